"""What each traced system call does to the simulated workspace (SPEC.md §Crash; docs/crash-target.md §The
trace): ``HANDLERS`` maps a call's name to a function of the simulation, the call and its split arguments.

Opening (``open``, ``openat``, ``openat2``, ``creat``: a new name is a ``Create``, a directory opened,
``O_TRUNC`` of a non-empty file a ``Truncate``, ``O_TMPFILE`` an anonymous file), descriptors (``close``,
``close_range``, ``dup*``, ``fcntl`` ``F_DUPFD``/``F_SETFL``/``F_SETFD``, ``execve``), positions (``read``,
``readv``, ``lseek``), data (``write``, ``writev``, ``pwrite64``, ``pwritev``, ``pwritev2``, ``sendfile``,
``copy_file_range``), sizes (``ftruncate``, ``truncate``, ``fallocate``), syncs (``fsync`` and
``fdatasync`` of a file or of a directory, ``sync_file_range``, ``syncfs``, ``sync``), mappings (``mmap``,
``msync``, ``munmap``), the namespace (``rename*``, ``link*``, ``unlink*``, ``mkdir*``, ``rmdir``,
``mknod*``, ``symlink*``), and what nothing can follow (``splice``, ``io_uring_setup``, ``io_submit``). The
module docstring of ``parser`` says what becomes ``Unsupported``.

The handlers live in three private modules, by what a call acts on: ``_descriptors`` (opening, descriptors,
the working directory), ``_data`` (positions, data, sizes, syncs, mappings, and what nothing can follow)
and ``_namespace`` (names). Each keeps a table of its own; this module joins them.

``FAILED_HANDLERS`` are the failed calls that still have an effect: a file ``fsync``/``fdatasync`` that
failed with ``EIO``, ``ENOSPC`` or ``EDQUOT`` is ``FsyncFailed`` (its pages may be lost).

Not guaranteed: a call missing here changes nothing in the simulation (``tracing.TRACE_SET`` lists the
calls strace is asked for).
"""

from __future__ import annotations

from capture_ledger.spec.kit.crash.strace import _data, _descriptors, _namespace
from capture_ledger.spec.kit.crash.strace._data import FAILED_HANDLERS, MARKER_PATH, MARKER_PREFIX
from capture_ledger.spec.kit.crash.strace._descriptors import VOLATILE
from capture_ledger.spec.kit.crash.strace._simulation import Handler

__all__ = ["FAILED_HANDLERS", "HANDLERS", "MARKER_PATH", "MARKER_PREFIX", "VOLATILE"]

#: Every call the simulation follows, by name: the descriptor calls, the data calls and the namespace calls.
HANDLERS: dict[str, Handler] = {**_descriptors.HANDLERS, **_data.HANDLERS, **_namespace.HANDLERS}
