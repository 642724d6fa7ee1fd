"""The sequential core of the spec: rollout IDs, errors, rows, the ``CaptureLedger`` protocol, the pure model
``step(state, op) -> (state, result)``, the abstraction function, the tables generated from the model and the
CrossHair contracts (SPEC.md §IDs, §Batches, §States, §Operations).

Everything here is pure: no files, no clock, no Hypothesis. Every other part of the project builds on it.

This package re-exports what a ledger author and the checkers use of it (the errors, the ID and row
rules, the protocol, the checkers' verdicts); the model and the rest are read from their own modules
(``spec.core.model``, ``spec.core.abstraction``, ...), which are public.
"""

from __future__ import annotations

from capture_ledger.spec.core.errors import (
    CaptureLedgerError,
    ConflictingRecordError,
    InvalidRolloutIdError,
    RolloutRetiredError,
)
from capture_ledger.spec.core.ids import (
    MAX_LEDGER_BATCH,
    MAX_ROLLOUT_ID_LENGTH,
    ROLLOUT_ID_PATTERN,
    staging_key,
    validate_rollout_id,
    validate_rollout_ids,
)
from capture_ledger.spec.core.protocol import OPERATIONS, CaptureLedger, FailureRow, Manifest, RolloutRemoval
from capture_ledger.spec.core.rows import (
    canonical_json,
    row_staging_key,
    validate_failure,
    validate_model_call_id,
    validate_row,
)
from capture_ledger.spec.core.verdicts import (
    EXIT_BROKEN,
    EXIT_OK,
    EXIT_UNKNOWN,
    Ok,
    Unknown,
    Verdict,
    Violation,
    exit_code,
    worst,
)

__all__ = [
    "EXIT_BROKEN",
    "EXIT_OK",
    "EXIT_UNKNOWN",
    "MAX_LEDGER_BATCH",
    "MAX_ROLLOUT_ID_LENGTH",
    "OPERATIONS",
    "ROLLOUT_ID_PATTERN",
    "CaptureLedger",
    "CaptureLedgerError",
    "ConflictingRecordError",
    "FailureRow",
    "InvalidRolloutIdError",
    "Manifest",
    "Ok",
    "RolloutRemoval",
    "RolloutRetiredError",
    "Unknown",
    "Verdict",
    "Violation",
    "canonical_json",
    "exit_code",
    "row_staging_key",
    "staging_key",
    "validate_failure",
    "validate_model_call_id",
    "validate_rollout_id",
    "validate_rollout_ids",
    "validate_row",
    "worst",
]
