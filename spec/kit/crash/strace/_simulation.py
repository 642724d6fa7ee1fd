"""The simulated workspace an strace is replayed over: nodes, open file descriptions, descriptor tables, the
current directory of each thread (SPEC.md §Crash; docs/crash-target.md §The trace).

``Simulation`` holds the namespace *path → node* (seeded from the snapshot taken before the run, each node
numbered; numbers are never reused), the tasks (threads share a descriptor table when cloned with
``CLONE_FILES``, a current directory with ``CLONE_FS``; a fork copies both, sharing the descriptions), the
writable mappings, and the events emitted so far. ``calls`` says what each system call does to it;
``parser.parse_trace`` runs it. ``Marker`` and ``Event`` are the records it emits besides the effects.

Not guaranteed: exactness for descriptors never seen opened (adopted from their ``-y`` path, with a warning).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from capture_ledger.spec.crash.durability import (
    Baseline,
    Effect,
    Fsync,
    FsyncFailed,
    SyncRange,
    Truncate,
    Unsupported,
    Write,
)
from capture_ledger.spec.kit.crash.strace._syscalls import FdArg, Syscall, split_args

__all__ = [
    "EFFECTFUL",
    "Cwd",
    "Description",
    "Event",
    "Handler",
    "Marker",
    "Node",
    "Simulation",
    "Table",
    "Task",
]

_AT_FDCWD = -100

#: Calls whose effect is unknown when they never returned.
EFFECTFUL = frozenset(
    [
        "write",
        "writev",
        "pwrite64",
        "pwritev",
        "pwritev2",
        "ftruncate",
        "truncate",
        "fallocate",
        "fsync",
        "fdatasync",
        "rename",
        "renameat",
        "renameat2",
        "link",
        "linkat",
        "unlink",
        "unlinkat",
        "mkdir",
        "mkdirat",
        "rmdir",
        "open",
        "openat",
        "creat",
        "sendfile",
        "copy_file_range",
    ]
)


@dataclass(frozen=True, slots=True)
class Marker:
    """A mark the driver wrote: ``kind`` (``INVOKE`` or ``RETURN``) and the rest of the text."""

    kind: str
    text: str


@dataclass(kw_only=True, frozen=True, slots=True)
class Event:
    """An effect or a mark, with the trace line and the thread that made it."""

    line: int
    tid: int
    item: Effect | Marker


@dataclass(kw_only=True, slots=True)
class Node:
    """A simulated file or directory: its inode number, kind, and (files) bytes."""

    inode: int
    kind: str  # "file" | "dir"
    data: bytearray = field(default_factory=bytearray)


@dataclass(kw_only=True, slots=True)
class Description:
    """An open file description: the path it was opened by, its node (``None``: outside the workspace),
    ``O_APPEND``, and its position."""

    path: str
    node: Node | None  # None: outside the workspace
    append: bool
    pos: int = 0


@dataclass(slots=True)
class Table:
    """A descriptor table, and which descriptors close on exec."""

    fds: dict[int, Description] = field(default_factory=dict)
    cloexec: set[int] = field(default_factory=set)


@dataclass(slots=True)
class Cwd:
    """A current directory (shared by tasks cloned with ``CLONE_FS``)."""

    path: str


@dataclass(slots=True)
class Task:
    """A thread or process: its descriptor table and current directory."""

    table: Table
    cwd: Cwd


class Simulation:
    """The simulated workspace and process state (see the module docstring).

    Args:
        workspace: the workspace's absolute path as the traced program saw it.
        snapshot: the workspace before the run: relative name → bytes (``None`` for a directory).
        cwd: the traced program's starting directory.
    """

    def __init__(self, workspace: str, snapshot: Mapping[str, bytes | None], cwd: str) -> None:
        self.root = os.path.normpath(workspace)
        self.start_cwd = cwd
        self.next_inode = 1
        self.space: dict[str, Node] = {self.root: self.new_node("dir")}
        files: list[tuple[str, int, bytes]] = []
        directories: list[tuple[str, int]] = []
        for name, data in sorted(snapshot.items()):
            node = self.new_node("dir" if data is None else "file")
            if data is not None:
                node.data = bytearray(data)
                files.append((name, node.inode, data))
            else:
                directories.append((name, node.inode))
            self.space[os.path.join(self.root, name)] = node
        self.baseline = Baseline(files=tuple(files), directories=tuple(directories))
        self.events: list[Event] = []
        self.warnings: list[str] = []
        self.tasks: dict[int, Task] = {}
        self.children: dict[int, tuple[int, str]] = {}
        self.maps: dict[int, tuple[int, Node, bool]] = {}
        self.volatile: set[int] = set()
        self.names: dict[int, str] = {}
        self.call: Syscall | None = None

    # ------------------------------------------------------------------------------------- helpers
    def new_node(self, kind: str) -> Node:
        """A node with the next inode number."""
        node = Node(inode=self.next_inode, kind=kind)
        self.next_inode += 1
        return node

    def inside(self, path: str) -> bool:
        """Whether ``path`` is in the workspace."""
        return path == self.root or path.startswith(self.root + "/")

    def rel(self, path: str) -> str:
        """``path`` relative to the workspace (``""`` for the workspace itself)."""
        relative = os.path.relpath(path, self.root)
        return "" if relative == "." else relative

    def emit(self, item: Effect | Marker) -> None:
        """Record an effect or a mark made by the current call (volatile files' bytes dropped)."""
        assert self.call is not None
        inode = getattr(item, "inode", None)
        if inode in self.volatile and isinstance(item, Write | Truncate | Fsync | FsyncFailed | SyncRange):
            return  # the bytes of a volatile file (SQLite's -shm): rebuilt when it is opened
        for name_field in ("name", "new"):
            name = getattr(item, name_field, None)
            if isinstance(name, str) and isinstance(inode, int):
                self.names[inode] = name
        self.events.append(Event(line=self.call.line, tid=self.call.tid, item=item))

    def warn(self, message: str) -> None:
        """Note a call the simulation could not follow exactly."""
        assert self.call is not None
        self.warnings.append(f"line {self.call.line} (thread {self.call.tid}, {self.call.name}): {message}")

    def task(self, tid: int) -> Task:
        """The task ``tid`` (made from its parent's on first sight)."""
        found = self.tasks.get(tid)
        if found is None:
            parent = self.children.get(tid)
            if parent is not None and parent[0] in self.tasks:
                up, flags = self.tasks[parent[0]], parent[1]
                table = (
                    up.table if "CLONE_FILES" in flags else Table(dict(up.table.fds), set(up.table.cloexec))
                )
                cwd = up.cwd if "CLONE_FS" in flags else Cwd(up.cwd.path)
                found = Task(table, cwd)
            else:
                found = Task(Table(), Cwd(self.start_cwd))
            self.tasks[tid] = found
        return found

    def resolve(self, tid: int, dirfd: FdArg | None, path: str) -> str:
        """The absolute path ``path`` names, relative to ``dirfd`` (or the task's current directory)."""
        if path.startswith("/"):
            return os.path.normpath(path)
        if dirfd is None or dirfd.fd == _AT_FDCWD:
            if dirfd is not None and dirfd.path:
                self.task(tid).cwd.path = dirfd.path  # AT_FDCWD</x> re-synchronises the current directory
            base = self.task(tid).cwd.path
        else:
            known = self.task(tid).table.fds.get(dirfd.fd)
            base = dirfd.path or (known.path if known else "?")
        return os.path.normpath(os.path.join(base, path))

    def description(self, tid: int, arg: FdArg) -> Description | None:
        """The open file description behind ``arg``; one never seen opened is adopted from its path."""
        table = self.task(tid).table
        found = table.fds.get(arg.fd)
        if found is None:
            if arg.path is None or not self.inside(arg.path):
                return None
            node = self.space.get(arg.path)
            if node is None:
                self.warn(f"descriptor {arg.fd} on {arg.path} was never seen opened")
                return None
            self.warn(f"descriptor {arg.fd} on {arg.path} was never seen opened; its position is unknown")
            found = table.fds[arg.fd] = Description(path=arg.path, node=node, append=False)
        return found

    def unsupported(self, reason: str) -> None:
        """Record that the current call did something no model follows."""
        self.emit(Unsupported(reason))

    # ---------------------------------------------------------------------------------------- the run
    def run(
        self,
        calls: list[Syscall],
        handlers: Mapping[str, Handler],
        failed: Mapping[str, Handler] | None = None,
    ) -> None:
        """Replay ``calls`` in order, each successful one through ``handlers[call.name]``, each failed one
        through ``failed[call.name]`` if there is one (a failed file sync, which may lose data)."""
        for call in calls:  # a child's lines may come before its parent's clone() result
            if call.name in ("clone", "clone3", "fork", "vfork") and call.retval and call.retval > 0:
                flags = re.search(r"flags=([A-Z0-9_|]+)", call.args)
                self.children[call.retval] = (call.tid, flags.group(1) if flags else "")
        for call in calls:
            self.call = call
            self.task(call.tid)
            if call.retval is None and call.errno is None and call.name in EFFECTFUL:
                self.warn("never returned (the process was killed mid-call?): its effect is unknown")
            handler = (handlers if call.succeeded else failed or {}).get(call.name)
            if handler is not None:
                handler(self, call, split_args(call.args))


#: What one successful call does to the simulation, given its split arguments.
Handler = Callable[[Simulation, Syscall, list[str]], None]
