"""The effects seam: every file-system call and lock the file store makes (SPEC.md §Store, STYLE "one seam").

``FileSystem`` is the one small interface through which ``FileLineageStore`` touches its directory. Names
are plain file names inside that directory (never paths). Nothing in the store bypasses it.

The study tools wrap the seam with ``impl.study.HookedFileSystem`` (record, schedule or fail each
call); nothing on the production path imports it.

``OsFileSystem`` is the real implementation: plain ``os`` calls on a directory, plus striped locks that
exclude both other processes (``fcntl.flock`` on descriptors held open) and other threads of this process
(one ``threading.Lock`` per stripe, because ``flock`` does not exclude threads sharing a descriptor).

Each lock file also holds ``GENERATION_SLOTS`` removal counters (8 bytes each, little-endian): a handle
bumps the rollout's counter under the lock before it unlinks a ledger, and every handle compares it with
the value its cache saw, so a cached entry is never trusted after another handle or process removed the
file, even when the file system reuses the inode number at once (ext4 does, measured) (R-STORE-7). The
counters are volatile coordination, not data: they are never fsynced, a crash may lose them, and after a
crash no cache survives. Recorders may treat them as having no durable effect. A lock file gets the blocks
of its whole counter area when it is created (or, made by an older version, at the next open), so that
bumping a counter needs no new block and retire and delete still work on a full file system (R-STORE-12).

``await_sync`` is the one call that is not about files: a caller of group commit (``_syncs``, R-STORE-9)
blocks there until the shared sync it needs has finished or none is running, and a caller of combined removals
(``_combining``) until the batch that took its request completed or it is to combine the next. It is on the
seam, as ``lock`` is, so that the study tools see every wait: the scheduler makes it a scheduling point it
understands (the thread is enabled only when the wait would return), the recorder and the tests see who
waited.

Guaranteed: each method is one system call or a fixed, documented handful (``open_append`` is ``open``;
``create_file`` is ``open`` + ``close``; ``advance_generation`` is ``pread`` + ``pwrite``; ``await_sync``
makes none). Not guaranteed:
durability of anything not fsynced, or that a ``stat`` result still holds after the call returns unless the
caller holds the rollout's lock.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = [
    "GENERATION_SLOTS",
    "FileStat",
    "FileSystem",
    "OsFileSystem",
    "SyncWait",
    "lock_file_name",
]

#: Removal counters per lock file (R-STORE-7); 4096 bytes per lock file, allocated when it is created.
GENERATION_SLOTS = 512


@dataclass(frozen=True, slots=True)
class FileStat:
    """What a lookup returns: the file's inode number and size in bytes."""

    inode: int
    size: int


def lock_file_name(stripe: int) -> str:
    """The name of lock stripe ``stripe``'s file; created once, never deleted (R-STORE-2)."""
    return f".capture-ledger.lock.{stripe:03d}"


class SyncWait(Protocol):
    """What ``await_sync`` waits on: a shared sync register of group commit (``_syncs.SyncRegister``), or
    a removal queue of combined removals (``_combining.RemovalQueue``, whose ticket numbers a request)."""

    def ready(self, ticket: int) -> bool:
        """Whether a wait for ``ticket`` would return now (a register: sync ``ticket`` finished, or none is
        running; a queue: request ``ticket`` was served, or it combines next)."""

    def wait_for(self, ticket: int) -> None:
        """Block until ``ready(ticket)``."""


