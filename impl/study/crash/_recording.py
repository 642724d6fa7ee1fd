"""The recording seam: a ``FileSystem`` that records every durability effect the store issues (R-CRASH-1..4).

``RecordingFileSystem`` wraps any ``FileSystem`` (normally ``OsFileSystem`` on a real temporary directory)
and appends to one trace, in the order the calls took effect: the effects of ``spec.durability``
(``Create`` with the recorder's own inode number, ``Write`` with its bytes, ``Truncate``, ``Fsync`` of a
file, ``SyncDir``, ``Syncfs``, ``Unlink``, ``Rename``: a ledger's creation renames its temporary into
place) and the ``Invoke``/``Return`` markers of each store operation,
which the workload driver adds around its calls. Reads, stats, locks, closes and the removal counters
change nothing durable and are not recorded. A call that raised is not recorded either, except an
``fsync`` failing with ``EIO``, ``ENOSPC`` or ``EDQUOT``: ``FsyncFailed``, whose pages the models may
lose (``spec.crash._failed``). The faults a workload's plan injected are kept (``injected``,
``Recording.injected``); a ``FaultAt`` of kind ``sync`` counts the seam's ``fsync``, ``sync_dir`` and
``syncfs`` together (``SEAM_KINDS``).

It is a ``store.fs.HookedFileSystem`` whose ``around`` runs each effect-bearing call under one mutex
together with its record, so the trace order is the order in which the calls reached the kernel even when
several threads share the recorder.

``record`` runs a ``Workload`` (setup, then a few store operations, optionally with injected faults) once
through the recorder on a real directory and returns the ``Recording`` the crash explorer (``crash``)
enumerates. A workload with a ``Pause`` runs one operation concurrently with the others, under the
interleaving scheduler (``scheduling``): its thread and the thread of the others both go through a
``SchedulingFileSystem`` around the recorder, and a ``scheduling.PauseSchedule`` parks the one at its pause
point while the others run. Whether the schedule ran as designed (``Recording.paused``) is read off the
scheduler's trace: the scheduler knows who holds which lock, so no timer decides it. A workload with
``threads`` runs each group of its operations on a thread and handle of its own under
``scheduling.GatherSchedule``, so that removals share their syncs (group commit, R-STORE-9); there
``Recording.paused`` says whether some call returned on a sync another call issued. ``lay_baseline``,
``operation_runner`` and ``StoreConfig.run_workload`` are ``record``'s steps, shared with the kernel study
(``kernel.recorder``), which marks the block log from ``RecordingFileSystem.appended``.

Not guaranteed: recording of effects that bypass the seam (the store never does; ``OsFileSystem``'s own lock
files are created at construction, before recording starts, and belong to the baseline), or hard links (the
store makes none). A rename is recorded as the seam issued it; a rename that raised is not.
"""

from __future__ import annotations

import errno
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from capture_ledger.impl.store import FenceSync, Ordering, ledger_name, shared_syncs
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import FileSystem, OsFileSystem
from capture_ledger.impl.study._faults import FaultyFileSystem
from capture_ledger.impl.study._hooked import FsCall, HookedFileSystem
from capture_ledger.impl.study._variants import StoreVariant
from capture_ledger.impl.study.interleave import (
    Controller,
    GatherSchedule,
    PauseSchedule,
    Schedule,
    SchedulingFileSystem,
    pause_held,
    run_thread,
)
from capture_ledger.spec.crash.durability import (
    Baseline,
    Create,
    Effect,
    Fsync,
    FsyncFailed,
    Rename,
    SyncDir,
    Syncfs,
    Truncate,
    Unlink,
    Write,
)
from capture_ledger.spec.kit.crash import (
    Fault,
    FaultAt,
    Invoke,
    Pause,
    Recording,
    Return,
    TraceEvent,
    Workload,
    each_position,
    positions,
    run_operation,
)

