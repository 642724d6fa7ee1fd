"""A linearizability checker for recorded histories (SPEC.md R-CONC-1, judged against ``model``).

``check_history(events)`` decides whether a history of concurrent calls (``history.Event``: invocation,
return and result of each call) could have come from the sequential model, each call taking effect
atomically at one instant between its invocation and its return. It answers with the one result type of
every checker (``spec.core.verdicts``): ``Ok()``; ``Violation(requirement="R-CONC-1", counterexample=...,
witness=LinearizabilityWitness(rollout_id, events, explanation))`` with a minimal witness; or
``Unknown(spent="N search steps")``. ``decide(events)`` is the same verdict without building the witness
(its ``Violation`` carries the whole failing partition, unexplained): what a caller that builds its own
witness from many small decisions wants (``spec.kit.stress``).

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
  its batch split; each is a ``Violation`` of its own (its witness's ``rollout_id`` is ``None``).
* **Search per partition** (``_search``): the call and return entries in one doubly linked list sorted by
  time (a call before a return at the same instant, so touching calls count as concurrent); a depth-first
  search linearizes a pending call whose model result matches the observed one, backtracks at a return
  whose call is not linearized yet, and memoises ``(linearized set as a bitset, state)`` so that no
  configuration is explored twice. The state is symbolic where writes commute (``_commute``: rows that
  no read has ordered are a set, and a write whose row no other call touches is taken only when a read
  shows it or it returns; one a removal may have cleared is kept as there or not until a read settles
  it), which is exact: ``reference_decide`` is the same verdict by the plain search on the model's
  ordered states, and a property test holds the two to it. A partition with at most ``_search.CROWD``
  writes in flight at once goes to the plain search itself (``_search.judge``).
* **Unreturned calls** (``returned=None``) may take effect anywhere after their invocation or not at all:
  their return is at +infinity and any result is accepted; the search stops once every returned call is
  linearized (the unreturned rest then take effect "after the end", which nothing observed).
* **Witnesses** (``_witness``) are minimal: the failing partition is cut to its shortest failing prefix
  (in order of invocation), whose last call is the *culprit*; then events are removed while the rest stays
  non-linearizable and the culprit essential. So the witness is the culprit plus a linearizable set of
  calls that makes its result impossible, and no single one of those calls can go (unless its absence is
  a violation of its own, as a ``retire`` reporting ``removed`` with no write before it).

Not guaranteed: a result within any time bound (the problem is NP-complete; a ``budget`` of search steps
bounds the work and yields ``Unknown(spent)``, R-KIT-9; the search stops exactly when it has spent the
budget, so ``spent`` is the budget; the witness has a bound of its own, ``explain_budget``, past which it
is given unshrunk); a globally minimal witness; judging clocks that the clients did not
share (``history`` says which clocks are fit).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from capture_ledger.spec.concurrency._search import Budget, Outcome, SubOperation, judge, plain_search
from capture_ledger.spec.concurrency._witness import LinearizabilityWitness, counterexample, explain, shrink
from capture_ledger.spec.concurrency.history import Event, results_match
from capture_ledger.spec.core.model import (
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
from capture_ledger.spec.core.verdicts import Ok, Unknown, Verdict, Violation

# Ok, Unknown, Verdict and Violation are the shared result type (spec.core.verdicts), re-exported for the
# checker's callers.
__all__ = [
    "DEFAULT_EXPLAIN_BUDGET",
    "REQUIREMENT",
    "LinearizabilityWitness",
    "Ok",
    "SubOperation",
    "Unknown",
    "Verdict",
    "Violation",
    "check_history",
    "decide",
    "partition",
    "reference_decide",
]

#: The requirement a non-linearizable history breaks.
REQUIREMENT = "R-CONC-1"
#: Search steps ``check_history`` may spend explaining and shrinking a witness, after the verdict.
DEFAULT_EXPLAIN_BUDGET = 2_000_000

Searcher = Callable[[Sequence[SubOperation], Budget], Outcome]


# ------------------------------------------------------------------------------------ sub-operations
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


def _violation(witness: LinearizabilityWitness) -> Violation:
    return Violation(requirement=REQUIREMENT, counterexample=counterexample(witness), witness=witness)


def _alone(event: Event, problem: str) -> Violation:
    """A result no state explains: a violation whose witness is the one event."""
    return _violation(LinearizabilityWitness(rollout_id=None, events=(event,), explanation=problem))


def partition(events: Sequence[Event]) -> tuple[dict[str, list[SubOperation]], Violation | None]:
    """Split a history into per-ID sub-operations (R-CONC-1) and judge the results no state can explain.

    Args:
        events: the history.

    Returns:
        The sub-operations of each rollout ID, in event order, and a ``Violation`` if some event's result
        is wrong whatever the state (a validation result, a value of the wrong type, or a removal that is
        not its batch split); its witness is that one event (``rollout_id=None``).

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
                return parts, _alone(event, problem)
            continue  # rejected by validation: changed nothing anywhere (R-BATCH-2)
        if isinstance(op, Retire | Delete):
            if isinstance(result, Err):
                problem = f"{op!r} can only fail validation, but returned {result!r}"
                return parts, _alone(event, problem)
            removed: tuple[str, ...] = ()
            if result is not None:
                shape = _removal_shape_error([rollout_id for rollout_id, _ in prepared], result.value)
                if shape is not None:
                    return parts, _alone(event, f"{op!r} {shape}")
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
                    # The second point, right after the fence in the list (``_search.search`` relies on it).
                    part.append(
                        SubOperation(
                            index, rollout_id, event.invoked, returned, _retire_complete, None, op, "complete"
                        )
                    )
            continue
        if isinstance(result, _ModelOk):
            shape = _value_shape_error(op, result.value)
            if shape is not None:
                return parts, _alone(event, shape)
            if isinstance(result.value, Discarded):
                result = _ModelOk(None)  # a recorder that kept the model's value: a discard returns None
        [(rollout_id, apply)] = prepared
        parts.setdefault(rollout_id, []).append(
            SubOperation(index, rollout_id, event.invoked, returned, apply, result, op)
        )
    return parts, None


