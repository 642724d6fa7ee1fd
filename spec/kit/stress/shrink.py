"""Witnesses that explain: the fewest calls that show *why* a result is wrong (SPEC.md R-CONC-1, R-KIT-12).

The linearizability checker's witness is minimal: no call of it can go while it stays non-linearizable.
But a read that sees rows where no write was recorded is non-linearizable on its own, so its minimal
witness is that one read, which says nothing about the race. ``explaining_witness`` asks more of a witness
``W`` whose last call (in invocation order) is the *culprit*:

1. ``W`` is not linearizable, and
2. ``W`` becomes linearizable when the culprit may take effect at any moment (its invocation moved before
   every other call's and its return after all of them): the culprit's result is possible given the other
   calls, only not *when* it happened.

It starts from the shortest failing prefix (in order of invocation) of the calls on the violation's rollout
ID, each batch reduced to that ID (with its result), and removes calls one at a time while both conditions
hold, until a whole pass removes none. So a read that saw a retired rollout's rows comes with the write that
made them and the retire that returned before the read began. When condition 2 does not hold at the start
(a result wrong at any moment), the checker's own witness is kept.

Not guaranteed: a globally smallest witness; speed on partitions of thousands of calls (each step runs the
checker on the candidate; stress rounds make partitions of tens to hundreds of calls).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from capture_ledger.spec.concurrency.history import Event
from capture_ledger.spec.concurrency.linearizability import Ok, Violation, check_history
from capture_ledger.spec.core.model import Delete, Removal, Retire, rollout_ids_of
from capture_ledger.spec.core.model import Ok as ModelOk
from capture_ledger.spec.kit.stress.running import Call

__all__ = ["explaining_witness"]

#: Search steps for each check while shrinking.
_STEPS = 200_000


def _project(event: Event, rollout_id: str) -> Event:
    """``event`` reduced to ``rollout_id``: a batch becomes a batch of that ID alone, with its result."""
    op = event.op
    if not isinstance(op, Retire | Delete):
        return event
    kind = type(op)
    result = event.result
    if isinstance(result, ModelOk) and isinstance(result.value, Removal):
        removed = rollout_id in result.value.removed
        value = Removal((rollout_id,), ()) if removed else Removal((), (rollout_id,))
        result = ModelOk(value)
    return replace(event, op=kind([rollout_id]), result=result)


def _touches(event: Event, rollout_id: str) -> bool:
    ids = rollout_ids_of(event.op)
    return not isinstance(ids, type(None)) and isinstance(ids, list) and rollout_id in ids


def _fails(events: Sequence[Event]) -> bool:
    return bool(events) and isinstance(check_history(events, budget=_STEPS), Violation)


def _relaxed_ok(events: Sequence[Event]) -> bool:
    """Condition 2: linearizable with the last event free to take effect at any moment."""
    if not events or events[-1].returned is None:
        return False
    first = min(e.invoked for e in events)
    last = max([e.returned for e in events if e.returned is not None] + [e.invoked for e in events])
    culprit = replace(events[-1], invoked=first - 1.0, returned=last + 1.0)
    return isinstance(check_history([*events[:-1], culprit], budget=_STEPS), Ok)


def _holds(events: Sequence[Event]) -> bool:
    return _fails(events) and _relaxed_ok(events)


def explaining_witness(calls: Sequence[Call], rollout_id: str, fallback: Sequence[Call]) -> tuple[Call, ...]:
    """The witness as the module docstring says, or ``fallback`` (the checker's) when none explains.

    Args:
        calls: the round's calls.
        rollout_id: the rollout ID of the violation.
        fallback: the checker's minimal witness.

    Returns:
        The witness's calls (the original calls, batches whole), in order of invocation.
    """
    mine = sorted(
        (c for c in calls if _touches(c.event, rollout_id)), key=lambda c: (c.event.invoked, c.event.client)
    )
    projected = {id(c): _project(c.event, rollout_id) for c in mine}
    events = [projected[id(c)] for c in mine]
    low, high = 1, len(events)
    if not _fails(events):
        return tuple(fallback)
    while low < high:
        middle = (low + high) // 2
        if _fails(events[:middle]):
            high = middle
        else:
            low = middle + 1
    chosen = mine[:high]
    if not _holds([projected[id(c)] for c in chosen]):
        return tuple(fallback)
    culprit, rest = chosen[-1], chosen[:-1]
    cut = True
    while cut:
        cut = False
        index = 0
        while index < len(rest):
            candidate = rest[:index] + rest[index + 1 :]
            if _holds([projected[id(c)] for c in [*candidate, culprit]]):
                rest, cut = candidate, True
            else:
                index += 1
    return (*rest, culprit)
