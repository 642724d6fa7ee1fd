"""Interleavings of the real file store under controlled schedules (SPEC.md R-CONC-1..3).

Several handles (``FileLineageStore`` instances on one directory, each over its own ``OsFileSystem``) run
store operations in threads, one thread per handle, each handle's seam wrapped in
``scheduling.SchedulingFileSystem``, so that every seam call is a scheduling point and a ``Schedule``
decides who runs next (the mechanism is ``scheduling``'s; this module runs and judges scenarios).

Each run yields the trace of ``(thread, seam call, result)``, the history of store operations on a
logical clock (``histories.HistoryRecorder``), read-backs of every rollout ID on every handle and on a
fresh one after the threads finish, and the verdict of ``spec.linearizability.check_history`` (whose
model gives retire two linearization points per ID, fence and completion, as R-STORE-4 does).

R-CONC-2 (no ledger while a retire of its ID has returned and no delete of it may follow) is checked on
the real directory at every point where all threads are parked; R-CONC-3 (no retire removes a write that
started after a later delete returned) is read off the trace.

``explore`` enumerates every schedule with at most ``preemption_bound`` preemptions (CHESS-style
stateless search: replay a prefix, then run by default, then backtrack to the deepest decision with an
untried thread); ``find_counterexample`` deepens the bound until a run fails. The issue's races are
``scenarios.SCENARIOS``; ``capture-ledger interleave [--ablate]`` (``interleave_cli``) prints the
schedules explored and each guard-removed ``StoreVariant``'s counterexample.

Not guaranteed: schedules of code that does not go through the seam (the store's pure Python between two
seam calls runs atomically here), coverage of more preemptions than the bound, or crash behaviour (that
is ``crash``'s job). A store that blocks on anything but a seam lock stalls a run until ``timeout``.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capture_ledger.impl.store.fs import FileSystem, OsFileSystem
from capture_ledger.impl.store.lines import fence_name, ledger_name
from capture_ledger.impl.study.histories import HistoryRecorder
from capture_ledger.impl.study.scheduling import (
    ChoiceSchedule,
    Controller,
    Decision,
    Schedule,
    SchedulerError,
    SchedulingFileSystem,
    SeamCall,
    ThreadSchedule,
    TraceStep,
    default_choice,
    worker,
)
from capture_ledger.spec.concurrency.history import Event
from capture_ledger.spec.concurrency.linearizability import CheckResult, Ok, check_history
from capture_ledger.spec.core.model import Delete, Operation, ReadManifest, Retire
from capture_ledger.spec.core.model import Ok as ResultOk

# The scheduling names are re-exported: a caller builds schedules and reads traces from here.
__all__ = [
    "ChoiceSchedule",
    "Decision",
    "Exploration",
    "OpenHandle",
    "Run",
    "Scenario",
    "Schedule",
    "SchedulerError",
    "SchedulingFileSystem",
    "SeamCall",
    "ThreadSchedule",
    "TraceStep",
    "explore",
    "find_counterexample",
    "run_schedule",
]

#: Opens one handle of the store under test on ``directory`` with the given (wrapped) seam.
OpenHandle = Callable[[Path, FileSystem], Any]


@dataclass(frozen=True, slots=True)
class Scenario:
    """Operations to interleave: ``threads[i]`` runs on handle ``i``, after ``setup`` ran sequentially.

    Attributes:
        name: a short name for reports.
        rollout_ids: the IDs read back on every handle and on a fresh handle after the threads end.
        setup: ``(handle, operation)`` pairs run one after another before scheduling (they are part of
            the history), e.g. to create a ledger or to warm a handle's cache.
        threads: each thread's operations, in order.
    """

    name: str
    rollout_ids: tuple[str, ...]
    setup: tuple[tuple[int, Operation], ...]
    threads: tuple[tuple[Operation, ...], ...]


@dataclass(frozen=True, slots=True)
class Run:
    """One scheduled run: what was chosen, what happened, and the judgement."""

    scenario: str
    decisions: tuple[Decision, ...]
    trace: tuple[TraceStep, ...]
    history: tuple[Event, ...]
    verdict: CheckResult
    invariant_failures: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Linearizable and no invariant failed."""
        return isinstance(self.verdict, Ok) and not self.invariant_failures

    @property
    def preemptions(self) -> int:
        """How many decisions switched away from a thread that could continue."""
        return sum(d.preemptive for d in self.decisions)

    @property
    def schedule(self) -> tuple[int, ...]:
        """The shortest thread-ID schedule that replays this run (trailing default choices dropped)."""
        chosen = [d.chosen for d in self.decisions]
        while self.decisions[: len(chosen)] and chosen[-1] == default_choice(
            self.decisions[len(chosen) - 1].enabled, self.decisions[len(chosen) - 1].current
        ):
            chosen.pop()
        return tuple(chosen)

    @property
    def switches(self) -> tuple[tuple[int, int], ...]:
        """The non-default choices as ``(trace step after which, thread run next)``: the counterexample."""
        return tuple(
            (d.step, d.chosen) for d in self.decisions if d.chosen != default_choice(d.enabled, d.current)
        )

    def describe(self) -> str:
        """A numbered trace, the schedule and the verdict: a counterexample one can read and replay."""
        switches = ", ".join(f"after step {step} run T{thread}" for step, thread in self.switches)
        lines = [
            f"scenario {self.scenario}: ThreadSchedule({self.schedule!r}); {len(self.decisions)} decisions, "
            f"{self.preemptions} preemptions; non-default choices: {switches or 'none'}"
        ]
        lines += [f"{n:3d}. {step}" for n, step in enumerate(self.trace, 1)]
        lines += [f"invariant: {failure}" for failure in self.invariant_failures]
        lines.append(f"verdict: {self.verdict!r}")
        return "\n".join(lines)


