"""Witnesses that explain a stress violation (SPEC.md R-CONC-1, R-KIT-9, R-KIT-12).

Every decision here is the linearizability checker's public ``decide`` (its verdict without a witness),
on small sub-histories of the calls on one rollout ID. Building the checker's own witness
(``check_history``) costs a search per candidate on the whole partition, tens of seconds on a partition
of a highly concurrent round, so a stress run builds its own, from a prefix:

The checker's witness is minimal: no call of it can go while it stays non-linearizable. But a read that
sees rows where no write was recorded is non-linearizable on its own, so its minimal witness is that one
read, which says nothing about the race. ``explaining_witness`` asks more of a witness ``W`` whose last
call (in invocation order) is the *culprit*:

1. ``W`` is not linearizable, and
2. ``W`` becomes linearizable when the culprit may take effect at any moment (its invocation moved before
   every other call's and its return after all of them): the culprit's result is possible given the other
   calls, only not *when* it happened.

It starts from the shortest failing prefix (in order of invocation) of the calls on the violation's rollout
ID, each batch reduced to that ID (with its result), and removes calls one at a time while both conditions
hold, until a whole pass removes none. So a read that saw a retired rollout's rows comes with the write that
made them and the retire that returned before the read began. When condition 2 does not hold at the start
(a result wrong at any moment), or the work bound (``MAX_CHECKS`` searches of ``STEPS`` steps) runs out,
the shortest failing prefix shrunk by condition 1 alone, within the same bound, is the witness. A prefix
the bound leaves undecided counts as failing while the prefix is searched for; a witness that is not then
shown to fail is replaced by the whole partition (which the first search showed does).

Not guaranteed: a globally smallest witness; that the bound leaves the witness minimal (a witness cut
short by it is still non-linearizable, only maybe not minimal).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from capture_ledger.spec.concurrency.history import Event
from capture_ledger.spec.concurrency.linearizability import Ok, Unknown, Violation, decide
from capture_ledger.spec.core.model import Delete, Removal, Retire, rollout_ids_of
from capture_ledger.spec.core.model import Ok as ModelOk
from capture_ledger.spec.kit.stress._running import Call, in_invocation_order

__all__ = ["MAX_CHECKS", "STEPS", "calls_on", "explaining_witness", "project", "touches"]

#: Search steps for each check while shrinking.
STEPS = 100_000
#: Searches at most while shrinking one witness.
MAX_CHECKS = 400


def project(event: Event, rollout_id: str) -> Event:
    """``event`` reduced to ``rollout_id``: a batch becomes a batch of that ID alone, with its result."""
    op = event.op
    if not isinstance(op, Retire | Delete):
        return event
    result = event.result
    if isinstance(result, ModelOk) and isinstance(result.value, Removal):
        removed = rollout_id in result.value.removed
        result = ModelOk(Removal((rollout_id,), ()) if removed else Removal((), (rollout_id,)))
    return replace(event, op=type(op)([rollout_id]), result=result)


def touches(event: Event, rollout_id: str) -> bool:
    """Whether ``event``'s operation names ``rollout_id`` (a valid one)."""
    ids = rollout_ids_of(event.op)
    return isinstance(ids, list) and rollout_id in ids


def calls_on(calls: Iterable[Call], rollout_id: str) -> list[Call]:
    """The calls whose operation names ``rollout_id``, in order of invocation."""
    return in_invocation_order(c for c in calls if touches(c.event, rollout_id))


class _Checks:
    """Bounded searches on one rollout ID's projected events."""

    def __init__(self) -> None:
        self.left = MAX_CHECKS

    def linearizable(self, events: Sequence[Event]) -> bool | None:
        if self.left <= 0:
            return None
        self.left -= 1
        verdict = decide(events, budget=STEPS)
        return None if isinstance(verdict, Unknown) else isinstance(verdict, Ok)

    def fails(self, events: Sequence[Event]) -> bool:
        return bool(events) and self.linearizable(events) is False

    def may_fail(self, events: Sequence[Event]) -> bool:
        """Fails, or undecided within the bound (the shortest failing prefix is then never cut too short)."""
        return bool(events) and self.linearizable(events) is not True

    def relaxed_ok(self, events: Sequence[Event]) -> bool:
        """Condition 2: linearizable with the last event free to take effect at any moment."""
        if not events or events[-1].returned is None:
            return False
        first = min(e.invoked for e in events)
        last = max([e.returned for e in events if e.returned is not None] + [e.invoked for e in events])
        culprit = replace(events[-1], invoked=first - 1.0, returned=last + 1.0)
        return self.linearizable([*events[:-1], culprit]) is True

    def explains(self, events: Sequence[Event]) -> bool:
        return self.fails(events) and self.relaxed_ok(events)


def _cut(rest: list[Call], culprit: Call, keeps: Callable[[list[Call]], bool]) -> list[Call]:
    """Remove calls of ``rest`` one at a time while ``keeps(rest + [culprit])``, until a pass cuts none."""
    cut = True
    while cut:
        cut = False
        index = 0
        while index < len(rest):
            candidate = rest[:index] + rest[index + 1 :]
            if keeps([*candidate, culprit]):
                rest, cut = candidate, True
            else:
                index += 1
    return rest


def explaining_witness(calls: Sequence[Call], rollout_id: str) -> tuple[tuple[Call, ...], int, bool]:
    """The witness as the module docstring says.

    Args:
        calls: the round's calls (not linearizable on ``rollout_id``).
        rollout_id: the rollout ID of the violation.

    Returns:
        The witness's calls (the original calls, batches whole), in order of invocation; how many calls
        on the ID the shortest failing prefix has; and whether the witness explains (condition 2 holds).
    """
    mine = calls_on(calls, rollout_id)
    projected = {id(c): project(c.event, rollout_id) for c in mine}
    checks = _Checks()

    def events_of(chosen: Sequence[Call]) -> list[Event]:
        return [projected[id(c)] for c in chosen]

    low, high = 1, len(mine)
    while low < high:
        middle = (low + high) // 2
        if checks.may_fail(events_of(mine[:middle])):
            high = middle
        else:
            low = middle + 1
    chosen = mine[:high]
    culprit, rest = chosen[-1], chosen[:-1]
    explained = checks.explains(events_of(chosen))
    if explained:
        rest = _cut(rest, culprit, lambda candidate: checks.explains(events_of(candidate)))
    else:
        rest = _cut(rest, culprit, lambda candidate: checks.fails(events_of(candidate)))
    final = decide(events_of([*rest, culprit]), budget=None if len(rest) < 12 else 10 * STEPS)
    if not isinstance(final, Violation):
        return tuple(mine), len(mine), False  # undecided within the bound: the whole partition, which fails
    return (*rest, culprit), len(chosen), explained
