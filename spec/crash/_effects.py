"""The effect vocabulary: what a ledger did to its files that a crash may keep or lose (SPEC.md §Crash,
R-CRASH-1..4; docs/crash.md, docs/crash-target.md).

Two recorders produce these records: the recording seam of our own store (``impl.study.crash``), and the
strace parser that watches any ledger from outside (``spec.kit.crash.strace``). The persistence models
(``spec.crash.durability``) turn a trace prefix of them into the disk images a crash may leave.

Names are paths relative to the workspace, ``/``-separated (``rollouts/r1/rows.jsonl``); a name's directory
is ``parent_of(name)`` (``""`` is the workspace itself). Inodes are the recorder's own numbers, never
reused, for files and directories alike, so a name re-created after an unlink names a new inode.

- ``Create(name, inode)``: a new entry naming a new, empty regular file.
- ``Mkdir(name, inode)`` / ``Rmdir(name, inode)``: a new entry naming a new, empty directory; an (empty)
  directory's entry removed.
- ``Unlink(name, inode)``: a file's entry removed.
- ``Rename(old, new, inode, replaced)``: ``old``'s entry moved to ``new`` (a file; ``replaced`` is the inode
  ``new`` named before, if any). ``Link(name, inode)``: a new entry naming an existing file.
- ``Write(inode, data, offset)``: ``data`` written at ``offset``; ``offset=None`` appends at the size the
  file has at that moment (the seam recorder's writes; the parser resolves every write to an offset).
  A write past the end leaves a hole of zeros.
- ``Truncate(inode, size)``: the file's size set: shrunk, or extended with zeros (``ftruncate``,
  ``truncate``, ``O_TRUNC`` on a non-empty file).
- ``Fsync(inode, data_only)``: a file sync; ``data_only`` for ``fdatasync`` (which the models treat as a
  file sync: an image holds bytes and sizes, never the timestamps ``fdatasync`` may leave behind).
- ``FsyncFailed(inode, data_only)``: a file sync that returned an error (``EIO``, ``ENOSPC``, ``EDQUOT``):
  it made nothing durable, and the sectors written since the file's last successful sync may be lost
  *even after a later sync succeeds* (Linux marks the pages clean after a failed write-back, so the next
  ``fsync`` may return 0 without writing them: PostgreSQL's "fsyncgate"). Only a write that dirties a
  sector again, followed by a successful sync, makes it durable; a ``Truncate`` that cuts it away drops it.
  The models follow this in ``spec.crash._failed`` (SPEC.md §Decisions, "After a failed fsync").
- ``SyncDir(directory)``: a sync of a directory (``fsync`` or ``fdatasync`` of it): the entries of that
  directory. ``SyncDir()`` is the workspace's.
- ``Syncfs()``: a whole-file-system flush (``syncfs``, ``sync``).
- ``SyncRange(inode)``: ``sync_file_range``: no durability promise at all (it flushes neither metadata nor
  the disk's cache); recorded so that timelines show it.
- ``Unsupported(reason)``: something the models cannot follow, above all a store through a writable shared
  memory mapping (``mmap``): the bytes never appear in the trace. A trace holding one has no image space:
  the judgement is "unknown", with the reason.

Not guaranteed: that the vocabulary covers every call a program can make (the parser says which calls it
reads, docs/crash-target.md); symbolic links, permissions and timestamps are not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "Create",
    "Effect",
    "Fsync",
    "FsyncFailed",
    "Link",
    "Mkdir",
    "Rename",
    "Rmdir",
    "SyncDir",
    "SyncRange",
    "Syncfs",
    "Truncate",
    "Unlink",
    "Unsupported",
    "Write",
    "describe_effect",
    "parent_of",
]


@dataclass(frozen=True, slots=True)
class Create:
    """A new directory entry ``name`` naming a new, empty file ``inode``."""

    name: str
    inode: int


@dataclass(frozen=True, slots=True)
class Mkdir:
    """A new directory entry ``name`` naming a new, empty directory ``inode``."""

    name: str
    inode: int


@dataclass(frozen=True, slots=True)
class Rmdir:
    """The entry ``name`` of the (empty) directory ``inode`` removed."""

    name: str
    inode: int


@dataclass(frozen=True, slots=True)
class Write:
    """``data`` written to file ``inode`` at ``offset``; ``None`` appends at its size at that moment."""

    inode: int
    data: bytes
    offset: int | None = None


@dataclass(frozen=True, slots=True)
class Truncate:
    """File ``inode``'s size set to ``size``: cut short, or extended with zeros."""

    inode: int
    size: int