@runtime_checkable
class FileSystem(Protocol):
    """The store's effects. Every call that matters for durability or ordering is one of these."""

    stripes: int

    def lock(self, stripe: int) -> None:
        """Block until this caller holds lock stripe ``stripe``, exclusive across threads and processes."""

    def unlock(self, stripe: int) -> None:
        """Release lock stripe ``stripe``."""

    def stat(self, name: str) -> FileStat | None:
        """Look a file up: its inode and size, or ``None`` when it does not exist."""

    def read(self, name: str, offset: int) -> tuple[FileStat, bytes] | None:
        """The file's stat and its bytes from ``offset`` to the end, or ``None`` when it does not exist."""

    def read_open(self, fd: int, offset: int) -> tuple[FileStat, bytes]:
        """The open file's stat and its bytes from ``offset`` to the end (``fstat`` and ``pread``: a cold
        append reads the ledger through the descriptor it appends with, R-STORE-3)."""

    def head(self, name: str, limit: int) -> bytes | None:
        """The file's first ``limit`` bytes (all of them when it is shorter), or ``None`` when it does not
        exist: ``open``, one ``pread``, ``close`` (no ``fstat``; a removal's probe, R-STORE-4)."""

    def open_append(self, name: str, *, create: bool) -> int | None:
        """Open for appending; create the file when ``create``. ``None`` when missing and not ``create``."""

    def write(self, fd: int, data: bytes) -> None:
        """Write all of ``data`` at the end of the open file."""

    def fsync(self, fd: int) -> None:
        """Make the open file's data and inode durable."""

    def close(self, fd: int) -> None:
        """Close a descriptor from ``open_append`` or ``create_file``."""

    def create_file(self, name: str) -> int | None:
        """Create an empty file exclusively; its descriptor, or ``None`` when it already existed."""

    def unlink(self, name: str) -> bool:
        """Remove a file; ``False`` when it did not exist."""

    def rename(self, old: str, new: str) -> None:
        """Rename file ``old`` to ``new`` in the directory, atomically replacing ``new`` (``rename(2)``);
        durable only after a directory sync."""

    def sync_dir(self) -> None:
        """fsync the directory: make its entries durable."""

    def syncfs(self) -> None:
        """Flush the whole file system holding the directory (``syncfs(2)``)."""

    def listdir(self) -> list[str]:
        """The names the directory holds when called, listed through a descriptor opened for the listing
        (``openat`` of the directory, ``getdents64`` until the end, ``close``; for ``check``, never on a
        hot path)."""

    def fstat(self, fd: int) -> FileStat:
        """The inode and size of an open file."""

    def size(self, fd: int) -> int:
        """The size of an open file in bytes (cheaper than ``fstat`` when the inode is not needed)."""

    def truncate(self, fd: int, size: int) -> None:
        """Cut an open file to ``size`` bytes (drops a torn last line before an append, R-STORE-6)."""

    def generation(self, stripe: int, slot: int) -> int:
        """Removal counter ``slot`` of lock stripe ``stripe`` (0 when never bumped); caller holds the lock."""

    def advance_generation(self, stripe: int, slot: int) -> None:
        """Add one to removal counter ``slot`` of stripe ``stripe``; caller holds the lock. Not durable."""

    def advance_generations(self, stripe: int, slots: Sequence[int]) -> None:
        """Add one to each of ``slots`` (a slot given twice gets two) of stripe ``stripe`` with one ``pread``
        and one ``pwrite`` of the span they lie in; caller holds the lock. Not durable."""

    def await_sync(self, register: SyncWait, ticket: int) -> None:
        """Block until ``register.ready(ticket)``: group commit's wait for a shared sync (R-STORE-9), or a
        combined removal's wait for its batch."""