# ------------------------------------------------------------------------------------------------ verdicts
def _decide(
    events: Sequence[Event], budget: Budget, searcher: Searcher = judge
) -> tuple[Verdict | None, dict[str, list[SubOperation]], str | None]:
    """The partitions and either the verdict (``Ok``, ``Unknown``, or a violation of one event) or, for a
    partition that fails, ``None`` and its rollout ID: the caller builds that violation's witness."""
    parts, invalid = partition(events)
    if invalid is not None:
        return invalid, parts, None
    for rollout_id, ops in parts.items():
        outcome = searcher(ops, budget)
        if outcome.linearizable is None:
            return Unknown(spent=f"{budget.spent} search steps"), parts, None
        if not outcome.linearizable:
            return None, parts, rollout_id
    return Ok(), parts, None


def decide(events: Sequence[Event], *, budget: int | None = None) -> Verdict:
    """Whether a recorded history is linearizable (R-CONC-1), without building a minimal witness.

    Cheaper than ``check_history`` on a violation: no explanation search and no shrinking. For callers that
    build their own witness from many decisions on small sub-histories.

    Args:
        events: the history.
        budget: at most this many search steps over every partition; ``None`` for no bound.

    Returns:
        ``Ok()``; a ``Violation`` of R-CONC-1 whose ``witness`` (a ``LinearizabilityWitness``) holds the
        failing rollout ID's events, in the history's order, with a one-line explanation (a result wrong
        in any state: that one event, ``rollout_id=None``, explained as ``check_history`` does); or
        ``Unknown(spent="N search steps")`` when the budget ran out first.

    Raises:
        ValueError: a malformed history (``partition`` says which event and why, R-KIT-9).
    """
    return _whole(events, *_decide(events, Budget(budget)))


