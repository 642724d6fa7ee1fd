"""The crash contract: which states a crash may leave each rollout ID in (SPEC.md §Crash; R-CRASH-1..4).

This is *how a crash is judged*; what the disk may hold after a crash is ``spec.durability`` (the effect
vocabulary and the persistence models), and reading an image back into a state is ``spec.abstraction``.
The two meet in ``impl.crash``, which reads each image a model allows with a fresh store and asks this
module whether the state it finds is allowed.

A history is a sequence of ``Span`` records: every store operation invoked before the crash, whether it
returned before the crash, and which operations returned before it was invoked (real-time order).
``allowed_states`` tries every linearization consistent with that order, per rollout ID (batches are not
atomic across IDs, R-CONC-1): a returned operation is applied (R-CRASH-1 a record is durable, R-CRASH-2 a
retire leaves its batch Retired, R-CRASH-3 a delete leaves its batch Absent); an unreturned one may leave
the ID in its pre-state, its post-state or a state on its own path (R-CRASH-4: a retire's fenced Live,
R-STATE-2; a delete's either unlink first). ``broken_clauses`` names the clauses a disallowed state breaks,
for the report.

Pure: no files, no clock; states are ``spec.model`` values. Not guaranteed: that ``broken_clauses`` names
the *only* explanation of a violation (it names the clauses whose relaxation alone explains it, else a
best guess documented on the function), or that ``allowed_states`` is fast on long concurrent histories
(the search is exponential in the number of unordered operations; sequential histories are a fold).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from capture_ledger.spec.core.ids import validate_rollout_ids
from capture_ledger.spec.core.model import (
    ABSENT,
    RETIRED,
    Delete,
    HasRows,
    LedgerState,
    Live,
    Operation,
    Retire,
    RolloutState,
    step,
)

__all__ = [
    "CLAUSES",
    "Span",
    "allowed_states",
    "broken_clauses",
    "touches",
]


@dataclass(kw_only=True, frozen=True, slots=True)
class Span:
    """One store operation as a crash saw it: invoked before the crash; ``returned`` before it too or not.

    ``follows`` holds the indexes (in the history) of the operations that returned before this one was
    invoked: real-time order, which every linearization respects (R-CONC-1).
    """

    op: Operation
    returned: bool
    follows: frozenset[int] = frozenset()


def touches(op: Operation, rollout_id: str) -> bool:
    """Whether ``op`` names ``rollout_id`` (a valid batch containing it, or a single-ID operation on it)."""
    if isinstance(op, Retire | Delete):
        try:
            return rollout_id in validate_rollout_ids(op.rollout_ids)
        except (TypeError, ValueError):
            return False
    return getattr(op, "rollout_id", None) == rollout_id


def _post(op: Operation, rollout_id: str, state: RolloutState) -> RolloutState:
    return step(LedgerState.of({rollout_id: state}), op)[0].get(rollout_id)


def _on_path(op: Operation, rollout_id: str, state: RolloutState) -> set[RolloutState]:
    """States strictly between pre and post that an interrupted operation may leave (R-CRASH-4, R-STATE-2)."""
    if not touches(op, rollout_id) or not isinstance(state, Live):
        return set()
    if isinstance(op, Retire) and not state.fenced:
        return {Live(state.entries, fenced=True)}  # fence written, ledger not yet unlinked
    if isinstance(op, Delete) and state.fenced:
        return {Live(state.entries), RETIRED}  # either of its two unlinks happened first
    return set()


def _outcomes(span: Span, rollout_id: str, states: frozenset[RolloutState]) -> frozenset[RolloutState]:
    after: set[RolloutState] = set()
    for state in states:
        after.add(_post(span.op, rollout_id, state))
        if not span.returned:
            after.add(state)
            after |= _on_path(span.op, rollout_id, state)
    return frozenset(after)


def allowed_states(
    history: Sequence[Span], rollout_id: str, *, initial: RolloutState = ABSENT
) -> frozenset[RolloutState]:
    """The states the crash contract allows ``rollout_id`` to be read in after a crash (R-CRASH-1..4).

    Every linearization of ``history`` consistent with real-time order is tried; a returned operation is
    applied (its post-state), an unreturned one may leave its pre-state, its post-state or a state on its
    own path. Per ID, since batches are not atomic across IDs (R-CONC-1). Starts from ``initial``.
    """
    if all(span.follows >= frozenset(range(i)) for i, span in enumerate(history)):
        states = frozenset({initial})  # one linearization: fold (no recursion, any length)
        for span in history:
            states = _outcomes(span, rollout_id, states)
        return states
    memo: dict[tuple[frozenset[int], frozenset[RolloutState]], frozenset[RolloutState]] = {}

    def explore(done: frozenset[int], states: frozenset[RolloutState]) -> frozenset[RolloutState]:
        if len(done) == len(history):
            return states
        key = (done, states)
        if key in memo:
            return memo[key]
        result: set[RolloutState] = set()
        for index, span in enumerate(history):
            if index in done or not span.follows <= done:
                continue
            result |= explore(done | {index}, _outcomes(span, rollout_id, states))
        memo[key] = frozenset(result)
        return memo[key]

    return explore(frozenset(), frozenset({initial}))


CLAUSES = ("R-CRASH-1", "R-CRASH-2", "R-CRASH-3", "R-CRASH-4")


def _clause_of(op: Operation) -> str:
    if isinstance(op, Retire):
        return "R-CRASH-2"
    if isinstance(op, Delete):
        return "R-CRASH-3"
    return "R-CRASH-1"


def _explains(state: RolloutState, observed: RolloutState, pending: Sequence[Operation], rid: str) -> bool:
    """Whether in-flight operations, each doing only what it can do at all (a retire adds a fence or
    removes rows, a delete removes rows or a fence, a write appends its own row), can turn the files of
    ``state`` into those of ``observed``, in some order or combination their paths do not allow: among
    them a partial removal, a retire or delete in flight that removed some of the rows and left the
    others (a ledger removing rows one file at a time), whatever the fence says."""
    rows_before = state.entries if isinstance(state, Live) else ()
    rows_after = observed.entries if isinstance(observed, Live) else ()
    fence_before = state == RETIRED or (isinstance(state, Live) and state.fenced)
    fence_after = observed == RETIRED or (isinstance(observed, Live) and observed.fenced)
    kinds = {type(op) for op in pending}
    if fence_after and not fence_before and Retire not in kinds:
        return False
    if fence_before and not fence_after and Delete not in kinds:
        return False
    if rows_after == rows_before:
        return True
    removes = bool(kinds & {Retire, Delete})
    if not rows_after:
        return removes
    writable: set[object] = set()
    for op in pending:
        post = _post(op, rid, ABSENT)
        if isinstance(post, Live):
            writable.update(post.entries)
    for keep in range(len(rows_after), -1, -1):  # rows kept, then rows the writes in flight appended
        kept, added = rows_after[:keep], rows_after[keep:]
        if not set(added) <= writable:
            break
        if kept == rows_before or (removes and _within(kept, rows_before)):
            return True  # a removal in flight took some rows and not others: a partial removal
    return False


def _within(kept: Sequence[object], rows: Sequence[object]) -> bool:
    """Whether ``kept`` is ``rows`` with some of them left out, in their order (a subsequence)."""
    remaining = iter(rows)
    return all(any(row == other for other in remaining) for row in kept)


def broken_clauses(
    history: Sequence[Span], rollout_id: str, observed: RolloutState, *, initial: RolloutState = ABSENT
) -> tuple[str, ...]:
    """Which clauses a disallowed ``observed`` state breaks.

    R-CRASH-4 when the operations in flight that name the ID could have made the difference between a
    state the returned operations allow and ``observed`` (they did things in their power, in an order or
    combination their path does not allow): a partial removal, some but not all of the rows left while a
    retire or delete of the ID is in flight, is R-CRASH-4, even when losing a returned record's row would
    explain it too. Otherwise the clauses of the returned operations whose
    durability alone explains it: relaxing that one to "in flight" makes ``observed`` allowed (R-CRASH-1
    for a write, -2 for a retire, -3 for a delete); failing that, the clause of the last returned operation
    naming the ID (its result did not survive), and R-CRASH-4 when there is none.
    """
    named = [s for s in history if touches(s.op, rollout_id)]
    pending = [s for s in named if not s.returned]
    if pending:
        inert = [
            Span(op=HasRows(rollout_id), returned=False, follows=s.follows) if s in pending else s
            for s in history
        ]  # the returned operations alone (a read changes nothing)
        ops = [s.op for s in pending]
        if any(
            _explains(state, observed, ops, rollout_id)
            for state in allowed_states(inert, rollout_id, initial=initial)
        ):
            return ("R-CRASH-4",)
    clauses: list[str] = []
    for index, span in enumerate(history):
        if span.returned and touches(span.op, rollout_id):
            relaxed = [
                *history[:index],
                Span(op=span.op, returned=False, follows=span.follows),
                *history[index + 1 :],
            ]
            if observed in allowed_states(relaxed, rollout_id, initial=initial):
                clauses.append(_clause_of(span.op))
    if clauses:
        return tuple(dict.fromkeys(clauses))
    returned = [s for s in named if s.returned]
    return (_clause_of(returned[-1].op),) if returned else ("R-CRASH-4",)
