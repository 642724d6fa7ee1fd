"""Interleavings of the real file store under controlled schedules (SPEC.md R-CONC-1..3).

Several handles (``FileLineageStore`` instances on one directory, each over its own ``OsFileSystem``) run
store operations in threads, one thread per handle, each handle's seam wrapped in
``scheduling.SchedulingFileSystem``, so that every seam call is a scheduling point and a ``Schedule``
decides who runs next (the mechanism is ``scheduling``'s; this module runs and judges scenarios).

Each run yields the trace of ``(thread, seam call, result)``, the history of store operations on a
logical clock (``spec.kit.HistoryRecorder``), read-backs of every rollout ID on every handle and on a
fresh one after the threads finish, and the verdict of ``spec.concurrency.linearizability.check_history``
(whose model gives retire two linearization points per ID, fence and completion, as R-STORE-4 does).

R-CONC-2 (no ledger while a retire of its ID has returned and no delete of it may follow) is checked on
the real directory at every point where all threads are parked; R-CONC-3 (no retire removes a write that
started after a later delete returned) and R-STORE-9 (no removal goes on before a sync that began after
its effects, whoever issued it: group commit's promise) are read off the trace. Handles of one run share
their syncs (one directory, one process), and a wait for a shared sync is a scheduling point.

``explore`` enumerates every schedule with at most ``preemption_bound`` preemptions (CHESS-style
stateless search: replay a prefix, then run by default, then backtrack to the deepest decision with an
untried thread); ``_deepening.find_counterexample`` deepens the bound until a run fails. The issue's races are
``scenarios.SCENARIOS``; ``capture-ledger interleave [--ablate]`` (``interleave_cli``) prints the
schedules explored and each guard-removed ``StoreVariant``'s counterexample.

Whatever the store under test does, a run ends in a ``Run`` (docs/verdicts.md): an exception no operation
may raise is a failure of the run naming the thread and the exception; a thread that makes no seam call
for ``timeout`` seconds (a hang, or a wait on a lock outside the seam), a deadlock on seam locks, a
schedule the store does not replay, and an exception or hang while opening handles, running the setup or
reading back (those run unscheduled, each within ``timeout``) stop the run, and ``Run.stopped`` says why.

Not guaranteed: schedules of code that does not go through the seam (the store's pure Python between two
seam calls runs atomically here), coverage of more preemptions than the bound, or crash behaviour (that
is ``crash``'s job). A thread that hung is left behind (Python cannot stop a thread); its next seam call,
if it ever makes one, ends it.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from capture_ledger.impl.store.fs import FileSystem, OsFileSystem
from capture_ledger.impl.study._bounded import BoundedCaller, Hung, Returned
from capture_ledger.impl.study.interleave._invariants import conc2_failure, conc3_failure, sync_failure
from capture_ledger.impl.study.interleave._scheduling import (
    ChoiceSchedule,
    Controller,
    Decision,
    Schedule,
    SchedulerError,
    SchedulingFileSystem,
    ThreadSchedule,
    TraceStep,
    default_choice,
    worker,
)
from capture_ledger.spec.concurrency.history import Event
from capture_ledger.spec.concurrency.linearizability import check_history
from capture_ledger.spec.core.model import Operation, ReadManifest
from capture_ledger.spec.core.verdicts import Ok, Verdict, Violation
from capture_ledger.spec.kit import HistoryRecorder

# Schedules are built from here too: the two kinds are re-exported.
__all__ = [
    "SCHEDULED_THREAD",
    "UNSCHEDULED_THREAD",
    "ChoiceSchedule",
    "OpenHandle",
    "Run",
    "Scenario",
    "ScheduleExploration",
    "ThreadSchedule",
    "explore",
    "run_schedule",
]

#: Scheduled thread ``i`` is named ``SCHEDULED_THREAD + str(i)``; setup, read-backs and opening handles run
#: on a thread named ``UNSCHEDULED_THREAD`` (each call within the run's ``timeout``).
SCHEDULED_THREAD = "interleave-T"
UNSCHEDULED_THREAD = "interleave-unscheduled"

#: What a run judges: linearizability, and the invariants read off the trace and the directory.
_CHECKED = ("R-CONC-1", "R-CONC-2", "R-CONC-3", "R-STORE-9")

#: Opens one handle of the store under test on ``directory`` with the given (wrapped) seam; called with
#: ``combine=True`` besides for a scenario that combines removals (``Scenario.combine``).
OpenHandle = Callable[..., Any]


@dataclass(kw_only=True, frozen=True, slots=True)
class Scenario:
    """Operations to interleave: ``threads[i]`` runs on handle ``i``, after ``setup`` ran sequentially.

    Attributes:
        name: a short name for reports.
        rollout_ids: the IDs read back on every handle and on a fresh handle after the threads end.
        setup: ``(handle, operation)`` pairs run one after another before scheduling (they are part of
            the history), e.g. to create a ledger or to warm a handle's cache.
        threads: each thread's operations, in order.
        combine: the handles combine their concurrent removals (``combine_removals``): ``open_handle`` is
            then called with ``combine=True``.
    """

    name: str
    rollout_ids: tuple[str, ...]
    setup: tuple[tuple[int, Operation], ...]
    threads: tuple[tuple[Operation, ...], ...]
    combine: bool = False


@dataclass(kw_only=True, frozen=True, slots=True)
class Run:
    """One scheduled run: what was chosen, what happened, and the judgement (``verdict``: the
    linearizability checker's on the history; ``result``: the run's as a whole)."""

    scenario: str
    decisions: tuple[Decision, ...]
    trace: tuple[TraceStep, ...]
    history: tuple[Event, ...]
    verdict: Verdict
    invariant_failures: tuple[str, ...] = ()
    stopped: str | None = None

    @property
    def ok(self) -> bool:
        """Ran to the end, linearizable, and no invariant failed."""
        return self.stopped is None and isinstance(self.verdict, Ok) and not self.invariant_failures

    @property
    def result(self) -> Verdict:
        """The run's shared verdict: ``Ok``, or a ``Violation`` whose counterexample is ``describe()``
        (``witness``: this run). The requirement is the first one the run breaks: R-CONC-1 when the history
        is not linearizable, else the one an invariant failure names, else (an exception no operation may
        raise, or a stopped run) R-CONC-1."""
        if self.ok:
            return Ok(checked=_CHECKED)
        requirement = "R-CONC-1"
        if not isinstance(self.verdict, Violation):
            named = [f.split(":", 1)[0] for f in self.invariant_failures if f.startswith("R-")]
            requirement = named[0] if named else requirement
        return Violation(requirement=requirement, counterexample=self.describe(), witness=self)

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
        if self.stopped is not None:
            lines.append(f"stopped: {self.stopped}")
        verdict = self.verdict
        lines.append(
            f"verdict: {verdict.counterexample if isinstance(verdict, Violation) else repr(verdict)}"
        )
        return "\n".join(lines)


class _StopError(Exception):
    """The run cannot go on; ``str`` is why, ``hung`` whether a call was left running."""

    def __init__(self, reason: str, *, hung: bool = False) -> None:
        super().__init__(reason)
        self.hung = hung


class _InFlight:
    """A recorder's journal that remembers calls invoked and not yet returned (a hung thread's call)."""

    def __init__(self) -> None:
        self.calls: dict[tuple[int, float], Event] = {}

    def __call__(self, event: Event) -> None:
        if event.returned is None:
            self.calls[event.client, event.invoked] = event
        else:
            self.calls.pop((event.client, event.invoked), None)

    def history(self, recorder: HistoryRecorder) -> tuple[Event, ...]:
        """The recorder's events and, as unreturned events, the calls still in flight."""
        events = recorder.events
        ended = {(e.client, e.invoked) for e in events}
        return tuple([*events, *(e for key, e in self.calls.items() if key not in ended)])