def reference_decide(events: Sequence[Event], *, budget: int | None = None) -> Verdict:
    """``decide`` with the plain search (porcupine's, on the model's ordered states), for comparison.

    What ``search``'s reductions are checked against (``tests/spec/concurrency/test_commute.py``) and
    measured against (``benchmarks/bench_linearizability.py``); not for judging: it gives up at about eight
    concurrent writes on one rollout ID.

    Args:
        events: the history.
        budget: at most this many search steps over every partition; ``None`` for no bound.

    Returns:
        As ``decide``.

    Raises:
        ValueError: a malformed history.
    """
    return _whole(events, *_decide(events, Budget(budget), plain_search))


def _why(ops: Sequence[SubOperation], rollout_id: str) -> str:
    return (
        f"no order of these {len(ops)} calls on rollout {rollout_id!r} respecting real time matches their "
        "results"
    )


def _whole(
    events: Sequence[Event],
    verdict: Verdict | None,
    parts: dict[str, list[SubOperation]],
    rollout_id: str | None,
) -> Verdict:
    """The verdict, or the violation whose witness is the failing partition's events, whole."""
    if verdict is not None:
        return verdict
    assert rollout_id is not None
    ops = parts[rollout_id]
    mine = tuple(events[i] for i in sorted({op.event for op in ops}))
    witness = LinearizabilityWitness(
        rollout_id=rollout_id, events=mine, explanation=_why(ops, rollout_id), shrunk=False
    )
    return _violation(witness)


def check_history(
    events: Sequence[Event], *, budget: int | None = None, explain_budget: int | None = DEFAULT_EXPLAIN_BUDGET
) -> Verdict:
    """Whether a recorded history is linearizable with respect to the sequential model (R-CONC-1).

    ``decide``, then, on a violation, the explanation and the shrinking of its witness under a bound of
    their own: the verdict never waits for the witness longer than ``explain_budget`` steps.

    Args:
        events: the history: every call's invocation, return (``None`` if it never returned) and result.
        budget: at most this many search steps to decide; ``None`` for no bound.
        explain_budget: at most this many search steps to explain and shrink a violation's witness;
            ``None`` for no bound. When they run out, the witness is the failing rollout's calls whole
            (``shrunk=False``), and its explanation says so.

    Returns:
        ``Ok()``; a ``Violation`` of R-CONC-1 whose ``witness`` is a ``LinearizabilityWitness`` with a
        minimal non-linearizable sub-history of ``events`` (``rollout_id`` is ``None`` when one call's
        result is wrong in any state) and whose ``counterexample`` is its text; or
        ``Unknown(spent="N search steps")`` when the budget ran out before a verdict.

    Raises:
        ValueError: a malformed history (``partition`` says which event and why, R-KIT-9): not a
            recording of calls, so not a history to judge.
    """
    verdict, parts, rollout_id = _decide(events, Budget(budget))
    if verdict is not None:
        return verdict
    assert rollout_id is not None
    ops = parts[rollout_id]
    steps = Budget(explain_budget)
    # The explanation comes from the whole partition (its context is what a reader needs); the witness is
    # the shrunk sub-history, which is often just the calls whose results clash.
    explanation = explain(ops, steps)
    shrunk, finished = shrink(ops, steps) if explanation is not None else (ops, False)
    if explanation is None or not finished:
        explanation = (explanation or _why(ops, rollout_id)) + (
            f"; the witness is not shrunk: the bound of {explain_budget} search steps to explain it ran out, "
            f"so these are all {len(ops)} calls on the rollout"
        )
    witness = tuple(events[i] for i in sorted({op.event for op in shrunk}))
    return _violation(
        LinearizabilityWitness(
            rollout_id=rollout_id, events=witness, explanation=explanation, shrunk=finished
        )
    )
