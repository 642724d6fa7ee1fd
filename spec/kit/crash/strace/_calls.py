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

Not guaranteed: a call missing here changes nothing in the simulation (``tracing.TRACE_SET`` lists the
calls strace is asked for).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from capture_ledger.spec.crash.durability import (
    Create,
    Fsync,
    Link,
    Mkdir,
    Rename,
    Rmdir,
    SyncDir,
    Syncfs,
    SyncRange,
    Truncate,
    Unlink,
    Write,
)
from capture_ledger.spec.kit.crash.strace._simulation import (
    Description,
    Handler,
    Marker,
    Node,
    Simulation,
    Table,
)
from capture_ledger.spec.kit.crash.strace._syscalls import (
    FdArg,
    Syscall,
    fd_arg,
    int_arg,
    iov_data,
    path_arg,
    str_arg,
)

__all__ = ["HANDLERS", "MARKER_PATH", "MARKER_PREFIX", "VOLATILE"]

#: The driver's marks: a write of bytes starting with this prefix to this path.
MARKER_PREFIX = b"CL-"
MARKER_PATH = "/dev/null"
#: Name suffixes of volatile files (SQLite's shared-memory index, rebuilt when the database is opened).
VOLATILE = ("-shm",)

HANDLERS: dict[str, Handler] = {}


