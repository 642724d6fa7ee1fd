"""The turn token of the interleaving scheduler (SPEC.md R-CONC-1..3, R-STORE-2).

Each scheduled thread runs store operations on its own handle, whose effects seam is wrapped in
``SchedulingFileSystem``: before **every** call through the seam, and before each operation starts, the
calling thread *parks* and waits for the turn token. The ``Controller`` (the caller's thread) waits until
every scheduled thread is parked or finished, so between two grants exactly one thread runs, and the
directory is in a state between two seam calls. Then it picks one *enabled* thread and hands it the token.

A thread whose next call is ``lock(s)`` while another scheduled thread holds stripe ``s`` is not enabled:
the controller tracks lock ownership from the seam calls themselves, so the real ``flock`` is never
contended and a schedule can never deadlock on it (a cycle of waits is reported as a deadlock instead).
Likewise a thread whose next call is ``await_sync(register, ticket)`` (group commit's wait for a shared
sync, R-STORE-9) is enabled only when ``register.ready(ticket)``: the sync it waits for has finished, or
none is running (then it leads the next one), so the real wait returns at once when it is granted.

A *schedule* is a list of choices, one per decision (a point where at least two threads are enabled).
``ChoiceSchedule`` reads each choice as an index into the enabled threads (modulo their number: any list
of integers is a schedule, so Hypothesis can generate and shrink them); ``ThreadSchedule`` names thread
IDs (the exhaustive explorer's replay). When the list runs out, ``default_choice`` continues the thread
that ran last if it is still enabled and otherwise the lowest enabled thread: the empty schedule runs the
threads one after another. A *preemption* is a decision that switches away from a thread that could
continue. ``PauseSchedule`` is the one fixed schedule of the crash study's concurrent workloads: a thread
runs alone up to a named seam call, waits there while the others run, then finishes; ``pause_held`` reads
off the trace whether it ran so, which the lock ownership decides, not a timer (a schedule whose other
threads need a lock the parked thread holds runs them after it instead). ``GatherSchedule`` is the crash
study's schedule for removals that share syncs: each thread runs to its next sync or wait for one before
any of them syncs. Scenarios, runs and their judgement are ``interleave``'s.

``SchedulingFileSystem`` is a ``store.fs.HookedFileSystem`` whose ``before`` hook parks the calling thread
and whose ``after`` hook notes the call's result in the trace.

Not guaranteed: schedules of code that does not go through the seam (the store's pure Python between two
seam calls runs atomically here), or fairness: a thread that blocks on anything but a seam lock or a seam
``await_sync`` stalls the run until ``timeout``, which is then reported as a ``SchedulerError``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from capture_ledger.impl.store import RemovalQueue, SyncRegister
from capture_ledger.impl.store.fs import FileSystem
from capture_ledger.impl.study._hooked import FsCall, HookedFileSystem
from capture_ledger.spec.core.model import Operation
from capture_ledger.spec.kit import HistoryRecorder

__all__ = [
    "SYNC_CALLS",
    "ChoiceSchedule",
    "Controller",
    "Decision",
    "GatherSchedule",
    "PauseSchedule",
    "Schedule",
    "SchedulerError",
    "SchedulingFileSystem",
    "SeamCall",
    "ThreadSchedule",
    "TraceStep",
    "default_choice",
    "pause_held",
    "run_thread",
    "worker",
]


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


@dataclass(kw_only=True, frozen=True, slots=True)
class TraceStep:
    """What one thread did at one scheduling point, and what the call returned."""

    thread: int
    call: SeamCall
    result: object = None

    def __str__(self) -> str:
        shown = "" if self.call.name in ("invoke", "return") else f" -> {self.result!r}"
        return f"T{self.thread} {self.call!r}{shown}"


@dataclass(kw_only=True, frozen=True, slots=True)
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


def default_choice(enabled: Sequence[int], current: int | None) -> int:
    """The choice once a schedule runs out: the thread that ran last if enabled, else the lowest enabled.

    Args:
        enabled: the enabled threads, sorted.
        current: the thread that ran last, if any.

    Returns:
        The thread to run.
    """
    return current if current is not None and current in enabled else enabled[0]


@dataclass(frozen=True, slots=True)
class ChoiceSchedule:
    """Choices as indexes into the sorted enabled threads (modulo their number); then the default."""

    choices: tuple[int, ...] = ()

    def choose(
        self, index: int, enabled: Sequence[int], current: int | None, pending: Sequence[SeamCall | None]
    ) -> int:
        """The thread to run at decision ``index`` (``pending``: each thread's next call; unused)."""
        if index < len(self.choices):
            return enabled[self.choices[index] % len(enabled)]
        return default_choice(enabled, current)


@dataclass(frozen=True, slots=True)
class ThreadSchedule:
    """Choices as thread IDs, which must be enabled when replayed; then the default."""

    threads: tuple[int, ...] = ()

    def choose(
        self, index: int, enabled: Sequence[int], current: int | None, pending: Sequence[SeamCall | None]
    ) -> int:
        """The thread to run at decision ``index`` (``pending``: each thread's next call; unused).

        Raises:
            SchedulerError: the named thread is not enabled (the store did not replay the same way).
        """
        if index < len(self.threads):
            if self.threads[index] not in enabled:
                raise SchedulerError(f"decision {index}: T{self.threads[index]} not enabled in {enabled}")
            return self.threads[index]
        return default_choice(enabled, current)


@dataclass(kw_only=True, slots=True)
class PauseSchedule:
    """Thread ``thread`` runs alone until it is about to make its ``occurrence``-th seam call named in
    ``calls``; there it waits while the other threads run, by ``default_choice``, as far as they can; then
    it continues. Single use: it counts the calls it has seen.
    """

    thread: int
    calls: frozenset[str]
    occurrence: int = 1
    _seen: int = 0
    _last: SeamCall | None = None

    def choose(
        self, index: int, enabled: Sequence[int], current: int | None, pending: Sequence[SeamCall | None]
    ) -> int:
        """The thread to run at decision ``index``, given each thread's next call ``pending``."""
        call = pending[self.thread]
        if call is not None and call is not self._last:
            self._last = call
            self._seen += call.name in self.calls
        others = [t for t in enabled if t != self.thread]
        if self._seen >= self.occurrence and others:
            return default_choice(others, current)
        return self.thread if self.thread in enabled else default_choice(enabled, current)


#: The seam calls at which ``GatherSchedule`` holds a thread back: a sync, or a wait for a shared one.
SYNC_CALLS = frozenset({"sync_dir", "syncfs", "await_sync"})


@dataclass(frozen=True, slots=True)
class GatherSchedule:
    """Every thread runs, lowest first, until its next call in ``calls`` (by default a sync or a wait for a
    shared one, ``SYNC_CALLS``); once every enabled thread has reached one, a follower whose wait is over
    goes first, else the thread that ran last, else the lowest. So as many removals as can ask for a sync
    while another one runs, and share the next (group commit, R-STORE-9). Stateless: any run may reuse it.
    """

    calls: frozenset[str] = SYNC_CALLS

    def choose(
        self, index: int, enabled: Sequence[int], current: int | None, pending: Sequence[SeamCall | None]
    ) -> int:
        """The thread to run at decision ``index``, given each thread's next call ``pending``."""
        moving = [t for t in enabled if (call := pending[t]) is None or call.name not in self.calls]
        if moving:
            return current if current in moving else moving[0]
        waited = [t for t in enabled if (call := pending[t]) is not None and call.name == "await_sync"]
        return waited[0] if waited else default_choice(enabled, current)


def pause_held(trace: Sequence[TraceStep], schedule: PauseSchedule) -> bool:
    """Whether a run under ``schedule`` went as designed: the paused thread reached its pause call, and
    every step of every other thread came before that call ran.

    Args:
        trace: the run's trace (``Controller.trace``).
        schedule: the schedule it ran under.

    Returns:
        ``False`` when the paused thread never made the call (a variant without it), or when another thread
        ran after it (it needed a lock the paused thread held, so the schedule was infeasible).
    """
    matches = [
        i
        for i, step in enumerate(trace)
        if step.thread == schedule.thread and step.call.name in schedule.calls
    ]
    if len(matches) < schedule.occurrence:
        return False
    pause = matches[schedule.occurrence - 1]
    return all(i < pause for i, step in enumerate(trace) if step.thread != schedule.thread)


#: A schedule; each answers ``choose(index, enabled, current, pending)``.
Schedule = ChoiceSchedule | ThreadSchedule | PauseSchedule | GatherSchedule


class Controller:
    """The turn token and the bookkeeping of one run (see the module docstring).

    ``run`` is called on the caller's thread; ``park``, ``note_result`` and ``finish`` on scheduled ones.
    """

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
        self.trace.append(TraceStep(thread=tid, call=call))

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
            if call.name == "await_sync" and not _sync_ready(call):
                continue  # R-STORE-9: the shared sync it waits for is still running
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
                    chosen = self.schedule.choose(len(self.decisions), enabled, current, self.pending)
                    self.decisions.append(
                        Decision(enabled=tuple(enabled), current=current, chosen=chosen, step=len(self.trace))
                    )
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


def _sync_ready(call: SeamCall) -> bool:
    """Whether an ``await_sync(register, ticket)`` would return now (every scheduled thread is parked, so
    no one changes the register while it is read)."""
    register, ticket = call.args
    # A shared sync register (group commit) or a removal queue (combining): both are ``fs.SyncWait``.
    return (
        isinstance(register, SyncRegister | RemovalQueue)
        and isinstance(ticket, int)
        and register.ready(ticket)
    )


class SchedulingFileSystem(HookedFileSystem):
    """A ``FileSystem`` that makes every call a scheduling point for threads the controller runs.

    Calls from any other thread (setup, read-backs) pass straight through.
    """

    def __init__(self, inner: FileSystem, controller: Controller) -> None:
        super().__init__(inner, before=self._park, after=self._note)
        self._controller = controller

    def _park(self, call: FsCall) -> None:
        tid = self._controller.thread_id()
        if tid is not None:
            self._controller.park(tid, SeamCall(call.method, call.args))

    def _note(self, call: FsCall, outcome: object) -> None:
        if self._controller.thread_id() is not None and not isinstance(outcome, BaseException):
            self._controller.note_result(outcome)


def run_thread(
    controller: Controller, tid: int, steps: Sequence[tuple[Operation, Callable[[], object]]]
) -> None:
    """The body of scheduled thread ``tid``: for each ``(operation, perform)``, park at the operation's
    invocation (a scheduling point), call ``perform`` and note its result as the operation's return.

    Args:
        controller: the run's controller.
        tid: this thread's number.
        steps: the operations, in order, each with the function that performs it.
    """
    controller.idents[threading.get_ident()] = tid
    try:
        for op, perform in steps:
            controller.park(tid, SeamCall("invoke", (op,)))
            result = perform()
            controller.trace.append(TraceStep(thread=tid, call=SeamCall("return", (op, result))))
    except _Aborted:
        pass
    except BaseException as error:  # an exception the spec allows no operation to raise
        controller.errors.append(f"T{tid} raised {type(error).__name__}: {error}")
    finally:
        controller.finish(tid)


def worker(
    controller: Controller, tid: int, handle: Any, ops: Sequence[Operation], recorder: HistoryRecorder
) -> None:
    """The body of scheduled thread ``tid``: run ``ops`` on ``handle``, each invocation a scheduling point.

    Args:
        controller: the run's controller.
        tid: this thread's number (and its handle's).
        handle: the store handle the operations run on.
        ops: the operations, in order.
        recorder: records each operation's invocation and return in the history.
    """

    def perform(op: Operation) -> Callable[[], object]:
        return lambda: recorder.call(tid, handle, op)[0]

    run_thread(controller, tid, [(op, perform(op)) for op in ops])