def _conc2(trace: Sequence[TraceStep], fs: FileSystem) -> str | None:
    """R-CONC-2: no ledger exists while its ID must be Retired.

    An ID must be Retired once a retire of it has returned, unless some delete of it may take effect
    after that retire: one not yet returned when the retire was invoked (concurrent, or later).
    """
    invoked: dict[int, int] = {}  # thread -> position of its current operation's invocation
    retires: list[tuple[int, Retire]] = []  # (position of the invocation, operation) of returned retires
    deletes: list[tuple[int, int | None, Delete]] = []  # (invocation, return or None, operation)
    for position, step in enumerate(trace):
        op = step.call.args[0] if step.call.args else None
        if step.call.name == "invoke":
            invoked[step.thread] = position
            if isinstance(op, Delete):
                deletes.append((position, None, op))
        elif step.call.name == "return" and isinstance(op, Delete):
            start = invoked[step.thread]
            deletes = [(i, position if i == start else r, d) for i, r, d in deletes]
        elif (
            step.call.name == "return" and isinstance(op, Retire) and isinstance(step.call.args[1], ResultOk)
        ):
            retires.append((invoked[step.thread], op))
    for start, retire in retires:
        for rollout_id in _ids(retire):
            if any(rollout_id in _ids(d) and (r is None or r > start) for _, r, d in deletes):
                continue
            if fs.stat(ledger_name(rollout_id)) is not None:
                return f"R-CONC-2: {ledger_name(rollout_id)} exists after retire([{rollout_id!r}]) returned"
    return None


def _ids(op: Retire | Delete) -> list[str]:
    ids = op.rollout_ids
    return [str(rid) for rid in ids] if isinstance(ids, list | tuple) else []


