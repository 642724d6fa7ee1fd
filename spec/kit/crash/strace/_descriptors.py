"""What opening a file and handling descriptors do to the simulated workspace (SPEC.md §Crash;
docs/crash-target.md §The trace): ``open``, ``openat``, ``openat2`` and ``creat`` (a new name is a
``Create``, a directory opened, ``O_TRUNC`` of a non-empty file a ``Truncate``, ``O_TMPFILE`` an anonymous
file), ``close``, ``close_range``, ``dup*``, ``fcntl`` ``F_DUPFD``/``F_SETFL``/``F_SETFD``, ``execve``
(which closes the ``O_CLOEXEC`` descriptors), ``chdir`` and ``fchdir``.

``HANDLERS`` maps each call's name to its handler; ``calls.HANDLERS`` joins it with the other tables.
``retval`` is the return value the handlers of this package read.

Not guaranteed: a descriptor never seen opened (inherited, or opened before tracing began) is adopted
from the path strace prints for it, with a warning, its position and flags unknown.
"""

from __future__ import annotations

import re

from capture_ledger.spec.crash.durability import Create, Truncate
from capture_ledger.spec.kit.crash.strace._simulation import Description, Handler, Simulation, Table
from capture_ledger.spec.kit.crash.strace._syscalls import FdArg, Syscall, fd_arg, int_arg, path_arg

__all__ = ["HANDLERS", "VOLATILE", "retval"]

#: Name suffixes of volatile files (SQLite's shared-memory index, rebuilt when the database is opened).
VOLATILE = ("-shm",)


def retval(call: Syscall) -> int:
    """The return value of ``call``, which succeeded: only successful calls reach the handlers."""
    assert call.retval is not None
    return call.retval


# ----------------------------------------------------------------------------------------- opening
def _open(sim: Simulation, call: Syscall, dirfd: FdArg | None, path: str, flags: str) -> None:
    table = sim.task(call.tid).table
    fd = retval(call)
    full = call.ret_path if call.ret_path and not call.ret_deleted else sim.resolve(call.tid, dirfd, path)
    append = "O_APPEND" in flags
    if "O_TMPFILE" in flags:
        table.fds[fd] = Description(
            path=full, node=sim.new_node("file"), append=append
        )  # anonymous until linked
    elif not sim.inside(full):
        table.fds[fd] = Description(path=full, node=None, append=append)
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
        table.fds[fd] = Description(path=full, node=node, append=append)
    if "O_CLOEXEC" in flags:
        table.cloexec.add(fd)
    else:
        table.cloexec.discard(fd)


def _sys_open(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _open(sim, call, None, path_arg(a[0]), a[1])


def _sys_creat(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _open(sim, call, None, path_arg(a[0]), "O_CREAT|O_WRONLY|O_TRUNC")


def _sys_openat(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _open(sim, call, fd_arg(a[0]), path_arg(a[1]), a[2])


def _sys_openat2(sim: Simulation, call: Syscall, a: list[str]) -> None:
    flags = re.search(r"flags=([A-Z0-9_|]+)", a[2])
    _open(sim, call, fd_arg(a[0]), path_arg(a[1]), flags.group(1) if flags else "")


# ------------------------------------------------------------------------------------- descriptors
def _sys_close(sim: Simulation, call: Syscall, a: list[str]) -> None:
    table = sim.task(call.tid).table
    fd = fd_arg(a[0]).fd
    table.fds.pop(fd, None)
    table.cloexec.discard(fd)


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
    found = sim.description(call.tid, old) or Description(path=old.path or "?", node=None, append=False)
    new = retval(call)
    table.fds[new] = found
    if cloexec:
        table.cloexec.add(new)
    else:
        table.cloexec.discard(new)


def _sys_dup(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _dup(sim, call, fd_arg(a[0]), False)


def _sys_dup3(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _dup(sim, call, fd_arg(a[0]), "O_CLOEXEC" in a[2])


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


def _sys_execve(sim: Simulation, call: Syscall, a: list[str]) -> None:
    table = sim.task(call.tid).table
    for fd in list(table.cloexec):
        table.fds.pop(fd, None)
    table.cloexec.clear()


def _sys_chdir(sim: Simulation, call: Syscall, a: list[str]) -> None:
    sim.task(call.tid).cwd.path = sim.resolve(call.tid, None, path_arg(a[0]))


def _sys_fchdir(sim: Simulation, call: Syscall, a: list[str]) -> None:
    arg = fd_arg(a[0])
    known = sim.task(call.tid).table.fds.get(arg.fd)
    task = sim.task(call.tid)
    task.cwd.path = arg.path or (known.path if known else task.cwd.path)


#: The calls this module follows, by name.
HANDLERS: dict[str, Handler] = {
    "open": _sys_open,
    "creat": _sys_creat,
    "openat": _sys_openat,
    "openat2": _sys_openat2,
    "close": _sys_close,
    "close_range": _sys_close_range,
    "dup": _sys_dup,
    "dup2": _sys_dup,
    "dup3": _sys_dup3,
    "fcntl": _sys_fcntl,
    "fcntl64": _sys_fcntl,
    "execve": _sys_execve,
    "execveat": _sys_execve,
    "chdir": _sys_chdir,
    "fchdir": _sys_fchdir,
}
