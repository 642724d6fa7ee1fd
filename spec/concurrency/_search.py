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

from capture_ledger.spec.concurrency._commute import Commuting, Rows, Symbolic, core
from capture_ledger.spec.concurrency.history import results_match
from capture_ledger.spec.core.model import (
    ABSENT,
    Delete,
    Err,
    ManifestValue,
    Ok,
    Operation,
    Record,
    RecordFailure,
    Removal,
    Result,
    Retire,
    RolloutState,
    Transition,
)

__all__ = ["CROWD", "Budget", "Outcome", "SubOperation", "judge", "plain_search", "search"]


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


def _observed_key(observed: Result | None) -> object:
    """A key under which observed results compare alike with every model result (``results_match``):
    the type of the value with the value, so ``Ok(True)`` and ``Ok(1)`` differ; anything else by identity."""
    if observed is None:
        return None
    if type(observed) is Err:
        return Err, observed.kind
    if type(observed) is Ok:
        value = observed.value
        kind = type(value)
        if kind is bool or kind is str or value is None:
            return kind, value
        if kind is ManifestValue or kind is Removal:
            try:
                hash(value)
            except TypeError:
                return id(observed)
            return kind, value
    return id(observed)


class _Table:
    """One partition's transitions through the model, each computed once: the model's states interned
    as small numbers (two equal states, one number), and per transition and observed result (sub-operations
    of equal calls share them) the number of the state after and whether the result matches, per state
    before. The search then hashes numbers, not states, and calls the model once per distinct step."""

    def __init__(self, ops: Sequence[SubOperation]) -> None:
        self.states: list[RolloutState] = [ABSENT]
        self.number: dict[RolloutState, int] = {ABSENT: 0}
        groups: dict[tuple[int, object], dict[int, tuple[int, bool]]] = {}
        keys = [(id(op.apply), _observed_key(op.observed)) for op in ops]
        self.steps: list[dict[int, tuple[int, bool]]] = [
            groups.get(key) or groups.setdefault(key, {}) for key in keys
        ]

    def step(self, op: SubOperation, before: int) -> tuple[int, bool]:
        """The model's step of ``op`` from state number ``before``: the number after, and the match."""
        state, expected = op.apply(self.states[before])
        after = self.number.get(state)
        if after is None:
            after = self.number[state] = len(self.states)
            self.states.append(state)
        return after, op.observed is None or results_match(expected, op.observed)


def plain_search(ops: Sequence[SubOperation], budget: Budget, *, explain: bool = False) -> Outcome:
    """Wing & Gong / Lowe search with memoisation, as porcupine's ``checkSingle``, on the model's states.

    The reference that ``search`` is checked against (``tests/spec/concurrency/test_commute.py``) and
    measured against (``benchmarks/bench_linearizability.py``): every order of unordered writes is a state
    of its own here. The states are the model's, interned (``_Table``): each distinct step is the model's,
    computed once.

    Args:
        ops: one rollout ID's sub-operations (a retire's completion right after its fence).
        budget: the steps left; each step taken is added to ``budget.spent``.
        explain: also keep the longest partial linearization found (O(n) each time it grows).

    Returns:
        Whether the sub-operations are linearizable (``None``: the budget ran out first).
    """
    n = len(ops)
    nxt, prv = _links(ops)
    returned = [op.returned for op in ops]
    must = n - returned.count(math.inf)  # returned calls still to linearize
    # A retire's completion may only follow its own fence (the sub-operation just before it).
    after = [
        i - 1 if op.stage == "complete" and i and ops[i - 1].stage == "fence" else -1
        for i, op in enumerate(ops)
    ]
    table = _Table(ops)
    steps, states = table.steps, table.states
    state = 0  # the number of the state (``_Table``)
    linearized = 0
    cache: set[tuple[int, int]] = set()
    calls: list[tuple[int, int]] = []
    longest: tuple[int, ...] = ()
    longest_state = 0
    spent = budget.spent
    limit = math.inf if budget.limit is None else budget.limit
    entry = nxt[0]
    while must:
        if spent >= limit:
            budget.spent = spent
            return Outcome(None, longest, states[longest_state])
        spent += 1
        i = entry - 1
        if 0 <= i < n:  # a call: try to linearize it now
            if after[i] >= 0 and not (linearized >> after[i]) & 1:
                entry = nxt[entry]
                continue
            known = steps[i].get(state)
            if known is None:
                known = steps[i][state] = table.step(ops[i], state)
            new_state, matches = known
            if matches:
                key = (linearized | (1 << i), new_state)
                if key not in cache:
                    cache.add(key)
                    calls.append((i, state))
                    state, linearized = new_state, key[0]
                    if returned[i] != math.inf:
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
            budget.spent = spent
            return Outcome(False, longest, states[longest_state])
        i, state = calls.pop()
        linearized &= ~(1 << i)
        if returned[i] != math.inf:
            must += 1
        call, ret = i + 1, n + i + 1
        nxt[prv[ret]] = ret  # unlift in reverse order
        prv[nxt[ret]] = ret
        nxt[prv[call]] = call
        prv[nxt[call]] = call
        entry = nxt[call]
    budget.spent = spent
    return Outcome(True, longest, states[longest_state])