def _conc3(trace: Sequence[TraceStep]) -> str | None:
    """R-CONC-3: a write that started after a delete of its ID returned is never removed by a retire that
    fenced the ID before that delete started.

    "Started" is read as "ran its phase 1 for the ID" (``create_file`` of the fence): a retire invoked
    earlier whose phase 1 comes after the delete and the write may linearize after the write and remove it.
    Read off the trace: R fenced, then D invoked and returned, then a write W invoked that wrote the
    ledger; R's own ``unlink`` of that ledger afterwards, with no other unlink of it in between.
    """
    spans: dict[int, tuple[int, Operation]] = {}  # thread -> (invocation position, operation) now
    ops: list[tuple[int, int, int, Operation]] = []  # (thread, invoked, returned, operation)
    for position, step in enumerate(trace):
        if step.call.name == "invoke":
            spans[step.thread] = (position, step.call.args[0])  # type: ignore[assignment]
        elif step.call.name == "return":
            start, op = spans[step.thread]
            ops.append((step.thread, start, position, op))

    def steps(name: str, file: str) -> list[tuple[int, int]]:
        return [
            (p, s.thread)
            for p, s in enumerate(trace)
            if s.call.name == name and s.call.args and s.call.args[0] == file and s.result is not False
        ]

    for r_thread, r_start, r_end, retire in ops:
        if not isinstance(retire, Retire):
            continue
        for rollout_id in _ids(retire):
            ledger = ledger_name(rollout_id)
            fenced = [p for p, t in steps("create_file", fence_name(rollout_id)) if t == r_thread]
            fenced = [p for p in fenced if r_start < p < r_end]
            if not fenced:
                continue
            for _, d_start, d_end, delete in ops:
                if not (isinstance(delete, Delete) and rollout_id in _ids(delete) and d_start > fenced[0]):
                    continue
                for w_at, w_thread in steps("write", ledger):
                    began = [s for t, s, e, _ in ops if t == w_thread and s < w_at < e]
                    if not began or began[0] < d_end:
                        continue
                    later = [t for u, t in steps("unlink", ledger) if u > w_at]
                    if later and later[0] == r_thread:
                        return f"R-CONC-3: retire of {rollout_id!r} removed a write made after a later delete"
    return None


def run_schedule(
    scenario: Scenario,
    schedule: Schedule,
    *,
    open_handle: OpenHandle,
    base_dir: str | Path | None = None,
    stripes: int = 64,
    timeout: float = 30.0,
) -> Run:
    """Run ``scenario`` once under ``schedule`` in a fresh directory and judge its history.

    Args:
        scenario: the operations to interleave.
        schedule: the choices (``ChoiceSchedule`` or ``ThreadSchedule``).
        open_handle: opens one handle on a directory over a given seam (e.g. a store variant).
        base_dir: where the run's temporary directory goes (removed afterwards).
        stripes: lock stripes of each handle's ``OsFileSystem``.
        timeout: seconds a running thread may take to reach its next seam call.

    Returns:
        The run: decisions, trace, history and verdict.

    Raises:
        SchedulerError: a deadlock, a stalled thread, or a replayed choice that is not enabled.
    """
    handles_needed = max(len(scenario.threads), 1 + max((h for h, _ in scenario.setup), default=0))
    directory = Path(tempfile.mkdtemp(prefix="interleave-", dir=base_dir))
    controller = Controller(len(scenario.threads), schedule, timeout=timeout)
    recorder = HistoryRecorder(clock=controller.clock)
    inner = [OsFileSystem(directory, stripes=stripes) for _ in range(handles_needed + 1)]
    try:
        handles = [open_handle(directory, SchedulingFileSystem(fs, controller)) for fs in inner[:-1]]
        for handle, op in scenario.setup:
            recorder.call(handle, handles[handle], op)
        threads = [
            threading.Thread(target=worker, args=(controller, tid, handles[tid], ops, recorder), daemon=True)
            for tid, ops in enumerate(scenario.threads)
        ]
        for thread in threads:
            thread.start()
        try:
            controller.run(lambda: _conc2(controller.trace, inner[0]))
        except BaseException:
            controller.abort()
            raise
        finally:
            for thread in threads:
                thread.join(timeout)
        # Read-backs after the end: every handle (a stale cache shows here, R-STORE-7) and a fresh one.
        fresh = open_handle(directory, inner[-1])
        for number, handle in enumerate([*handles, fresh]):
            for rollout_id in scenario.rollout_ids:
                recorder.call(number, handle, ReadManifest(rollout_id))
        history = tuple(recorder.events)
        return Run(
            scenario=scenario.name,
            decisions=tuple(controller.decisions),
            trace=tuple(controller.trace),
            history=history,
            verdict=check_history(history),
            invariant_failures=tuple([*controller.errors, *filter(None, [_conc3(controller.trace)])]),
        )
    finally:
        for fs in inner:
            fs.close_all()
        shutil.rmtree(directory, ignore_errors=True)


