"""Persistence models: which disk images a crash may leave (SPEC.md §Crash; docs/architecture.md §Facts;
docs/crash.md, docs/crash-target.md).

The crash contract (R-CRASH-1..4, judged by ``spec.crash.contract``) only means something relative to what
the file system promises to keep at a crash. This module states three such promises precisely, as pure
functions from the *effects* a ledger issued before the crash (a trace prefix; the vocabulary is
``spec.crash``, re-exported here) to the set of disk images the crash may leave. It says what the
disk may hold, never whether a state read from it is correct. Every model starts from a ``Baseline``: files
and directories present and durable before the trace began.

Shared rules.

- *Directory operations.* Creating, removing, linking and renaming entries (``Create``, ``Mkdir``,
  ``Unlink``, ``Rmdir``, ``Link``, ``Rename``) change directories. An operation on an entry of directory
  ``d`` issued before a later ``SyncDir(d)`` (an ``fsync`` or ``fdatasync`` of the directory), or before a
  ``Syncfs``, is *synced* and always kept. An entry whose directory is not in the image is not either (a
  lost directory takes its entries with it).
- *File data.* A file's *synced* bytes are those it held at its last ``Fsync`` (``fdatasync`` alike: images
  hold no timestamps) or ``Syncfs``; ``SyncRange`` (``sync_file_range``) promises nothing. A file only
  appended to since (and perhaps cut short) comes back holding a prefix of its bytes at least its synced
  length long, under ``journaled`` and ``weakest-posix`` with no garbage and no holes but zeroed new
  blocks at its end (below); an unsynced
  ``Truncate`` may be undone. A file *rewritten in place* since its last sync (a write inside its bytes or
  past its end, a ``Truncate`` that extends it: SQLite's pages) comes back at any size it had since (or
  reached part way through an extension, at a sector or a byte), and each 512-byte sector holds its bytes
  from the last sync or from any later moment, independently of the others: a write is torn at sectors, and
  unsynced writes reach the disk in any order. A rename replaces its target atomically in every model; the
  bytes of a file are the same under each of its names.
- *A failed file sync* (``FsyncFailed``: ``fsync`` or ``fdatasync`` returned ``EIO``, ``ENOSPC``): it makes
  nothing durable, and every sector written since the file's last successful sync is *poisoned*: in every
  later image it may hold any value it had from that sync up to the failure (zeros for bytes never synced),
  even after a later sync succeeded, until a write dirties it again and a sync succeeds after that (Linux
  marks the pages clean after a failed write-back; ``spec.crash._failed``). Every model follows it alike.
- *Enumeration.* ``space(model, baseline, effects)`` returns an ``ImageSpace`` (``spec.crash``):
  exact size, indexable, for seeded sampling. An appended file's prefixes are enumerated up to what a
  reader tells apart (``spec.crash``): for newline-ended text the *line-reader reduction* (the synced
  length; each later write's start, first interior byte, last interior byte, end); for other bytes also
  every sector boundary inside a write. A rewritten file gets no reduction: its sector combinations are
  listed lazily and callers sample them.
- *Unsupported.* A trace holding an ``Unsupported`` effect (a store through a writable shared memory map,
  whose bytes no trace shows) has no space: ``space`` raises ``UnsupportedEffectError``.

``journaled`` — directory operations persist *in issue order on each directory*: the kept ones hold, for
each directory, a prefix of the operations on its entries that contains every synced one (a rename is one
operation, in both its directories when they differ); operations on different directories persist in any
relative order, except that a synced directory is reachable: a ``SyncDir(d)`` also keeps the operation that
made ``d`` (and each of its ancestors), with what that operation's directory held before it (ext4's and
XFS's one log order every directory; btrfs logs a synced new directory's new ancestors). An entry that comes
back names its inode (a directory sync persists the entries and the inodes they name); file data persists
only through ``Fsync``/``Syncfs``. (Real ext4 with a journal promises
more, e.g. its ``fsync`` of a new file also commits the entry, and one journal orders every directory;
this is the weakest journaled model, on purpose, held to ext4 with a journal, XFS and btrfs alike.)

Two more rules, shared by every model (so the models nest), each from a kernel state the earlier model
refused (docs/crash.md §The kernel study):

- *A logged name.* A name a file held when it was fsynced may come back naming that file (holding its
  bytes as any entry of it may), whatever else the directory operations kept, until a ``Syncfs``; never
  over a name the image already has, never once a later ``Unlink`` of that name is kept (synced, in the
  weak models), and under ``journaled`` only for a file the image names nowhere else (so a rename stays
  atomic: never both names of the renamed file). btrfs's ``fsync`` writes the inode and its names to the
  log tree, and a crash before the transaction commits replays them: the kernel study saw NeMo Gym's
  fsynced ledger come back without the lock file created before it in the same directory, and the store's
  new ledger, fsynced under its temporary, renamed into place (directory synced) and unlinked by a retire
  (directory synced), come back under the temporary name (a rename leaves the logged name; btrfs drops an
  unlinked one, and no kernel state showed one back).
- *Zeroed new blocks.* The blocks of an appended file beyond those it held at its last sync (``block_size``
  bytes each; 4096 by default, the study's images set theirs) may read as zeros from one block boundary on,
  to the file's end: on ext4 ``data=ordered`` a journal commit carried a new file's size while its data
  block was still in flight (another thread's sync committed the journal while this file's ``fsync`` was
  under way), and the crash left a new 56-byte row log as 56 NUL bytes. The likely mechanism (read from
  the block log, not traced in the kernel): writeback with ``dioread_nolock``, ext4's default, allocates
  an *unwritten* extent and sets the size in one transaction, which ordered mode does not hold back for
  the data, and converts the extent once the data write completes; an unwritten extent reads as zeros.
  Never a block the file held at its last sync (written in place, ordered), never zeros followed by bytes
  that read (the kernel showed none; a later block converted before an earlier one is not allowed), never
  a removed file's bytes (ordered mode never exposes a freed block), never once the file is synced. A file
  rewritten in place gets no such rule (no kernel state asked for one).

Why weaken ``journaled`` rather than add per-file-system models: each rule admits only the states of one
documented mechanism, and the states it adds are harmless to ledgers that follow the crash contract's
usual discipline (a temporary is residue; a NUL tail is a torn tail, R-STORE-11). The rules cost the model
study images (``tests/impl/study/test_crash_study.py`` ``DEFAULT_SPACE``) and change no verdict of the
store's matrix.

``weakest-posix`` — nothing unsynced is promised: every unsynced directory operation on a name may be kept
or lost independently of the others (so in any combination, as if in any order; a rename is a removal of
``old`` and a new entry ``new``, each kept or lost on its own, so both names or neither may come back); an
entry that comes back names its inode. (Two names of one file then each choose their bytes: an
over-approximation no disk shows, documented in docs/crash-target.md.)

``ext4-nojournal`` — as measured on these machines (docs/architecture.md §Facts) and on real ext4 without a
journal (docs/crash.md §The kernel study): as ``weakest-posix``, and in addition a directory sync persists a
new *entry* but not the new *inode* it names. An inode (file or directory) is durable only once it is
synced (``Fsync``, or ``SyncDir`` of the directory itself), flushed by ``Syncfs``, or was in the baseline.
An entry naming a non-durable inode comes back either dropped (fsck removes the dangling entry) or as a file
holding any prefix of its bytes, the empty file included (a directory: present). And a file's size may reach
the disk without its data: each file-system block (``block_size`` bytes of the file, 4096 by default) beyond
the synced length may read as zeros from some point on, whatever follows it, and a block the file did not
hold before may read as a block of any removed file's bytes (removed in the trace, or before it:
``Baseline.freed``) — the inode and the block bitmap of an append were written, its data block was not.
And an entry naming a non-durable inode may come back as a *removed file, whole* (any file removed in the
trace or before it, at the bytes it held when removed): the new entry reached the disk with the inode
number the allocator reused, the new inode did not, and ``e2fsck`` keeps the freed inode's old contents.
The kernel study found all four: NUL bytes where a row should be; where a row spans two blocks, a complete
line of NULs and the row's end; a re-created ledger holding the deleted ledger's rows in its new blocks;
and a ledger name re-created over a deleted ledger coming back as that ledger, whole. (For a rewritten
file: each sector it did not hold at its last sync may also read as zeros or as the matching sector of a
removed file's block.) A rename's new entry names the renamed inode, durable or not as that inode is: a
file fsynced before its rename comes back whole under either name. Links were not part of the kernel
study.

The models nest — journaled ⊆ weakest-posix ⊆ ext4-nojournal — and always allow the no-crash image.
``Journaled(directory_order=False, logged_names=False, block_size=0)`` and ``WeakestPosix(block_size=0)``
are the models as they stood before the btrfs and ext4 ``data=ordered`` findings, kept to show them
unsound (``tests/impl/study/test_kernel_filesystems.py``).

Not guaranteed: that the images are distinct (callers deduplicate), or that a real file system matches a
model. The models are the study's parameters; the kernel study (``impl.study.kernel``, docs/crash.md)
checks them against real ext4, XFS and btrfs for the store's own effects (creates, appends, renames,
unlinks, syncs) and, through ``crash --target --kernel``, for other ledgers'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from capture_ledger.spec.crash._effects import (
    Create,
    Effect,
    Fsync,
    FsyncFailed,
    Link,
    Mkdir,
    Rename,
    Rmdir,
    SyncDir,
    Syncfs,
    SyncRange,
    Truncate,
    Unlink,
    Unsupported,
    Write,
    describe_effect,
    parent_of,
)
from capture_ledger.spec.crash._failed import poisoned_options
from capture_ledger.spec.crash._images import (
    DIRECTORY,
    Alternative,
    Baseline,
    Content,
    DiskImage,
    ImageSpace,
    Options,
)
from capture_ledger.spec.crash._order import entries_of, flatten, ghost_options, kept_sets
from capture_ledger.spec.crash._replay import (
    Replay,
    UnsupportedEffectError,
    contents,
    lost_blocks,
    replay,
    rewritten_contents,
    unique,
    zeroed_tails,
)

__all__ = [
    "MODELS",
    "Alternative",
    "Baseline",
    "Create",
    "DiskImage",
    "Effect",
    "Fsync",
    "FsyncFailed",
    "ImageSpace",
    "Journaled",
    "Link",
    "Mkdir",
    "NoJournalExt4",
    "PersistenceModel",
    "Rename",
    "Rmdir",
    "SyncDir",
    "SyncRange",
    "Syncfs",
    "Truncate",
    "Unlink",
    "Unsupported",
    "UnsupportedEffectError",
    "WeakestPosix",
    "Write",
    "describe_effect",
    "parent_of",
    "space",
]


def _file_options(state: Replay, inode: int, *, lowest: int, block: int, tail: int) -> Sequence[Content]:
    """A file's possible contents: its prefixes at least ``lowest`` long (with ``tail``, also those whose
    new blocks of ``tail`` bytes read as zeros from one on; with ``block``, its lost blocks), or, rewritten
    in place, its sector combinations."""
    if inode in state.rewritten:
        return poisoned_options(state, inode, rewritten_contents(state, inode, block=block))
    found: list[Content] = list(contents(state, inode, lowest=lowest))
    found += zeroed_tails(state, inode, lowest=lowest, block=tail)
    if block:
        found += lost_blocks(state, inode, lowest=lowest, block=block)
    return poisoned_options(state, inode, unique(found))


def _options(
    state: Replay, inode: int, *, may_vanish: bool, block: int, tail: int, reused: bool = False
) -> Sequence[Content]:
    """What an entry naming ``inode`` may come back as, for the weak models (module docstring); with
    ``reused``, an entry whose inode may vanish may also come back as a removed file, whole."""
    vanishes = may_vanish and inode not in state.durable_inodes
    if inode in state.directories:
        return (None, DIRECTORY) if vanishes else (DIRECTORY,)
    if (
        vanishes
    ):  # ext4 without a journal: the entry persisted, its inode did not (docs/architecture.md §Facts)
        found = _file_options(state, inode, lowest=0, block=block, tail=tail)
        # ... and the inode number it names may be a removed file's, whose old inode fsck keeps: the
        # name comes back as that file, whole (the kernel study, docs/crash.md).
        removed = unique(state.freed) if reused else ()
        if isinstance(found, tuple):
            return unique((None, *found, *removed))
        return Options([(None,), found, removed])
    return _file_options(state, inode, lowest=state.synced_length[inode], block=block, tail=tail)


# -------------------------------------------------------------------------------------------- models
class PersistenceModel(Protocol):
    """A persistence model: the images a crash after ``effects`` may leave, starting from ``baseline``."""

    @property
    def name(self) -> str:
        """The model's name in ``MODELS``."""
        ...

    @property
    def summary(self) -> str:
        """One line saying what the model promises."""
        ...

    def space(self, baseline: Baseline, effects: Sequence[Effect]) -> ImageSpace:
        """Every image the model allows."""
        ...


