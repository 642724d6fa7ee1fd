"""The linearizability checker's witnesses (SPEC.md R-CONC-1, R-KIT-9): the record a ``Violation`` carries,
its text, the explanation of a failing partition, and the shrinking that makes a witness minimal.

* ``LinearizabilityWitness(rollout_id, events, explanation)``: the events that are not linearizable (a
  sub-history of the events judged), the rollout ID they are on (``None`` when one call's result is wrong
  in any state) and why. ``counterexample`` is its text: the witness written as the checker has always
  printed it, ``Violation(rollout_id=..., explanation=..., witness=[...])``, one event a line, each event a
  ``repr`` that is valid Python.
* ``explain(ops)``: the longest partial linearization of a failing partition, and the calls that no state
  after it explains.
* ``shrink(ops, budget)``: a minimal non-linearizable sub-list of a failing partition. First the shortest
  failing prefix in order of invocation (binary search), whose last call is the *culprit*; then chunks, and
  finally single events, are removed while the rest still fails and the culprit stays essential (without
  it, the rest is linearizable). So the witness is the culprit plus a linearizable set of calls that makes
  its result impossible, and no single one of those calls can go (unless its absence is a violation of its
  own, as a ``retire`` reporting ``removed`` with no write before it).

Both run within a budget of their own (``check_history``'s ``explain_budget``), after the verdict is
decided: when it runs out, the witness is the failing partition whole, unshrunk, and says so
(``shrunk=False`` in its text).

Not guaranteed: a globally minimal witness; a minimal one when the explaining budget runs out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from capture_ledger.spec.concurrency._search import Budget, Outcome, SubOperation, search
from capture_ledger.spec.concurrency.history import Event, results_match

__all__ = ["LinearizabilityWitness", "counterexample", "explain", "shrink"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearizabilityWitness:
    """What a linearizability ``Violation`` shows, for tools (``Violation.witness``).

    Attributes:
        rollout_id: the rollout ID whose calls are not linearizable; ``None`` when one call's result is
            wrong whatever the state (a value of the wrong type, a removal that is not its batch split, a
            wrong validation result).
        events: the witness: events of the history judged, in the history's order (minimal from
            ``check_history``; the whole failing partition from ``decide``).
        explanation: why no order of them matches their results.
        shrunk: whether ``events`` were shrunk to a minimal witness.
    """

    rollout_id: str | None
    events: tuple[Event, ...]
    explanation: str
    #: ``False`` when ``events`` are not shrunk: from ``decide``, or when the explaining bound of
    #: ``check_history`` ran out (its explanation then says so).
    shrunk: bool = True


def counterexample(witness: LinearizabilityWitness) -> str:
    """The witness as text, ``Violation(rollout_id=..., explanation=..., witness=[...])``, an event a line."""
    shrunk = "" if witness.shrunk else "shrunk=False, "
    lines = [
        f"Violation(rollout_id={witness.rollout_id!r}, explanation={witness.explanation!r}, {shrunk}witness=["
    ]
    lines += [f"    {event!r}," for event in witness.events]
    lines.append("])")
    return "\n".join(lines)


def explain(ops: Sequence[SubOperation], budget: Budget) -> str | None:
    """Why a non-linearizable partition fails: its longest partial linearization and what blocks it.

    The search that finds it is deterministic and within ``budget``; ``None`` when the budget ran out.
    """
    outcome: Outcome = search(ops, budget, explain=True)
    if outcome.linearizable is None:
        return None
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


def _fails(groups: Sequence[Group], budget: Budget) -> bool:
    return bool(groups) and search([op for g in groups for op in g], budget).linearizable is False


def shrink(ops: list[SubOperation], budget: Budget) -> tuple[list[SubOperation], bool]:
    """A minimal non-linearizable sub-list of a non-linearizable partition, removing whole events (see the
    module docstring), within ``budget``; and whether it finished. When the budget runs out first, the
    partition is returned whole (``False``): a cut made on an undecided search may not keep it failing."""
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
    if budget.exhausted():
        return list(ops), False
    rest = [*rest, culprit]
    return [op for g in rest for op in g], True
