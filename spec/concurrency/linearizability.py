"""A linearizability checker for recorded histories (SPEC.md R-CONC-1, judged against ``model``).

``check_history(events)`` decides whether a history of concurrent calls (``history.Event``: invocation,
return and result of each call) could have come from the sequential model, each call taking effect
atomically at one instant between its invocation and its return.

How (porcupine's design, after Wing & Gong and Lowe):

* **Partition by rollout ID.** Every operation touches one ID, except ``retire`` and ``delete``, which are
  per-ID linearizable and *not atomic across IDs* (R-CONC-1): a batch becomes one sub-operation per ID of
  its (de-duplicated) batch, whose result is whether that ID was ``removed`` or ``absent``. IDs never
  interact in the model, so the history is linearizable exactly when every partition is.
* **Well-formed first.** A history whose events are not recordings of calls (a time that is not a finite
  number, a return before the invocation, a result that is neither ``Ok`` nor ``Err``) is refused with a
  ``ValueError`` naming the event (R-KIT-9): there is nothing to judge.
* **Validation first.** A call rejected by validation (invalid ID, row, batch; R-BATCH-2) does not depend
  on the state and changed nothing: it is judged on its own and leaves every partition. So is a result
  that no state explains: a value of the wrong type (``has_rows`` returning ``1``), or a removal that is not
  its batch split; each is a ``Violation`` of its own (``rollout_id=None``).
* **Search per partition**: the call and return entries in one doubly linked list sorted by time (a call
  before a return at the same instant, so touching calls count as concurrent); a depth-first search
  linearizes a pending call whose model result matches the observed one, backtracks at a return whose call
  is not linearized yet, and memoises ``(linearized set as a bitset, state)`` so that no configuration is
  explored twice.
* **Unreturned calls** (``returned=None``) may take effect anywhere after their invocation or not at all:
  their return is at +infinity and any result is accepted; the search stops once every returned call is
  linearized (the unreturned rest then take effect "after the end", which nothing observed).
* **Witnesses** are minimal: the failing partition is cut to its shortest failing prefix (in order of
  invocation), whose last call is the *culprit*; then events are removed while the rest stays
  non-linearizable and the culprit essential. So the witness is the culprit plus a linearizable set of
  calls that makes its result impossible, and no single one of those calls can go (unless its absence is
  a violation of its own, as a ``retire`` reporting ``removed`` with no write before it).

Not guaranteed: a result within any time bound (the problem is NP-complete; a ``budget`` of search steps
bounds the work and yields ``Unknown(spent)``, R-KIT-9); a globally minimal witness; judging clocks that
the clients did not share (``history`` says which clocks are fit).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from capture_ledger.spec.concurrency.history import Event, results_match
from capture_ledger.spec.core.model import (
    ABSENT,
    Admit,
    Delete,
    Discarded,
    Err,
    ErrorKind,
    HasRows,
    Live,
    ManifestValue,
    Operation,
    ReadManifest,
    Record,
    RecordFailure,
    Removal,
    Result,
    Retire,
    RolloutState,
    Transition,
    retire_one,
    rollout_ids_of,
    rollout_transition,
)
from capture_ledger.spec.core.model import Ok as _ModelOk

__all__ = [
    "CheckResult",
    "Ok",
    "SubOperation",
    "Unknown",
    "Violation",
    "check_history",
    "partition",
]


# --------------------------------------------------------------------------------------------- results
@dataclass(frozen=True, slots=True)
class Ok:
    # The checker's verdict, named like porcupine's ``Ok``; not ``model.Ok``, a call's result.
    """The history is linearizable."""

    def __repr__(self) -> str:
        return "Ok()"


@dataclass(frozen=True, slots=True)
class Violation:
    """The history is not linearizable; ``witness`` is a minimal non-linearizable sub-history."""

    rollout_id: str | None
    witness: tuple[Event, ...]
    explanation: str

    def __repr__(self) -> str:
        lines = [f"Violation(rollout_id={self.rollout_id!r}, explanation={self.explanation!r}, witness=["]
        lines += [f"    {event!r}," for event in self.witness]
        lines.append("])")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Unknown:
    """The budget of search steps was spent before a verdict."""

    spent: int


CheckResult = Ok | Violation | Unknown


# ------------------------------------------------------------------------------------ sub-operations
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


def _retire_fence(state: RolloutState) -> tuple[RolloutState, Result]:
    # Phase 1 of a retire on one ID: a Live rollout becomes fenced (reads and writes as Live, admission
    # refused, R-STATE-2); any other becomes Retired. ``removed`` is decided here.
    if isinstance(state, Live):
        return Live(state.entries, fenced=True), _ModelOk(True)
    return retire_one(state)[0], _ModelOk(False)


def _retire_complete(state: RolloutState) -> tuple[RolloutState, Result]:
    # Phase 2: only a rollout still fenced is completed; one deleted (and maybe re-used) meanwhile is left
    # alone (R-CONC-3). Composed with the fence, this is ``retire_one`` on every state.
    if isinstance(state, Live) and state.fenced:
        return retire_one(state)[0], _ModelOk(None)
    return state, _ModelOk(None)


def _removal_shape_error(batch: list[str], removal: object) -> str | None:
    if not isinstance(removal, Removal):
        return f"returned {removal!r}, not a removal"
    in_order = [i for i in batch if i in removal.removed] == list(removal.removed)
    in_order = in_order and [i for i in batch if i in removal.absent] == list(removal.absent)
    if not in_order or sorted((*removal.removed, *removal.absent)) != sorted(batch):
        return (
            f"reported removed={list(removal.removed)} absent={list(removal.absent)}, which is not the batch "
            f"{batch} split in first-seen order (R-BATCH-3)"
        )
    return None


def _prepare(op: Operation) -> Err | list[tuple[str, Transition]]:
    """Validate ``op`` once, as ``model.step`` does: the validation error (R-ID-1, R-BATCH-1..3, then
    R-WRITE-1, R-WRITE-7), or each of its IDs with the model's transition of that ID
    (``model.rollout_transition``; for a retire, its fence, R-STATE-2)."""
    ids = rollout_ids_of(op)
    if isinstance(ids, Err):
        return ids
    if isinstance(op, Retire):
        return [(rollout_id, _retire_fence) for rollout_id in ids]
    prepared: list[tuple[str, Transition]] = []
    for rollout_id in ids:
        transition = rollout_transition(rollout_id, op)
        if isinstance(transition, Err):
            return transition
        prepared.append((rollout_id, transition))
    return prepared


_OPERATIONS = (Record, RecordFailure, Admit, ReadManifest, HasRows, Retire, Delete)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _malformed(event: object) -> str | None:
    """Why ``event`` is not an observation of a call at all (R-KIT-9), or ``None``."""
    if not isinstance(event, Event):
        return f"{event!r} is not an Event"
    if not isinstance(event.op, _OPERATIONS):
        return f"{event.op!r} is not an operation"
    if not _finite(event.invoked) or not (event.returned is None or _finite(event.returned)):
        return f"its times must be finite numbers: invoked={event.invoked!r}, returned={event.returned!r}"
    if event.returned is not None and event.returned < event.invoked:
        return f"it returned before it was invoked: {event!r}"
    if event.returned is None and event.result is not None:
        return f"it has a result but no return time: {event!r}"
    result = event.result
    if result is not None and not isinstance(result, _ModelOk | Err):
        return f"its result {result!r} is neither Ok nor Err"
    if isinstance(result, Err) and not isinstance(result.kind, ErrorKind):
        return f"its result {result!r} names no ErrorKind"
    return None


def _value_shape_error(op: Operation, value: object) -> str | None:
    """Why a returned value cannot be ``op``'s whatever the state, or ``None`` (R-KIT-9)."""
    if isinstance(op, Record | RecordFailure):
        fits, what = value is None or isinstance(value, Discarded), "None (a write returns None)"
    elif isinstance(op, Admit):
        fits, what = value is None or isinstance(value, str), "a staging key or None"
    elif isinstance(op, HasRows):
        fits, what = isinstance(value, bool), "a bool"
    else:
        fits, what = isinstance(value, ManifestValue), "a manifest"
    return None if fits else f"{op!r} returned {value!r}, not {what}"


