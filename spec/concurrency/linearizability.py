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
  simple writes in flight at once goes to the plain search itself (``_search.judge``).
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

import contextlib
import gc
from collections.abc import Callable, Iterator, Sequence

from capture_ledger.spec.concurrency._partition import REQUIREMENT, partition, violation
from capture_ledger.spec.concurrency._search import Budget, Outcome, SubOperation, judge, plain_search
from capture_ledger.spec.concurrency._witness import LinearizabilityWitness, explain, shrink
from capture_ledger.spec.concurrency.history import Event
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

#: Search steps ``check_history`` may spend explaining and shrinking a witness, after the verdict.
DEFAULT_EXPLAIN_BUDGET = 2_000_000

Searcher = Callable[[Sequence[SubOperation], Budget], Outcome]


# ------------------------------------------------------------------------------------------------ verdicts
@contextlib.contextmanager
def _uncollected() -> Iterator[None]:
    """The cyclic garbage collector paused, then restored as it was. Judging a long history allocates a
    record per call, and every full collection would walk the whole history again (half the time of a
    100,000-call history went there); the checker makes no reference cycles, so nothing waits on it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _decide(
    events: Sequence[Event], budget: Budget, searcher: Searcher = judge
) -> tuple[Verdict | None, dict[str, list[SubOperation]], str | None]:
    """The partitions and either the verdict (``Ok``, ``Unknown``, or a violation of one event) or, for a
    partition that fails, ``None`` and its rollout ID: the caller builds that violation's witness."""
    with _uncollected():
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
    return violation(witness)


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
    with _uncollected():
        explanation = explain(ops, steps)
        shrunk, finished = shrink(ops, steps) if explanation is not None else (ops, False)
    if explanation is None or not finished:
        explanation = (explanation or _why(ops, rollout_id)) + (
            f"; the witness is not shrunk: the bound of {explain_budget} search steps to explain it ran out, "
            f"so these are all {len(ops)} calls on the rollout"
        )
    witness = tuple(events[i] for i in sorted({op.event for op in shrunk}))
    return violation(
        LinearizabilityWitness(
            rollout_id=rollout_id, events=witness, explanation=explanation, shrunk=finished
        )
    )