def _unscheduled(caller: BoundedCaller, what: str, call: Callable[[], Any]) -> Any:
    """Run ``call`` outside the schedule within the caller's budget; anything else stops the run."""
    outcome = caller.call(call)
    if isinstance(outcome, Returned):
        return outcome.value
    if isinstance(outcome, Hung):
        raise _StopError(f"{what} did not return within {outcome.budget:g} s", hung=True)
    raise _StopError(f"{what} raised {outcome.describe()}")


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
        timeout: seconds a running thread may take to reach its next seam call, and an unscheduled call
            (opening a handle, a setup operation, a read-back) to return.

    Returns:
        The run: decisions, trace, history and verdict; ``stopped`` when it could not finish (a hang, a
        deadlock, a choice the store did not replay, a failure outside the schedule). Nothing the store
        under test does is raised from here.
    """
    handles_needed = max(len(scenario.threads), 1 + max((h for h, _ in scenario.setup), default=0))
    directory = Path(tempfile.mkdtemp(prefix="interleave-", dir=base_dir))
    controller = Controller(len(scenario.threads), schedule, timeout=timeout)
    in_flight = _InFlight()
    recorder = HistoryRecorder(clock=controller.clock, journal=in_flight)
    inner = [OsFileSystem(directory, stripes=stripes) for _ in range(handles_needed + 1)]
    caller = BoundedCaller(timeout, name=UNSCHEDULED_THREAD)
    failures: list[str] = []
    stopped: str | None = None
    try:
        try:
            options = {"combine": True} if scenario.combine else {}
            handles = _unscheduled(
                caller,
                "opening the handles",
                lambda: [
                    open_handle(directory, SchedulingFileSystem(fs, controller), **options)
                    for fs in inner[:-1]
                ],
            )
            for handle, op in scenario.setup:
                _unscheduled(
                    caller,
                    f"setup {op!r} on handle {handle}",
                    partial(recorder.call, handle, handles[handle], op),
                )
            _run_threads(controller, scenario, handles, recorder, inner[0])
            # Read-backs after the end: every handle (a stale cache shows here, R-STORE-7) and a fresh one.
            fresh = _unscheduled(caller, "opening a fresh handle", lambda: open_handle(directory, inner[-1]))
            for number, handle in enumerate([*handles, fresh]):
                for rollout_id in scenario.rollout_ids:
                    try:
                        _unscheduled(
                            caller,
                            f"reading {rollout_id!r} back on handle {number}",
                            partial(recorder.call, number, handle, ReadManifest(rollout_id)),
                        )
                    except _StopError as failure:
                        if failure.hung:
                            raise
                        failures.append(str(failure))
        except _StopError as stop:
            stopped = str(stop)
        history = in_flight.history(recorder)
        trace = tuple(controller.trace)
        return Run(
            scenario=scenario.name,
            decisions=tuple(controller.decisions),
            trace=trace,
            history=history,
            verdict=check_history(history),
            invariant_failures=tuple(
                [*controller.errors, *filter(None, [conc3_failure(trace), sync_failure(trace)]), *failures]
            ),
            stopped=stopped,
        )
    finally:
        caller.close()
        if not caller.hangs:  # an unscheduled call left running goes straight to these: leave them open
            for fs in inner:
                fs.close_all()
        shutil.rmtree(directory, ignore_errors=True)


def _run_threads(
    controller: Controller,
    scenario: Scenario,
    handles: Sequence[Any],
    recorder: HistoryRecorder,
    fs: FileSystem,
) -> None:
    """Run the scenario's threads under the controller; a scheduling failure stops the run.

    Raises:
        _StopError: a thread ran ``timeout`` seconds without a seam call, a deadlock, or a choice not enabled.
    """
    threads = [
        threading.Thread(
            target=worker,
            args=(controller, tid, handles[tid], ops, recorder),
            name=f"{SCHEDULED_THREAD}{tid}",
            daemon=True,
        )
        for tid, ops in enumerate(scenario.threads)
    ]
    for thread in threads:
        thread.start()
    try:
        controller.run(lambda: conc2_failure(controller.trace, fs))
    except SchedulerError as error:
        stuck = set(controller.running)  # threads that never reached their next seam call
        controller.abort()
        for tid, thread in enumerate(threads):
            if tid not in stuck:
                thread.join(controller.timeout)
        raise _StopError(str(error)) from None
    except BaseException:
        controller.abort()
        raise
    for thread in threads:
        thread.join(controller.timeout)


@dataclass(kw_only=True, slots=True)
class _Node:
    decision: Decision
    chosen: int
    tried: set[int] = field(default_factory=set)


@dataclass(kw_only=True, frozen=True, slots=True)
class ScheduleExploration:
    """The outcome of ``explore`` over a scenario's schedules: runs made, whether the bounded space was
    exhausted, failing runs."""

    scenario: str
    preemption_bound: int
    runs: int
    exhausted: bool
    failures: tuple[Run, ...]
    max_decisions: int

    @property
    def result(self) -> Verdict:
        """The shared verdict: the first failing run's ``result``, else ``Ok`` with the schedules run (an
        ``Ok`` of the schedules within the bound only: ``exhausted`` says whether that was all of them)."""
        if self.failures:
            return self.failures[0].result
        return Ok(checked=_CHECKED, detail=f"{self.scenario}: {self.runs} schedules")


def _replay_failure(stack: Sequence[_Node], run: Run) -> str | None:
    """Why ``run`` did not replay the prefix ``stack`` chose (``None``: it did).

    A deterministic store meets the same enabled threads at every decision of a replayed prefix, and gets
    at least as far as the run that made the prefix did.
    """
    replayed = [d.enabled for d in run.decisions[: len(stack)]]
    if replayed == [n.decision.enabled for n in stack]:
        return None
    return (
        f"the store did not replay the prefix {len(stack)} choices long (a nondeterministic store cannot be "
        f"explored){'; ' + run.stopped if run.stopped else ''}"
    )


def explore(
    scenario: Scenario,
    *,
    open_handle: OpenHandle,
    preemption_bound: int = 2,
    max_runs: int = 10_000,
    stop_at_first: bool = True,
    base_dir: str | Path | None = None,
    timeout: float = 30.0,
) -> ScheduleExploration:
    """Run every schedule of ``scenario`` with at most ``preemption_bound`` preemptions.

    Args:
        scenario: the operations to interleave.
        open_handle: opens one handle of the store under test.
        preemption_bound: the largest number of preemptions in one schedule.
        max_runs: stop after this many runs (``exhausted`` is then ``False``).
        stop_at_first: stop at the first failing run.
        base_dir: where the runs' temporary directories go.
        timeout: each run's budget for a thread between seam calls and for each unscheduled call.

    Returns:
        The number of runs, whether the bounded space was exhausted, and the failing runs. A store that
        does not replay a prefix the same way (so no schedule can be replayed) ends the exploration with
        that run as a failure whose ``stopped`` says so; nothing the store does is raised from here.
    """
    stack: list[_Node] = []
    failures: list[Run] = []
    runs = 0
    max_decisions = 0

    def ended(*, exhausted: bool) -> ScheduleExploration:
        return ScheduleExploration(
            scenario=scenario.name,
            preemption_bound=preemption_bound,
            runs=runs,
            exhausted=exhausted,
            failures=tuple(failures),
            max_decisions=max_decisions,
        )

    while True:
        run = run_schedule(
            scenario,
            ThreadSchedule(tuple(n.chosen for n in stack)),
            open_handle=open_handle,
            base_dir=base_dir,
            timeout=timeout,
        )
        runs += 1
        max_decisions = max(max_decisions, len(run.decisions))
        replay = _replay_failure(stack, run)
        if replay is not None:
            failures.append(dataclasses.replace(run, stopped=replay))
            return ended(exhausted=False)
        stack.extend(
            _Node(decision=d, chosen=d.chosen, tried={d.chosen}) for d in run.decisions[len(stack) :]
        )
        if not run.ok:
            failures.append(run)
            if stop_at_first:
                return ended(exhausted=False)
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
            return ended(exhausted=True)
        if runs >= max_runs:
            return ended(exhausted=False)
