"""Errors of the capture ledger (SPEC.md R-ERR-1..4).

One root, ``CaptureLedgerError``; each subclass is named for what forbids the operation and also inherits
the builtin a caller would catch, so code written against plain ``ValueError`` keeps working. Every error
carries structured fields, says how to fix the call, and pickles (``__reduce__`` keeps the fields).

Not guaranteed: the exact wording of messages. Match on the class and the fields.
"""

from __future__ import annotations

__all__ = [
    "CaptureLedgerError",
    "ConflictingRecordError",
    "InvalidRolloutIdError",
    "RolloutRetiredError",
]


class CaptureLedgerError(Exception):
    """Root of every error the capture ledger raises on purpose."""


class RolloutRetiredError(CaptureLedgerError):
    """The rollout is Retired: its ledger is gone and a fence discards late writes (R-READ-3).

    Deliberately not a ``ValueError``: the HTTP layer maps it to 410 Gone, apart from 400.
    """

    def __init__(self, rollout_id: str) -> None:
        self.rollout_id = rollout_id
        super().__init__(
            f"rollout {rollout_id!r} is retired: its ledger was removed and cannot be read; "
            "delete it first if the ID must be reused"
        )

    def __reduce__(self) -> tuple[type[RolloutRetiredError], tuple[str]]:
        return (type(self), (self.rollout_id,))


class InvalidRolloutIdError(CaptureLedgerError, ValueError):
    """A rollout ID breaks the ID rules (R-ID-1); in a batch, nothing was changed (R-BATCH-2)."""

    def __init__(self, rollout_id: object, reason: str = "") -> None:
        self.rollout_id = rollout_id
        self.reason = reason
        detail = f": {reason}" if reason else ""
        # "Invalid rollout id: " is NeMo Gym's own wording, which its callers match (docs/gym.md).
        super().__init__(
            f"Invalid rollout id: {rollout_id!r}{detail}; a rollout ID is 1 to 200 characters "
            "matching [A-Za-z0-9][A-Za-z0-9._-]*"
        )

    def __reduce__(self) -> tuple[type[InvalidRolloutIdError], tuple[object, str]]:
        return (type(self), (self.rollout_id, self.reason))


class ConflictingRecordError(CaptureLedgerError, ValueError):
    """A different row was recorded for a ``model_call_id`` that already has one (R-WRITE-3)."""

    def __init__(self, rollout_id: str, model_call_id: str) -> None:
        self.rollout_id = rollout_id
        self.model_call_id = model_call_id
        # "conflicting lineage record for model call <id>" is NeMo Gym's own wording (docs/gym.md).
        super().__init__(
            f"conflicting lineage record for model call {model_call_id}: rollout {rollout_id!r} already "
            "holds a different row for it; re-record only the identical row, or use a fresh model_call_id"
        )

    def __reduce__(self) -> tuple[type[ConflictingRecordError], tuple[str, str]]:
        return (type(self), (self.rollout_id, self.model_call_id))
