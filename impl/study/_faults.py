"""Injected faults: a ``FileSystem`` whose calls can fail with ``OSError`` (R-CRASH-4).

``FaultyFileSystem`` wraps a ``FileSystem``. Before each call it asks its ``plan`` whether this call fails;
a planned fault raises ``OSError(EIO)`` or ``OSError(ENOSPC)`` at one of three moments:

- ``before``: the call does nothing and raises (a full disk refusing a create, a dead device);
- ``after``: the call takes effect and then raises (``fsync`` reporting a write-back error for data that
  may or may not be on disk; an unlink whose success the caller never learns);
- ``partial``: for ``write`` only, the first half of the bytes is written, then it raises (``ENOSPC``
  midway through an append). Other calls treat ``partial`` as ``before``.

For calls without an effect (``stat``, ``read``, ``listdir``, ``fstat``, ``size``) ``after`` is the same as
``before`` to the caller. An ``after`` fault of ``open_append`` or ``create_file`` closes the descriptor
the caller never learns. ``FaultyFileSystem`` is a ``HookedFileSystem`` (``store.fs``) whose ``around``
consults the plan.

Every call of the seam may fail (``FAULTABLE_CALLS`` is every ``FileSystem`` method; a test pins that),
because every one of them is a system call that can: ``flock`` (``ENOLCK``, ``EINTR``), the removal
counters' ``pread``/``pwrite`` in the lock files (``EIO``; ``ENOSPC`` when a block must be allocated),
``close`` (``EIO`` reporting a write-back error). Where a moment would misstate the kernel, it is mapped
to the one that does not:

- ``lock``, ``generation`` and ``await_sync``: always ``before`` (a lock taken and then reported as not
  taken would wedge the store, and the kernel never does that; a read has no effect to take);
- ``unlock`` and ``close``: always ``after`` (Linux releases a ``flock`` and frees a descriptor even when
  the call reports an error, so the effect happens and the caller learns of a failure).

Not guaranteed: the kernel's exact behaviour after an ``fsync`` error (on Linux the dirty pages may be
dropped and the error reported once); this module models the caller-visible part only.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import NoReturn, TypeVar

from capture_ledger.impl.store.fs import FileSystem
from capture_ledger.impl.study._hooked import FsCall, HookedFileSystem
from capture_ledger.spec.kit.crash import Fault

__all__ = ["FAULTABLE_CALLS", "Fault", "FaultyFileSystem", "InjectedFaultError", "Plan", "describe"]

#: The seam calls a plan may fail.
FAULTABLE_CALLS = (
    "lock",
    "unlock",
    "stat",
    "read",
    "read_open",
    "head",
    "open_append",
    "write",
    "fsync",
    "close",
    "create_file",
    "unlink",
    "rename",
    "sync_dir",
    "syncfs",
    "listdir",
    "fstat",
    "size",
    "truncate",
    "generation",
    "advance_generation",
    "advance_generations",
    "await_sync",
)
#: Calls whose planned fault always strikes before the call, and those for which it always strikes after.
_ALWAYS_BEFORE = frozenset({"lock", "generation", "await_sync"})
_ALWAYS_AFTER = frozenset({"unlock", "close"})


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
_R = TypeVar("_R")


class FaultyFileSystem(HookedFileSystem):
    """A ``FileSystem`` that forwards to ``inner`` unless ``plan`` says the call fails.

    Args:
        inner: the file system that does the work.
        plan: consulted as ``plan(call, name)`` before every call of ``FAULTABLE_CALLS`` (``name``: the file
            the call names, a descriptor's file name, or ``""``); ``None`` (the default) never fails. The
            plan may be replaced at any time through the ``plan`` attribute.

    ``injected`` counts the faults raised so far.
    """

    def __init__(self, inner: FileSystem, *, plan: Plan | None = None) -> None:
        super().__init__(inner)
        self.plan: Plan | None = plan
        self.injected = 0

    def around(self, call: FsCall, proceed: Callable[[], _R]) -> _R:
        """Run ``call``, or fail it as planned: before it, halfway through a write, or after it."""
        plan = self.plan
        fault = plan(call.method, call.name) if plan is not None and call.method in FAULTABLE_CALLS else None
        if fault is None:
            return proceed()
        if call.method in _ALWAYS_BEFORE:
            fault = Fault(fault.code, "before")
        elif call.method in _ALWAYS_AFTER:
            fault = Fault(fault.code, "after")
        if fault.when == "partial" and call.method == "write" and call.fd is not None:
            data = call.args[1]
            if isinstance(data, bytes) and len(data) > 1:
                self.inner.write(call.fd, data[: len(data) // 2])
        if fault.when != "after":
            self._raise(fault, call)
        result = proceed()
        if call.method in ("open_append", "create_file") and isinstance(result, int):
            self.close(result)  # the caller never learns the descriptor: do not leak it
        self._raise(fault, call)

    def _raise(self, fault: Fault, call: FsCall) -> NoReturn:
        self.injected += 1
        raise InjectedFaultError(fault.code, call.method, call.name)


def describe(fault: Fault) -> str:
    """``EIO before`` and the like, for messages."""
    return f"{errno.errorcode.get(fault.code, str(fault.code))} {fault.when} ({os.strerror(fault.code)})"
