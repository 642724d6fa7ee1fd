"""From an strace of any ledger to the persistence models' effects (SPEC.md §Crash, R-CRASH-1..4;
docs/crash-target.md §The trace).

``parse_trace(lines, workspace, snapshot)`` replays the calls ``syscalls.read_syscalls`` reads over a
simulated workspace (``simulation``; what each call does is ``calls``) and returns the ``Effect`` records of
``spec.crash`` (and the driver's ``Marker`` records) that touched it, in completion order, each with
its line and thread.

Identity is simulated, since strace prints no inode numbers: a namespace *path → node* seeded from the
snapshot taken just before the run (each node gets an inode number, never reused), updated by every create,
mkdir, rename, link, unlink and rmdir. An open file description holds its node, not its path, so a write
after a rename or an unlink still reaches the right inode; ``dup``, ``fcntl(F_DUPFD)`` and ``fork`` share
descriptions, threads (``CLONE_FILES``) share the descriptor table, ``close_range`` and ``execve`` (close
on exec) are followed; opens use the kernel's own path of the result (``-y``), other paths the tracked
current directory. Every write gets an offset: ``O_APPEND`` (also with ``pwrite``, as Linux does), the
description's position (moved by ``write``, ``read``, ``lseek``), or the call's own. A write of bytes
starting ``CL-`` to ``/dev/null`` is a ``Marker`` (the driver's invoke and return marks).

Volatile files (``calls.VOLATILE``: SQLite's ``-shm``, a shared memory index SQLite rebuilds when it opens
the database) keep their creates and removals; their bytes, sizes and syncs are dropped, and mapping them is
no problem. A writable shared mapping of any other workspace file is ``Unsupported`` (its stores never reach
the trace), as are ``splice``, ``io_uring``, Linux AIO, ``fallocate`` modes that punch or collapse, symbolic
links, ``RENAME_EXCHANGE``, renaming a directory, and bytes copied into the workspace from a file whose bytes
are unknown.

A file sync that failed with ``EIO``, ``ENOSPC`` or ``EDQUOT`` (strace's injected faults among them) is an
``FsyncFailed``: the models may lose the pages it covered (``spec.crash._failed``).

Not guaranteed: other calls that failed, calls that were cut short by a kill (``= ?``, a warning), or act
outside the workspace have no effect; a 32-bit tracee's calls are named but were never tried; ``ioctl``
(reflinks) is not traced.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from capture_ledger.spec.crash.durability import Baseline
from capture_ledger.spec.kit.crash.strace._calls import FAILED_HANDLERS, HANDLERS
from capture_ledger.spec.kit.crash.strace._simulation import Event, Marker, Simulation
from capture_ledger.spec.kit.crash.strace._syscalls import Syscall, read_syscalls

__all__ = ["Event", "Marker", "ParsedTrace", "Snapshot", "parse_trace", "take_snapshot"]

#: A workspace's content: relative name → bytes, ``None`` for a directory.
Snapshot = dict[str, bytes | None]


@dataclass(kw_only=True, frozen=True, slots=True)
class ParsedTrace:
    """What a trace did to the workspace: the baseline (the snapshot, numbered), the events in completion
    order, warnings (calls the parser could not follow exactly), each inode's last name, the final
    files and directories as simulated (``final``: name → bytes, ``None`` for a directory), and the calls
    read from the trace (``calls``, in its order)."""

    baseline: Baseline
    events: tuple[Event, ...]
    warnings: tuple[str, ...]
    names: dict[int, str]
    final: Snapshot
    calls: tuple[Syscall, ...] = ()


def take_snapshot(workspace: Path) -> Snapshot:
    """The workspace's files (with their bytes) and directories; symbolic links are left out."""
    found: Snapshot = {}
    for root, directories, files in os.walk(workspace):
        for name in directories:
            path = Path(root, name)
            if not path.is_symlink():
                found[str(path.relative_to(workspace))] = None
        for name in files:
            path = Path(root, name)
            if not path.is_symlink():
                found[str(path.relative_to(workspace))] = path.read_bytes()
    return found


def parse_trace(
    lines: Iterable[str], workspace: str, snapshot: Mapping[str, bytes | None], *, cwd: str | None = None
) -> ParsedTrace:
    """Replay a trace's calls over the workspace (see the module docstring).

    Args:
        lines: the trace, line by line.
        workspace: the workspace's absolute path as the traced program saw it.
        snapshot: the workspace before the run: relative name → bytes (``None`` for a directory).
        cwd: the traced program's starting directory (default: this process's).

    Returns:
        The baseline, events, warnings, names, final state and the calls read.

    Raises:
        TruncatedDataError: strace cut a string short.
        ValueError: a line that cannot be read.
    """
    calls = list(read_syscalls(lines))
    simulation = Simulation(workspace, snapshot, cwd or os.getcwd())
    simulation.run(calls, HANDLERS, FAILED_HANDLERS)
    final: Snapshot = {}
    for path, node in simulation.space.items():
        if path != simulation.root and simulation.inside(path):
            final[simulation.rel(path)] = bytes(node.data) if node.kind == "file" else None
    names = {inode: name for name, inode, _ in simulation.baseline.files}
    names.update({inode: name for name, inode in simulation.baseline.directories})
    names.update(simulation.names)
    return ParsedTrace(
        baseline=simulation.baseline,
        events=tuple(simulation.events),
        warnings=tuple(simulation.warnings),
        names=names,
        final=final,
        calls=tuple(calls),
    )