def partition(events: Sequence[Event]) -> tuple[dict[str, list[SubOperation]], Violation | None]:
    """Split a history into per-ID sub-operations (R-CONC-1) and judge the results no state can explain.

    Args:
        events: the history.

    Returns:
        The sub-operations of each rollout ID, in event order, and a ``Violation`` if some event's result
        is wrong whatever the state (a validation result, a value of the wrong type, or a removal that is
        not its batch split).

    Raises:
        ValueError: a malformed event (R-KIT-9): not an ``Event`` of an operation value, a time that is
            not a finite number, a return before the invocation, a result without a return time, or a
            result that is neither ``Ok`` nor ``Err``. The message names the event's index.
    """
    for index, event in enumerate(events):
        problem = _malformed(event)
        if problem is not None:
            raise ValueError(f"event {index} is malformed: {problem}")
    parts: dict[str, list[SubOperation]] = {}
    for index, event in enumerate(events):
        returned = math.inf if event.returned is None else event.returned
        op, result = event.op, event.result
        prepared = _prepare(op)
        if isinstance(prepared, Err):
            if result is not None and not results_match(prepared, result):
                problem = f"{op!r} must fail validation with {prepared!r} but returned {result!r}"
                return parts, Violation(None, (event,), problem)
            continue  # rejected by validation: changed nothing anywhere (R-BATCH-2)
        if isinstance(op, Retire | Delete):
            if isinstance(result, Err):
                problem = f"{op!r} can only fail validation, but returned {result!r}"
                return parts, Violation(None, (event,), problem)
            removed: tuple[str, ...] = ()
            if result is not None:
                shape = _removal_shape_error([rollout_id for rollout_id, _ in prepared], result.value)
                if shape is not None:
                    return parts, Violation(None, (event,), f"{op!r} {shape}")
                assert isinstance(result.value, Removal)  # checked by _removal_shape_error
                removed = result.value.removed
            for rollout_id, apply in prepared:
                observed = None if result is None else _ModelOk(rollout_id in removed)
                part = parts.setdefault(rollout_id, [])
                stage = "fence" if isinstance(op, Retire) else ""
                part.append(
                    SubOperation(index, rollout_id, event.invoked, returned, apply, observed, op, stage)
                )
                if isinstance(op, Retire):
                    # The second point, right after the fence in the list (``_search`` relies on it).
                    part.append(
                        SubOperation(
                            index, rollout_id, event.invoked, returned, _retire_complete, None, op, "complete"
                        )
                    )
            continue
        if isinstance(result, _ModelOk):
            shape = _value_shape_error(op, result.value)
            if shape is not None:
                return parts, Violation(None, (event,), shape)
            if isinstance(result.value, Discarded):
                result = _ModelOk(None)  # a recorder that kept the model's value: a discard returns None
        [(rollout_id, apply)] = prepared
        parts.setdefault(rollout_id, []).append(
            SubOperation(index, rollout_id, event.invoked, returned, apply, result, op)
        )
    return parts, None