__all__ = [
    "SEAM_KINDS",
    "RecordingFileSystem",
    "RunOperation",
    "StoreConfig",
    "lay_baseline",
    "operation_runner",
    "record",
    "record_each",
]


_R = TypeVar("_R")
#: The seam calls a ``FaultAt`` kind of any ledger's calls stands for (other kinds are seam call names).
SEAM_KINDS: dict[str, tuple[str, ...]] = {"sync": ("fsync", "sync_dir", "syncfs")}
#: The errors of a failed fsync after which its pages may be lost.
_LOSSY = frozenset({errno.EIO, errno.ENOSPC, errno.EDQUOT})
#: The seam calls that change what a crash may leave (``close`` only forgets its descriptor).
_EFFECT_CALLS = frozenset(
    {
        "open_append",
        "write",
        "fsync",
        "close",
        "create_file",
        "unlink",
        "rename",
        "sync_dir",
        "syncfs",
        "truncate",
    }
)


class RecordingFileSystem(HookedFileSystem):
    """A ``FileSystem`` that forwards to ``inner`` and records effects in ``trace``.

    Args:
        inner: the file system that does the work.

    The baseline (``baseline``) is read from ``inner`` at construction: every file then present, each
    given a fresh inode number, assumed durable.
    """

    def __init__(self, inner: FileSystem) -> None:
        super().__init__(inner)
        self.trace: list[TraceEvent] = []
        #: ``threads[i]`` is the name of the thread that issued ``trace[i]``.
        self.threads: list[str] = []
        self._mutex = threading.Lock()
        self._next_inode = itertools.count(1)
        self._inode_of: dict[str, int] = {}  # file name -> the recorder's inode number
        self._fd_inode: dict[int, int] = {}  # open descriptor -> inode number
        #: The workload's faults injected so far (``operation_runner``'s plan appends each as it fires).
        self.injected: list[FaultAt] = []
        files: list[tuple[str, int, bytes]] = []
        for name in inner.listdir():
            read = inner.read(name, 0)
            if read is None:  # pragma: no cover - removed meanwhile; nothing else uses the directory
                continue
            inode = next(self._next_inode)
            self._inode_of[name] = inode
            files.append((name, inode, read[1]))
        self.baseline = Baseline(files=tuple(files))

    # ------------------------------------------------------------------------------------------ markers
    def invoke(self, op: int, label: str, *, thread: str = "main") -> None:
        """Mark that store operation ``op`` (described by ``label``) starts now."""
        with self._mutex:
            self._append(Invoke(op=op, label=label, thread=thread))

    def returned(self, op: int, outcome: str, *, raised: bool = False) -> None:
        """Mark that store operation ``op`` returned (or, with ``raised``, raised) now."""
        with self._mutex:
            self._append(Return(op=op, outcome=outcome, raised=raised))

    def effects(self) -> list[Effect]:
        """The recorded effects, without the markers."""
        with self._mutex:
            return [e for e in self.trace if not isinstance(e, Invoke | Return)]

    def inode_names(self) -> dict[int, str]:
        """The name each inode was created under (for labels)."""
        with self._mutex:
            names = {inode: name for name, inode, _ in self.baseline.files}
            names.update({e.inode: e.name for e in self.trace if isinstance(e, Create)})
            return names

    def _append(self, event: TraceEvent) -> None:
        # Called with the mutex held.
        self.trace.append(event)
        self.threads.append(threading.current_thread().name)
        self.appended(len(self.trace))

    def appended(self, length: int) -> None:
        """Called with the recorder's mutex held each time the trace grew, to ``length`` events: after the
        call it records returned, before any other thread's event. Does nothing here (a subclass hook)."""

    # ------------------------------------------------------------------------------------- the seam call
    def around(self, call: FsCall, proceed: Callable[[], _R]) -> _R:
        """Run ``call``; if it bears an effect, run it and record the effect under the one mutex."""
        if call.method not in _EFFECT_CALLS:
            return proceed()
        with self._mutex:
            try:
                result = proceed()
            except OSError as error:
                if call.method == "fsync" and error.errno in _LOSSY and call.fd in self._fd_inode:
                    self._append(FsyncFailed(self._fd_inode[call.fd]))  # its pages may be lost
                raise
            self._note(call, result)
            return result

    def _note(self, call: FsCall, result: object) -> None:
        # Called with the mutex held, after ``call`` returned ``result``.
        method = call.method
        if method in ("open_append", "create_file"):
            if not isinstance(result, int):
                return  # no such file (open_append), or it existed (create_file): nothing happened
            if method == "create_file" or call.name not in self._inode_of:
                self._inode_of[call.name] = next(self._next_inode)
                self._append(Create(call.name, self._inode_of[call.name]))
            self._fd_inode[result] = self._inode_of[call.name]
        elif method == "unlink":
            if result:
                self._append(Unlink(call.name, self._inode_of.pop(call.name)))
        elif method == "rename":
            old, new = call.args[0], call.args[1]
            assert isinstance(old, str) and isinstance(new, str)
            inode = self._inode_of.pop(old)
            replaced = self._inode_of.get(new)
            self._inode_of[new] = inode
            self._append(Rename(old, new, inode, replaced))
        elif method == "sync_dir":
            self._append(SyncDir())
        elif method == "syncfs":
            self._append(Syncfs())
        else:  # a call on a descriptor: write, fsync, truncate, close
            assert call.fd is not None
            if method == "close":
                self._fd_inode.pop(call.fd, None)
                return
            inode = self._fd_inode[call.fd]
            argument = call.args[1] if len(call.args) > 1 else None
            if method == "write" and isinstance(argument, bytes):
                self._append(Write(inode, bytes(argument)))
            elif method == "truncate" and isinstance(argument, int):
                self._append(Truncate(inode, argument))
            else:
                self._append(Fsync(inode))


