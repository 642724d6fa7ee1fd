"""What the namespace calls do to the simulated workspace (SPEC.md §Crash; docs/crash-target.md §The
trace): ``rename*``, ``link*``, ``unlink*``, ``mkdir*``, ``rmdir``, ``mknod*`` and ``symlink*``, each an
effect on a name (``Rename``, ``Link``, ``Unlink``, ``Mkdir``, ``Rmdir``, ``Create``) when the name is in
the workspace; a rename out of it is an unlink.

``HANDLERS`` maps each call's name to its handler; ``calls.HANDLERS`` joins it with the other tables.

Not guaranteed: renames of directories, ``RENAME_EXCHANGE``, renames and links into the workspace from
outside it, symbolic links and special files are followed only as far as the names go and reported
unsupported, so no crash state is judged from them.
"""

from __future__ import annotations

import re

from capture_ledger.spec.crash.durability import Create, Link, Mkdir, Rename, Rmdir, Unlink
from capture_ledger.spec.kit.crash.strace._simulation import Handler, Node, Simulation
from capture_ledger.spec.kit.crash.strace._syscalls import FdArg, Syscall, fd_arg, path_arg

__all__ = ["HANDLERS"]


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
    sim.emit(
        Rename(
            sim.rel(old),
            sim.rel(new),
            node.inode,
            replaced.inode if replaced else None,
        )
    )


def _sys_rename(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _rename(sim, sim.resolve(call.tid, None, path_arg(a[0])), sim.resolve(call.tid, None, path_arg(a[1])))


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


def _sys_link(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _link(sim, call, None, path_arg(a[0]), sim.resolve(call.tid, None, path_arg(a[1])), flags="")


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


def _sys_unlink(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _unlink(sim, sim.resolve(call.tid, None, path_arg(a[0])), directory=False)


def _sys_rmdir(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _unlink(sim, sim.resolve(call.tid, None, path_arg(a[0])), directory=True)


def _sys_unlinkat(sim: Simulation, call: Syscall, a: list[str]) -> None:
    path = sim.resolve(call.tid, fd_arg(a[0]), path_arg(a[1]))
    _unlink(sim, path, directory="AT_REMOVEDIR" in a[2])


def _mkdir(sim: Simulation, path: str) -> None:
    if sim.inside(path):
        node = sim.space[path] = sim.new_node("dir")
        sim.emit(Mkdir(sim.rel(path), node.inode))


def _sys_mkdir(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _mkdir(sim, sim.resolve(call.tid, None, path_arg(a[0])))


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


def _sys_mknod(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _mknod(sim, sim.resolve(call.tid, None, path_arg(a[0])), a[1])


def _sys_mknodat(sim: Simulation, call: Syscall, a: list[str]) -> None:
    _mknod(sim, sim.resolve(call.tid, fd_arg(a[0]), path_arg(a[1])), a[2])


def _sys_symlink(sim: Simulation, call: Syscall, a: list[str]) -> None:
    path = sim.resolve(call.tid, fd_arg(a[1]) if len(a) > 2 else None, path_arg(a[-1]))
    if sim.inside(path):
        sim.unsupported(f"a symbolic link {sim.rel(path)}")


#: The calls this module follows, by name.
HANDLERS: dict[str, Handler] = {
    "rename": _sys_rename,
    "renameat": _sys_renameat,
    "renameat2": _sys_renameat,
    "link": _sys_link,
    "linkat": _sys_linkat,
    "unlink": _sys_unlink,
    "rmdir": _sys_rmdir,
    "unlinkat": _sys_unlinkat,
    "mkdir": _sys_mkdir,
    "mkdirat": _sys_mkdirat,
    "mknod": _sys_mknod,
    "mknodat": _sys_mknodat,
    "symlink": _sys_symlink,
    "symlinkat": _sys_symlink,
}
