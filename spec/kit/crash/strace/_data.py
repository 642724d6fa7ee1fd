"""What reading, writing, resizing, syncing and mapping files do to the simulated workspace (SPEC.md
§Crash; docs/crash-target.md §The trace): positions (``read``, ``readv``, ``lseek``), data (``write``,
``writev``, ``pwrite64``, ``pwritev``, ``pwritev2``, ``sendfile``, ``copy_file_range``), sizes
(``ftruncate``, ``truncate``, ``fallocate``), syncs (``fsync`` and ``fdatasync`` of a file or of a
directory, ``sync_file_range``, ``syncfs``, ``sync``), mappings (``mmap``, ``msync``, ``munmap``), and the
I/O nothing can follow (``splice``, ``io_uring_setup``, ``io_submit``), which is reported unsupported.

A write of the driver's mark (``MARKER_PREFIX`` to ``MARKER_PATH``) becomes a ``Marker``, not data.
``HANDLERS`` maps each call's name to its handler; ``calls.HANDLERS`` joins it with the other tables.

Not guaranteed: the stores through a writable shared mapping, and the bytes of a copy whose source the
simulation does not know, are not in the trace; both are reported unsupported rather than guessed.
"""

from __future__ import annotations

import re

from capture_ledger.spec.crash.durability import (
    Fsync,
    FsyncFailed,
    SyncDir,
    Syncfs,
    SyncRange,
    Truncate,
    Write,
)
from capture_ledger.spec.kit.crash.strace._descriptors import retval
from capture_ledger.spec.kit.crash.strace._simulation import Handler, Marker, Node, Simulation
from capture_ledger.spec.kit.crash.strace._syscalls import (
    FdArg,
    Syscall,
    fd_arg,
    int_arg,
    iov_data,
    path_arg,
    str_arg,
)

__all__ = ["FAILED_HANDLERS", "HANDLERS", "LOSSY_SYNC_ERRORS", "MARKER_PATH", "MARKER_PREFIX"]

#: The driver's marks: a write of bytes starting with this prefix to this path.
MARKER_PREFIX = b"CL-"
MARKER_PATH = "/dev/null"


# ------------------------------------------------------------------------------------ positions, data
def _sys_read(sim: Simulation, call: Syscall, a: list[str]) -> None:
    found = sim.description(call.tid, fd_arg(a[0]))
    if found is not None:
        found.pos += retval(call)


def _sys_lseek(sim: Simulation, call: Syscall, a: list[str]) -> None:
    found = sim.description(call.tid, fd_arg(a[0]))
    if found is not None:
        found.pos = retval(call)


def _sys_llseek(sim: Simulation, call: Syscall, a: list[str]) -> None:
    found = sim.description(call.tid, fd_arg(a[0]))
    position = re.search(r"\[(\d+)\]", a[3])
    if found is not None and position is not None:
        found.pos = int(position.group(1))


def _write(
    sim: Simulation, call: Syscall, arg: FdArg, data: bytes, offset: int | None, *, append: bool = False
) -> None:
    tracked = sim.task(call.tid).table.fds.get(arg.fd)
    if data.startswith(MARKER_PREFIX) and MARKER_PATH in (arg.path, tracked.path if tracked else None):
        kind, _, rest = data.decode("utf-8", "replace").partition(" ")
        sim.emit(Marker(kind[len(MARKER_PREFIX) :], rest))
        return
    found = sim.description(call.tid, arg)
    if found is None or found.node is None:
        return
    data = data[: retval(call)]  # a short write
    node = found.node
    appending = found.append or append  # pwrite on an O_APPEND descriptor appends too (Linux)
    at = len(node.data) if appending else found.pos if offset is None else offset
    if offset is None or found.append or append:
        found.pos = at + len(data)
    if len(node.data) < at:
        node.data.extend(bytes(at - len(node.data)))
    node.data[at : at + len(data)] = data
    sim.emit(Write(node.inode, data, at))


