"""Which requirement a stress violation names (SPEC.md §Concurrency "What a requirement name means in a
concurrent verdict", R-CONC-1..3, R-ADMIT-2, R-KIT-11; docs/stress.md §Which requirement).

A non-linearizable history on one rollout ID is named in two steps:

1. **Sequential, when real time orders every call.** When no two calls of the witness overlap (each
   returned before the next began), real time allows one order only, so the witness is a sequential run
   that the model refuses, and its first failing step is classified as the conformance kit classifies
   one (``spec.kit.sequential`` ``call_requirement`` and ``change_requirement``): a write's own wrong
   result is that call's requirement (R-WRITE-3, ...); a call whose result tells the state (``manifest``,
   ``has_rows``, ``admit``, a removal's report) and tells a wrong one is blamed on the *earliest*
   state-changing call
   after which some state explains every later result (the read-back rule of the kit, with the reads of
   the run as the read-backs): a delete that kept its fence is R-DELETE-2, not the read that saw it.
   When that call went through another handle than the read, the read's own requirement is named (the
   read's handle did not see the change: R-ADMIT-1 for a refused admission).
2. **Otherwise, what the culprit observed**, given the witness's calls (then, if they name nothing more
   specific, every call on its ID up to the culprit): a ledger seen (rows, a
   conflict, a ``removed`` report) after a retire returned, with no delete that can fall in between, is
   R-CONC-2 (an admission granted there, R-ADMIT-2); a write begun after a delete returned and missing
   from the culprit's result, while a retire begun before that delete returned was still running when the
   write began, is R-CONC-3; a fence seen (an admission refused, a read raising ``RolloutRetiredError``)
   after a delete returned, with no retire that can fall in between, is R-ADMIT-1 (a read: R-DELETE-2);
   anything else R-CONC-1.

The calls a name rests on (the returned retire; the retire, delete and write of R-CONC-3) are *pinned*:
``name_violation`` returns them, and the judge adds them to the witness when it stays non-linearizable.

Pure functions over the model's values. Not guaranteed: that the name is the slip's own requirement
when several explain the history equally (the kit's rule, from outside: a read and the call it blames
cannot be told apart without a read through the blamed call's handle); that a concurrent witness whose
calls happen not to overlap is named as a concurrency bug (it is a sequential run, and named as one).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from capture_ledger.spec.concurrency.history import Event, results_match
from capture_ledger.spec.core.model import (
    ABSENT,
    RETIRED,
    Admit,
    Delete,
    Err,
    ErrorKind,
    HasRows,
    LedgerState,
    Live,
    ManifestValue,
    Ok,
    ReadManifest,
    Record,
    RecordFailure,
    Removal,
    Result,
    Retire,
    RolloutState,
    step,
)
from capture_ledger.spec.core.rows import canonical_json, validate_row
from capture_ledger.spec.kit.sequential import call_requirement, change_requirement, state_kind
from capture_ledger.spec.kit.stress._running import Call, in_invocation_order
from capture_ledger.spec.kit.stress._shrink import project
from capture_ledger.spec.kit.stress._witness import op_text, result_text

__all__ = ["Naming", "name_violation", "totally_ordered"]

#: Calls whose results tell the state: reads, admission, and removals (their reports).
_READS = (ReadManifest, HasRows, Admit, Retire, Delete)
_CHANGES = (Record, RecordFailure, Retire, Delete)


@dataclass(frozen=True, slots=True)
class Naming:
    """The requirement a violation names, and why.

    Attributes:
        requirement: the requirement (``R-CONC-1``, ``R-DELETE-2``, ...).
        culprit: the call whose result is wrong (the first failing step of a sequential witness, else the
            witness's last call).
        reason: a clause saying why that requirement (for the heading).
        pinned: calls the name rests on, to keep in the witness.
        sequential: named by the sequential rule (step 1 of the module docstring).
        calls: the sequential rule's witness (the run up to the culprit, shrunk), else empty.
    """

    requirement: str
    culprit: Call
    reason: str
    pinned: tuple[Call, ...] = ()
    sequential: bool = False
    calls: tuple[Call, ...] = ()


def _end(event: Event) -> float:
    return float("inf") if event.returned is None else event.returned


def totally_ordered(calls: Sequence[Call]) -> bool:
    """Whether real time orders every pair of ``calls``: each returned before the next one began."""
    ordered = in_invocation_order(calls)
    if any(c.event.returned is None or c.event.result is None for c in ordered):
        return False
    return all(_end(a.event) < b.event.invoked for a, b in itertools.pairwise(ordered))


def _plain(result: Result) -> object:
    """What ``call_requirement`` reads of a removal's result: ``{"removed": [...], "absent": [...]}``."""
    if isinstance(result, Ok) and isinstance(result.value, Removal):
        return {"removed": list(result.value.removed), "absent": list(result.value.absent)}
    return result.value if isinstance(result, Ok) else None


def _candidates(visited: Sequence[RolloutState]) -> list[RolloutState]:
    """States a wrong call may have left: every state the model went through, with and without a fence,
    and Absent and Retired."""
    found: list[RolloutState] = [ABSENT, RETIRED]
    for state in visited:
        variants = [state, Live(state.entries, not state.fenced)] if isinstance(state, Live) else [state]
        found += [v for v in variants if v not in found]
    return found


def _explains(start: LedgerState, events: Sequence[Event]) -> bool:
    state = start
    for event in events:
        state, expected = step(state, event.op)
        if event.result is None or not results_match(expected, event.result):
            return False
    return True


def _first_failure(events: Sequence[Event]) -> tuple[int, list[LedgerState], Result, LedgerState] | None:
    """The first step of ``events`` run in order whose result is not the model's: its index, the states
    before each step up to it, the model's result there, and the state after it; ``None`` if legal."""
    before: list[LedgerState] = []
    state = LedgerState.of({})
    for index, event in enumerate(events):
        before.append(state)
        state, expected = step(state, event.op)
        if event.result is None or not results_match(expected, event.result):
            return index, before, expected, state
    return None


def _shrunk(calls: list[Call], rollout_id: str) -> list[Call]:
    """``calls`` (a run failing first at its last call) without every call it can lose while it still
    fails first at its last call."""
    kept = list(calls)
    index = 0
    while index < len(kept) - 1:
        candidate = kept[:index] + kept[index + 1 :]
        found = _first_failure([project(c.event, rollout_id) for c in candidate])
        if found is not None and found[0] == len(candidate) - 1:
            kept = candidate
        else:
            index += 1
    return kept


def _sequential(calls: list[Call], rollout_id: str) -> Naming | None:
    """Step 1 of the module docstring on ``calls``, in the one order real time allows (``None``: legal)."""
    events = [project(c.event, rollout_id) for c in calls]
    found = _first_failure(events)
    if found is None:
        return None
    failing, before, expected, state = found
    culprit, event = calls[failing], events[failing]
    assert event.result is not None  # totally_ordered: every call returned
    said = f"{op_text(event.op)} -> {result_text(event.result)}"
    order = f"no two of these {failing + 1} calls overlap, so real time allows this order only"
    own = call_requirement(event.op, before[failing], _plain(event.result))
    plain = f"{said} is wrong: {order}, in which the model gives {result_text(expected)}"
    if not isinstance(event.op, _READS):
        return Naming(own, culprit, plain, sequential=True, calls=tuple(calls[: failing + 1]))
    visited = [s.get(rollout_id) for s in [*before, state]]
    for blamed in range(failing):
        if not isinstance(events[blamed].op, _CHANGES):
            continue
        after = before[blamed + 1].get(rollout_id)
        rest = events[blamed + 1 : failing + 1]
        for other in _candidates(visited):
            if other == after or not _explains(before[blamed + 1].set(rollout_id, other), rest):
                continue
            wrong = calls[blamed]
            did = f"{op_text(wrong.event.op)} -> {_outcome(wrong)}"
            left = f"left {rollout_id!r} {state_kind(other)} where the model has it {state_kind(after)}"
            why = f"{said} is wrong: {order}, and every later result is what the ledger gives if {did} {left}"
            kept = tuple(calls[: failing + 1])
            if wrong.handle and culprit.handle and wrong.handle != culprit.handle:
                why += f", or if handle {culprit.handle} did not see the change made through {wrong.handle}"
                return Naming(own, culprit, why, (wrong,), sequential=True, calls=kept)
            requirement = change_requirement(events[blamed].op, before[blamed], rollout_id)
            return Naming(requirement, culprit, why, (wrong,), sequential=True, calls=kept)
    return Naming(own, culprit, plain, sequential=True, calls=tuple(calls[: failing + 1]))


def _named_sequentially(prefix: list[Call], rollout_id: str) -> Naming | None:
    """``_sequential`` on the shortest run of ``prefix`` that fails first at the same call and names the
    same requirement (the whole run up to that call when shrinking changes the name)."""
    whole = _sequential(prefix, rollout_id)
    if whole is None:
        return None
    run = list(whole.calls)
    small = _sequential(_shrunk(run, rollout_id), rollout_id)
    if small is not None and small.requirement == whole.requirement and small.culprit is whole.culprit:
        return small
    return whole


def _outcome(call: Call) -> str:
    """A returned call's result, short."""
    return result_text(call.event.result) if call.event.result is not None else "never returned"


def _shows_ledger(event: Event, rollout_id: str) -> bool:
    """Whether ``event``'s result shows ``rollout_id`` has rows (a Live ledger)."""
    result = event.result
    if isinstance(result, Err):
        return isinstance(event.op, Record) and result.kind is ErrorKind.CONFLICTING_RECORD
    if result is None:
        return False
    value = result.value
    if isinstance(event.op, ReadManifest) and isinstance(value, ManifestValue):
        return bool(value.records or value.failures)
    if isinstance(event.op, HasRows):
        return value is True
    if isinstance(event.op, Admit):
        return isinstance(value, str)
    return isinstance(value, Removal) and rollout_id in value.removed


def _lacks(event: Event, write: Event) -> bool:
    """Whether ``event`` (a read) shows that ``write``'s row is not there."""
    result = event.result
    if isinstance(result, Err):
        return isinstance(event.op, ReadManifest | HasRows) and result.kind is ErrorKind.ROLLOUT_RETIRED
    if result is None:
        return False
    value, op = result.value, write.op
    if isinstance(event.op, HasRows):
        return value is False
    if not isinstance(event.op, ReadManifest) or not isinstance(value, ManifestValue):
        return False
    if isinstance(op, Record):
        try:
            return canonical_json(validate_row(op.row)) not in value.records
        except (TypeError, ValueError):
            return False
    return isinstance(op, RecordFailure) and (op.model_call_id, op.reason) not in value.failures


def _concurrent(prefix: Sequence[Call], rollout_id: str) -> tuple[str, str, tuple[Call, ...]]:
    """Step 2 of the module docstring: the requirement, a clause, and the calls it rests on."""
    calls = in_invocation_order(prefix)
    events = {id(c): project(c.event, rollout_id) for c in calls}
    culprit, earlier = calls[-1], calls[:-1]
    seen = events[id(culprit)]

    def of(kind: type | tuple[type, ...]) -> list[Call]:
        return [c for c in earlier if isinstance(c.event.op, kind) and isinstance(c.event.result, Ok)]

    retires, deletes, writes = of(Retire), of(Delete), of((Record, RecordFailure))
    for delete in deletes:
        gone = _end(delete.event)
        for write in writes:
            if not (write.event.invoked > gone and _end(write.event) < seen.invoked):
                continue
            if not _lacks(seen, events[id(write)]):
                continue
            for retire in retires:
                if _looked_after(retire, delete, rollout_id):
                    continue  # its report saw rows the delete had not: its fence came after the delete
                if retire.event.invoked < gone and _end(retire.event) > write.event.invoked:
                    why = (
                        f"{op_text(write.event.op)} began after {op_text(delete.event.op)} returned, and is "
                        f"gone while {op_text(retire.event.op)}, begun before that delete returned, ran on"
                    )
                    return "R-CONC-3", why, (retire, delete, write)
    for retire in retires:
        done = _end(retire.event)
        if done >= seen.invoked or not _shows_ledger(seen, rollout_id):
            continue
        if any(d.event.invoked < _end(seen) and _end(d.event) > retire.event.invoked for d in deletes):
            continue  # a delete may come between the retire and the culprit: the ID may be reused
        shown = [w for w in writes if not _lacks(seen, events[id(w)]) and w.event.invoked < done]
        pins = (retire, *shown[-1:])
        if isinstance(seen.op, Admit):
            return "R-ADMIT-2", f"{op_text(retire.event.op)} had returned before it began", pins
        why = f"{op_text(retire.event.op)} had returned before it began, and no delete comes in between"
        return "R-CONC-2", why, pins
    for delete in deletes:
        gone = _end(delete.event)
        if gone >= seen.invoked or not _shows_fence(seen):
            continue
        if any(r.event.invoked < _end(seen) and _end(r.event) > delete.event.invoked for r in retires):
            continue  # a retire may come between the delete and the culprit: the fence may be new
        why = f"{op_text(delete.event.op)} had returned before it began, and no retire comes in between"
        return ("R-ADMIT-1" if isinstance(seen.op, Admit) else "R-DELETE-2"), why, (delete,)
    return "R-CONC-1", "", ()


def _looked_after(retire: Call, delete: Call, rollout_id: str) -> bool:
    """Whether ``retire`` reported ``rollout_id`` removed where ``delete`` found it without rows."""
    said, found = retire.event.result, delete.event.result
    if not (isinstance(said, Ok) and isinstance(said.value, Removal)):
        return False
    if not (isinstance(found, Ok) and isinstance(found.value, Removal)):
        return False
    return rollout_id in said.value.removed and rollout_id not in found.value.removed


def _shows_fence(event: Event) -> bool:
    """Whether ``event``'s result shows a fence: an admission refused, or a read of a Retired rollout."""
    result = event.result
    if isinstance(result, Err):
        return isinstance(event.op, ReadManifest | HasRows) and result.kind is ErrorKind.ROLLOUT_RETIRED
    return isinstance(event.op, Admit) and result is not None and result.value is None


def name_violation(witness: Sequence[Call], prefix: Sequence[Call], rollout_id: str) -> Naming:
    """The requirement a non-linearizable history on ``rollout_id`` names (see the module docstring).

    Args:
        witness: the witness's calls (the culprit last in order of invocation).
        prefix: the calls on ``rollout_id`` up to the culprit, in order of invocation.
        rollout_id: the ID.

    Returns:
        The ``Naming``; R-CONC-1 with an empty reason when nothing more specific applies.
    """
    ordered = in_invocation_order(witness)
    run = in_invocation_order(prefix) if prefix else ordered
    if totally_ordered(run):
        named = _named_sequentially(run, rollout_id)
        if named is not None:
            return named
    # The witness first (its calls alone break the requirement), then every call on the ID up to the
    # culprit (a cause the shrinking let go: the stale retire and the delete of R-CONC-3).
    requirement, why, pins = _concurrent(ordered, rollout_id)
    if requirement == "R-CONC-1" and prefix:
        requirement, why, pins = _concurrent(run, rollout_id)
    return Naming(requirement, ordered[-1], why, pins)
