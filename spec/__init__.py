"""The executable specification of the capture ledger (SPEC.md) and its conformance kit.

Public names are pinned and tested (``tests/test_exports.py``): other code imports exactly these. The
sub-packages show the layers: ``core`` (IDs, errors, rows, the protocol, the pure model), ``concurrency``
(the step-level model, its explorer, histories and the linearizability checker), ``crash`` (persistence
models and the crash contract) and ``kit`` (the conformance kit).

For a ledger author: the protocol and its records, the errors (one root, ``CaptureLedgerError``), the
validators a ledger runs before it changes anything (``validate_rollout_id(s)``, ``validate_row``,
``validate_failure``, ``validate_model_call_id``), ``canonical_json`` (what "identical row" means), and the
one result shape of every checker (``Ok``, ``Violation``, ``Unknown``; ``exit_code``). A ledger that warns
about discarded late writes logs on the logger named ``capture_ledger`` or a child of it (R-WRITE-5).

The kit's names (``check_ledger``, ``conformance_test_case``) are loaded on first use: importing this package
for the protocol, the errors or the ID rules does not import Hypothesis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capture_ledger._lazy import lazy_attributes
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
from capture_ledger.spec.core.protocol import CaptureLedger, FailureRow, Manifest, RolloutRemoval
from capture_ledger.spec.core.rows import (
    canonical_json,
    validate_failure,
    validate_model_call_id,
    validate_row,
)
from capture_ledger.spec.core.verdicts import Ok, Unknown, Verdict, Violation, exit_code, worst

if TYPE_CHECKING:
    from capture_ledger.spec.kit.crash import check_crashes
    from capture_ledger.spec.kit.sequential import check_ledger, conformance_test_case
    from capture_ledger.spec.kit.stress import check_concurrency

#: Names loaded on first use, and the module each comes from.
_LAZY = {
    "check_concurrency": "capture_ledger.spec.kit",
    "check_crashes": "capture_ledger.spec.kit",
    "check_ledger": "capture_ledger.spec.kit",
    "conformance_test_case": "capture_ledger.spec.kit",
}

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
    "Ok",
    "RolloutRemoval",
    "RolloutRetiredError",
    "Unknown",
    "Verdict",
    "Violation",
    "canonical_json",
    "check_concurrency",
    "check_crashes",
    "check_ledger",
    "conformance_test_case",
    "exit_code",
    "staging_key",
    "validate_failure",
    "validate_model_call_id",
    "validate_rollout_id",
    "validate_rollout_ids",
    "validate_row",
    "worst",
]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