# ----------------------------------------------------------------------------------- recorded runs
@dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    """The store under study: its guards (``variant``), how retire syncs fences (``fence_sync``, and from
    which retire size one ``syncfs`` does it instead: ``syncfs_from``), and whether concurrent removals
    share their syncs (``group_commit``, R-STORE-9)."""

    label: str = "default"
    variant: StoreVariant = field(default_factory=StoreVariant)
    fence_sync: FenceSync = "directory"
    stripes: int = 4
    group_commit: bool = True
    syncfs_from: int | None = None

    def ordering(self) -> Ordering:
        """The ordering of this configuration, for ``FileLineageStore(..., ordering=...)``."""
        return self.variant.ordering(fence_sync=self.fence_sync, syncfs_from=self.syncfs_from)

    def open(self, directory: Path, fs: FileSystem) -> FileLineageStore:
        """A handle of this configuration on ``directory`` over ``fs``."""
        return FileLineageStore(directory, fs=fs, ordering=self.ordering(), group_commit=self.group_commit)

    def run_workload(
        self, workload: Workload, *, directory: Path, recorder: RecordingFileSystem, run: RunOperation
    ) -> bool | None:
        """Run ``workload``'s operations through ``recorder`` on handles of this configuration (``open``),
        as ``record`` does (``run`` from ``operation_runner``): a workload with a ``Pause`` under
        ``PauseSchedule`` (``run_paused``), one with ``threads`` each group on a thread and handle of its
        own under ``GatherSchedule``, any other in order on one handle. The kernel study calls it on its
        mounted image.

        Returns:
            ``Recording.paused``: whether the pause held, whether a sync was shared, or ``None``.

        Raises:
            SchedulerError: a scheduled run could not be scheduled (a deadlock, or a thread that stalled).
        """
        if workload.pause is not None:
            return run_paused(
                workload, workload.pause, config=self, directory=directory, recorder=recorder, run=run
            )
        if workload.threads:
            return _run_gathered(workload, config=self, directory=directory, recorder=recorder, run=run)
        main = self.open(directory, recorder)
        for index in range(len(workload.ops)):
            run(index, main, "main")
        return None


