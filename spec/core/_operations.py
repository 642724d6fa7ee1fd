"""The sequential model's operations: one value per method of the ``CaptureLedger`` protocol (SPEC.md
§Operations, §Protocol).

Frozen dataclasses whose ``repr`` is valid Python, so a counterexample prints as a program. The arguments
are kept as given (``object``): an operation value may carry an invalid ID, row or batch, and ``model.step``
says what happens to it. The public names are re-exported by ``spec.core.model``.

Not guaranteed here: that the arguments are valid, or that a value is an operation an implementation can
be called with (a batch may be a bare string, R-BATCH-1).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Admit",
    "Delete",
    "HasRows",
    "Operation",
    "ReadManifest",
    "Record",
    "RecordFailure",
    "Retire",
]


# ----------------------------------------------------------------------------------------- operations
@dataclass(frozen=True, slots=True)
class Record:
    """``record(rollout_id, row)``."""

    rollout_id: object
    row: object


@dataclass(frozen=True, slots=True)
class RecordFailure:
    """``record_failure(rollout_id, model_call_id, reason)``."""

    rollout_id: object
    model_call_id: object
    reason: object


@dataclass(frozen=True, slots=True)
class Admit:
    """``admit(rollout_id, model_call_id)``."""

    rollout_id: object
    model_call_id: object


@dataclass(frozen=True, slots=True)
class ReadManifest:
    """``manifest(rollout_id)``."""

    rollout_id: object


@dataclass(frozen=True, slots=True)
class HasRows:
    """``has_rows(rollout_id)``."""

    rollout_id: object


@dataclass(frozen=True, slots=True)
class Retire:
    """``retire(rollout_ids)``."""

    rollout_ids: object


@dataclass(frozen=True, slots=True)
class Delete:
    """``delete(rollout_ids)``."""

    rollout_ids: object


Operation = Record | RecordFailure | Admit | ReadManifest | HasRows | Retire | Delete