def _handles(*names: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for name in names:
            HANDLERS[name] = handler
        return handler

    return register


def _retval(call: Syscall) -> int:
    assert call.retval is not None  # only successful calls reach the handlers
    return call.retval


# ----------------------------------------------------------------------------------------- opening
def _open(sim: Simulation, call: Syscall, dirfd: FdArg | None, path: str, flags: str) -> None:
    table = sim.task(call.tid).table
    fd = _retval(call)
    full = call.ret_path if call.ret_path and not call.ret_deleted else sim.resolve(call.tid, dirfd, path)
    append = "O_APPEND" in flags
    if "O_TMPFILE" in flags:
        table.fds[fd] = Description(full, sim.new_node("file"), append)  # anonymous until linked
    elif not sim.inside(full):
        table.fds[fd] = Description(full, None, append)
    else:
        node = sim.space.get(full)
        if node is None:
            if "O_CREAT" not in flags:
                sim.warn(f"{full} opened without O_CREAT but not in the snapshot; adopted")
            node = sim.space[full] = sim.new_node("dir" if "O_DIRECTORY" in flags else "file")
            if node.kind == "file":
                if full.endswith(VOLATILE):
                    sim.volatile.add(node.inode)
                sim.emit(Create(sim.rel(full), node.inode))
        elif (
            "O_TRUNC" in flags
            and node.kind == "file"
            and node.data
            and ("O_WRONLY" in flags or "O_RDWR" in flags)
        ):
            node.data.clear()
            sim.emit(Truncate(node.inode, 0))
        table.fds[fd] = Description(full, node, append)
    if "O_CLOEXEC" in flags:
        table.cloexec.add(fd)
    else:
        table.cloexec.discard(fd)


@_handles("open")
def _sys_open(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _open(sim, call, None, path_arg(a[0]), a[1])


@_handles("creat")
def _sys_creat(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _open(sim, call, None, path_arg(a[0]), "O_CREAT|O_WRONLY|O_TRUNC")


@_handles("openat")
def _sys_openat(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _open(sim, call, fd_arg(a[0]), path_arg(a[1]), a[2])


@_handles("openat2")
def _sys_openat2(sim: Simulation, call: Syscall, a: list[str]) -> None:
    flags = re.search(r"flags=([A-Z0-9_|]+)", a[2])
    _open(sim, call, fd_arg(a[0]), path_arg(a[1]), flags.group(1) if flags else "")


# ------------------------------------------------------------------------------------- descriptors
@_handles("close")
def _sys_close(sim: Simulation, call: Syscall, a: list[str]) -> None:
    table = sim.task(call.tid).table
    fd = fd_arg(a[0]).fd
    table.fds.pop(fd, None)
    table.cloexec.discard(fd)


@_handles("close_range")
def _sys_close_range(sim: Simulation, call: Syscall, a: list[str]) -> None:
    low, high = int_arg(a[0]), int_arg(a[1])
    task = sim.task(call.tid)
    if "CLOSE_RANGE_UNSHARE" in a[2]:
        task.table = Table(dict(task.table.fds), set(task.table.cloexec))
    for fd in [fd for fd in task.table.fds if low <= fd <= high]:
        if "CLOSE_RANGE_CLOEXEC" in a[2]:
            task.table.cloexec.add(fd)
        else:
            task.table.fds.pop(fd)
            task.table.cloexec.discard(fd)


def _dup(sim: Simulation, call: Syscall, old: FdArg, cloexec: bool) -> None:
    table = sim.task(call.tid).table
    found = sim.description(call.tid, old) or Description(old.path or "?", None, append=False)
    new = _retval(call)
    table.fds[new] = found
    if cloexec:
        table.cloexec.add(new)
    else:
        table.cloexec.discard(new)


@_handles("dup", "dup2")
def _sys_dup(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _dup(sim, call, fd_arg(a[0]), False)


@_handles("dup3")
def _sys_dup3(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _dup(sim, call, fd_arg(a[0]), "O_CLOEXEC" in a[2])


@_handles("fcntl", "fcntl64")
def _sys_fcntl(sim: Simulation, call: Syscall, a: list[str]) -> None:
    command = a[1]
    if command in ("F_DUPFD", "F_DUPFD_CLOEXEC"):
        _dup(sim, call, fd_arg(a[0]), command == "F_DUPFD_CLOEXEC")
    elif command == "F_SETFL":
        found = sim.description(call.tid, fd_arg(a[0]))
        if found is not None:
            found.append = "O_APPEND" in a[2]
    elif command == "F_SETFD":
        fd = fd_arg(a[0]).fd
        table = sim.task(call.tid).table
        if "FD_CLOEXEC" in a[2]:
            table.cloexec.add(fd)
        else:
            table.cloexec.discard(fd)


@_handles("execve", "execveat")
def _sys_execve(sim: Simulation, call: Syscall, a: list[str]) -> None:
    table = sim.task(call.tid).table
    for fd in list(table.cloexec):
        table.fds.pop(fd, None)
    table.cloexec.clear()


@_handles("chdir")
def _sys_chdir(sim: Simulation, call: Syscall, a: list[str]) -> None:
    sim.task(call.tid).cwd.path = sim.resolve(call.tid, None, path_arg(a[0]))


@_handles("fchdir")
def _sys_fchdir(sim: Simulation, call: Syscall, a: list[str]) -> None:
    arg = fd_arg(a[0])
    known = sim.task(call.tid).table.fds.get(arg.fd)
    task = sim.task(call.tid)
    task.cwd.path = arg.path or (known.path if known else task.cwd.path)


# ------------------------------------------------------------------------------------ positions, data
@_handles("read", "readv")
def _sys_read(sim: Simulation, call: Syscall, a: list[str]) -> None:
    found = sim.description(call.tid, fd_arg(a[0]))
    if found is not None:
        found.pos += _retval(call)


@_handles("lseek")
def _sys_lseek(sim: Simulation, call: Syscall, a: list[str]) -> None:
    found = sim.description(call.tid, fd_arg(a[0]))
    if found is not None:
        found.pos = _retval(call)


@_handles("_llseek")
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
    data = data[: _retval(call)]  # a short write
    node = found.node
    appending = found.append or append  # pwrite on an O_APPEND descriptor appends too (Linux)
    at = len(node.data) if appending else found.pos if offset is None else offset
    if offset is None or found.append or append:
        found.pos = at + len(data)
    if len(node.data) < at:
        node.data.extend(bytes(at - len(node.data)))
    node.data[at : at + len(data)] = data
    sim.emit(Write(node.inode, data, at))


@_handles("write")
def _sys_write(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _write(sim, call, fd_arg(a[0]), str_arg(a[1]), None)


@_handles("writev")
def _sys_writev(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _write(sim, call, fd_arg(a[0]), iov_data(a[1]), None)


@_handles("pwrite64", "pwrite")
def _sys_pwrite(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _write(sim, call, fd_arg(a[0]), str_arg(a[1]), int_arg(a[3]))


@_handles("pwritev")
def _sys_pwritev(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _write(sim, call, fd_arg(a[0]), iov_data(a[1]), int_arg(a[3]))


@_handles("pwritev2")
def _sys_pwritev2(sim: Simulation, call: Syscall, a: list[str]) -> None:
    offset = int_arg(a[3])
    _write(
        sim, call, fd_arg(a[0]), iov_data(a[1]), None if offset == -1 else offset, append="RWF_APPEND" in a[4]
    )


def _copy(
    sim: Simulation, call: Syscall, out: str, out_offset: str | None, *, source: str, in_offset: str
) -> None:
    if _retval(call) == 0:
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
        origin.pos += _retval(call)
    data = bytes(origin.node.data[start : start + _retval(call)])
    at = re.match(r"^\[(\d+)\]", out_offset) if out_offset else None
    _write(sim, call, fd_arg(out), data.ljust(_retval(call), b"\0"), int(at.group(1)) if at else None)


@_handles("sendfile", "sendfile64")
def _sys_sendfile(sim: Simulation, call: Syscall, a: list[str]) -> None:  # (out, in, [in_off], count)
    _copy(sim, call, a[0], None, source=a[1], in_offset=a[2])


@_handles("copy_file_range")
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


@_handles("ftruncate", "ftruncate64")
def _sys_ftruncate(sim: Simulation, call: Syscall, a: list[str]) -> None:
    found = sim.description(call.tid, fd_arg(a[0]))
    if found is not None and found.node is not None:
        _resize(sim, found.node, int_arg(a[1]))


@_handles("truncate", "truncate64")
def _sys_truncate(sim: Simulation, call: Syscall, a: list[str]) -> None:
    path = sim.resolve(call.tid, None, path_arg(a[0]))
    if sim.inside(path) and path in sim.space:
        _resize(sim, sim.space[path], int_arg(a[1]))


@_handles("fallocate")
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


@_handles("fsync")
def _sys_fsync(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _sync(sim, call, a, data_only=False)


@_handles("fdatasync")
def _sys_fdatasync(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _sync(sim, call, a, data_only=True)


@_handles("sync_file_range", "sync_file_range2")
def _sys_sync_file_range(sim: Simulation, call: Syscall, a: list[str]) -> None:
    found = sim.description(call.tid, fd_arg(a[0]))
    if found is not None and found.node is not None:
        sim.emit(SyncRange(found.node.inode))


@_handles("syncfs")
def _sys_syncfs(sim: Simulation, call: Syscall, a: list[str]) -> None:
    arg = fd_arg(a[0])
    if arg.path is None or sim.inside(arg.path) or arg.fd in sim.task(call.tid).table.fds:
        sim.emit(Syncfs())


@_handles("sync")
def _sys_sync(sim: Simulation, call: Syscall, a: list[str]) -> None:
    sim.emit(Syncfs())


# ---------------------------------------------------------------------------------------- mappings
@_handles("mmap", "mmap2")
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
    sim.maps[_retval(call)] = (int_arg(a[1]), found.node, writable)
    if writable and found.node.inode not in sim.volatile:
        sim.unsupported(
            f"a writable shared mapping of {sim.rel(found.path)}: its stores are not in the trace"
        )


@_handles("msync")
def _sys_msync(sim: Simulation, call: Syscall, a: list[str]) -> None:
    address = int_arg(a[0])
    for base, (length, node, writable) in sim.maps.items():
        if base <= address < base + length and writable and node.inode not in sim.volatile:
            sim.unsupported(f"msync of a mapped file (inode {node.inode})")


@_handles("munmap")
def _sys_munmap(sim: Simulation, call: Syscall, a: list[str]) -> None:
    sim.maps.pop(int_arg(a[0]), None)


# --------------------------------------------------------------------------------------- namespace
def _drop(sim: Simulation, path: str) -> None:
    for name in [n for n in sim.space if n == path or n.startswith(path + "/")]:
        del sim.space[name]


def _rename(sim: Simulation, old: str, new: str, flags: str = "") -> None:
    inside_old, inside_new = sim.inside(old), sim.inside(new)
    if not inside_old and not inside_new:
        return
    if not inside_new:  # moved out of the workspace: gone from it
        node = sim.space.get(old)
        if node is not None:
            _drop(sim, old)
            sim.emit(
                Rmdir(sim.rel(old), node.inode) if node.kind == "dir" else Unlink(sim.rel(old), node.inode)
            )
        return
    if not inside_old:
        sim.unsupported(f"a rename from outside the workspace into {sim.rel(new)}")
        sim.space[new] = sim.new_node("file")
        return
    node = sim.space.get(old)
    if node is None:
        sim.warn(f"rename of {old}, which the simulation does not know")
        node = sim.space[old] = sim.new_node("file")
    if "RENAME_EXCHANGE" in flags or node.kind == "dir":
        what = "exchange" if "RENAME_EXCHANGE" in flags else "a directory"
        sim.unsupported(f"rename {sim.rel(old)} -> {sim.rel(new)} ({what})")
        moved = {
            n[len(old) :]: sim.space.pop(n) for n in list(sim.space) if n == old or n.startswith(old + "/")
        }
        if "RENAME_EXCHANGE" in flags:
            for n in [n for n in list(sim.space) if n == new or n.startswith(new + "/")]:
                sim.space[old + n[len(new) :]] = sim.space.pop(n)
        sim.space.update({new + rest: moved_node for rest, moved_node in moved.items()})
        return
    replaced = sim.space.get(new)
    if replaced is node:  # onto a hard link of itself: nothing happens
        return
    sim.space.pop(old)
    sim.space[new] = node
    sim.emit(Rename(sim.rel(old), sim.rel(new), node.inode, replaced.inode if replaced else None))


@_handles("rename")
def _sys_rename(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _rename(sim, sim.resolve(call.tid, None, path_arg(a[0])), sim.resolve(call.tid, None, path_arg(a[1])))


@_handles("renameat", "renameat2")
def _sys_renameat(sim: Simulation, call: Syscall, a: list[str]) -> None:
    old = sim.resolve(call.tid, fd_arg(a[0]), path_arg(a[1]))
    _rename(sim, old, sim.resolve(call.tid, fd_arg(a[2]), path_arg(a[3])), a[4] if len(a) > 4 else "")


def _link(sim: Simulation, call: Syscall, old_fd: FdArg | None, old: str, new: str, *, flags: str) -> None:
    if not sim.inside(new):
        return
    node: Node | None = None
    from_fd = re.match(r"^/proc/(?:self|\d+)/fd/(\d+)$", old)
    if from_fd and "AT_SYMLINK_FOLLOW" in flags:
        known = sim.task(call.tid).table.fds.get(int(from_fd.group(1)))
        node = known.node if known else None
    elif old == "" and "AT_EMPTY_PATH" in flags and old_fd is not None:
        known = sim.description(call.tid, old_fd)
        node = known.node if known else None
    else:
        node = sim.space.get(sim.resolve(call.tid, old_fd, old))
    if node is None:
        sim.unsupported(f"a link of a file from outside the workspace as {sim.rel(new)}")
        return
    sim.space[new] = node
    sim.emit(Link(sim.rel(new), node.inode))


@_handles("link")
def _sys_link(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _link(sim, call, None, path_arg(a[0]), sim.resolve(call.tid, None, path_arg(a[1])), flags="")


@_handles("linkat")
def _sys_linkat(sim: Simulation, call: Syscall, a: list[str]) -> None:
    new = sim.resolve(call.tid, fd_arg(a[2]), path_arg(a[3]))
    _link(sim, call, fd_arg(a[0]), path_arg(a[1]), new, flags=a[4])


def _unlink(sim: Simulation, path: str, *, directory: bool) -> None:
    if not sim.inside(path):
        return
    node = sim.space.pop(path, None)
    if node is None:
        sim.warn(f"unlink of {path}, which the simulation does not know")
        return
    sim.emit(Rmdir(sim.rel(path), node.inode) if directory else Unlink(sim.rel(path), node.inode))


@_handles("unlink")
def _sys_unlink(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _unlink(sim, sim.resolve(call.tid, None, path_arg(a[0])), directory=False)


@_handles("rmdir")
def _sys_rmdir(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _unlink(sim, sim.resolve(call.tid, None, path_arg(a[0])), directory=True)


@_handles("unlinkat")
def _sys_unlinkat(sim: Simulation, call: Syscall, a: list[str]) -> None:
    path = sim.resolve(call.tid, fd_arg(a[0]), path_arg(a[1]))
    _unlink(sim, path, directory="AT_REMOVEDIR" in a[2])


def _mkdir(sim: Simulation, path: str) -> None:
    if sim.inside(path):
        node = sim.space[path] = sim.new_node("dir")
        sim.emit(Mkdir(sim.rel(path), node.inode))


@_handles("mkdir")
def _sys_mkdir(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _mkdir(sim, sim.resolve(call.tid, None, path_arg(a[0])))


@_handles("mkdirat")
def _sys_mkdirat(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _mkdir(sim, sim.resolve(call.tid, fd_arg(a[0]), path_arg(a[1])))


def _mknod(sim: Simulation, path: str, mode: str) -> None:
    if not sim.inside(path):
        return
    if "S_IFREG" in mode or not mode.startswith("S_IF"):
        node = sim.space[path] = sim.new_node("file")
        sim.emit(Create(sim.rel(path), node.inode))
    else:
        sim.unsupported(f"mknod {mode} {sim.rel(path)}")


@_handles("mknod")
def _sys_mknod(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _mknod(sim, sim.resolve(call.tid, None, path_arg(a[0])), a[1])


@_handles("mknodat")
def _sys_mknodat(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _mknod(sim, sim.resolve(call.tid, fd_arg(a[0]), path_arg(a[1])), a[2])


@_handles("symlink", "symlinkat")
def _sys_symlink(sim: Simulation, call: Syscall, a: list[str]) -> None:
    path = sim.resolve(call.tid, fd_arg(a[1]) if len(a) > 2 else None, path_arg(a[-1]))
    if sim.inside(path):
        sim.unsupported(f"a symbolic link {sim.rel(path)}")


# ------------------------------------------------------------------------------------ invisible I/O
@_handles("splice")
def _sys_splice(sim: Simulation, call: Syscall, a: list[str]) -> None:
    found = sim.description(call.tid, fd_arg(a[2]))
    if found is not None and found.node is not None:
        sim.unsupported(f"splice into {sim.rel(found.path)}: the bytes are not in the trace")


@_handles("io_uring_setup")
def _sys_io_uring(sim: Simulation, call: Syscall, a: list[str]) -> None:
    sim.unsupported("io_uring: its I/O is invisible to strace")


@_handles("io_submit")
def _sys_io_submit(sim: Simulation, call: Syscall, a: list[str]) -> None:
    sim.unsupported("Linux AIO (io_submit): its data is not decoded")
