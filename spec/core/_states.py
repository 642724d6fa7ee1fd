"""The sequential model's state: rows and per-rollout states (SPEC.md §States, R-STATE-1..2; rows R-WRITE-3,
R-WRITE-7).

Frozen values only. ``LedgerState`` is canonical (a sorted tuple, Absent IDs left out), so equal states
compare and hash equal. The operations on these values are ``model``'s transitions; the public names are
re-exported by ``spec.core.model``, which is where to import them from.

Not guaranteed here: that a state is reachable (``Live(..., fenced=True)`` is reachable only by an
interrupted or in-flight retire), or that an entry's row is valid: validation belongs to ``model.step``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ABSENT",
    "RETIRED",
    "Absent",
    "Entry",
    "FailureEntry",
    "LedgerState",
    "Live",
    "RecordEntry",
    "Retired",
    "RolloutState",
]


# ----------------------------------------------------------------------------------------------- rows
@dataclass(frozen=True, slots=True)
class RecordEntry:
    """A recorded row, kept as its canonical JSON (R-WRITE-3)."""

    model_call_id: str
    canonical: str

    def row(self) -> dict[str, Any]:
        """The row as a ``dict``."""
        row: dict[str, Any] = json.loads(self.canonical)
        return row


@dataclass(frozen=True, slots=True)
class FailureEntry:
    """A failure row recorded with ``record_failure`` (R-WRITE-7)."""

    model_call_id: str
    reason: str


Entry = RecordEntry | FailureEntry


# --------------------------------------------------------------------------------------------- states
@dataclass(frozen=True, slots=True)
class Absent:
    """No rows and no fence (R-STATE-1)."""


@dataclass(frozen=True, slots=True)
class Live:
    """At least one row; ``fenced`` when a fence also exists (mid-retire, R-STATE-2)."""

    entries: tuple[Entry, ...]
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class Retired:
    """No rows, and a fence that discards late writes (R-STATE-1)."""


RolloutState = Absent | Live | Retired
ABSENT = Absent()
RETIRED = Retired()


@dataclass(frozen=True, slots=True)
class LedgerState:
    """The state of every rollout ID: a sorted tuple of ``(id, state)``; Absent IDs are left out.

    Canonical, so equal states compare and hash equal.
    """

    rollouts: tuple[tuple[str, RolloutState], ...] = ()

    @classmethod
    def of(cls, rollouts: Mapping[str, RolloutState]) -> LedgerState:
        """Build a state from a mapping; Absent entries are dropped."""
        return cls(tuple(sorted((k, v) for k, v in rollouts.items() if not isinstance(v, Absent))))

    def get(self, rollout_id: str) -> RolloutState:
        """The state of one ID (Absent when not listed)."""
        for key, value in self.rollouts:
            if key == rollout_id:
                return value
        return ABSENT

    def set(self, rollout_id: str, state: RolloutState) -> LedgerState:
        """A copy with one ID's state replaced."""
        rollouts = dict(self.rollouts)
        rollouts[rollout_id] = state
        return LedgerState.of(rollouts)

    def as_dict(self) -> dict[str, RolloutState]:
        """The listed (non-Absent) IDs and their states."""
        return dict(self.rollouts)
