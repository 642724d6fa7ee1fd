"""The recording seam: a ``FileSystem`` that records every durability effect the store issues (R-CRASH-1..4).

``RecordingFileSystem`` wraps any ``FileSystem`` (normally ``OsFileSystem`` on a real temporary directory)
and appends to one trace, in the order the calls took effect: the effects of ``spec.durability``
(``Create`` with the recorder's own inode number, ``Write`` with its bytes, ``Truncate``, ``Fsync`` of a
file, ``SyncDir``, ``Syncfs``, ``Unlink``) and the ``Invoke``/``Return`` markers of each store operation,
which the workload driver adds around its calls. Reads, stats, locks, closes and the removal counters
change nothing durable and are not recorded.

Each effect-bearing call runs under one mutex together with its record, so the trace order is the order
in which the calls reached the kernel even when several threads share the recorder. An optional ``before``
hook runs at the top of every call, outside the mutex, so that a schedule can park a thread there.

``record`` runs a ``Workload`` (setup, then a few store operations, optionally one of them concurrent with
the others under a fixed ``Pause`` schedule, optionally with injected faults) once through the recorder on
a real directory and returns the ``Recording`` the crash explorer (``crash``) enumerates.

Not guaranteed: recording of effects that bypass the seam (the store never does; ``OsFileSystem``'s own lock
files are created at construction, before recording starts, and belong to the baseline), or hard links and
renames (the store makes none, and the vocabulary has no such effect).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import FileStat, FileSystem, OsFileSystem
from capture_ledger.impl.store.lines import ledger_name
from capture_ledger.impl.store.ordering import FenceSync, StoreVariant
from capture_ledger.impl.study.faults import Fault, FaultyFileSystem
from capture_ledger.spec.concurrency.history import apply_operation
from capture_ledger.spec.core.model import Delete, Operation, Record, RecordFailure, Retire
from capture_ledger.spec.crash.durability import (
    Baseline,
    Create,
    Effect,
    Fsync,
    SyncDir,
    Syncfs,
    Truncate,
    Unlink,
    Write,
)

__all__ = [
    "FaultAt",
    "Invoke",
    "Pause",
    "Recording",
    "RecordingFileSystem",
    "Return",
    "StoreConfig",
    "TraceEvent",
    "Workload",
    "record",
    "run_operation",
]


@dataclass(frozen=True, slots=True)
class Invoke:
    """Store operation number ``op`` was invoked (on ``thread``); ``label`` is its ``repr``."""

    op: int
    label: str
    thread: str = "main"


@dataclass(frozen=True, slots=True)
class Return:
    """Store operation number ``op`` returned; ``outcome`` is its result or raised exception, as text;
    ``raised`` when it raised (the caller got no acknowledgement)."""

    op: int
    outcome: str
    raised: bool = False


TraceEvent = Effect | Invoke | Return


class RecordingFileSystem:
    """A ``FileSystem`` that forwards to ``inner`` and records effects in ``trace``.

    Args:
        inner: the file system that does the work.
        before: called as ``before(call, name)`` at the top of every call (``name`` is ``""`` when the call
            names no file); a scheduler parks threads here.

    The baseline (``baseline``) is read from ``inner`` at construction: every file then present, each
    given a fresh inode number, assumed durable.
    """

    def __init__(self, inner: FileSystem, *, before: Callable[[str, str], None] | None = None) -> None:
        self.inner = inner
        self.stripes = inner.stripes
        self.before = before
        self.trace: list[TraceEvent] = []
        #: ``threads[i]`` is the name of the thread that issued ``trace[i]``.
        self.threads: list[str] = []
        self._mutex = threading.Lock()
        self._inodes = itertools.count(1)
        self._names: dict[str, int] = {}
        self._fds: dict[int, int] = {}
        files: list[tuple[str, int, bytes]] = []
        for name in inner.listdir():
            read = inner.read(name, 0)
            if read is None:  # pragma: no cover - removed meanwhile; nothing else uses the directory
                continue
            inode = next(self._inodes)
            self._names[name] = inode
            files.append((name, inode, read[1]))
        self.baseline = Baseline(tuple(files))

    # ------------------------------------------------------------------------------------------ markers
    def invoke(self, op: int, label: str, *, thread: str = "main") -> None:
        """Mark that store operation ``op`` (described by ``label``) starts now."""
        with self._mutex:
            self._append(Invoke(op, label, thread))

    def returned(self, op: int, outcome: str, *, raised: bool = False) -> None:
        """Mark that store operation ``op`` returned (or, with ``raised``, raised) now."""
        with self._mutex:
            self._append(Return(op, outcome, raised))

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

    def _hook(self, call: str, name: str = "") -> None:
        if self.before is not None:
            self.before(call, name)

    # ------------------------------------------------------------------------------- FileSystem protocol
    def lock(self, stripe: int) -> None:
        self._hook("lock")
        self.inner.lock(stripe)

    def unlock(self, stripe: int) -> None:
        self._hook("unlock")
        self.inner.unlock(stripe)

    def stat(self, name: str) -> FileStat | None:
        self._hook("stat", name)
        return self.inner.stat(name)

    def read(self, name: str, offset: int) -> tuple[FileStat, bytes] | None:
        self._hook("read", name)
        return self.inner.read(name, offset)

    def open_append(self, name: str, *, create: bool) -> int | None:
        self._hook("open_append", name)
        with self._mutex:
            existed = name in self._names
            fd = self.inner.open_append(name, create=create)
            if fd is None:
                return None
            if not existed:
                inode = next(self._inodes)
                self._names[name] = inode
                self._append(Create(name, inode))
            self._fds[fd] = self._names[name]
            return fd

    def write(self, fd: int, data: bytes) -> None:
        self._hook("write")
        with self._mutex:
            self.inner.write(fd, data)
            self._append(Write(self._fds[fd], bytes(data)))

    def fsync(self, fd: int) -> None:
        self._hook("fsync")
        with self._mutex:
            self.inner.fsync(fd)
            self._append(Fsync(self._fds[fd]))

    def close(self, fd: int) -> None:
        self._hook("close")
        with self._mutex:
            self.inner.close(fd)
            self._fds.pop(fd, None)

    def create_file(self, name: str) -> int | None:
        self._hook("create_file", name)
        with self._mutex:
            fd = self.inner.create_file(name)
            if fd is None:
                return None
            inode = next(self._inodes)
            self._names[name] = inode
            self._fds[fd] = inode
            self._append(Create(name, inode))
            return fd

    def unlink(self, name: str) -> bool:
        self._hook("unlink", name)
        with self._mutex:
            removed = self.inner.unlink(name)
            if removed:
                self._append(Unlink(name, self._names.pop(name)))
            return removed

    def sync_dir(self) -> None:
        self._hook("sync_dir")
        with self._mutex:
            self.inner.sync_dir()
            self._append(SyncDir())

    def syncfs(self) -> None:
        self._hook("syncfs")
        with self._mutex:
            self.inner.syncfs()
            self._append(Syncfs())

    def listdir(self) -> list[str]:
        self._hook("listdir")
        return self.inner.listdir()

    def fstat(self, fd: int) -> FileStat:
        self._hook("fstat")
        return self.inner.fstat(fd)

    def truncate(self, fd: int, size: int) -> None:
        self._hook("truncate")
        with self._mutex:
            self.inner.truncate(fd, size)
            self._append(Truncate(self._fds[fd], size))

    def generation(self, stripe: int, slot: int) -> int:
        # Removal counters live in the lock files and are not durable state (R-STORE-7): not recorded.
        return self.inner.generation(stripe, slot)

    def advance_generation(self, stripe: int, slot: int) -> None:
        self._hook("advance_generation")
        self.inner.advance_generation(stripe, slot)


# ----------------------------------------------------------------------------------- recorded runs
@dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    """The store under study: its guards (``variant``) and how retire syncs fences (``fence_sync``)."""

    label: str = "default"
    variant: StoreVariant = field(default_factory=StoreVariant)
    fence_sync: FenceSync = "directory"
    stripes: int = 4


@dataclass(frozen=True, slots=True)
class Pause:
    """A fixed schedule: operation ``op`` runs on its own handle and thread and is parked before its
    ``occurrence``-th seam call named in ``calls``; meanwhile the other operations run, in order, on the
    main handle; then it resumes and finishes."""

    op: int
    calls: frozenset[str]
    occurrence: int = 1


@dataclass(frozen=True, slots=True)
class FaultAt:
    """During operation ``op``, its ``occurrence``-th seam call named ``call`` fails (``faults.Fault``)."""

    op: int
    call: str
    occurrence: int = 1
    fault: Fault = field(default_factory=Fault)


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """A crash-exploration workload: ``setup`` is run first and its files are the durable baseline; the
    effects of ``ops`` are recorded. ``torn`` lists IDs whose ledger gets a torn last line after setup;
    ``faults`` makes seam calls of given operations fail (an operation that raised is unacknowledged)."""

    name: str
    ops: tuple[Operation, ...]
    setup: tuple[Operation, ...] = ()
    pause: Pause | None = None
    torn: tuple[str, ...] = ()
    faults: tuple[FaultAt, ...] = ()
    note: str = ""

    def ids(self) -> tuple[str, ...]:
        """Every rollout ID the workload names, sorted."""
        found: set[str] = set()
        for op in (*self.setup, *self.ops):
            if isinstance(op, Retire | Delete):
                found.update(str(i) for i in op.rollout_ids)  # type: ignore[attr-defined]
            else:
                found.add(str(getattr(op, "rollout_id", "")))
        return tuple(sorted(found))


def run_operation(store: FileLineageStore, op: Operation) -> object:
    """Call the store method ``op`` stands for and return its result.

    Raises:
        TypeError: ``op`` is a read (workloads only write).
        Exception: whatever the store raises.
    """
    if isinstance(op, Record | RecordFailure | Retire | Delete):
        return apply_operation(store, op)
    raise TypeError(f"a crash workload writes; {op!r} is not a write")


# ---------------------------------------------------------------------------------------- recording
@dataclass(frozen=True, slots=True)
class Recording:
    """One recorded run: the baseline, the trace, and (for a scheduled workload) whether the schedule ran
    as designed: the parked operation reached its pause point and the others finished meanwhile."""

    workload: Workload
    config: StoreConfig
    baseline: Baseline
    trace: tuple[TraceEvent, ...]
    threads: tuple[str, ...]
    inode_names: dict[int, str]
    paused: bool | None

    def effect_count(self) -> int:
        """How many effects the run issued."""
        return sum(1 for e in self.trace if not isinstance(e, Invoke | Return))


class _Scheduler:
    """Parks the paused operation's thread at its pause point (``RecordingFileSystem.before``)."""

    def __init__(self, pause: Pause) -> None:
        self.pause = pause
        self.seen = 0
        self.reached = threading.Event()
        self.release = threading.Event()
        self.timed_out = False

    def before(self, call: str, name: str) -> None:
        if threading.current_thread().name != "paused-op" or call not in self.pause.calls:
            return
        self.seen += 1
        if self.seen == self.pause.occurrence:
            self.reached.set()
            # Bounded: if the others block (the parked thread holds a lock they need), the schedule is
            # infeasible; the run goes on sequentially and the recording says so (``paused`` is False).
            if not self.release.wait(timeout=5):
                self.timed_out = True


