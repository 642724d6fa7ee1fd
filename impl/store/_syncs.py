"""Group commit: concurrent removals in one process share directory syncs (SPEC.md R-STORE-9; R-STORE-4..5).

A retire syncs the directory after its fences and again after its unlinks, and a delete after its unlinks
(R-STORE-4, R-STORE-5). What such a sync must do for its caller is make durable what the caller did before
it asked; any sync of the same kind that *began after the caller asked* does that, whoever issues it. So
callers share: a ``SyncRegister`` numbers the syncs of one kind (``"directory"``: an fsync of the directory;
``"filesystem"``: a ``syncfs``) of one directory, and ``sync(fs)``

1. takes a *ticket*: the number of the next sync to start (a sync running now began before the caller asked,
   so it does not count);
2. if no sync is running, *leads*: marks sync ``ticket`` started, issues it through the caller's own seam
   (``fs.sync_dir()`` or ``fs.syncfs()``), marks it finished and wakes the waiters;
3. otherwise *follows*: waits, through the seam's ``await_sync`` (so the study tools see and schedule the
   wait), until sync ``ticket`` has finished, or until no sync is running, and then leads it itself.

A leader whose sync raises re-raises; every follower of that sync raises ``OSError`` as well (its effects may
not be durable, and on Linux a later fsync may succeed without having written them, so a retry of the sync
alone would prove nothing: the caller retries the whole call, as for any ``OSError``). A follower never
returns before its sync finished without error.

``shared_syncs(directory)`` gives every handle of one process on one directory (keyed by the directory's
device and inode) the same registers, so the threads of one handle (an HTTP worker's thread pool) and
several handles share; ``private_syncs()`` gives each call its own sync (``group_commit=False``). After a
``fork`` the child's registers start idle.

Not guaranteed: sharing between processes (each process has its own registers; processes still exclude
each other through the stripe locks, and each of their calls gets a sync that began after it asked), or
any bound on how many callers one sync serves.
"""

from __future__ import annotations

import errno
import os
import threading
import weakref
from typing import Literal

from capture_ledger.impl.store.fs import FileSystem

__all__ = ["SyncKind", "SyncRegister", "Syncs", "private_syncs", "shared_syncs"]

#: What a register's syncs are: an fsync of the directory, or a ``syncfs`` of its file system.
SyncKind = Literal["directory", "filesystem"]


class SyncRegister:
    """The syncs of one kind for one directory: started and finished counters, and who is running one.

    Args:
        kind: ``"directory"`` (``fs.sync_dir``) or ``"filesystem"`` (``fs.syncfs``).
        shared: ``False`` makes ``sync`` issue the caller's own sync every time (no counters kept).

    Thread-safe. ``ready`` reads without the lock (two integers and a flag, each read atomically), so the
    scheduler may ask it while every scheduled thread is parked.
    """

    __slots__ = (
        "__weakref__",
        "_callers",
        "_changed",
        "_failures",
        "_leader",
        "_mutex",
        "finished",
        "issued",
        "joined",
        "kind",
        "running",
        "shared",
        "started",
    )

    def __init__(self, kind: SyncKind, *, shared: bool = True) -> None:
        self.kind: SyncKind = kind
        self.shared = shared
        self._reset()

    def _reset(self) -> None:
        self._mutex = threading.Lock()
        self._changed = threading.Condition(self._mutex)
        #: Syncs started and finished so far (sync ``n`` is the ``n``-th started); one runs at a time.
        self.started = 0
        self.finished = 0
        self.running = False
        self._leader: int | None = None  # the thread running a sync now
        #: Syncs this register issued, and calls that returned on a sync another caller issued.
        self.issued = 0
        self.joined = 0
        self._callers: dict[int, int] = {}  # ticket -> callers holding it
        self._failures: dict[int, OSError] = {}  # ticket -> what its failed sync raised, while awaited

    def __repr__(self) -> str:
        return f"{self.kind} sync"

    def ready(self, ticket: int) -> bool:
        """Whether a caller holding ``ticket`` can go on: its sync finished, or none is running (it leads)."""
        return self.finished >= ticket or not self.running

    def wait_for(self, ticket: int) -> None:
        """Block until ``ready(ticket)`` (``OsFileSystem.await_sync``)."""
        with self._changed:
            while not self.ready(ticket):
                self._changed.wait()

    def sync(self, fs: FileSystem) -> bool:
        """Return once a sync of this kind that began after this call began has finished (R-STORE-9).

        Args:
            fs: the caller's seam: a leader issues the sync through it, a follower waits through it.

        Returns:
            Whether this caller issued the sync (``False``: it returned on another caller's).

        Raises:
            OSError: the sync this caller needed failed (its own, or its leader's).
        """
        if not self.shared or self._leader == threading.get_ident():
            # Each call its own; or a call made from inside this thread's own running sync (a seam hook that
            # calls a store back), which cannot wait for itself: it issues a sync of its own.
            self._issue(fs)
            with self._mutex:
                self.issued += 1
            return True
        with self._mutex:
            ticket = self.started + 1
            self._callers[ticket] = self._callers.get(ticket, 0) + 1
            try:
                while self.finished < ticket:
                    if not self.running:
                        self._lead(fs, ticket)
                        return True
                    self._mutex.release()
                    try:
                        fs.await_sync(self, ticket)
                    finally:
                        self._mutex.acquire()
                failure = self._failures.get(ticket)
                if failure is not None:
                    raise OSError(failure.errno, f"the shared {self.kind} sync failed: {failure}")
                self.joined += 1
                return False
            finally:
                left = self._callers[ticket] - 1
                if left:
                    self._callers[ticket] = left
                else:
                    del self._callers[ticket]
                    self._failures.pop(ticket, None)

    def _lead(self, fs: FileSystem, ticket: int) -> None:
        # Called with the mutex held and no sync running, so ``started == ticket - 1``; returns with it held.
        self.running = True
        self.started = ticket
        self._leader = threading.get_ident()
        self._mutex.release()
        failure: BaseException | None = None
        try:
            self._issue(fs)
        except BaseException as error:
            failure = error
            raise
        finally:
            self._mutex.acquire()
            self._leader = None
            self.running = False
            self.finished = ticket
            self.issued += 1
            if failure is not None and self._callers.get(ticket, 0) > 1:
                self._failures[ticket] = (
                    failure
                    if isinstance(failure, OSError)
                    else OSError(errno.EIO, f"the sync was interrupted: {failure!r}")
                )
            self._changed.notify_all()

    def _issue(self, fs: FileSystem) -> None:
        if self.kind == "directory":
            fs.sync_dir()
        else:
            fs.syncfs()


