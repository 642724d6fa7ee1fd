"""The one wrapper of the effects seam, for the study tools (never on the production path).

``HookedFileSystem`` forwards every call to another ``FileSystem`` (``impl.store.fs``), keeps the file name
behind each descriptor it saw opened, and hands each call (``FsCall``: the method, the file it names, its
arguments) to a ``before`` hook and then, with the result or the exception, to an ``after`` hook; a
subclass may instead override ``around`` to hold the whole call. The study tools build on it: the recording
seam of the crash explorer, the scheduler's turn token, the fault injector, and the tests' call counter.

Not guaranteed: anything about calls that do not go through the wrapper (the store makes none).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from capture_ledger.impl.store.fs import FileStat, FileSystem, SyncWait

__all__ = ["AfterHook", "BeforeHook", "FsCall", "HookedFileSystem"]


@dataclass(kw_only=True, frozen=True, slots=True)
class FsCall:
    """One call through a ``HookedFileSystem``, as its hooks see it.

    Attributes:
        method: the ``FileSystem`` method, e.g. ``"write"``.
        name: the file the call names (for a descriptor, the name it was opened under; ``"fd<n>"`` if it
            was not opened through this wrapper), or ``""`` when it names none (``lock``, ``sync_dir``).
        args: the arguments, a descriptor shown as its file name: ``lock (stripe,)``, ``stat (name,)``,
            ``read (name, offset)``, ``open_append (name, create)``, ``write (name, data)``,
            ``truncate (name, size)``, ``generation (stripe, slot)``, ``await_sync (register, ticket)``,
            and so on.
        fd: the descriptor a ``write``, ``fsync``, ``close``, ``fstat``, ``size`` or ``truncate`` acts on.
    """

    method: str
    name: str
    args: tuple[object, ...]
    fd: int | None = None


_R = TypeVar("_R")
#: Runs before a call reaches the wrapped file system; raising stops the call there.
BeforeHook = Callable[[FsCall], None]
#: Runs after the call with its result, or with the exception it raised (which is then re-raised).
AfterHook = Callable[[FsCall, object], None]


class HookedFileSystem:
    """A ``FileSystem`` that forwards every call to ``inner`` and shows each call to its hooks.

    Args:
        inner: the file system that does the work.
        before: called as ``before(call)`` before each call; may block (a scheduler parks there) or raise.
        after: called as ``after(call, outcome)`` after each call, ``outcome`` being its result or the
            exception it raised.

    Subclasses override ``around`` to hold a call whole (under a mutex, or to fail it halfway). Thread-safe
    as far as ``inner`` and the hooks are.
    """

    def __init__(
        self, inner: FileSystem, *, before: BeforeHook | None = None, after: AfterHook | None = None
    ) -> None:
        self.inner = inner
        self.stripes = inner.stripes
        self.before = before
        self.after = after
        self._names: dict[int, str] = {}

    def around(self, call: FsCall, proceed: Callable[[], _R]) -> _R:
        """Run one call: ``before``, then ``proceed`` (the call on ``inner``), then ``after``.

        Args:
            call: what is being called.
            proceed: makes the call on ``inner`` and returns its result.

        Returns:
            The call's result.
        """
        if self.before is not None:
            self.before(call)
        try:
            result = proceed()
        except BaseException as error:
            if self.after is not None:
                self.after(call, error)
            raise
        if self.after is not None:
            self.after(call, result)
        return result

    def name_of(self, fd: int) -> str:
        """The file name descriptor ``fd`` was opened under through this wrapper (else ``"fd<n>"``)."""
        return self._names.get(fd, f"fd{fd}")

    def _on_fd(self, method: str, fd: int, *rest: object) -> FsCall:
        name = self.name_of(fd)
        return FsCall(method=method, name=name, args=(name, *rest), fd=fd)

    def _opened(self, name: str, fd: int | None) -> int | None:
        if fd is not None:
            self._names[fd] = name
        return fd

    def lock(self, stripe: int) -> None:
        self.around(FsCall(method="lock", name="", args=(stripe,)), lambda: self.inner.lock(stripe))

    def unlock(self, stripe: int) -> None:
        self.around(FsCall(method="unlock", name="", args=(stripe,)), lambda: self.inner.unlock(stripe))

    def stat(self, name: str) -> FileStat | None:
        return self.around(FsCall(method="stat", name=name, args=(name,)), lambda: self.inner.stat(name))

    def read(self, name: str, offset: int) -> tuple[FileStat, bytes] | None:
        return self.around(
            FsCall(method="read", name=name, args=(name, offset)), lambda: self.inner.read(name, offset)
        )

    def read_open(self, fd: int, offset: int) -> tuple[FileStat, bytes]:
        return self.around(self._on_fd("read_open", fd, offset), lambda: self.inner.read_open(fd, offset))

    def head(self, name: str, limit: int) -> bytes | None:
        return self.around(
            FsCall(method="head", name=name, args=(name, limit)), lambda: self.inner.head(name, limit)
        )

    def open_append(self, name: str, *, create: bool) -> int | None:
        return self.around(
            FsCall(method="open_append", name=name, args=(name, create)),
            lambda: self._opened(name, self.inner.open_append(name, create=create)),
        )

    def write(self, fd: int, data: bytes) -> None:
        self.around(self._on_fd("write", fd, data), lambda: self.inner.write(fd, data))

    def fsync(self, fd: int) -> None:
        self.around(self._on_fd("fsync", fd), lambda: self.inner.fsync(fd))

    def close(self, fd: int) -> None:
        try:
            self.around(self._on_fd("close", fd), lambda: self.inner.close(fd))
        finally:
            self._names.pop(fd, None)

    def create_file(self, name: str) -> int | None:
        return self.around(
            FsCall(method="create_file", name=name, args=(name,)),
            lambda: self._opened(name, self.inner.create_file(name)),
        )

    def unlink(self, name: str) -> bool:
        return self.around(FsCall(method="unlink", name=name, args=(name,)), lambda: self.inner.unlink(name))

    def rename(self, old: str, new: str) -> None:
        self.around(FsCall(method="rename", name=old, args=(old, new)), lambda: self.inner.rename(old, new))

    def sync_dir(self) -> None:
        self.around(FsCall(method="sync_dir", name="", args=()), self.inner.sync_dir)

    def syncfs(self) -> None:
        self.around(FsCall(method="syncfs", name="", args=()), self.inner.syncfs)

    def listdir(self) -> list[str]:
        return self.around(FsCall(method="listdir", name="", args=()), self.inner.listdir)

    def fstat(self, fd: int) -> FileStat:
        return self.around(self._on_fd("fstat", fd), lambda: self.inner.fstat(fd))

    def size(self, fd: int) -> int:
        return self.around(self._on_fd("size", fd), lambda: self.inner.size(fd))

    def truncate(self, fd: int, size: int) -> None:
        self.around(self._on_fd("truncate", fd, size), lambda: self.inner.truncate(fd, size))

    def generation(self, stripe: int, slot: int) -> int:
        return self.around(
            FsCall(method="generation", name="", args=(stripe, slot)),
            lambda: self.inner.generation(stripe, slot),
        )

    def advance_generation(self, stripe: int, slot: int) -> None:
        self.around(
            FsCall(method="advance_generation", name="", args=(stripe, slot)),
            lambda: self.inner.advance_generation(stripe, slot),
        )

    def advance_generations(self, stripe: int, slots: Sequence[int]) -> None:
        self.around(
            FsCall(method="advance_generations", name="", args=(stripe, tuple(slots))),
            lambda: self.inner.advance_generations(stripe, slots),
        )

    def await_sync(self, register: SyncWait, ticket: int) -> None:
        self.around(
            FsCall(method="await_sync", name="", args=(register, ticket)),
            lambda: self.inner.await_sync(register, ticket),
        )