# ---------------------------------------------------------------------------------------- recording
#: Runs workload operation ``index`` on a handle and marks it in the trace, as thread ``label``.
RunOperation = Callable[[int, FileLineageStore, str], object]
_Recorder = TypeVar("_Recorder", bound=RecordingFileSystem)


def lay_baseline(workload: Workload, directory: Path, inner: OsFileSystem) -> None:
    """Run ``workload``'s setup on ``directory`` and write its torn lines, through ``inner`` (unrecorded).

    Args:
        workload: whose ``setup`` and ``torn`` to lay down.
        directory: the lineage directory.
        inner: the file system on ``directory`` the recorder will wrap.
    """
    with FileLineageStore(directory, fs=inner) as setup_store:
        for op in workload.setup:
            run_operation(setup_store, op)
    for rollout_id in workload.torn:
        fd = inner.open_append(ledger_name(rollout_id), create=True)
        assert fd is not None
        inner.write(fd, b'{"record":{"model_call_id":"tor')
        inner.close(fd)


def operation_runner(
    workload: Workload, inner: FileSystem, recorder_of: Callable[[FileSystem], _Recorder]
) -> tuple[_Recorder, RunOperation]:
    """The recorder over ``inner`` and the runner of ``workload``'s operations through it.

    The recorder wraps ``inner`` behind a ``FaultyFileSystem`` when the workload injects faults; each
    ``FaultAt`` fires on its operation (the one the calling thread is running) at its occurrence of its call.

    Args:
        workload: whose operations and faults to run.
        inner: the file system under the recorder.
        recorder_of: makes the recorder over a file system (``RecordingFileSystem`` or a subclass).

    Returns:
        The recorder, and ``run(index, store, thread)``: runs operation ``index`` on ``store`` between its
        ``Invoke`` and ``Return`` (as thread ``thread``) and returns its outcome, or the exception it raised.
    """
    running: dict[str, int] = {}
    seen: dict[tuple[int, str], int] = {}

    def plan(call: str, name: str) -> Fault | None:
        op = running.get(threading.current_thread().name)
        for planned in workload.faults:
            if planned.op == op and call in SEAM_KINDS.get(planned.call, (planned.call,)):
                key = (op, planned.call)
                seen[key] = seen.get(key, 0) + 1
                if seen[key] == planned.occurrence:
                    recorder.injected.append(planned)
                    return planned.fault
        return None

    recorder = recorder_of(FaultyFileSystem(inner, plan=plan) if workload.faults else inner)

    def run(index: int, store: FileLineageStore, thread: str) -> object:
        op = workload.ops[index]
        recorder.invoke(index, repr(op), thread=thread)
        running[threading.current_thread().name] = index
        try:
            outcome = run_operation(store, op)
        except Exception as error:
            recorder.returned(index, f"raised {error!r}", raised=True)
            return error
        else:
            recorder.returned(index, repr(outcome))
            return outcome
        finally:
            running.pop(threading.current_thread().name, None)

    return recorder, run


def record(workload: Workload, config: StoreConfig, directory: Path) -> Recording:
    """Run ``workload`` once on ``directory`` (empty) through the recording seam.

    Args:
        workload: what to run.
        config: the store under study.
        directory: a fresh directory on a real file system.

    Returns:
        The recording.

    Raises:
        SchedulerError: a paused workload could not be scheduled (a deadlock, or a thread that stalled).
    """
    inner = OsFileSystem(directory, stripes=config.stripes)
    try:
        lay_baseline(workload, directory, inner)
        recorder, run = operation_runner(workload, inner, RecordingFileSystem)
        paused = config.run_workload(workload, directory=directory, recorder=recorder, run=run)
        return Recording(
            workload=workload,
            config=config,
            baseline=recorder.baseline,
            trace=tuple(recorder.trace),
            threads=tuple(recorder.threads),
            inode_names=recorder.inode_names(),
            paused=paused,
            injected=tuple(recorder.injected),
        )
    finally:
        inner.close_all()


