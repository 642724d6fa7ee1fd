"""The abstraction function: from what is concretely stored to the model's state (SPEC.md R-STATE-3).

A concrete snapshot says, per rollout ID, which complete rows its ledger holds (a torn last line is not a
row, R-STORE-6) and whether a fence exists. Rows present means Live (fenced or not); no rows and a fence
means Retired; neither means Absent. An empty ledger file holds no rows, so it is not Live. Total: every
snapshot maps to exactly one state.

The crash explorer and ``FileLineageStore.check`` read directories into snapshots and judge them with
this function. Not guaranteed: that a snapshot came from a directory the store wrote.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from capture_ledger.spec.core.model import ABSENT, RETIRED, Entry, LedgerState, Live, RolloutState

__all__ = ["ConcreteRollout", "abstract", "abstract_rollout"]


@dataclass(frozen=True, slots=True)
class ConcreteRollout:
    """What is stored for one rollout ID: its complete rows, in file order, and whether a fence exists."""

    entries: tuple[Entry, ...] = ()
    fenced: bool = False


def abstract_rollout(entries: Sequence[Entry], fenced: bool) -> RolloutState:
    """The model state of one rollout ID."""
    if entries:
        return Live(tuple(entries), fenced)
    return RETIRED if fenced else ABSENT


def abstract(snapshot: Mapping[str, ConcreteRollout]) -> LedgerState:
    """The model state of a whole snapshot."""
    return LedgerState.of({rid: abstract_rollout(c.entries, c.fenced) for rid, c in snapshot.items()})
