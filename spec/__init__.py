"""The executable specification of the capture ledger (SPEC.md) and its conformance kit.

Public names are pinned by DESIGN.md §3: other code imports exactly these. The model and the other
concept modules (``model``, ``abstraction``, ``rows``, ``strategies``, ``profiles``) are public too.
"""

from capture_ledger.spec.conformance import check_ledger, conformance_test_case
from capture_ledger.spec.errors import (
    CaptureLedgerError,
    ConflictingRecordError,
    InvalidRolloutIdError,
    RolloutRetiredError,
)
from capture_ledger.spec.ids import (
    MAX_LEDGER_BATCH,
    MAX_ROLLOUT_ID_LENGTH,
    ROLLOUT_ID_PATTERN,
    staging_key,
    validate_rollout_id,
    validate_rollout_ids,
)
from capture_ledger.spec.protocol import CaptureLedger, FailureRow, Manifest, RolloutRemoval

__all__ = [
    "MAX_LEDGER_BATCH",
    "MAX_ROLLOUT_ID_LENGTH",
    "ROLLOUT_ID_PATTERN",
    "CaptureLedger",
    "CaptureLedgerError",
    "ConflictingRecordError",
    "FailureRow",
    "InvalidRolloutIdError",
    "Manifest",
    "RolloutRemoval",
    "RolloutRetiredError",
    "check_ledger",
    "conformance_test_case",
    "staging_key",
    "validate_rollout_id",
    "validate_rollout_ids",
]