class Syncs:
    """The two registers of one directory: ``directory`` (fsync of the directory) and ``filesystem``
    (``syncfs``); shared between callers or each call's own.

    Args:
        shared: whether callers share syncs (group commit).
    """

    __slots__ = ("__weakref__", "directory", "filesystem", "shared")

    def __init__(self, *, shared: bool) -> None:
        self.shared = shared
        self.directory = SyncRegister("directory", shared=shared)
        self.filesystem = SyncRegister("filesystem", shared=shared)
        if shared:
            _REGISTRY.live.add(self)

    def counts(self) -> tuple[int, int]:
        """``(syncs issued, calls that returned on another caller's sync)`` over both registers."""
        registers = (self.directory, self.filesystem)
        return sum(r.issued for r in registers), sum(r.joined for r in registers)


class _Registry:
    """The shared registers of this process by directory, and every shared ``Syncs`` (for ``fork``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_directory: weakref.WeakValueDictionary[tuple[int, int], Syncs] = weakref.WeakValueDictionary()
        self.live: weakref.WeakSet[Syncs] = weakref.WeakSet()


_REGISTRY = _Registry()


def shared_syncs(directory: str | os.PathLike[str]) -> Syncs:
    """The shared registers of ``directory`` in this process, the same for every handle on it.

    Keyed by the directory's device and inode (so two paths to one directory share); kept while a handle
    holds them. A directory that cannot be looked up gets registers of its own.

    Args:
        directory: the lineage directory.

    Returns:
        Shared ``Syncs``.
    """
    try:
        st = os.stat(directory)
    except OSError:
        return Syncs(shared=True)
    key = (st.st_dev, st.st_ino)
    with _REGISTRY.lock:
        found = _REGISTRY.by_directory.get(key)
        if found is None:
            found = Syncs(shared=True)
            _REGISTRY.by_directory[key] = found
        return found


def private_syncs() -> Syncs:
    """Registers that give every call its own sync (``group_commit=False``)."""
    return Syncs(shared=False)


def _after_fork() -> None:
    # A child has only the forking thread: a register caught running, or a mutex held, would never
    # settle. Every register starts idle (they coordinate threads, and no thread was carried over).
    _REGISTRY.lock = threading.Lock()
    for syncs in list(_REGISTRY.live):
        syncs.directory._reset()
        syncs.filesystem._reset()


os.register_at_fork(after_in_child=_after_fork)
