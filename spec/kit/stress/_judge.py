"""Judging a stress round's calls (SPEC.md R-CONC-1, R-KIT-7, R-KIT-8, R-KIT-9, R-KIT-12).

``judge_calls`` turns the calls of one round (``running.Call``) into the shared verdict
(``spec.core.verdicts``): ``Ok``, ``Unknown(spent=...)``, or a ``Violation`` whose ``counterexample`` is
the witness as a text timeline (``witness.timeline``) and whose ``witness`` is a ``StressWitness`` (the
rollout ID, the explanation, the witness's calls). In this order:

1. a call that did not return within the budget is a violation of R-KIT-8 (the ledger hangs under
   contention: a deadlock, or a lock never let go); the witness is that call and the calls that overlap it;
2. a call that raised an exception no operation may raise (``sqlite3.OperationalError: database is
   locked``, say), or returned a value that fits no operation, is a violation of R-CONC-1 and R-KIT-7: the
   spec allows no such outcome in any interleaving; the witness is that call and the calls that overlap it
   (the contention that provoked it);
3. otherwise the history goes to the linearizability checker's ``decide`` (its verdict without a
   witness): ``ok``, ``unknown`` when its budget of search steps runs out, or a violation whose witness is
   built by
   ``shrink.explaining_witness``: the fewest calls that show why the culprit's result is impossible *at the
   time it happened* (the write behind a read's rows, the retire before it); a result wrong in any state
   (R-KIT-9) has the checker's own one-call witness.

Not guaranteed: a globally minimal witness; which of several violations of a round is reported (the first
found, in the order above).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from capture_ledger.spec.concurrency.linearizability import (
    LinearizabilityWitness,
    Ok,
    Unknown,
    Verdict,
    Violation,
    check_history,
    decide,
)
from capture_ledger.spec.kit.stress._naming import name_violation
from capture_ledger.spec.kit.stress._running import Call, in_invocation_order
from capture_ledger.spec.kit.stress._shrink import calls_on, explaining_witness, project
from capture_ledger.spec.kit.stress._witness import op_text, outcome_text, timeline

__all__ = ["CHECKED", "DEFAULT_CHECK_BUDGET", "StressWitness", "judge_calls", "overlapping"]

#: Search steps the linearizability checker may spend on one round.
DEFAULT_CHECK_BUDGET = 2_000_000
#: What a round that is ``Ok`` was checked for.
CHECKED = ("R-CONC-1", "R-KIT-7", "R-KIT-8")

#: Search steps for the checker's explanation of a witness that does not explain itself.
_EXPLAIN_STEPS = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class StressWitness:
    """What a stress ``Violation`` shows, for tools (``Violation.witness``; its ``counterexample`` is
    these calls as a text timeline).

    Attributes:
        rollout_id: the rollout ID of a linearizability violation, when it has one.
        explanation: why (the checker's explanation, or the unexpected outcome).
        calls: the witness's calls, in order of invocation.
    """

    rollout_id: str | None
    explanation: str
    calls: tuple[Call, ...]


def _end(call: Call) -> float:
    finished = call.finished
    return float("inf") if finished is None else finished


def overlapping(calls: Sequence[Call], focus: Call) -> tuple[Call, ...]:
    """``focus`` and the calls that ran at some instant while it ran, in order of invocation."""
    start, end = focus.event.invoked, _end(focus)
    chosen = [c for c in calls if c is focus or (c.event.invoked <= end and _end(c) >= start)]
    return tuple(in_invocation_order(chosen))


def _violation(requirement: str, explanation: str, witness: tuple[Call, ...], rid: str | None) -> Violation:
    heading = f"{requirement} violated" + (f" on rollout {rid!r}" if rid else "") + f": {explanation}"
    return Violation(
        requirement=requirement,
        counterexample=timeline(witness, heading),
        witness=StressWitness(rollout_id=rid, explanation=explanation, calls=witness),
    )


def _expected(calls: Sequence[Call], rollout_id: str, culprit: Call) -> str:
    """What the checker says the model gives where ``culprit`` went wrong (``""`` if it cannot say soon)."""
    mine = calls_on(calls, rollout_id)
    prefix = mine[: mine.index(culprit) + 1] if culprit in mine else mine
    found = check_history([project(c.event, rollout_id) for c in prefix], budget=_EXPLAIN_STEPS)
    if not isinstance(found, Violation):
        return ""
    explanation: str = found.witness.explanation
    if "after which " not in explanation:
        return ""
    return "; the checker: " + explanation.split("after which ", 1)[1].split("; ", maxsplit=1)[0]


def judge_calls(calls: Sequence[Call], *, budget: int | None = DEFAULT_CHECK_BUDGET) -> Verdict:
    """Judge one round's calls (see the module docstring).

    Args:
        calls: the round's calls, from one or several processes sharing one clock.
        budget: search steps for the linearizability checker (``None``: no bound).

    Returns:
        ``Ok(checked=CHECKED)``; ``Unknown(spent="N steps")``, ``N`` the budget; or a ``Violation`` with a
        ``StressWitness``. Never raises for what the ledger did.
    """
    hung = [c for c in calls if c.hung]
    if hung:
        focus = hung[0]
        why = f"{op_text(focus.event.op)} did not return within the per-call budget, under contention"
        return _violation("R-KIT-8", why, overlapping(calls, focus), None)
    raised = [c for c in calls if c.raised]
    if raised:
        focus = raised[0]
        why = f"{op_text(focus.event.op)} raised {focus.raised}, which no operation may (R-KIT-7)"
        return _violation("R-CONC-1", why, overlapping(calls, focus), None)
    events = [c.event for c in calls]
    decided = decide(events, budget=budget)
    if isinstance(decided, Ok):
        return Ok(checked=CHECKED)
    if isinstance(decided, Unknown):
        # The search stops exactly when it has spent its budget: what it spent is ``budget``.
        return Unknown(spent=f"{budget} steps")
    found: LinearizabilityWitness = decided.witness
    rollout_id = found.rollout_id
    if rollout_id is None:  # one call's result is wrong in any state (R-KIT-9): the checker says which
        chosen = {id(e) for e in found.events}
        return _violation(
            "R-CONC-1", found.explanation, tuple(c for c in calls if id(c.event) in chosen), None
        )
    witness, prefix, explained = explaining_witness(calls, rollout_id)
    mine = calls_on(calls, rollout_id)
    last = witness[-1]
    on_id = mine[: mine.index(last) + 1] if last in mine else mine
    named = name_violation(witness, on_id, rollout_id)
    if named.sequential:
        why = f"{named.reason} (of {len(calls)} calls in the round)"
        return _violation(named.requirement, why, named.calls, rollout_id)
    witness = _pinned(witness, named.pinned, rollout_id)
    culprit = witness[-1]
    said = f"{op_text(culprit.event.op)} -> {outcome_text(culprit)}"
    because = f" ({named.requirement}: {named.reason})" if named.reason else ""
    if explained:
        why = (
            f"{said} is impossible at the time it ran, given the {len(witness) - 1} other calls here (of "
            f"{len(calls)} in the round): it would be possible at another moment, but no order of these "
            f"calls that respects real time gives it{because}"
        )
    else:
        why = (
            f"{said} is impossible given the {prefix - 1} calls on {rollout_id!r} invoked before it, at any "
            f"moment; the calls here (of {len(calls)} in the round) are the fewest that stay non-linearizable"
            + _expected(calls, rollout_id, culprit)
            + because
        )
    return _violation(named.requirement, why, witness, rollout_id)


def _pinned(witness: tuple[Call, ...], pins: Sequence[Call], rollout_id: str) -> tuple[Call, ...]:
    """``witness`` with the calls its requirement's name rests on, when it stays non-linearizable."""
    extra = [c for c in pins if all(c is not w for w in witness)]
    if not extra:
        return witness
    joined = tuple(in_invocation_order([*witness, *extra]))
    verdict = decide([project(c.event, rollout_id) for c in joined], budget=_EXPLAIN_STEPS)
    return joined if isinstance(verdict, Violation) else witness