# ------------------------------------------------------------------------------------------------ search
class _Budget:
    """Search steps left across partitions and shrinking (``None``: unbounded)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.spent = 0

    def exhausted(self) -> bool:
        return self.limit is not None and self.spent >= self.limit


@dataclass(frozen=True, slots=True)
class _Outcome:
    linearizable: bool | None  # None: budget spent
    longest: tuple[int, ...]  # the longest partial linearization found (indices into the partition)
    state: RolloutState


def _search(ops: Sequence[SubOperation], budget: _Budget, *, explain: bool = False) -> _Outcome:
    """Wing & Gong / Lowe search with memoisation, as porcupine's ``checkSingle``."""
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
            return _Outcome(None, longest, longest_state)
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
            return _Outcome(False, longest, longest_state)
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
    return _Outcome(True, longest, longest_state)


def _explain(ops: Sequence[SubOperation], outcome: _Outcome) -> str:
    done = set(outcome.longest)
    shown = [ops[i].label for i in outcome.longest[-4:]]
    if len(outcome.longest) > len(shown):
        shown.insert(0, f"... {len(outcome.longest) - len(shown)} calls")
    prefix = ", ".join(shown) or "nothing"
    blocked: list[str] = []
    for i, op in enumerate(ops):
        if i in done or op.observed is None or op.returned == math.inf:
            continue
        _, expected = op.apply(outcome.state)
        if len(blocked) < 3 and not results_match(expected, op.observed):
            blocked.append(f"{op.label} returned {op.observed!r} where the model gives {expected!r}")
    return (
        f"no order of these {len(ops)} calls on rollout {ops[0].rollout_id!r} respecting real time matches "
        f"their results; the longest partial linearization is [{prefix}] reaching {outcome.state!r}, after "
        f"which " + ("; ".join(blocked) or "a returned call is left with no order possible")
    )