@dataclass(slots=True)
class _Node:
    decision: Decision
    chosen: int
    tried: set[int] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class Exploration:
    """The outcome of ``explore``: runs made, whether the bounded space was exhausted, failing runs."""

    scenario: str
    preemption_bound: int
    runs: int
    exhausted: bool
    failures: tuple[Run, ...]
    max_decisions: int


def explore(
    scenario: Scenario,
    *,
    open_handle: OpenHandle,
    preemption_bound: int = 2,
    max_runs: int = 10_000,
    stop_at_first: bool = True,
    base_dir: str | Path | None = None,
) -> Exploration:
    """Run every schedule of ``scenario`` with at most ``preemption_bound`` preemptions.

    Args:
        scenario: the operations to interleave.
        open_handle: opens one handle of the store under test.
        preemption_bound: the largest number of preemptions in one schedule.
        max_runs: stop after this many runs (``exhausted`` is then ``False``).
        stop_at_first: stop at the first failing run.
        base_dir: where the runs' temporary directories go.

    Returns:
        The number of runs, whether the bounded space was exhausted, and the failing runs.

    Raises:
        SchedulerError: a run could not be scheduled or the store did not replay a prefix the same way.
    """
    stack: list[_Node] = []
    failures: list[Run] = []
    runs = 0
    max_decisions = 0
    while True:
        run = run_schedule(
            scenario,
            ThreadSchedule(tuple(n.chosen for n in stack)),
            open_handle=open_handle,
            base_dir=base_dir,
        )
        runs += 1
        max_decisions = max(max_decisions, len(run.decisions))
        replayed = [d.enabled for d in run.decisions[: len(stack)]]
        if replayed != [n.decision.enabled for n in stack]:
            raise SchedulerError(
                f"{scenario.name}: the store did not replay the prefix {len(stack)} choices long"
            )
        stack.extend(_Node(d, d.chosen, {d.chosen}) for d in run.decisions[len(stack) :])
        if not run.ok:
            failures.append(run)
            if stop_at_first:
                return Exploration(
                    scenario.name, preemption_bound, runs, False, tuple(failures), max_decisions
                )
        while stack:
            node = stack[-1]
            used = sum(n.decision.preempts(n.chosen) for n in stack[:-1])
            options = [
                t
                for t in node.decision.enabled
                if t not in node.tried and used + node.decision.preempts(t) <= preemption_bound
            ]
            if options:
                node.tried.add(options[0])
                node.chosen = options[0]
                break
            stack.pop()
        if not stack:
            return Exploration(scenario.name, preemption_bound, runs, True, tuple(failures), max_decisions)
        if runs >= max_runs:
            return Exploration(scenario.name, preemption_bound, runs, False, tuple(failures), max_decisions)


def find_counterexample(
    scenario: Scenario,
    *,
    open_handle: OpenHandle,
    max_preemptions: int = 2,
    base_dir: str | Path | None = None,
) -> tuple[Run | None, int]:
    """The first failing run with the fewest preemptions (iterative deepening over ``explore``).

    Returns:
        The failing run (``None`` if every schedule up to ``max_preemptions`` passed) and the number of
        runs made over all bounds.
    """
    total = 0
    for bound in range(max_preemptions + 1):
        found = explore(scenario, open_handle=open_handle, preemption_bound=bound, base_dir=base_dir)
        total += found.runs
        if found.failures:
            return found.failures[0], total
    return None, total