def _links(ops: Sequence[SubOperation]) -> tuple[list[int], list[int]]:
    """The doubly linked list of call and return entries sorted by time: entry ``i + 1`` is call ``i``,
    ``n + i + 1`` its return, 0 the head and the end. A call sorts before a return at the same instant,
    and calls (returns) at one instant in index order: a stable sort of the calls, then the returns."""
    n = len(ops)
    times = [op.invoked for op in ops]
    times += [op.returned for op in ops]
    order = sorted(range(2 * n), key=times.__getitem__)
    nxt = [0] * (2 * n + 2)
    prv = [0] * (2 * n + 2)
    last = 0
    for entry in order:
        nxt[last] = entry + 1
        prv[entry + 1] = last
        last = entry + 1
    nxt[last] = 0
    return nxt, prv


def search(ops: Sequence[SubOperation], budget: Budget, *, explain: bool = False) -> Outcome:
    """The search of ``plain_search`` on symbolic states that know what commutes (``_commute``).

    Two changes, both exact (``docs/concurrency.md``): a Live state keeps rows that no read has ordered as
    a set (``_commute.Rows``), so orders of commuting writes are one state; and a *lazy* write (a simple
    write that overlaps no removal and no write that is not simple) is never tried on a Live rollout, only
    taken when a read shows its row (just before that read) or when the search reaches its return. So
    ``N`` concurrent writes with reads between them make about ``N`` configurations, not ``2**N`` or ``N!``.
    A lazy write a removal may have cleared is kept, at its return, as a row there or not
    (``Commuting.maybe_write``) until a read settles it, and the memo compares configurations by inclusion
    of those rows and of the vanishing writes, so writes overlapping a removal do not make ``2**k``
    configurations either.
    And a read that lists a row no call writes fails the partition before any search.

    Args, Returns: as ``plain_search``; ``Outcome.state`` is a concrete state the longest partial
    linearization reaches.
    """
    n = len(ops)
    ctx = Commuting(ops)
    if ctx.impossible() is not None:
        return Outcome(False, (), ABSENT)
    nxt, prv = _links(ops)
    must = sum(1 for op in ops if op.returned != math.inf)
    after = [
        i - 1 if op.stage == "complete" and i and ops[i - 1].stage == "fence" else -1
        for i, op in enumerate(ops)
    ]
    lazy, lazy_mask, read, returned = ctx.lazy, ctx.lazy_mask, ctx.read, ctx.returned
    step = ctx.step
    state: Symbolic = ABSENT
    linearized = 0
    # The memo: per linearized set and certain part of the state (``_commute.core``), the (rows that may
    # be gone, vanishing writes) of each configuration explored. A configuration is skipped when one
    # explored has the same key and both sets as large: it stands for every concrete configuration this
    # one does, with every option this one has, and it failed (the search stops at the first success).
    cache: dict[tuple[int, Symbolic], list[tuple[int, int]]] = {}
    # Each step taken: the call, the state before it, the lazy writes taken just before it, the vanishing
    # writes before it, and which option of a lazy write's return it was (-1: a call taken).
    calls: list[tuple[int, Symbolic, list[int], int, int]] = []
    longest: tuple[int, ...] = ()
    longest_state: Symbolic = ABSENT

    def lift(i: int) -> None:
        call, ret = i + 1, n + i + 1
        nxt[prv[call]] = nxt[call]
        prv[nxt[call]] = prv[call]
        nxt[prv[ret]] = nxt[ret]
        prv[nxt[ret]] = prv[ret]

    def unlift(i: int) -> None:
        call, ret = i + 1, n + i + 1
        nxt[prv[ret]] = ret
        prv[nxt[ret]] = ret
        nxt[prv[call]] = call
        prv[nxt[call]] = call

    def takeable() -> int:
        # The calls that may take effect now: those before the first return left in the list.
        mask, cursor = 0, nxt[0]
        while cursor and cursor <= n:
            mask |= 1 << (cursor - 1)
            cursor = nxt[cursor]
        return mask

    vanish = 0  # lazy writes not taken that may have taken effect before a removal cleared their row
    resume = 0  # the option to try next at a lazy write's return (0: take it; 1: it vanished)
    entry = nxt[0]
    while must:
        if budget.exhausted():
            return Outcome(None, longest, ctx.concrete(longest_state))
        budget.spent += 1
        i = entry - 1
        forced: list[int] = []
        option = -1
        if 0 <= i < n:  # a call: try to linearize it now
            if (after[i] >= 0 and not (linearized >> after[i]) & 1) or (lazy[i] and isinstance(state, Rows)):
                entry = nxt[entry]
                continue
            before = state
            if read[i] and isinstance(state, Rows):
                pending = ctx.shown(i) & lazy_mask & ~linearized
                if pending:
                    if pending & ~takeable():
                        entry = nxt[entry]
                        continue
                    while pending:
                        low = pending & -pending
                        writer = low.bit_length() - 1
                        forced.append(writer)
                        before, _ = step(writer, before)
                        pending ^= low
            new_state, matches = step(i, before)
            new_vanish = vanish
            if matches and isinstance(state, Rows) and not isinstance(new_state, Rows):
                # A removal cleared the rows: a lazy write that could take effect now could have taken
                # effect just before it, and its row would be gone (R-CONC-1, per-ID linearizable).
                new_vanish |= takeable() & lazy_mask & ~(1 << i)
        elif entry and lazy[entry - n - 1]:
            # The return of a lazy write not taken yet: take it now, as late as it can be, or, if a removal
            # could have cleared it, let it vanish there. Both: its row is there or not, which the next
            # read settles (``Commuting.maybe_write``), so the search does not try the two apart.
            i = entry - n - 1
            option, resume = resume, 0
            new_vanish = vanish
            matches = option == 0
            if not matches:
                pass
            elif isinstance(state, Rows):
                new_state = ctx.maybe_write(i, state) if (vanish >> i) & 1 else step(i, state)[0]
            elif (vanish >> i) & 1:
                new_state = state
            else:
                matches = False
        else:
            matches = False
        resume = 0
        if matches:
            done = linearized | (1 << i)
            for writer in forced:
                done |= 1 << writer
            new_vanish &= ~done
            key = (done, core(new_state))
            maybe = new_state.maybe if isinstance(new_state, Rows) else 0
            seen = cache.get(key)
            if seen is None:
                seen = cache[key] = []
            if not any(maybe & ~m == 0 and new_vanish & ~v == 0 for m, v in seen):
                seen.append((maybe, new_vanish))
                calls.append((i, state, forced, vanish, option))
                state, linearized, vanish = new_state, done, new_vanish
                for writer in forced:
                    lift(writer)
                    if returned[writer] != math.inf:
                        must -= 1
                lift(i)
                if returned[i] != math.inf:
                    must -= 1
                if explain and linearized.bit_count() > len(longest):  # O(n) a time: only to explain
                    longest = tuple(c for call, _, taken, _, _ in calls for c in (*taken, call))
                    longest_state = state
                entry = nxt[0]
                continue
            if option >= 0:  # this option of a lazy write's return was explored: try the next one
                resume = option + 1
                continue
        if 0 <= entry - 1 < n:
            entry = nxt[entry]
            continue
        # A return whose call is not linearized (or the end of the list): undo the last step.
        if not calls:
            return Outcome(False, longest, ctx.concrete(longest_state))
        i, state, forced, vanish, option = calls.pop()
        unlift(i)
        linearized &= ~(1 << i)
        if returned[i] != math.inf:
            must += 1
        for writer in reversed(forced):
            unlift(writer)
            linearized &= ~(1 << writer)
            if returned[writer] != math.inf:
                must += 1
        if option >= 0:  # a lazy write's return: try its next option
            entry, resume = n + i + 1, option + 1
        else:
            entry = nxt[i + 1]
    return Outcome(True, longest, ctx.concrete(longest_state))