Group = tuple[SubOperation, ...]  # the sub-operations of one event on one ID (a retire has two)


def _fails(groups: Sequence[Group], budget: _Budget) -> bool:
    return bool(groups) and _search([op for g in groups for op in g], budget).linearizable is False


def _shrink(ops: list[SubOperation], budget: _Budget) -> list[SubOperation]:
    """A minimal non-linearizable sub-list of a non-linearizable partition, removing whole events.

    First the shortest failing prefix in invocation order (binary search), whose last call is the
    *culprit*: the first call whose result no order explains. Then chunks, and finally single calls, are
    removed while the rest still fails and the culprit stays essential (without it, the rest is
    linearizable), so that the witness shows the call that went wrong and the calls that make its result
    impossible, rather than some other small failing subset (a lone ``retire`` reporting ``removed`` is one).
    """
    by_event: dict[int, list[SubOperation]] = {}
    for op in sorted(ops, key=lambda op: (op.invoked, op.event)):  # stable: a fence stays first
        by_event.setdefault(op.event, []).append(op)
    groups = [tuple(g) for g in by_event.values()]
    low, high = 1, len(groups)  # groups[:high] fails
    while low < high and not budget.exhausted():
        middle = (low + high) // 2
        if _fails(groups[:middle], budget):
            high = middle
        else:
            low = middle + 1
    groups = groups[:high]
    culprit, rest = groups[-1], groups[:-1]
    # Cut chunks, then single events, keeping the culprit essential: the rest without it stays
    # linearizable, so what is left explains why the culprit's result is impossible.
    # Single events are cut until a whole pass cuts none: an event needed only by one cut later (a read
    # of its row) goes in the next pass.
    chunk = max(1, len(rest) // 2)
    while not budget.exhausted():
        start, cut = 0, False
        while start < len(rest) and not budget.exhausted():
            candidate = rest[:start] + rest[start + chunk :]
            if _fails([*candidate, culprit], budget) and not _fails(candidate, budget):
                rest, cut = candidate, True  # keep the cut; try the same position again
            else:
                start += chunk
        if chunk == 1 and not cut:
            break
        chunk = max(1, chunk // 2)
    rest = [*rest, culprit]
    return [op for g in rest for op in g]


def check_history(events: Sequence[Event], *, budget: int | None = None) -> CheckResult:
    """Whether a recorded history is linearizable with respect to the sequential model (R-CONC-1).

    Args:
        events: the history: every call's invocation, return (``None`` if it never returned) and result.
        budget: at most this many search steps (over all partitions and the shrinking of a witness);
            ``None`` for no bound.

    Returns:
        ``Ok()``; ``Violation(rollout_id, witness, explanation)`` with a minimal non-linearizable
        sub-history of ``events`` (``rollout_id`` is ``None`` when one call's result is wrong in any
        state); or ``Unknown(spent)`` when the budget ran out before a verdict.

    Raises:
        ValueError: a malformed history (``partition`` says which event and why, R-KIT-9): not a
            recording of calls, so not a history to judge.
    """
    parts, invalid = partition(events)
    if invalid is not None:
        return invalid
    steps = _Budget(budget)
    unknown = False
    for rollout_id, ops in parts.items():
        outcome = _search(ops, steps)
        if outcome.linearizable is None:
            unknown = True
            break
        if outcome.linearizable:
            continue
        # The explanation comes from the whole partition (its context is what a reader needs); the
        # witness is the shrunk sub-history, which is often just the calls whose results clash.
        explanation = _explain(ops, _search(ops, _Budget(None), explain=True))  # deterministic: ends
        shrunk = _shrink(ops, steps)
        witness = tuple(events[i] for i in sorted({op.event for op in shrunk}))
        return Violation(rollout_id, witness, explanation)
    if unknown:
        return Unknown(steps.spent)
    return Ok()