@dataclass(kw_only=True, frozen=True, slots=True)
class Journaled:
    """Directory operations persist in order per directory (on each, a prefix including every synced one),
    a name a file was fsynced under may come back, and an unsynced file's new blocks may read as
    zeros from one on; see the module docstring. ``directory_order=False`` (one prefix of all directories'
    operations), ``logged_names=False`` (no name back) and ``block_size=0`` (no zeroed blocks) give the
    model as it stood before the kernel study on btrfs and ext4 ``data=ordered``, kept to show that each
    was unsound."""

    name: str = "journaled"
    summary: str = (
        "directory operations persist in order per directory; a directory sync persists entries and "
        "inodes; a name a file was fsynced under may come back; new blocks may read as zeros"
    )
    block_size: int = 4096
    logged_names: bool = True
    directory_order: bool = True

    def with_block_size(self, block_size: int) -> Journaled:
        """The same model for a file system with blocks of ``block_size`` bytes (the unit of a zeroed
        tail); the model without zeroed tails (``block_size=0``) stays without them."""
        return replace(self, block_size=block_size) if self.block_size else self

    def space(self, baseline: Baseline, effects: Sequence[Effect]) -> ImageSpace:
        """Every image the model allows.

        Raises:
            UnsupportedEffectError: the trace holds an ``Unsupported`` effect.
        """
        state = replay(baseline, effects)
        alternatives: list[Alternative] = []

        def ghost(inode: int) -> Sequence[Content]:
            return _file_options(
                state, inode, lowest=state.synced_length[inode], block=0, tail=self.block_size
            )

        sets = (
            kept_sets(state)
            if self.directory_order
            else [frozenset(range(k)) for k in range(state.synced_ops, len(state.dir_ops) + 1)]
        )
        for kept in sets:
            found = entries_of(state, kept)
            named: dict[int, list[str]] = {}
            for name in sorted(found):
                named.setdefault(found[name], []).append(name)
            first = {inode: names[0] for inode, names in named.items()}
            inode_of = {name: inode for inode, name in first.items()}
            ghosts = ghost_options(state, kept, found, ghost) if self.logged_names else {}
            names = tuple(sorted([*first.values(), *ghosts]))
            options = tuple(
                flatten([(None,), *ghosts[n]])
                if n in ghosts
                else (DIRECTORY,)
                if inode_of[n] in state.directories
                else _file_options(
                    state, inode_of[n], lowest=state.synced_length[inode_of[n]], block=0, tail=self.block_size
                )
                for n in names
            )
            aliases = tuple((alias, ns[0]) for ns in named.values() for alias in ns[1:])
            alternatives.append(Alternative(names=names, options=options, aliases=aliases))
        return ImageSpace(tuple(alternatives))