class OsFileSystem:
    """``FileSystem`` over a real directory, with ``stripes`` lock files created once and never deleted.

    Args:
        directory: the lineage directory; created if missing.
        stripes: the number of lock stripes; every process sharing the directory must use the same number.
    """

    def __init__(self, directory: str | os.PathLike[str], *, stripes: int = 64) -> None:
        if stripes < 1:
            raise ValueError("stripes must be at least 1")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.stripes = stripes
        self._dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        self._thread_locks = [threading.Lock() for _ in range(stripes)]
        self._noatime = getattr(os, "O_NOATIME", 0)
        self._lock_fds: list[int] = []
        created = False
        for stripe in range(stripes):
            path = self._path(lock_file_name(stripe))
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                created = True
            except FileExistsError:
                fd = os.open(path, os.O_RDWR)
            self._lock_fds.append(fd)
            _reserve_counters(fd)
        if created:
            os.fsync(self._dir_fd)

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def lock(self, stripe: int) -> None:
        self._thread_locks[stripe].acquire()
        try:
            fcntl.flock(self._lock_fds[stripe], fcntl.LOCK_EX)
        except BaseException:
            self._thread_locks[stripe].release()
            raise

    def unlock(self, stripe: int) -> None:
        try:
            fcntl.flock(self._lock_fds[stripe], fcntl.LOCK_UN)
        finally:
            self._thread_locks[stripe].release()

    def stat(self, name: str) -> FileStat | None:
        try:
            st = os.stat(name, dir_fd=self._dir_fd)
        except FileNotFoundError:
            return None
        return FileStat(st.st_ino, st.st_size)

    def _open_read(self, name: str) -> int | None:
        # O_NOATIME: a read must not dirty the inode (relatime updates atime on the first read after a
        # write), which would make the next fsync or unlink of the file write it back; refused (EPERM)
        # for files we do not own, then read without it.
        try:
            return os.open(name, os.O_RDONLY | os.O_CLOEXEC | self._noatime, dir_fd=self._dir_fd)
        except FileNotFoundError:
            return None
        except PermissionError:
            if not self._noatime:
                raise
            self._noatime = 0
            return self._open_read(name)

    def read(self, name: str, offset: int) -> tuple[FileStat, bytes] | None:
        fd = self._open_read(name)
        if fd is None:
            return None
        try:
            return self.read_open(fd, offset)
        finally:
            os.close(fd)

    def read_open(self, fd: int, offset: int) -> tuple[FileStat, bytes]:
        st = os.fstat(fd)
        chunks: list[bytes] = []
        position = offset
        while position < st.st_size:
            chunk = os.pread(fd, st.st_size - position, position)
            if not chunk:
                break
            chunks.append(chunk)
            position += len(chunk)
        return FileStat(st.st_ino, st.st_size), b"".join(chunks)

    def head(self, name: str, limit: int) -> bytes | None:
        fd = self._open_read(name)
        if fd is None:
            return None
        try:
            return os.pread(fd, limit, 0)
        finally:
            os.close(fd)

    def open_append(self, name: str, *, create: bool) -> int | None:
        flags = _APPEND_CREATE if create else _APPEND
        try:
            return os.open(name, flags, 0o644, dir_fd=self._dir_fd)
        except FileNotFoundError:
            if create:
                raise
            return None

    def write(self, fd: int, data: bytes) -> None:
        written = os.write(fd, data)
        if written == len(data):
            return  # the usual case: one call wrote it all, no view to slice
        view = memoryview(data)[written:]
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def create_file(self, name: str) -> int | None:
        try:
            return os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644, dir_fd=self._dir_fd
            )
        except FileExistsError:
            return None

    def unlink(self, name: str) -> bool:
        try:
            os.unlink(name, dir_fd=self._dir_fd)
        except FileNotFoundError:
            return False
        return True

    def rename(self, old: str, new: str) -> None:
        os.rename(old, new, src_dir_fd=self._dir_fd, dst_dir_fd=self._dir_fd)

    def sync_dir(self) -> None:
        os.fsync(self._dir_fd)

    def syncfs(self) -> None:
        _syncfs(self._dir_fd)

    def listdir(self) -> list[str]:
        # A descriptor of its own per listing (openat of "." through the handle's, so the same directory
        # even if its path changed): a listing through a long-lived descriptor shows, on btrfs, only the
        # entries the directory held when that descriptor was opened or last rewound, and two threads
        # listing through one open file description would share its offset.
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self._dir_fd)
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def fstat(self, fd: int) -> FileStat:
        st = os.fstat(fd)
        return FileStat(st.st_ino, st.st_size)

    def size(self, fd: int) -> int:
        # The end of the file; an O_APPEND descriptor writes at the end wherever its offset is.
        return os.lseek(fd, 0, os.SEEK_END)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def generation(self, stripe: int, slot: int) -> int:
        raw = os.pread(self._lock_fds[stripe], 8, _slot_offset(slot))
        return int.from_bytes(raw, "little")  # a counter never written reads b"": 0

    def advance_generation(self, stripe: int, slot: int) -> None:
        value = (self.generation(stripe, slot) + 1) % (1 << 64)
        os.pwrite(self._lock_fds[stripe], value.to_bytes(8, "little"), _slot_offset(slot))

    def advance_generations(self, stripe: int, slots: Sequence[int]) -> None:
        if not slots:
            return
        offsets = [_slot_offset(slot) for slot in slots]
        low, high = min(offsets), max(offsets) + 8
        span = bytearray(os.pread(self._lock_fds[stripe], high - low, low))
        span.extend(bytes(high - low - len(span)))  # counters never written read short: 0
        for offset in offsets:
            at = offset - low
            value = (int.from_bytes(span[at : at + 8], "little") + 1) % (1 << 64)
            span[at : at + 8] = value.to_bytes(8, "little")
        # The other counters in the span are written back as read: every change to them holds this lock.
        os.pwrite(self._lock_fds[stripe], bytes(span), low)

    def await_sync(self, register: SyncWait, ticket: int) -> None:
        register.wait_for(ticket)

    def close_all(self) -> None:
        """Close the directory and lock descriptors. The lock files stay (R-STORE-2)."""
        for fd in [*self._lock_fds, self._dir_fd]:
            try:
                os.close(fd)
            except OSError as error:  # pragma: no cover - double close
                if error.errno != errno.EBADF:
                    raise
        self._lock_fds = []