def _sys_write(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _write(sim, call, fd_arg(a[0]), str_arg(a[1]), None)


def _sys_writev(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _write(sim, call, fd_arg(a[0]), iov_data(a[1]), None)


def _sys_pwrite(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _write(sim, call, fd_arg(a[0]), str_arg(a[1]), int_arg(a[3]))


def _sys_pwritev(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _write(sim, call, fd_arg(a[0]), iov_data(a[1]), int_arg(a[3]))


def _sys_pwritev2(sim: Simulation, call: Syscall, a: list[str]) -> None:
    offset = int_arg(a[3])
    _write(
        sim, call, fd_arg(a[0]), iov_data(a[1]), None if offset == -1 else offset, append="RWF_APPEND" in a[4]
    )


def _copy(
    sim: Simulation, call: Syscall, out: str, out_offset: str | None, *, source: str, in_offset: str
) -> None:
    if retval(call) == 0:
        return
    target = sim.description(call.tid, fd_arg(out))
    if target is None or target.node is None:
        return
    origin = sim.description(call.tid, fd_arg(source))
    if origin is None or origin.node is None:
        sim.unsupported(f"{call.name} into {sim.rel(target.path)}: the source's bytes are unknown")
        return
    given = re.match(r"^\[(\d+)\]", in_offset)
    start = int(given.group(1)) if given else origin.pos
    if not given:
        origin.pos += retval(call)
    data = bytes(origin.node.data[start : start + retval(call)])
    at = re.match(r"^\[(\d+)\]", out_offset) if out_offset else None
    _write(sim, call, fd_arg(out), data.ljust(retval(call), b"\0"), int(at.group(1)) if at else None)


def _sys_sendfile(sim: Simulation, call: Syscall, a: list[str]) -> None:  # (out, in, [in_off], count)
    _copy(sim, call, a[0], None, source=a[1], in_offset=a[2])


def _sys_copy_file_range(
    sim: Simulation, call: Syscall, a: list[str]
) -> None:  # (in, [off], out, [off], n, f)
    _copy(sim, call, a[2], a[3], source=a[0], in_offset=a[1])


# ------------------------------------------------------------------------------------------- sizes
def _resize(sim: Simulation, node: Node, size: int) -> None:
    if size == len(node.data):
        return  # the size it has: nothing changes
    del node.data[size:]
    node.data.extend(bytes(size - len(node.data)))
    sim.emit(Truncate(node.inode, size))


def _sys_ftruncate(sim: Simulation, call: Syscall, a: list[str]) -> None:
    found = sim.description(call.tid, fd_arg(a[0]))
    if found is not None and found.node is not None:
        _resize(sim, found.node, int_arg(a[1]))


def _sys_truncate(sim: Simulation, call: Syscall, a: list[str]) -> None:
    path = sim.resolve(call.tid, None, path_arg(a[0]))
    if sim.inside(path) and path in sim.space:
        _resize(sim, sim.space[path], int_arg(a[1]))


def _sys_fallocate(sim: Simulation, call: Syscall, a: list[str]) -> None:
    found = sim.description(call.tid, fd_arg(a[0]))
    if found is None or found.node is None:
        return
    mode, end = a[1], int_arg(a[2]) + int_arg(a[3])
    if mode == "0":
        if end > len(found.node.data):
            _resize(sim, found.node, end)
    elif mode != "FALLOC_FL_KEEP_SIZE":
        sim.unsupported(f"fallocate mode {mode} on {sim.rel(found.path)}")


# ------------------------------------------------------------------------------------------- syncs
def _sync(sim: Simulation, call: Syscall, a: list[str], *, data_only: bool) -> None:
    found = sim.description(call.tid, fd_arg(a[0]))
    if found is None or found.node is None:
        return
    if found.node.kind == "dir":
        names = [p for p, n in sim.space.items() if n is found.node]
        sim.emit(SyncDir(sim.rel(names[0]) if names else sim.rel(found.path)))
    else:
        sim.emit(Fsync(found.node.inode, data_only))


def _sys_fsync(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _sync(sim, call, a, data_only=False)


def _sys_fdatasync(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _sync(sim, call, a, data_only=True)


#: The errors of a file sync after which its pages may be lost (a failed write-back); ``EBADF``,
#: ``EINVAL`` (a file that cannot be synced), ``EROFS`` and ``EINTR`` say nothing about the data.
LOSSY_SYNC_ERRORS = frozenset({"EIO", "ENOSPC", "EDQUOT"})


def _failed_sync(sim: Simulation, call: Syscall, a: list[str]) -> None:
    """A failed ``fsync``/``fdatasync`` of a workspace file: ``FsyncFailed`` (its pages may be lost); a
    failed directory sync records nothing (docs/crash-target.md §Faults)."""
    if call.errno not in LOSSY_SYNC_ERRORS:
        return
    found = sim.description(call.tid, fd_arg(a[0]))
    if found is not None and found.node is not None and found.node.kind == "file":
        sim.emit(FsyncFailed(found.node.inode, call.name == "fdatasync"))


def _sys_sync_file_range(sim: Simulation, call: Syscall, a: list[str]) -> None:
    found = sim.description(call.tid, fd_arg(a[0]))
    if found is not None and found.node is not None:
        sim.emit(SyncRange(found.node.inode))


def _sys_syncfs(sim: Simulation, call: Syscall, a: list[str]) -> None:
    arg = fd_arg(a[0])
    if arg.path is None or sim.inside(arg.path) or arg.fd in sim.task(call.tid).table.fds:
        sim.emit(Syncfs())


def _sys_sync(sim: Simulation, call: Syscall, a: list[str]) -> None:
    sim.emit(Syncfs())


# ---------------------------------------------------------------------------------------- mappings
def _sys_mmap(sim: Simulation, call: Syscall, a: list[str]) -> None:
    if len(a) < 6:
        return
    arg = fd_arg(a[4])
    if arg.fd < 0:
        return
    found = sim.description(call.tid, arg)
    if found is None or found.node is None:
        return
    writable = "MAP_SHARED" in a[3] and "PROT_WRITE" in a[2]
    sim.maps[retval(call)] = (int_arg(a[1]), found.node, writable)
    if writable and found.node.inode not in sim.volatile:
        sim.unsupported(
            f"a writable shared mapping of {sim.rel(found.path)}: its stores are not in the trace"
        )


def _sys_msync(sim: Simulation, call: Syscall, a: list[str]) -> None:
    address = int_arg(a[0])
    for base, (length, node, writable) in sim.maps.items():
        if base <= address < base + length and writable and node.inode not in sim.volatile:
            sim.unsupported(f"msync of a mapped file (inode {node.inode})")


def _sys_munmap(sim: Simulation, call: Syscall, a: list[str]) -> None:
    sim.maps.pop(int_arg(a[0]), None)


# ------------------------------------------------------------------------------------ invisible I/O
def _sys_splice(sim: Simulation, call: Syscall, a: list[str]) -> None:
    found = sim.description(call.tid, fd_arg(a[2]))
    if found is not None and found.node is not None:
        sim.unsupported(f"splice into {sim.rel(found.path)}: the bytes are not in the trace")


def _sys_io_uring(sim: Simulation, call: Syscall, a: list[str]) -> None:
    sim.unsupported("io_uring: its I/O is invisible to strace")


def _sys_io_submit(sim: Simulation, call: Syscall, a: list[str]) -> None:
    sim.unsupported("Linux AIO (io_submit): its data is not decoded")


#: The calls this module follows, by name.
HANDLERS: dict[str, Handler] = {
    "read": _sys_read,
    "readv": _sys_read,
    "lseek": _sys_lseek,
    "_llseek": _sys_llseek,
    "write": _sys_write,
    "writev": _sys_writev,
    "pwrite64": _sys_pwrite,
    "pwrite": _sys_pwrite,
    "pwritev": _sys_pwritev,
    "pwritev2": _sys_pwritev2,
    "sendfile": _sys_sendfile,
    "sendfile64": _sys_sendfile,
    "copy_file_range": _sys_copy_file_range,
    "ftruncate": _sys_ftruncate,
    "ftruncate64": _sys_ftruncate,
    "truncate": _sys_truncate,
    "truncate64": _sys_truncate,
    "fallocate": _sys_fallocate,
    "fsync": _sys_fsync,
    "fdatasync": _sys_fdatasync,
    "sync_file_range": _sys_sync_file_range,
    "sync_file_range2": _sys_sync_file_range,
    "syncfs": _sys_syncfs,
    "sync": _sys_sync,
    "mmap": _sys_mmap,
    "mmap2": _sys_mmap,
    "msync": _sys_msync,
    "munmap": _sys_munmap,
    "splice": _sys_splice,
    "io_uring_setup": _sys_io_uring,
    "io_submit": _sys_io_submit,
}

#: What a failed call does: only a failed file sync has an effect (its pages may be lost).
FAILED_HANDLERS: dict[str, Handler] = {"fsync": _failed_sync, "fdatasync": _failed_sync}