def _independent_space(
    state: Replay, *, inode_may_vanish: bool, tail: int, zero_block: int = 0, reused_inodes: bool = False
) -> ImageSpace:
    """The weak models: each name ends in its synced state or the state after any one unsynced operation on
    it; with ``zero_block``, unsynced blocks of that size may also read as zeros or removed bytes."""
    durable = dict(state.baseline)
    unsynced: dict[str, list[int | None]] = {}
    for op, synced in zip(state.dir_ops, state.bindings_synced, strict=True):
        for (name, inode), kept in zip(op, synced, strict=True):
            if kept and name not in unsynced:
                if inode is None:
                    durable.pop(name, None)
                else:
                    durable[name] = inode
            else:
                unsynced.setdefault(name, []).append(inode)
    outcomes: dict[str, list[int | None]] = {name: [inode] for name, inode in durable.items()}
    for name, bindings in unsynced.items():
        outcomes.setdefault(name, [None]).extend(bindings)

    def ghost(inode: int) -> Sequence[Content]:
        return _file_options(state, inode, lowest=state.synced_length[inode], block=zero_block, tail=tail)

    ghosts = ghost_options(state, None, {}, ghost)
    names = tuple(sorted({*outcomes, *ghosts}))
    options: list[Sequence[Content]] = []
    for name in names:
        parts: list[Sequence[Content]] = list(ghosts.get(name, ()))
        if name not in outcomes:
            parts.append((None,))
        for inode in dict.fromkeys(outcomes.get(name, [])):
            if inode is None:
                parts.append((None,))
            else:
                parts.append(
                    _options(
                        state,
                        inode,
                        may_vanish=inode_may_vanish,
                        block=zero_block,
                        tail=tail,
                        reused=reused_inodes,
                    )
                )
        options.append(flatten(parts))
    return ImageSpace((Alternative(names=names, options=tuple(options)),))