def record(workload: Workload, config: StoreConfig, directory: Path) -> Recording:
    """Run ``workload`` once on ``directory`` (empty) through the recording seam.

    Args:
        workload: what to run.
        config: the store under study.
        directory: a fresh directory on a real file system.

    Returns:
        The recording.
    """
    inner = OsFileSystem(directory, stripes=config.stripes)
    try:
        with FileLineageStore(directory, fs=inner) as setup_store:
            for op in workload.setup:
                run_operation(setup_store, op)
        for rollout_id in workload.torn:
            fd = inner.open_append(ledger_name(rollout_id), create=True)
            assert fd is not None
            inner.write(fd, b'{"record":{"model_call_id":"tor')
            inner.close(fd)
        running: dict[str, int] = {}
        seen: dict[tuple[int, str], int] = {}

        def plan(call: str, name: str) -> Fault | None:
            op = running.get(threading.current_thread().name)
            for planned in workload.faults:
                if planned.op == op and planned.call == call:
                    seen[op, call] = seen.get((op, call), 0) + 1
                    if seen[op, call] == planned.occurrence:
                        return planned.fault
            return None

        recorder = RecordingFileSystem(FaultyFileSystem(inner, plan=plan) if workload.faults else inner)
        options: dict[str, Any] = {"variant": config.variant, "fence_sync": config.fence_sync}
        main = FileLineageStore(directory, fs=recorder, **options)
        paused: bool | None = None

        def run(index: int, store: FileLineageStore, thread: str) -> None:
            op = workload.ops[index]
            recorder.invoke(index, repr(op), thread=thread)
            running[threading.current_thread().name] = index
            try:
                outcome = repr(run_operation(store, op))
            except Exception as error:
                recorder.returned(index, f"raised {error!r}", raised=True)
            else:
                recorder.returned(index, outcome)
            finally:
                running.pop(threading.current_thread().name, None)

        if workload.pause is None:
            for index in range(len(workload.ops)):
                run(index, main, "main")
        else:
            scheduler = _Scheduler(workload.pause)
            recorder.before = scheduler.before
            other = FileLineageStore(directory, fs=recorder, **options)
            worker = threading.Thread(
                target=run, args=(workload.pause.op, other, "paused"), name="paused-op", daemon=True
            )
            worker.start()
            while not scheduler.reached.wait(0.002) and worker.is_alive():
                pass
            reached = scheduler.reached.is_set()
            for index in range(len(workload.ops)):
                if index != workload.pause.op:
                    run(index, main, "main")
            scheduler.release.set()
            worker.join(timeout=30)
            paused = reached and not scheduler.timed_out
        return Recording(
            workload,
            config,
            recorder.baseline,
            tuple(recorder.trace),
            tuple(recorder.threads),
            recorder.inode_names(),
            paused,
        )
    finally:
        inner.close_all()