@dataclass(frozen=True, slots=True)
class Fsync:
    """A file sync: inode ``inode``'s data and size (not its directory entry) are durable. ``data_only``
    for ``fdatasync``; the models treat both alike (see the module docstring)."""

    inode: int
    data_only: bool = False


@dataclass(frozen=True, slots=True)
class FsyncFailed:
    """A file sync of ``inode`` that failed: nothing became durable, and the sectors written since the
    file's last successful sync may stay lost after a later sync succeeds (see the module docstring)."""

    inode: int
    data_only: bool = False


@dataclass(frozen=True, slots=True)
class Unlink:
    """Directory entry ``name`` (naming file ``inode``) removed."""

    name: str
    inode: int


@dataclass(frozen=True, slots=True)
class Rename:
    """The entry ``old`` (naming file ``inode``) moved to ``new``; ``replaced`` is what ``new`` named."""

    old: str
    new: str
    inode: int
    replaced: int | None = None


@dataclass(frozen=True, slots=True)
class Link:
    """A new entry ``name`` naming the existing file ``inode`` (a hard link)."""

    name: str
    inode: int


@dataclass(frozen=True, slots=True)
class SyncDir:
    """A directory sync: the entries of ``directory`` (``""``: the workspace) issued before it are
    durable."""

    directory: str = ""


@dataclass(frozen=True, slots=True)
class Syncfs:
    """A whole-file-system flush: everything issued before it is durable."""


@dataclass(frozen=True, slots=True)
class SyncRange:
    """``sync_file_range`` on file ``inode``: no durability promise (no metadata, no cache flush)."""

    inode: int


@dataclass(frozen=True, slots=True)
class Unsupported:
    """Something no model follows (a store through a shared writable mapping, say); ``reason`` says what."""

    reason: str


Effect = (
    (Create | Mkdir | Rmdir | Write | Truncate | Fsync | FsyncFailed | Unlink | Rename | Link)
    | (SyncDir | Syncfs | SyncRange)
    | Unsupported
)


def parent_of(name: str) -> str:
    """The directory holding entry ``name`` (``""``: the workspace)."""
    return name.rpartition("/")[0]


def describe_effect(effect: Effect, names: Mapping[int, str] | None = None) -> str:
    """A short human-readable label, e.g. ``create r1.lineage.retired`` or ``write r1.lineage.jsonl +42``."""
    label = (names or {}).get(getattr(effect, "inode", -1), "")
    shown = label or f"#{getattr(effect, 'inode', '?')}"
    if isinstance(effect, Create):
        return f"create {effect.name}"
    if isinstance(effect, Unlink):
        return f"unlink {effect.name}"
    if isinstance(effect, Mkdir):
        return f"mkdir {effect.name}"
    if isinstance(effect, Rmdir):
        return f"rmdir {effect.name}"
    if isinstance(effect, Rename):
        return f"rename {effect.old} -> {effect.new}"
    if isinstance(effect, Link):
        return f"link {shown} as {effect.name}"
    if isinstance(effect, Write):
        where = "" if effect.offset is None else f" at {effect.offset}"
        return f"write {shown} +{len(effect.data)}{where}"
    if isinstance(effect, Truncate):
        return f"truncate {shown} to {effect.size}"
    if isinstance(effect, Fsync):
        return f"{'fdatasync' if effect.data_only else 'fsync'} {shown}"
    if isinstance(effect, FsyncFailed):
        return f"{'fdatasync' if effect.data_only else 'fsync'} {shown} FAILED (its pages may be lost)"
    if isinstance(effect, SyncDir):
        return "sync dir" + (f" {effect.directory}" if effect.directory else "")
    if isinstance(effect, SyncRange):
        return f"sync_file_range {shown} (no promise)"
    if isinstance(effect, Unsupported):
        return f"unsupported: {effect.reason}"
    return "syncfs"
