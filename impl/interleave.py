"""A deterministic scheduler for the real file store (SPEC.md R-CONC-1..3; issue 5 item 3).

Several handles (``FileLineageStore`` instances on one directory, each over its own ``OsFileSystem``) run
store operations in threads, one thread per handle. Each handle's effects seam is wrapped in
``SchedulingFileSystem``: before **every** call through the seam, and before each operation starts, the
calling thread *parks* and waits for the turn token. A controller (the caller's thread) waits until every
scheduled thread is parked or finished, so between two grants exactly one thread runs, and the directory
is in a state between two seam calls. Then it picks one *enabled* thread and hands it the token.

A thread whose next call is ``lock(s)`` while another scheduled thread holds stripe ``s`` is not enabled:
the controller tracks lock ownership from the seam calls themselves, so the real ``flock`` is never
contended and a schedule can never deadlock on it (a cycle of waits is reported as a deadlock instead).

A *schedule* is a list of choices, one per decision (a point where at least two threads are enabled).
``ChoiceSchedule`` reads each choice as an index into the enabled threads (modulo their number: any list
of integers is a schedule, so Hypothesis can generate and shrink them); ``ThreadSchedule`` names thread
IDs (the exhaustive explorer's replay). When the list runs out, the default continues the thread that ran
last if it is still enabled and otherwise the lowest enabled thread: the empty schedule runs the threads
one after another. A *preemption* is a decision that switches away from a thread that could continue.

Each run yields the trace of ``(thread, seam call, result)``, the history of store operations on a
logical clock (``histories.HistoryRecorder``), read-backs of every rollout ID on every handle and on a
fresh one after the threads finish, and the verdict of ``spec.linearizability.check_history`` (whose
model gives retire two linearization points per ID, fence and completion, as R-STORE-4 does).

R-CONC-2 (no ledger while a retire of its ID has returned and no delete of it may follow) is checked on
the real directory at every point where all threads are parked; R-CONC-3 (no retire removes a write that
started after a later delete returned) is read off the trace.

``explore`` enumerates every schedule with at most ``preemption_bound`` preemptions (CHESS-style
stateless search: replay a prefix, then run by default, then backtrack to the deepest decision with an
untried thread); ``find_counterexample`` deepens the bound until a run fails. ``SCENARIOS`` are the
issue's races; ``capture-ledger interleave [--ablate]`` prints the schedules explored and each
guard-removed ``StoreVariant``'s counterexample.

Not guaranteed: schedules of code that does not go through the seam (the store's pure Python between two
seam calls runs atomically here), coverage of more preemptions than the bound, or crash behaviour (that
is ``crash``'s job). A store that blocks on anything but a seam lock stalls a run until ``timeout``.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capture_ledger.impl.fs import FileStat, FileSystem, OsFileSystem
from capture_ledger.impl.histories import HistoryRecorder
from capture_ledger.impl.ordering import StoreVariant
from capture_ledger.spec.history import Event
from capture_ledger.spec.linearizability import CheckResult, Ok, check_history
from capture_ledger.spec.model import (
    Admit,
    Delete,
    HasRows,
    Operation,
    ReadManifest,
    Record,
    RecordFailure,
    Retire,
)
from capture_ledger.spec.model import Ok as ResultOk

__all__ = [
    "GUARDS",
    "SCENARIOS",
    "ChoiceSchedule",
    "Decision",
    "Exploration",
    "Run",
    "Scenario",
    "SchedulerError",
    "SchedulingFileSystem",
    "SeamCall",
    "ThreadSchedule",
    "TraceStep",
    "explore",
    "find_counterexample",
    "run_schedule",
    "store_opener",
]

#: Opens one handle of the store under test on ``directory`` with the given (wrapped) seam.
OpenHandle = Callable[[Path, FileSystem], Any]


class SchedulerError(Exception):
    """A run could not be scheduled: deadlock, a thread that never parked, or a non-replayable store."""


class _Aborted(BaseException):
    """Raised in parked threads when the controller gives up, so that they unwind and end."""


@dataclass(frozen=True, slots=True)
class SeamCall:
    """One scheduling point: a seam call (``lock``, ``stat``, ...) or an operation boundary.

    ``invoke`` (before an operation starts; a scheduling point) and ``return`` (after it returned; not a
    scheduling point) carry the operation and its result. Descriptors are shown as the file they name.
    """

    name: str
    args: tuple[object, ...] = ()

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(repr(a) for a in self.args)})"


@dataclass(frozen=True, slots=True)
class TraceStep:
    """What one thread did at one scheduling point, and what the call returned."""

    thread: int
    call: SeamCall
    result: object = None

    def __str__(self) -> str:
        shown = "" if self.call.name in ("invoke", "return") else f" -> {self.result!r}"
        return f"T{self.thread} {self.call!r}{shown}"


@dataclass(frozen=True, slots=True)
class Decision:
    """A point where several threads were enabled: which, who ran last, and who was chosen."""

    enabled: tuple[int, ...]
    current: int | None
    chosen: int
    step: int = 0  # trace steps before this decision

    @property
    def preemptive(self) -> bool:
        """Whether the choice switched away from a thread that could have continued."""
        return self.preempts(self.chosen)

    def preempts(self, thread: int) -> bool:
        """Whether choosing ``thread`` here would be a preemption."""
        return self.current in self.enabled and thread != self.current


def _default(enabled: Sequence[int], current: int | None) -> int:
    return current if current is not None and current in enabled else enabled[0]


@dataclass(frozen=True, slots=True)
class ChoiceSchedule:
    """Choices as indexes into the sorted enabled threads (modulo their number); then the default."""

    choices: tuple[int, ...] = ()

    def choose(self, index: int, enabled: Sequence[int], current: int | None) -> int:
        """The thread to run at decision ``index``."""
        if index < len(self.choices):
            return enabled[self.choices[index] % len(enabled)]
        return _default(enabled, current)


@dataclass(frozen=True, slots=True)
class ThreadSchedule:
    """Choices as thread IDs, which must be enabled when replayed; then the default."""

    threads: tuple[int, ...] = ()

    def choose(self, index: int, enabled: Sequence[int], current: int | None) -> int:
        """The thread to run at decision ``index``.

        Raises:
            SchedulerError: the named thread is not enabled (the store did not replay the same way).
        """
        if index < len(self.threads):
            if self.threads[index] not in enabled:
                raise SchedulerError(f"decision {index}: T{self.threads[index]} not enabled in {enabled}")
            return self.threads[index]
        return _default(enabled, current)


Schedule = ChoiceSchedule | ThreadSchedule


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


class _Controller:
    """The turn token and the bookkeeping of one run (see the module docstring)."""

    def __init__(self, threads: int, schedule: Schedule, *, timeout: float) -> None:
        self.cond = threading.Condition()
        self.threads = threads
        self.schedule = schedule
        self.timeout = timeout
        self.idents: dict[int, int] = {}
        self.pending: list[SeamCall | None] = [None] * threads
        self.running: set[int] = set(range(threads))
        self.done: set[int] = set()
        self.turn: int | None = None
        self.aborted = False
        self.owner: dict[object, int] = {}  # stripe -> thread holding it
        self.trace: list[TraceStep] = []
        self.decisions: list[Decision] = []
        self.errors: list[str] = []
        self.ticks = 0

    def clock(self) -> float:
        # A logical clock: only the thread holding the turn reads it, so ticks are totally ordered and a
        # replayed schedule yields the identical history.
        self.ticks += 1
        return float(self.ticks)

    def thread_id(self) -> int | None:
        return self.idents.get(threading.get_ident())

    def park(self, tid: int, call: SeamCall) -> None:
        with self.cond:
            self.pending[tid] = call
            self.running.discard(tid)
            self.cond.notify_all()
            while self.turn != tid:
                if self.aborted:
                    raise _Aborted
                self.cond.wait()
            self.turn = None
        self.trace.append(TraceStep(tid, call))

    def note_result(self, result: object) -> None:
        # Only the thread holding the turn appends, so the last step is its own.
        self.trace[-1] = dataclasses.replace(self.trace[-1], result=result)

    def finish(self, tid: int) -> None:
        with self.cond:
            self.done.add(tid)
            self.running.discard(tid)
            self.cond.notify_all()

    def enabled(self) -> list[int]:
        ready = []
        for tid in range(self.threads):
            call = self.pending[tid]
            if tid in self.done or call is None:
                continue
            if call.name == "lock" and call.args[0] in self.owner:
                continue  # R-STORE-2 stripes: held by another scheduled thread (or re-entered: deadlock)
            ready.append(tid)
        return ready

    def run(self, inspect: Callable[[], str | None]) -> None:
        current: int | None = None
        with self.cond:
            while True:
                if not self.cond.wait_for(lambda: not self.running, timeout=self.timeout):
                    raise SchedulerError(f"T{sorted(self.running)} ran {self.timeout}s without a seam call")
                if len(self.done) == self.threads:
                    return
                problem = inspect()
                if problem is not None and problem not in self.errors:
                    self.errors.append(problem)
                enabled = self.enabled()
                if not enabled:
                    waits = {t: self.pending[t] for t in range(self.threads) if t not in self.done}
                    raise SchedulerError(f"deadlock: {waits}, stripes held {self.owner}; {self.errors}")
                chosen = enabled[0]
                if len(enabled) > 1:
                    chosen = self.schedule.choose(len(self.decisions), enabled, current)
                    self.decisions.append(Decision(tuple(enabled), current, chosen, len(self.trace)))
                call = self.pending[chosen]
                assert call is not None
                if call.name == "lock":
                    self.owner[call.args[0]] = chosen
                elif call.name == "unlock":
                    self.owner.pop(call.args[0], None)
                current = chosen
                self.pending[chosen] = None
                self.running.add(chosen)
                self.turn = chosen
                self.cond.notify_all()

    def abort(self) -> None:
        with self.cond:
            self.aborted = True
            self.cond.notify_all()


class SchedulingFileSystem:
    """A ``FileSystem`` that makes every call a scheduling point for threads the controller runs.

    Calls from any other thread (setup, read-backs) pass straight through.
    """

    def __init__(self, inner: FileSystem, controller: _Controller) -> None:
        self.inner = inner
        self.stripes = inner.stripes
        self._controller = controller
        self._names: dict[int, str] = {}

    def _call(self, name: str, args: tuple[object, ...], run: Callable[[], Any]) -> Any:
        tid = self._controller.thread_id()
        if tid is None:
            return run()
        self._controller.park(tid, SeamCall(name, args))
        result = run()
        self._controller.note_result(result)
        return result

    def _opened(self, name: str, fd: int | None) -> int | None:
        if fd is not None:
            self._names[fd] = name
        return fd

    def _fd(self, fd: int) -> str:
        return self._names.get(fd, f"fd{fd}")

    def lock(self, stripe: int) -> None:
        self._call("lock", (stripe,), lambda: self.inner.lock(stripe))

    def unlock(self, stripe: int) -> None:
        self._call("unlock", (stripe,), lambda: self.inner.unlock(stripe))

    def stat(self, name: str) -> FileStat | None:
        found: FileStat | None = self._call("stat", (name,), lambda: self.inner.stat(name))
        return found

    def read(self, name: str, offset: int) -> tuple[FileStat, bytes] | None:
        data: tuple[FileStat, bytes] | None = self._call(
            "read", (name, offset), lambda: self.inner.read(name, offset)
        )
        return data

    def open_append(self, name: str, *, create: bool) -> int | None:
        fd: int | None = self._call(
            "open_append",
            (name, create),
            lambda: self._opened(name, self.inner.open_append(name, create=create)),
        )
        return fd

    def write(self, fd: int, data: bytes) -> None:
        self._call("write", (self._fd(fd), data), lambda: self.inner.write(fd, data))

    def fsync(self, fd: int) -> None:
        self._call("fsync", (self._fd(fd),), lambda: self.inner.fsync(fd))

    def close(self, fd: int) -> None:
        self._call("close", (self._fd(fd),), lambda: self.inner.close(fd))

    def create_file(self, name: str) -> int | None:
        fd: int | None = self._call(
            "create_file", (name,), lambda: self._opened(name, self.inner.create_file(name))
        )
        return fd

    def unlink(self, name: str) -> bool:
        removed: bool = self._call("unlink", (name,), lambda: self.inner.unlink(name))
        return removed

    def sync_dir(self) -> None:
        self._call("sync_dir", (), self.inner.sync_dir)

    def syncfs(self) -> None:
        self._call("syncfs", (), self.inner.syncfs)

    def listdir(self) -> list[str]:
        names: list[str] = self._call("listdir", (), self.inner.listdir)
        return names

    def fstat(self, fd: int) -> FileStat:
        found: FileStat = self._call("fstat", (self._fd(fd),), lambda: self.inner.fstat(fd))
        return found

    def truncate(self, fd: int, size: int) -> None:
        self._call("truncate", (self._fd(fd), size), lambda: self.inner.truncate(fd, size))

    def generation(self, stripe: int, slot: int) -> int:
        value: int = self._call("generation", (stripe, slot), lambda: self.inner.generation(stripe, slot))
        return value

    def advance_generation(self, stripe: int, slot: int) -> None:
        self._call("advance_generation", (stripe, slot), lambda: self.inner.advance_generation(stripe, slot))


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
        while self.decisions[: len(chosen)] and chosen[-1] == _default(
            self.decisions[len(chosen) - 1].enabled, self.decisions[len(chosen) - 1].current
        ):
            chosen.pop()
        return tuple(chosen)

    @property
    def switches(self) -> tuple[tuple[int, int], ...]:
        """The non-default choices as ``(trace step after which, thread run next)``: the counterexample."""
        return tuple((d.step, d.chosen) for d in self.decisions if d.chosen != _default(d.enabled, d.current))

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
            if fs.stat(f"{rollout_id}.lineage.jsonl") is not None:
                return f"R-CONC-2: {rollout_id}.lineage.jsonl exists after retire([{rollout_id!r}]) returned"
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
            ledger = f"{rollout_id}.lineage.jsonl"
            fenced = [p for p, t in steps("create_file", f"{rollout_id}.lineage.retired") if t == r_thread]
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


def _worker(
    controller: _Controller, tid: int, handle: Any, ops: Sequence[Operation], recorder: HistoryRecorder
) -> None:
    controller.idents[threading.get_ident()] = tid
    try:
        for op in ops:
            controller.park(tid, SeamCall("invoke", (op,)))
            result, _ = recorder.call(tid, handle, op)
            controller.trace.append(TraceStep(tid, SeamCall("return", (op, result))))
    except _Aborted:
        pass
    except BaseException as error:  # an exception the spec allows no operation to raise
        controller.errors.append(f"T{tid} raised {type(error).__name__}: {error}")
    finally:
        controller.finish(tid)


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
    controller = _Controller(len(scenario.threads), schedule, timeout=timeout)
    recorder = HistoryRecorder(clock=controller.clock)
    inner = [OsFileSystem(directory, stripes=stripes) for _ in range(handles_needed + 1)]
    try:
        handles = [open_handle(directory, SchedulingFileSystem(fs, controller)) for fs in inner[:-1]]
        for handle, op in scenario.setup:
            recorder.call(handle, handles[handle], op)
        workers = [
            threading.Thread(target=_worker, args=(controller, tid, handles[tid], ops, recorder), daemon=True)
            for tid, ops in enumerate(scenario.threads)
        ]
        for worker in workers:
            worker.start()
        try:
            controller.run(lambda: _conc2(controller.trace, inner[0]))
        except BaseException:
            controller.abort()
            raise
        finally:
            for worker in workers:
                worker.join(timeout)
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


def store_opener(variant: StoreVariant | None = None) -> OpenHandle:
    """Open ``FileLineageStore`` handles with ``variant`` (the production store when ``None``)."""
    from capture_ledger.impl.store import FileLineageStore

    chosen = variant if variant is not None else StoreVariant()

    def open_handle(directory: Path, fs: FileSystem) -> Any:
        return FileLineageStore(directory, fs=fs, variant=chosen)

    return open_handle


def _row(k: int) -> dict[str, object]:
    return {"model_call_id": f"c{k}", "v": k}


_LIVE_A: tuple[tuple[int, Operation], ...] = ((0, Record("a", _row(1))),)

#: The scenarios of issue 5 item 3 and two more, each starting with ``a`` made Live by handle 0.
SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario("retire-vs-late-write", ("a",), _LIVE_A, ((Retire(["a"]),), (Record("a", _row(2)),))),
        Scenario(
            "retire-vs-two-late-writes",
            ("a",),
            _LIVE_A,
            ((Retire(["a"]),), (Record("a", _row(2)),), (Record("a", _row(3)),)),
        ),
        Scenario(
            "retire-vs-delete-reuse",
            ("a",),
            _LIVE_A,
            ((Retire(["a"]),), (Delete(["a"]), Record("a", _row(2)))),
        ),
        Scenario(
            "two-retires-vs-write",
            ("a",),
            _LIVE_A,
            ((Retire(["a"]),), (Retire(["a"]),), (Record("a", _row(2)),)),
        ),
        Scenario("delete-vs-write", ("a",), _LIVE_A, ((Delete(["a"]),), (Record("a", _row(2)),))),
        Scenario("admit-vs-retire", ("a",), _LIVE_A, ((Retire(["a"]),), (Admit("a", "c2"),))),
        # Handle 1 has read (cached) a's rows before handle 0 deletes and reuses the ID (R-STORE-7).
        Scenario(
            "stale-cache-after-delete",
            ("a",),
            (*_LIVE_A, (1, ReadManifest("a"))),
            ((Delete(["a"]), Record("a", _row(2))), (Record("a", _row(3)),)),
        ),
        # Reads and a failure row between retire's phases see a fenced Live rollout (R-STATE-2).
        Scenario(
            "retire-vs-reads",
            ("a",),
            _LIVE_A,
            ((Retire(["a"]),), (HasRows("a"), RecordFailure("a", "c1", "timeout"), ReadManifest("a"))),
        ),
        # A batch is linearizable per ID, not atomic across IDs (R-CONC-1): writes to both IDs race it.
        Scenario(
            "batch-retire-vs-writes",
            ("a", "b"),
            (*_LIVE_A, (0, Record("b", _row(1)))),
            ((Retire(["a", "b"]),), (Record("b", _row(2)), Record("a", _row(2)))),
        ),
    ]
}


# ------------------------------------------------------------------------------------------------- CLI
#: The guards ``StoreVariant`` can switch off whose absence a schedule (not a crash) must reveal.
GUARDS = (
    "recheck_fence",
    "fence_before_unlink",
    "fence_lookup_on_write",
    "admit_checks_fence",
    "cache_coherence",
)


def register(subparsers: Any) -> None:
    """Add the ``interleave`` sub-command (``impl.cli``)."""
    parser = subparsers.add_parser(
        "interleave",
        help="run the real file store under every bounded schedule of the interleaving scenarios",
    )
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="a scenario")
    parser.add_argument("--bound", type=int, default=2, help="most preemptions per schedule (default 2)")
    parser.add_argument(
        "--ablate", action="store_true", help="also find each guard-removed variant's counterexample"
    )
    parser.add_argument("--verbose", action="store_true", help="print every counterexample trace")
    parser.add_argument("--dir", type=Path, default=None, help="where run directories go (default: temp)")
    parser.set_defaults(handler=run_cli)


def run_cli(args: Any) -> int:
    """Explore the chosen scenarios with the production store (and ``--ablate``: every variant).

    Returns:
        0 when the production store passed every schedule (and every variant was caught), else 1.
    """
    import logging
    import time

    logging.getLogger("capture_ledger").setLevel(logging.ERROR)  # discarded late writes are expected here
    names = args.scenario or sorted(SCENARIOS)
    code = 0
    for name in names:
        started = time.monotonic()
        found = explore(
            SCENARIOS[name], open_handle=store_opener(), preemption_bound=args.bound, base_dir=args.dir
        )
        print(
            f"{name:26} {found.runs:5d} schedules (<={args.bound} preemptions; exhausted={found.exhausted}) "
            f"<= {found.max_decisions} decisions, "
            f"{len(found.failures)} failing, {time.monotonic() - started:.1f}s"
        )
        for failure in found.failures:
            code = 1
            print(failure.describe())
    if args.ablate:
        for guard in GUARDS:
            caught = False
            for name in names:
                started = time.monotonic()
                run, runs = find_counterexample(
                    SCENARIOS[name],
                    open_handle=store_opener(StoreVariant(**{guard: False})),
                    max_preemptions=args.bound,
                    base_dir=args.dir,
                )
                took = time.monotonic() - started
                if run is None:
                    print(f"{guard}=False {name:28} not caught in {runs} schedules, {took:.1f}s")
                    continue
                caught = True
                switches = ", ".join(f"after step {s} run T{t}" for s, t in run.switches) or "none"
                print(
                    f"{guard}=False {name:28} caught after {runs} schedules, {took:.1f}s: "
                    f"{run.preemptions} preemptions, {len(run.decisions)} decisions, switches: {switches}"
                )
                if args.verbose:
                    print(run.describe())
            code = code if caught else 1
    return code