def record_each(workload: Workload, config: StoreConfig, scratch: Path) -> tuple[Recording, ...]:
    """``record`` of ``workload``, one recording per position when its fault strikes *each* call of a kind
    (``occurrence=0``; ``spec.kit.crash.each_position``: counted in a reference run without the fault),
    each in a fresh directory under ``scratch``."""

    def fresh(name: str) -> Path:
        (scratch / name).mkdir(parents=True)
        return scratch / name

    each = [f for f in workload.faults if f.occurrence == 0]
    if not each:
        return (record(workload, config, fresh("run")),)
    reference = record(replace(workload, faults=()), config, fresh("reference"))
    expanded = each_position(workload, positions(reference, each[0]))
    return tuple(record(w, config, fresh(f"at-{i}")) for i, w in enumerate(expanded, 1))


def run_paused(
    workload: Workload,
    pause: Pause,
    *,
    config: StoreConfig,
    directory: Path,
    recorder: RecordingFileSystem,
    run: RunOperation,
) -> bool:
    """Run the paused operation (thread 0, ``paused``) against the others (thread 1, ``main``), each on its
    own handle, under ``PauseSchedule``; whether the schedule held (``scheduling.pause_held``)."""
    schedule = PauseSchedule(thread=0, calls=pause.calls, occurrence=pause.occurrence)
    programs = (
        ("paused", (pause.op,)),
        ("main", tuple(i for i in range(len(workload.ops)) if i != pause.op)),
    )
    controller, _ = _run_scheduled(
        workload, programs, schedule, config=config, directory=directory, recorder=recorder, run=run
    )
    return pause_held(controller.trace, schedule)


def _run_gathered(
    workload: Workload,
    *,
    config: StoreConfig,
    directory: Path,
    recorder: RecordingFileSystem,
    run: RunOperation,
) -> bool:
    """Run each of ``workload.threads`` on its own thread and handle under ``GatherSchedule``; whether some
    call returned on a sync another call issued (group commit shared a sync)."""
    programs = tuple((f"t{tid}", indexes) for tid, indexes in enumerate(workload.threads))
    syncs = shared_syncs(directory)  # the handles' registers when group commit is on; held for the run
    joined = syncs.counts()[1]
    _, handles = _run_scheduled(
        workload, programs, GatherSchedule(), config=config, directory=directory, recorder=recorder, run=run
    )
    return any(handle.group_commit for handle in handles) and syncs.counts()[1] > joined


def _run_scheduled(
    workload: Workload,
    programs: tuple[tuple[str, tuple[int, ...]], ...],
    schedule: Schedule,
    *,
    config: StoreConfig,
    directory: Path,
    recorder: RecordingFileSystem,
    run: RunOperation,
) -> tuple[Controller, list[FileLineageStore]]:
    """Run ``programs`` (a label and operation indexes each) on threads and handles of their own, every seam
    call a scheduling point of ``schedule``; the controller and the handles, once every thread ended.

    Raises:
        SchedulerError: the run could not be scheduled (a deadlock, or a thread that stalled).
    """
    controller = Controller(len(programs), schedule, timeout=30.0)
    seam = SchedulingFileSystem(recorder, controller)
    threads = []
    handles = []
    for tid, (label, indexes) in enumerate(programs):
        handle = config.open(directory, seam)
        handles.append(handle)
        steps = [(workload.ops[i], _bound(run, i, handle, label)) for i in indexes]
        threads.append(
            threading.Thread(
                target=run_thread, args=(controller, tid, steps), name=f"{label}-op", daemon=True
            )
        )
    for thread in threads:
        thread.start()
    try:
        controller.run(lambda: None)
    except BaseException:
        controller.abort()
        raise
    finally:
        for thread in threads:
            thread.join(timeout=30)
    return controller, handles


def _bound(run: RunOperation, index: int, handle: FileLineageStore, label: str) -> Callable[[], object]:
    return lambda: run(index, handle, label)