#: At most this many writes in flight at once, a partition is judged by the plain search (``judge``).
CROWD = 3


def _crowd(ops: Sequence[SubOperation]) -> int:
    """The most *simple* writes of ``ops`` in flight at one instant (touching calls count as concurrent):
    writes whose key (a record's model call ID, a failure itself) no other write of ``ops`` has. Only
    their orders multiply the plain search's states; a write whose key recurs is ordered by the model
    (R-WRITE-3, R-WRITE-7) and is no loose row for ``search`` either."""
    keys: dict[object, int] = {}
    writes: list[tuple[object, SubOperation]] = []
    for op in ops:
        call = op.op
        kind = type(call)
        if kind is Record or isinstance(call, Record):
            key: object = call.row["model_call_id"]  # type: ignore[union-attr,index]
        elif kind is RecordFailure or isinstance(call, RecordFailure):
            key = (call.model_call_id, call.reason)  # type: ignore[union-attr]
        else:
            continue
        writes.append((key, op))
        keys[key] = keys.get(key, 0) + 1
    marks = [(op.invoked, 0) for key, op in writes if keys[key] == 1]
    if len(marks) <= CROWD:
        return len(marks)
    marks += [(op.returned, 1) for key, op in writes if keys[key] == 1]
    marks.sort()
    most = now = 0
    for _, mark in marks:
        now += 1 - 2 * mark
        most = max(most, now)
    return most


def judge(ops: Sequence[SubOperation], budget: Budget) -> Outcome:
    """``plain_search`` when at most ``CROWD`` simple writes are ever in flight at once (``_crowd``), else
    ``search``: both are
    exact (``tests/spec/concurrency/test_commute.py`` holds ``search`` to the plain one), and with so few
    writes to order the plain search has few orders to try and none of ``search``'s set-up per partition
    (``Commuting``). Which one judged is not part of the outcome."""
    return plain_search(ops, budget) if _crowd(ops) <= CROWD else search(ops, budget)
