"""The per-ID search of the linearizability checker (SPEC.md R-CONC-1): one partition's sub-operations,
the budget of search steps, and the Wing & Gong / Lowe depth-first search with memoisation (porcupine's
``checkSingle``).

``search(ops, budget)`` says whether the sub-operations of one rollout ID (``SubOperation``, made by
``linearizability.partition``) have an order that respects real time and matches every observed result;
with ``explain`` it also keeps the longest partial linearization found, for a witness's explanation.

Not guaranteed: a verdict within any time (``Budget`` bounds the steps; the outcome is then undecided).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from capture_ledger.spec.concurrency.history import results_match
from capture_ledger.spec.core.model import ABSENT, Delete, Operation, Result, Retire, RolloutState, Transition

__all__ = ["Budget", "Outcome", "SubOperation", "search"]


class SubOperation(NamedTuple):
    """One event's effect on one rollout ID: ``apply`` is the model's per-ID step (state -> state, result).

    A ``NamedTuple`` rather than a frozen dataclass: a history of 100,000 calls makes as many, and a frozen
    dataclass's ``__init__`` costs several times more.
    """

    event: int
    rollout_id: str
    invoked: float
    returned: float  # math.inf when the call never returned
    apply: Transition
    observed: Result | None  # None: not checked (an unreturned call, or a retire's completion)
    op: Operation
    #: ``"fence"`` or ``"complete"`` for the two points of a retire (R-STATE-2); ``""`` otherwise.
    stage: str = ""

    @property
    def label(self) -> str:
        """The call, as valid Python; a batch names the ID this sub-operation stands for."""
        if isinstance(self.op, Retire | Delete) and list(self.op.rollout_ids) != [self.rollout_id]:  # type: ignore[call-overload]
            label = f"{self.op!r} on {self.rollout_id!r}"
        else:
            label = repr(self.op)
        return f"{label} ({self.stage})" if self.stage else label


class Budget:
    """Search steps spent, and the bound on them across partitions and shrinking (``None``: unbounded)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.spent = 0

    def exhausted(self) -> bool:
        return self.limit is not None and self.spent >= self.limit


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one search found."""

    linearizable: bool | None  # None: budget spent
    longest: tuple[int, ...]  # the longest partial linearization found (indices into the partition)
    state: RolloutState


def search(ops: Sequence[SubOperation], budget: Budget, *, explain: bool = False) -> Outcome:
    """Wing & Gong / Lowe search with memoisation, as porcupine's ``checkSingle``.

    Args:
        ops: one rollout ID's sub-operations (a retire's completion right after its fence).
        budget: the steps left; each step taken is added to ``budget.spent``.
        explain: also keep the longest partial linearization found (O(n) each time it grows).

    Returns:
        Whether the sub-operations are linearizable (``None``: the budget ran out first).
    """
    n = len(ops)
    # Entries 1..2n: call of op i is i+1, its return n+i+1; 0 is the list head. A call sorts before a
    # return at the same instant.
    order = sorted(
        [(op.invoked, 0, i) for i, op in enumerate(ops)]
        + [(op.returned, 1, n + i) for i, op in enumerate(ops)]
    )
    nxt = [0] * (2 * n + 2)
    prv = [0] * (2 * n + 2)
    last = 0
    for _, _, entry in order:
        nxt[last] = entry + 1
        prv[entry + 1] = last
        last = entry + 1
    nxt[last] = 0  # 0 doubles as the end of the list
    must = sum(1 for op in ops if op.returned != math.inf)  # returned calls still to linearize
    # A retire's completion may only follow its own fence (the sub-operation just before it).
    after = [
        i - 1 if op.stage == "complete" and i and ops[i - 1].stage == "fence" else -1
        for i, op in enumerate(ops)
    ]
    state: RolloutState = ABSENT
    linearized = 0
    cache: set[tuple[int, RolloutState]] = set()
    calls: list[tuple[int, RolloutState]] = []
    longest: tuple[int, ...] = ()
    longest_state: RolloutState = ABSENT
    entry = nxt[0]
    while must:
        if budget.exhausted():
            return Outcome(None, longest, longest_state)
        budget.spent += 1
        i = entry - 1
        if 0 <= i < n:  # a call: try to linearize it now
            op = ops[i]
            if after[i] >= 0 and not (linearized >> after[i]) & 1:
                entry = nxt[entry]
                continue
            new_state, expected = op.apply(state)
            if op.observed is None or results_match(expected, op.observed):
                key = (linearized | (1 << i), new_state)
                if key not in cache:
                    cache.add(key)
                    calls.append((i, state))
                    state, linearized = new_state, key[0]
                    if op.returned != math.inf:
                        must -= 1
                    ret = n + i + 1
                    nxt[prv[entry]] = nxt[entry]  # lift the call and its return out of the list
                    prv[nxt[entry]] = prv[entry]
                    nxt[prv[ret]] = nxt[ret]
                    prv[nxt[ret]] = prv[ret]
                    if explain and len(calls) > len(longest):  # O(n) a time: only to explain
                        longest, longest_state = tuple(c for c, _ in calls), state
                    entry = nxt[0]
                    continue
            entry = nxt[entry]
            continue
        # A return whose call is not linearized (or the end of the list): undo the last linearization.
        if not calls:
            return Outcome(False, longest, longest_state)
        i, state = calls.pop()
        linearized &= ~(1 << i)
        if ops[i].returned != math.inf:
            must += 1
        call, ret = i + 1, n + i + 1
        nxt[prv[ret]] = ret  # unlift in reverse order
        prv[nxt[ret]] = ret
        nxt[prv[call]] = call
        prv[nxt[call]] = call
        entry = nxt[call]
    return Outcome(True, longest, longest_state)
