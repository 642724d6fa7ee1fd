"""An exhaustive explorer (model checker) of the step-level model (R-CONC-1..3, SPEC.md §Store).

``explore(config, guards)`` visits every state reachable by interleaving the clients of a bounded
configuration (``steps.Config``), breadth first with state hashing, so each state is expanded once and the
first counterexample found is a shortest one. On every state it checks the named invariants:

* ``R-CONC-2 retired stays retired``: no ledger exists for an ID once a retire of it has returned, until a
  delete of it is invoked;
* ``R-CONC-3 write after delete survives``: no retire removes a row written by a call that started after a
  delete of the ID returned, if that retire's fence of the ID came before the delete -- unless a later
  retire has meanwhile noted the row's ledger and would remove it anyway (docs/concurrency.md explains
  this reading, which the protocol's re-check of the fence *by name* needs).

* ``R-STORE-9 shared sync finished first``: with group commit, no removal passes a sync point (goes on to
  its next phase, or returns) before a sync that began after it asked has finished (the step model's ghost
  ``unsynced``; the syncs' durability itself is the crash study's, docs/crash.md).
* ``R-STORE-9 no return before its batch synced``: with combined removals (``Config.combine``), no caller
  returns before the batch that took its request finished its syncs (the ghost ``early``; checked first,
  since a retire returned that early is often an R-CONC-2 breach as well).

On every complete execution (all clients finished) it checks **linearizability** against the sequential
model with ``linearizability.check_history``: the history is built from the ghost state (a call's
invocation is its first step, its return its last) and ends with a ``manifest`` and an ``admit`` of every
ID, judged after everything returned, so that the final directory must be a state some linearization
reaches. Counterexamples print as numbered step traces.

``CONFIGURATIONS`` are the bounded configurations; ``spec/manifest.json`` pins, for each, its
expected result and exact state count, and the ablation table (each guard switched off, the counterexample
it leads to); ``tests/test_explore*.py`` hold the explorer to it.

Not guaranteed: anything about configurations larger than those explored (the usual small-scope
hypothesis), or about crashes (the step model has none).
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capture_ledger.spec.concurrency._configurations import CONFIGURATIONS, SLOW
from capture_ledger.spec.concurrency._programs import successor
from capture_ledger.spec.concurrency.history import Event
from capture_ledger.spec.concurrency.linearizability import check_history
from capture_ledger.spec.concurrency.steps import (
    GUARD_NAMES,
    Config,
    Guards,
    State,
    initial_state,
    is_done,
    operation_of,
)
from capture_ledger.spec.core import model
from capture_ledger.spec.core.ids import staging_key
from capture_ledger.spec.core.rows import canonical_json
from capture_ledger.spec.core.verdicts import Ok, Verdict, Violation

__all__ = [
    "CONFIGURATIONS",
    "MANIFEST",
    "PROPERTIES",
    "REQUIREMENTS",
    "SLOW",
    "Counterexample",
    "StepExploration",
    "ablation",
    "explore",
    "history_of",
    "replay",
]

LINEARIZABILITY = "linearizability"
RETIRED_STAYS_RETIRED = "R-CONC-2 retired stays retired"
WRITE_AFTER_DELETE_SURVIVES = "R-CONC-3 write after delete survives"
SYNCED_FIRST = "R-STORE-9 shared sync finished first"
BATCH_SYNCED = "R-STORE-9 no return before its batch synced"
DEADLOCK = "deadlock"
PROPERTIES = (
    LINEARIZABILITY,
    RETIRED_STAYS_RETIRED,
    WRITE_AFTER_DELETE_SURVIVES,
    SYNCED_FIRST,
    BATCH_SYNCED,
    DEADLOCK,
)


#: The pinned manifest (configurations, expected results, state counts, ablation), next to this module.
MANIFEST = Path(__file__).with_name("manifest.json")


# --------------------------------------------------------------------------------------------- results
@dataclass(kw_only=True, frozen=True, slots=True)
class Counterexample:
    """A violated property, the numbered steps that lead to it, and what is wrong."""

    property: str
    steps: tuple[str, ...]
    detail: str
    #: Which client took each step: ``replay(config, guards, schedule)`` runs the same steps again.
    schedule: tuple[int, ...] = ()

    def __str__(self) -> str:
        lines = [f"{self.property} violated after {len(self.steps)} steps:"]
        lines += [f"  {n}. {text}" for n, text in enumerate(self.steps, 1)]
        lines.append(self.detail)
        lines.append(f"schedule (clients, for explore.replay): {list(self.schedule)}")
        return "\n".join(lines)


#: The requirement each property checks (a deadlock: some call never returns, so no history of the
#: execution is linearizable).
REQUIREMENTS = {
    LINEARIZABILITY: "R-CONC-1",
    RETIRED_STAYS_RETIRED: "R-CONC-2",
    WRITE_AFTER_DELETE_SURVIVES: "R-CONC-3",
    SYNCED_FIRST: "R-STORE-9",
    BATCH_SYNCED: "R-STORE-9",
    DEADLOCK: "R-CONC-1",
}


@dataclass(kw_only=True, frozen=True, slots=True)
class StepExploration:
    """What ``explore`` did on the step-level model: states visited, complete executions, time, and the
    counterexample if any."""

    config: str
    guards_off: tuple[str, ...]
    states: int
    complete: int
    seconds: float
    counterexample: Counterexample | None

    @property
    def ok(self) -> bool:
        """Whether no property was violated."""
        return self.counterexample is None

    @property
    def result(self) -> Verdict:
        """The shared verdict: ``Ok`` listing the requirements checked, or a ``Violation`` of the property's
        requirement whose counterexample is the numbered step trace (``witness``: the ``Counterexample``).
        """
        example = self.counterexample
        if example is None:
            counts = f"{self.config}: {self.states} states, {self.complete} complete executions"
            return Ok(checked=tuple(dict.fromkeys(REQUIREMENTS.values())), detail=counts)
        return Violation(
            requirement=REQUIREMENTS[example.property], counterexample=str(example), witness=example
        )


# --------------------------------------------------------------------------------------------- history
def history_of(config: Config, state: State) -> list[Event]:
    """The history of the calls made so far, plus a final read of every ID if all clients are done.

    Times realise exactly the real-time order of the execution: a call returned before another was
    invoked iff its time of return is smaller.
    """
    events: list[Event] = []
    for client, records in enumerate(state.calls):
        for index, (invoked_after, returned_at, result) in enumerate(records):
            op = operation_of(config.clients[client].calls[index])
            returned = None if returned_at < 0 else 2.0 * (returned_at + 1)
            events.append(
                Event(client=client, op=op, invoked=2.0 * invoked_after + 1, returned=returned, result=result)
            )
    if all(is_done(config, state, c) for c in range(len(config.clients))):
        time_ = 2.0 * state.returns + 3
        observer = len(config.clients)
        for position, rollout_id in enumerate(config.ids):
            ledger, fence = state.ledgers[position], state.fences[position]
            if ledger is not None:
                rows = tuple(canonical_json({"model_call_id": r.call}) for r in ledger.rows)
                manifest: model.Result = model.Ok(model.ManifestValue(rows))
            elif fence:
                manifest = model.Err(model.ErrorKind.ROLLOUT_RETIRED)
            else:
                manifest = model.Ok(model.ManifestValue())
            admitted = model.Ok(None if fence else staging_key(rollout_id, "final"))
            events.append(
                Event(
                    client=observer,
                    op=model.ReadManifest(rollout_id),
                    invoked=time_,
                    returned=time_ + 0.5,
                    result=manifest,
                )
            )
            events.append(
                Event(
                    client=observer,
                    op=model.Admit(rollout_id, "final"),
                    invoked=time_ + 1,
                    returned=time_ + 1.5,
                    result=admitted,
                )
            )
            time_ += 2
    return events


def replay(config: Config, guards: Guards, schedule: tuple[int, ...] | list[int]) -> tuple[list[str], State]:
    """Run the steps a schedule names (one client index per step), as a counterexample was found.

    Returns:
        The steps' descriptions and the state reached.

    Raises:
        ValueError: the schedule names a client that cannot move at that point.
    """
    state = initial_state(config)
    texts: list[str] = []
    for n, client in enumerate(schedule, 1):
        step = successor(config, guards, state, client)
        if step is None:
            raise ValueError(f"step {n}: client {client} cannot move")
        text, state = step
        texts.append(text)
    return texts, state


def _invariants(config: Config, state: State) -> tuple[str, str] | None:
    if state.early:  # first: a return before its batch's syncs is also, often, a retire returned too soon
        return BATCH_SYNCED, state.early[0]
    for position, rollout_id in enumerate(config.ids):
        if rollout_id in state.retired and state.ledgers[position] is not None:
            return RETIRED_STAYS_RETIRED, (
                f"a ledger of {rollout_id!r} exists after a retire of it returned, and no delete of it "
                "was invoked since"
            )
    if state.broken:
        return WRITE_AFTER_DELETE_SURVIVES, state.broken[0]
    if state.unsynced:
        return SYNCED_FIRST, state.unsynced[0]
    return None


# ----------------------------------------------------------------------------------------------- search
def explore(config: Config, guards: Guards | None = None, *, linearizability: bool = True) -> StepExploration:
    """Visit every reachable state of ``config``; stop at the first violated property.

    Args:
        config: the configuration.
        guards: the protocol's guards (all on by default).
        linearizability: check every complete execution's history with the checker.

    Returns:
        The exploration: state count (exact when no counterexample stopped it), complete executions,
        seconds, and the shortest counterexample found, if any.
    """
    guards = guards or Guards()
    off = tuple(name for name in GUARD_NAMES if not getattr(guards, name))
    began = time.perf_counter()
    start = initial_state(config)
    parents: dict[State, tuple[State, str, int] | None] = {start: None}
    queue = deque([start])
    complete = 0
    clients = range(len(config.clients))

    def stop(state: State, prop: str, detail: str) -> StepExploration:
        steps: list[str] = []
        schedule: list[int] = []
        link = parents[state]
        while link is not None:
            steps.append(link[1])
            schedule.append(link[2])
            link = parents[link[0]]
        example = Counterexample(
            property=prop, steps=tuple(reversed(steps)), detail=detail, schedule=tuple(reversed(schedule))
        )
        return StepExploration(
            config=config.name,
            guards_off=off,
            states=len(parents),
            complete=complete,
            seconds=time.perf_counter() - began,
            counterexample=example,
        )

    while queue:
        state = queue.popleft()
        broken = _invariants(config, state)
        if broken is not None:
            return stop(state, *broken)
        moved = False
        for client in clients:
            step = successor(config, guards, state, client)
            if step is None:
                continue
            moved = True
            text, after = step
            if after not in parents:
                parents[after] = (state, text, client)
                queue.append(after)
        if moved:
            continue
        if not all(is_done(config, state, c) for c in clients):
            return stop(state, DEADLOCK, "no client can move, and not all are done")
        complete += 1
        if linearizability:
            verdict = check_history(history_of(config, state))
            if isinstance(verdict, Violation):
                return stop(state, LINEARIZABILITY, verdict.counterexample)
    return StepExploration(
        config=config.name,
        guards_off=off,
        states=len(parents),
        complete=complete,
        seconds=time.perf_counter() - began,
        counterexample=None,
    )


def ablation(configs: dict[str, Config] | None = None) -> dict[str, dict[str, StepExploration]]:
    """Explore every configuration with all guards on (``"none"``) and with each guard off in turn.

    Returns:
        ``{guard switched off or "none": {configuration: exploration}}``.
    """
    configs = configs if configs is not None else CONFIGURATIONS
    table: dict[str, dict[str, StepExploration]] = {}
    for name in ("none", *GUARD_NAMES):
        guards = Guards() if name == "none" else Guards().without(name)
        table[name] = {key: explore(config, guards) for key, config in configs.items()}
    return table


def _cell(exploration: StepExploration) -> dict[str, Any] | str:
    example = exploration.counterexample
    if example is None:
        return "no violation"
    return {"property": example.property, "steps": len(example.steps)}


def manifest_data(table: dict[str, dict[str, StepExploration]]) -> dict[str, Any]:
    """The manifest for an ablation table (the format of ``manifest.json``)."""
    return {
        "about": "Pinned by tests/spec/concurrency/test_explore_manifest.py; regenerate with "
        "`capture-ledger explore --ablate "
        "--json`, and explain every change of a count in the commit.",
        "configurations": {
            name: {
                "description": CONFIGURATIONS[name].description,
                "expected": "ok" if run.ok else run.counterexample.property,  # type: ignore[union-attr]
                "states": run.states,
                "complete_executions": run.complete,
                "slow": name in SLOW,
            }
            for name, run in table["none"].items()
        },
        "ablation": {
            guard: {name: _cell(run) for name, run in row.items()}
            for guard, row in table.items()
            if guard != "none"
        },
    }


def load_manifest() -> dict[str, Any]:
    """The pinned manifest."""
    data: dict[str, Any] = json.loads(MANIFEST.read_text(encoding="utf-8"))
    return data