#: The bytes of a lock file's removal counters: allocated when the file is opened (``_reserve_counters``).
_COUNTER_BYTES = GENERATION_SLOTS * 8


def _reserve_counters(fd: int) -> None:
    """Give lock file ``fd`` the blocks of its whole counter area now, so that bumping a removal counter
    (a ``pwrite`` inside it) never needs a new block: retire and delete must work on a full file system,
    which they are how one frees space (R-STORE-12).

    Under the stripe's ``flock`` (every counter write holds it, so no counter changes meanwhile): zeros are
    written from the file's end to the end of the area (never over a counter), and holes an older version
    left before its counters are filled with ``posix_fallocate``, which changes no byte. A file system that
    cannot allocate now (full, or no ``fallocate``) is left as it is: its removals may then fail with
    ``ENOSPC`` as before. Not guaranteed on copy-on-write file systems (btrfs, ZFS), where every write of
    a block needs a new one.
    """
    st = os.fstat(fd)
    if st.st_size >= _COUNTER_BYTES and st.st_blocks * 512 >= _COUNTER_BYTES:
        return  # the usual open: reserved when it was created
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        size = os.fstat(fd).st_size
        if size < _COUNTER_BYTES:
            os.pwrite(fd, bytes(_COUNTER_BYTES - size), size)
        if os.fstat(fd).st_blocks * 512 < _COUNTER_BYTES:
            os.posix_fallocate(fd, 0, _COUNTER_BYTES)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EOPNOTSUPP, errno.EINVAL):
            raise
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


#: Read-write, so that a cold append reads the ledger through the descriptor it appends with (``read_open``);
#: the read may dirty the inode's atime, which the append's own fsync writes back with the new size anyway.
_APPEND = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
_APPEND_CREATE = _APPEND | os.O_CREAT


def _slot_offset(slot: int) -> int:
    if not 0 <= slot < GENERATION_SLOTS:
        raise ValueError(f"generation slot {slot} outside 0..{GENERATION_SLOTS - 1}")
    return slot * 8


@functools.cache
def _libc() -> ctypes.CDLL:
    # Loaded once: CDLL(None) per call costs more than the syncfs it wraps on a quiet file system.
    return ctypes.CDLL(None, use_errno=True)


def _syncfs(fd: int) -> None:
    if _libc().syncfs(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
