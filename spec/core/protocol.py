"""The ``CaptureLedger`` protocol and its result types (SPEC.md §Protocol, SPEC.md §Protocol).

Third parties satisfy the protocol structurally; they never subclass. Implementations may define the
methods as coroutines (NeMo Gym's are ``async``); the conformance kit and the CLI await them, and
``isinstance(x, CaptureLedger)`` still holds because ``runtime_checkable`` checks names only.

Not guaranteed by the protocol itself: atomicity of a batch across IDs (each ID of a batch changes state
on its own, R-CONC-1), or any durability (that is the file store's contract, SPEC.md §Crash).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypedDict, runtime_checkable

__all__ = ["OPERATIONS", "CaptureLedger", "FailureRow", "Manifest", "RolloutRemoval"]

#: The protocol's operations: the names of ``CaptureLedger``'s methods, in the order SPEC.md §Protocol lists
#: them. The one list every per-operation table derives from (the store's ``OperationCounts``, the metrics'
#: operation labels, recorded histories); ``tests/test_exports.py`` holds each to it.
OPERATIONS = ("record", "record_failure", "admit", "manifest", "has_rows", "retire", "delete")


class RolloutRemoval(TypedDict):
    """Result of ``retire`` and ``delete``: which IDs had ledger rows (``removed``) and which did not."""

    removed: list[str]
    absent: list[str]


class FailureRow(TypedDict):
    """A failed model call recorded with ``record_failure``."""

    model_call_id: str
    reason: str


class Manifest(TypedDict):
    """A rollout's ledger: its records and its failures, each in append order."""

    rollout_id: str
    records: list[dict[str, Any]]
    failures: list[FailureRow]


@runtime_checkable
class CaptureLedger(Protocol):
    """A capture ledger: one append-only ledger per rollout ID, retired behind a fence, then deleted.

    Every method validates its input before changing anything. See SPEC.md for each requirement.
    """

    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        """Append ``row`` (R-WRITE-1..6); discard it with one warning if the rollout is Retired."""

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        """Append a failure row ``{"model_call_id", "reason"}`` (R-WRITE-7)."""

    def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        """Return the staging key for a new capture, or ``None`` when a fence exists (R-ADMIT-1..2)."""

    def manifest(self, rollout_id: str) -> Manifest:
        """Return the rows (R-READ-1..3); raise ``RolloutRetiredError`` when Retired."""

    def has_rows(self, rollout_id: str) -> bool:
        """Whether the rollout is Live (R-READ-4); raise ``RolloutRetiredError`` when Retired."""

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Make every ID Retired (R-RETIRE-1..4)."""

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Make every ID Absent (R-DELETE-1..3)."""
