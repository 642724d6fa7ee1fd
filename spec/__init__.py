"""The executable specification of the capture ledger (SPEC.md) and its conformance kit.

Public names are pinned and tested (``tests/test_exports.py``): other code imports exactly these. The
sub-packages show the layers: ``core`` (IDs, errors, rows, the protocol, the pure model), ``concurrency``
(the step-level model, its explorer, histories and the linearizability checker), ``crash`` (persistence
models and the crash contract) and ``kit`` (the conformance kit).

The kit's names (``check_ledger``, ``conformance_test_case``) are loaded on first use: importing this package
for the protocol, the errors or the ID rules does not import Hypothesis.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from capture_ledger.spec.kit.conformance import check_ledger, conformance_test_case
    from capture_ledger.spec.kit.stress.check import check_concurrency

#: Names loaded on first use, and the module each comes from.
_LAZY = {
    "check_concurrency": "capture_ledger.spec.kit.stress.check",
    "check_ledger": "capture_ledger.spec.kit.conformance",
    "conformance_test_case": "capture_ledger.spec.kit.conformance",
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
    "RolloutRemoval",
    "RolloutRetiredError",
    "check_concurrency",
    "check_ledger",
    "conformance_test_case",
    "staging_key",
    "validate_rollout_id",
    "validate_rollout_ids",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
