"""Injected faults: a ``FileSystem`` whose calls can fail with ``OSError`` (R-CRASH-4).

``FaultyFileSystem`` wraps a ``FileSystem``. Before each call it asks its ``plan`` whether this call fails;
a planned fault raises ``OSError(EIO)`` or ``OSError(ENOSPC)`` at one of three moments:

- ``before``: the call does nothing and raises (a full disk refusing a create, a dead device);
- ``after``: the call takes effect and then raises (``fsync`` reporting a write-back error for data that
  may or may not be on disk; an unlink whose success the caller never learns);
- ``partial``: for ``write`` only, the first half of the bytes is written, then it raises (``ENOSPC``
  midway through an append). Other calls treat ``partial`` as ``before``.

``lock``, ``unlock``, ``close`` and the removal counters (``generation``, ``advance_generation``,
which live in the lock files) never fail here: their failure modes are not I/O errors the store could
report meaningfully (a lost lock or a leaked descriptor), and a store that cannot release a lock wedges
the test rather than telling us anything about durability.

Not guaranteed: the kernel's exact behaviour after an ``fsync`` error (on Linux the dirty pages may be
dropped and the error reported once); this module models the caller-visible part only.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass

from capture_ledger.impl.store.fs import FileStat, FileSystem

__all__ = ["FAULTABLE_CALLS", "Fault", "FaultyFileSystem", "InjectedFaultError", "Plan", "describe"]

#: The seam calls a plan may fail.
FAULTABLE_CALLS = (
    "stat",
    "read",
    "open_append",
    "write",
    "fsync",
    "create_file",
    "unlink",
    "sync_dir",
    "syncfs",
    "listdir",
    "fstat",
    "truncate",
)


@dataclass(frozen=True, slots=True)
class Fault:
    """One planned failure: ``code`` is ``errno.EIO`` or ``errno.ENOSPC``; ``when`` says at which moment."""

    code: int = errno.EIO
    when: str = "before"


class InjectedFaultError(OSError):
    """The ``OSError`` a planned fault raises; ``call`` names the seam call that failed."""

    def __init__(self, code: int, call: str, name: str) -> None:
        super().__init__(code, f"injected {errno.errorcode.get(code, code)} in {call}({name!r})")
        self.call = call
        self.name = name

    def __reduce__(self) -> tuple[type[InjectedFaultError], tuple[int, str, str]]:
        return (type(self), (self.errno or 0, self.call, self.name))


#: ``plan(call, name)``: the fault for this call, or ``None`` to let it through.
Plan = Callable[[str, str], Fault | None]


class FaultyFileSystem:
    """A ``FileSystem`` that forwards to ``inner`` unless ``plan`` says the call fails.

    Args:
        inner: the file system that does the work.
        plan: consulted before every faultable call; ``None`` (the default plan) never fails. The plan may
            be replaced at any time through the ``plan`` attribute.

    ``injected`` counts the faults raised so far.
    """

    def __init__(self, inner: FileSystem, *, plan: Plan | None = None) -> None:
        self.inner = inner
        self.stripes = inner.stripes
        self.plan: Plan | None = plan
        self.injected = 0

    def _fault(self, call: str, name: str = "") -> Fault | None:
        if self.plan is None:
            return None
        return self.plan(call, name)

    def _raise(self, fault: Fault, call: str, name: str) -> None:
        self.injected += 1
        raise InjectedFaultError(fault.code, call, name)

    def lock(self, stripe: int) -> None:
        self.inner.lock(stripe)

    def unlock(self, stripe: int) -> None:
        self.inner.unlock(stripe)

    def close(self, fd: int) -> None:
        self.inner.close(fd)

    def stat(self, name: str) -> FileStat | None:
        fault = self._fault("stat", name)
        if fault is not None and fault.when != "after":
            self._raise(fault, "stat", name)
        result = self.inner.stat(name)
        if fault is not None:
            self._raise(fault, "stat", name)
        return result

    def read(self, name: str, offset: int) -> tuple[FileStat, bytes] | None:
        fault = self._fault("read", name)
        if fault is not None:
            self._raise(fault, "read", name)
        return self.inner.read(name, offset)

    def open_append(self, name: str, *, create: bool) -> int | None:
        fault = self._fault("open_append", name)
        if fault is not None and fault.when != "after":
            self._raise(fault, "open_append", name)
        fd = self.inner.open_append(name, create=create)
        if fault is not None:
            if fd is not None:
                self.inner.close(fd)  # the caller never learns the descriptor: do not leak it
            self._raise(fault, "open_append", name)
        return fd

    def write(self, fd: int, data: bytes) -> None:
        fault = self._fault("write", str(fd))
        if fault is not None and fault.when == "partial" and len(data) > 1:
            self.inner.write(fd, data[: len(data) // 2])
            self._raise(fault, "write", str(fd))
        if fault is not None and fault.when != "after":
            self._raise(fault, "write", str(fd))
        self.inner.write(fd, data)
        if fault is not None:
            self._raise(fault, "write", str(fd))

    def fsync(self, fd: int) -> None:
        self._simple("fsync", str(fd), lambda: self.inner.fsync(fd))

    def create_file(self, name: str) -> int | None:
        fault = self._fault("create_file", name)
        if fault is not None and fault.when != "after":
            self._raise(fault, "create_file", name)
        fd = self.inner.create_file(name)
        if fault is not None:
            if fd is not None:
                self.inner.close(fd)
            self._raise(fault, "create_file", name)
        return fd

    def unlink(self, name: str) -> bool:
        fault = self._fault("unlink", name)
        if fault is not None and fault.when != "after":
            self._raise(fault, "unlink", name)
        removed = self.inner.unlink(name)
        if fault is not None:
            self._raise(fault, "unlink", name)
        return removed

    def sync_dir(self) -> None:
        self._simple("sync_dir", "", self.inner.sync_dir)

    def syncfs(self) -> None:
        self._simple("syncfs", "", self.inner.syncfs)

    def listdir(self) -> list[str]:
        fault = self._fault("listdir")
        if fault is not None:
            self._raise(fault, "listdir", "")
        return self.inner.listdir()

    def fstat(self, fd: int) -> FileStat:
        fault = self._fault("fstat", str(fd))
        if fault is not None:
            self._raise(fault, "fstat", str(fd))
        return self.inner.fstat(fd)

    def truncate(self, fd: int, size: int) -> None:
        self._simple("truncate", str(fd), lambda: self.inner.truncate(fd, size))

    def generation(self, stripe: int, slot: int) -> int:
        return self.inner.generation(stripe, slot)

    def advance_generation(self, stripe: int, slot: int) -> None:
        self.inner.advance_generation(stripe, slot)

    def _simple(self, call: str, name: str, run: Callable[[], None]) -> None:
        fault = self._fault(call, name)
        if fault is not None and fault.when != "after":
            self._raise(fault, call, name)
        run()
        if fault is not None:
            self._raise(fault, call, name)


def describe(fault: Fault) -> str:
    """``EIO before`` and the like, for messages."""
    return f"{errno.errorcode.get(fault.code, str(fault.code))} {fault.when} ({os.strerror(fault.code)})"