@dataclass(kw_only=True, frozen=True, slots=True)
class WeakestPosix:
    """Unsynced directory operations and appends may each be lost in any combination; see module
    docstring."""

    name: str = "weakest-posix"
    summary: str = "unsynced creates, unlinks and appends may each be lost, in any combination"
    block_size: int = 4096

    def with_block_size(self, block_size: int) -> WeakestPosix:
        """The same model for a file system with blocks of ``block_size`` bytes (as ``Journaled``)."""
        return replace(self, block_size=block_size) if self.block_size else self

    def space(self, baseline: Baseline, effects: Sequence[Effect]) -> ImageSpace:
        """Every image the model allows.

        Raises:
            UnsupportedEffectError: the trace holds an ``Unsupported`` effect.
        """
        return _independent_space(replay(baseline, effects), inode_may_vanish=False, tail=self.block_size)


@dataclass(kw_only=True, frozen=True, slots=True)
class NoJournalExt4:
    """``weakest-posix`` plus: a synced entry's inode is lost unless fsynced or syncfs'd (the entry then
    dropped, a prefix of the file's bytes, or a removed file whole), and unsynced blocks of ``block_size``
    bytes may read as zeros or stale bytes; see the module docstring. ``block_size=0`` is the
    model as it stood before the kernel study (no block reads as zeros), kept to show that it was
    unsound; ``reused_inodes=False`` the model as it stood before a re-created name was seen to come back
    as the removed file, whole (likewise kept to show that it was unsound)."""

    name: str = "ext4-nojournal"
    summary: str = (
        "as weakest-posix; a directory sync persists a new entry but not its unsynced inode (which may "
        "read as a removed file), and unsynced blocks may read as zeros"
    )
    block_size: int = 4096
    reused_inodes: bool = True

    def with_block_size(self, block_size: int) -> NoJournalExt4:
        """The same model (its name and rules kept) for a file system with blocks of ``block_size`` bytes;
        the model without lost blocks (``block_size=0``) stays without them."""
        return replace(self, block_size=block_size) if self.block_size else self

    def space(self, baseline: Baseline, effects: Sequence[Effect]) -> ImageSpace:
        """Every image the model allows.

        Raises:
            UnsupportedEffectError: the trace holds an ``Unsupported`` effect.
        """
        state = replay(baseline, effects)
        return _independent_space(
            state,
            inode_may_vanish=True,
            tail=self.block_size,
            zero_block=self.block_size,
            reused_inodes=self.reused_inodes,
        )


#: The models by name, weakest last.
MODELS: dict[str, PersistenceModel] = {m.name: m for m in (Journaled(), WeakestPosix(), NoJournalExt4())}


def space(model: PersistenceModel | str, baseline: Baseline, effects: Sequence[Effect]) -> ImageSpace:
    """The images ``model`` allows after ``effects``, starting from ``baseline``.

    Args:
        model: a model or its name in ``MODELS``.
        baseline: the durable files before the trace.
        effects: the effects issued before the crash, in issue order.

    Returns:
        The image space (exact size; images may repeat).

    Raises:
        KeyError: an unknown model name.
        UnsupportedEffectError: the trace holds an ``Unsupported`` effect.
    """
    chosen = MODELS[model] if isinstance(model, str) else model
    return chosen.space(baseline, effects)
