"""Persistence models: which disk images a crash may leave (SPEC.md §Crash; docs/architecture.md §Facts).

The crash contract (R-CRASH-1..4, judged by ``spec.crash_contract``) only means something relative to what
the file system promises to keep at a crash. This module states three such promises precisely, as pure
functions from the *effects* a store issued before the crash (a trace prefix) to the set of disk images the
crash may leave. It says what the disk may hold, never whether a state read from it is correct.

Effect vocabulary (shared by ``impl/recording`` and the models): ``Create(name, inode)`` a new entry naming
a new empty inode; ``Write(inode, data)`` bytes appended to an inode; ``Truncate(inode, size)`` an inode
cut short (a crash may undo it until the inode is synced); ``Fsync(inode)`` a file sync;
``Unlink(name, inode)`` an entry removed; ``SyncDir()`` a directory sync; ``Syncfs()`` a whole-file-system
flush. Inodes are the recorder's own numbers (never reused), so a name re-created after an unlink names a new
inode. Every model starts from a ``Baseline``: files present and durable before the trace began.

Shared rules. A *synced* directory operation is one issued before a later ``SyncDir`` or ``Syncfs``; it is
always kept. A file's *synced length* is its size at its last ``Fsync`` (or ``Syncfs``); a file that comes
back is at least its synced length long and at most as long as what was written. Under ``journaled`` and
``weakest-posix`` it holds a prefix of the bytes written to it (no holes, no garbage); under
``ext4-nojournal`` its unsynced blocks may read as zeros (below).

``journaled`` — directory operations persist *in issue order*: the kept ones are a prefix of them that
includes every synced one. An entry that comes back names its inode (a directory sync persists the entries
and the inodes they name); file data persists only through ``Fsync``/``Syncfs``; unsynced appended bytes
may persist as any prefix. (Real ext4 with a journal promises more; this is the weakest journaled model.)

``weakest-posix`` — nothing unsynced is promised: every unsynced create and unlink may be kept or lost
independently of the others (so in any combination and as if in any order); an entry that comes back names
its inode; an unsynced append may persist as any prefix of its bytes.

``ext4-nojournal`` — as measured on these machines (docs/architecture.md §Facts) and on real ext4 without a
journal (docs/crash.md §The kernel study): as ``weakest-posix``, and in addition a directory sync persists a
new *entry* but not the new *inode* it names. An inode is durable only once it is fsynced, flushed by
``Syncfs``, or was in the baseline. An entry naming a non-durable inode comes back either dropped (fsck
removes the dangling entry) or as a file holding any prefix of its bytes, the empty file included. And a
file's size may reach the disk without its data: each file-system block (``block_size`` bytes of the file,
4096 by default) beyond the synced length may read as zeros from some point on, whatever follows it, and a
block the file did not hold before may read as a block of any removed file's bytes (removed in the trace,
or before it: ``Baseline.freed``) — the inode and the block bitmap of an append were written, its data
block was not. The kernel study found all three: NUL bytes where a row should be; where a row spans two
blocks, a complete line of NULs and the row's end; and a re-created ledger holding the deleted ledger's
rows.

Enumeration. ``space(model, baseline, effects)`` returns an ``ImageSpace``: a union of products of
per-name options, with an exact ``size``, indexable (for deterministic sampling) and iterable. A file's
possible contents ("any prefix at least the synced length") are enumerated up to what a line reader can
distinguish: the synced length, and for each later write its start, first interior byte, last interior
byte and end. Every other prefix reads the same as one of these (the same complete lines, and a torn tail
or none). Zeroed blocks (``ext4-nojournal``) are enumerated likewise: per block of such a prefix, kept, or
zeroed from its first unsynced byte, from a write's start or from a write's first interior byte, or (a new
block) replaced by a block of removed bytes, and one image per distinct reading (the same complete lines,
and a tail of zeros, of text, or none).

Not guaranteed: that the images are distinct (callers deduplicate), or that a real file system matches a
model. The models are the study's parameters; the kernel study (``impl.study.kernel``, docs/crash.md)
checks them against real ext4: every state it recovered lies inside the matching model.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "MODELS",
    "Alternative",
    "Baseline",
    "Create",
    "DiskImage",
    "Effect",
    "Fsync",
    "ImageSpace",
    "Journaled",
    "NoJournalExt4",
    "PersistenceModel",
    "SyncDir",
    "Syncfs",
    "Truncate",
    "Unlink",
    "WeakestPosix",
    "Write",
    "describe_effect",
    "space",
]


# ------------------------------------------------------------------------------------------- effects
@dataclass(frozen=True, slots=True)
class Create:
    """A new directory entry ``name`` naming a new, empty inode ``inode``."""

    name: str
    inode: int


@dataclass(frozen=True, slots=True)
class Write:
    """``data`` appended to inode ``inode``."""

    inode: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Truncate:
    """Inode ``inode`` cut to ``size`` bytes (the store drops a torn tail before appending, R-STORE-6)."""

    inode: int
    size: int


@dataclass(frozen=True, slots=True)
class Fsync:
    """A file sync: inode ``inode``'s data and metadata (not its directory entry) are durable."""

    inode: int


@dataclass(frozen=True, slots=True)
class Unlink:
    """Directory entry ``name`` (naming inode ``inode``) removed."""

    name: str
    inode: int


@dataclass(frozen=True, slots=True)
class SyncDir:
    """A directory sync: every directory operation issued before it is durable."""


@dataclass(frozen=True, slots=True)
class Syncfs:
    """A whole-file-system flush: everything issued before it is durable."""


Effect = Create | Write | Truncate | Fsync | Unlink | SyncDir | Syncfs


def describe_effect(effect: Effect, names: Mapping[int, str] | None = None) -> str:
    """A short human-readable label, e.g. ``create r1.lineage.retired`` or ``write r1.lineage.jsonl +42``."""
    label = (names or {}).get(getattr(effect, "inode", -1), "")
    if isinstance(effect, Create):
        return f"create {effect.name}"
    if isinstance(effect, Unlink):
        return f"unlink {effect.name}"
    if isinstance(effect, Write):
        return f"write {label or f'#{effect.inode}'} +{len(effect.data)}"
    if isinstance(effect, Truncate):
        return f"truncate {label or f'#{effect.inode}'} to {effect.size}"
    if isinstance(effect, Fsync):
        return f"fsync {label or f'#{effect.inode}'}"
    if isinstance(effect, SyncDir):
        return "sync dir"
    return "syncfs"


# -------------------------------------------------------------------------------------------- images
@dataclass(frozen=True, slots=True)
class DiskImage:
    """What a crash leaves: file names and their bytes, sorted by name. Hashable, so images deduplicate."""

    files: tuple[tuple[str, bytes], ...] = ()

    @classmethod
    def of(cls, files: Mapping[str, bytes]) -> DiskImage:
        """Build an image from a mapping."""
        return cls(tuple(sorted(files.items())))

    def as_dict(self) -> dict[str, bytes]:
        """The image as a mapping."""
        return dict(self.files)


@dataclass(frozen=True, slots=True)
class Baseline:
    """The durable starting point: ``(name, inode, bytes)`` for every file present before the trace, and
    ``freed``, the bytes of files removed before it whose blocks the disk may still hold (a lost block of
    ``ext4-nojournal`` may read as one of them; callers that do not know them leave it empty)."""

    files: tuple[tuple[str, int, bytes], ...] = ()
    freed: tuple[bytes, ...] = ()

    def image(self) -> DiskImage:
        """The baseline as an image."""
        return DiskImage.of({name: data for name, _, data in self.files})


@dataclass(frozen=True, slots=True)
class Alternative:
    """A product of independent per-name choices: ``options[i]`` are name ``names[i]``'s possible contents
    (``None``: the name is absent). Names with a single option are fixed."""

    names: tuple[str, ...]
    options: tuple[tuple[bytes | None, ...], ...]

    @property
    def size(self) -> int:
        """The number of images in this product."""
        return math.prod(len(o) for o in self.options)

    def image(self, index: int) -> DiskImage:
        """The ``index``-th image of the product, in mixed radix (first name varies slowest)."""
        files: dict[str, bytes] = {}
        for name, options in zip(reversed(self.names), reversed(self.options), strict=True):
            index, digit = divmod(index, len(options))
            chosen = options[digit]
            if chosen is not None:
                files[name] = chosen
        return DiskImage.of(files)


@dataclass(frozen=True, slots=True)
class ImageSpace:
    """Every image one crash point allows: a union of ``Alternative`` products (possibly overlapping)."""

    alternatives: tuple[Alternative, ...]
    size: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", sum(a.size for a in self.alternatives))

    def image(self, index: int) -> DiskImage:
        """The ``index``-th image, ``0 <= index < size``.

        Raises:
            IndexError: ``index`` is out of range.
        """
        if not 0 <= index < self.size:
            raise IndexError(index)
        for alternative in self.alternatives:
            if index < alternative.size:
                return alternative.image(index)
            index -= alternative.size
        raise AssertionError("unreachable")  # pragma: no cover

    def __iter__(self) -> Iterator[DiskImage]:
        for index in range(self.size):
            yield self.image(index)

    def sample(self, count: int, *, seed: int) -> list[DiskImage]:
        """``count`` images drawn without replacement by a ``random.Random(seed)`` (all when fewer)."""
        if self.size <= count:
            return list(self)
        rng = random.Random(seed)
        chosen: set[int] = set()
        while len(chosen) < count:
            chosen.add(rng.randrange(self.size))
        return [self.image(i) for i in sorted(chosen)]


# -------------------------------------------------------------------------------------------- replay
@dataclass(slots=True)
class _Replay:
    """What a trace prefix did, in the terms every model needs."""

    baseline: dict[str, int]
    dir_ops: list[tuple[str, int | None]]  # (name, inode created) or (name, None) for an unlink
    synced_ops: int  # how many of dir_ops precede the last SyncDir/Syncfs
    data: dict[int, bytearray]
    writes: dict[int, list[tuple[int, int]]]
    synced_length: dict[int, int]
    durable_inodes: set[int]  # inodes whose metadata a model with separate inode writeback may rely on
    untruncated: dict[int, bytes]  # content before an unsynced truncate, which a crash may undo
    freed: list[bytes]  # the bytes of removed files, which freed blocks may still hold


def _replay(baseline: Baseline, effects: Sequence[Effect]) -> _Replay:
    replay = _Replay(
        baseline={name: inode for name, inode, _ in baseline.files},
        dir_ops=[],
        synced_ops=0,
        data={inode: bytearray(data) for _, inode, data in baseline.files},
        writes={inode: [] for _, inode, _ in baseline.files},
        synced_length={inode: len(data) for _, inode, data in baseline.files},
        durable_inodes={inode for _, inode, _ in baseline.files},
        untruncated={},
        freed=[data for data in baseline.freed if data],
    )
    for effect in effects:
        if isinstance(effect, Create):
            replay.dir_ops.append((effect.name, effect.inode))
            replay.data[effect.inode] = bytearray()
            replay.writes[effect.inode] = []
            replay.synced_length[effect.inode] = 0
        elif isinstance(effect, Unlink):
            replay.dir_ops.append((effect.name, None))
            if replay.data.get(effect.inode):
                replay.freed.append(bytes(replay.data[effect.inode]))
        elif isinstance(effect, Write):
            buffer = replay.data.setdefault(effect.inode, bytearray())
            start = len(buffer)
            buffer += effect.data
            replay.writes.setdefault(effect.inode, []).append((start, len(buffer)))
        elif isinstance(effect, Truncate):
            buffer = replay.data.setdefault(effect.inode, bytearray())
            replay.untruncated.setdefault(effect.inode, bytes(buffer[: replay.synced_length[effect.inode]]))
            del buffer[effect.size :]
            replay.writes[effect.inode] = [(s, min(e, effect.size)) for s, e in replay.writes[effect.inode]]
            replay.synced_length[effect.inode] = min(replay.synced_length[effect.inode], effect.size)
        elif isinstance(effect, Fsync):
            replay.synced_length[effect.inode] = len(replay.data.get(effect.inode, b""))
            replay.durable_inodes.add(effect.inode)
            replay.untruncated.pop(effect.inode, None)
        elif isinstance(effect, SyncDir):
            replay.synced_ops = len(replay.dir_ops)
        else:  # Syncfs: everything issued so far is durable
            replay.synced_ops = len(replay.dir_ops)
            for inode, buffer in replay.data.items():
                replay.synced_length[inode] = len(buffer)
                replay.durable_inodes.add(inode)
            replay.untruncated.clear()
    return replay


def _entries(replay: _Replay, count: int) -> dict[str, int]:
    """The directory after the baseline and the first ``count`` directory operations."""
    entries = dict(replay.baseline)
    for name, inode in replay.dir_ops[:count]:
        if inode is None:
            entries.pop(name, None)
        else:
            entries[name] = inode
    return entries


def _contents(replay: _Replay, inode: int, *, lowest: int) -> tuple[bytes, ...]:
    """The distinguishable prefixes of ``inode``'s bytes at least ``lowest`` long (see module docstring)."""
    data = bytes(replay.data.get(inode, b""))
    points = {lowest, len(data)}
    for start, end in replay.writes.get(inode, []):
        for point in (start, start + 1, end - 1, end):
            if lowest <= point <= end and start <= point:
                points.add(point)
    contents = [data[:point] for point in sorted(points)]
    if inode in replay.untruncated:
        contents.append(replay.untruncated[inode])  # the truncate itself was lost
    return tuple(contents)


#: The most lost-block variants of one prefix enumerated block by block; beyond it, one block at a time.
_ZERO_VARIANTS = 4096


def _reading(data: bytes) -> tuple[bytes, str]:
    """What a line reader tells apart: the complete lines, and the tail (none, text, or zeros)."""
    cut = data.rfind(b"\n") + 1
    tail = data[cut:]
    return data[:cut], ("" if not tail else "zeros" if b"\0" in tail else "text")


def _lost_blocks(replay: _Replay, inode: int, *, lowest: int, block: int) -> tuple[bytes, ...]:
    """Prefixes of ``inode``'s bytes (at least ``lowest`` long) in which unsynced blocks were lost: read as
    zeros from some point, or, for a block the file did not hold yet, as a block of a removed file's bytes
    (stale data). One per reading that no plain prefix already has (see the module docstring)."""
    data = bytes(replay.data.get(inode, b""))
    plain = _contents(replay, inode, lowest=lowest)
    seen = {_reading(content) for content in plain}
    found: list[bytes] = []
    writes = replay.writes.get(inode, [])
    stale = {
        freed[k : k + block].ljust(block, b"\0")
        for freed in replay.freed
        for k in range(0, len(freed), block)
    }
    for end in sorted({len(c) for c in plain}, reverse=True):
        if end <= lowest:
            continue
        blocks: list[list[tuple[int, bytes]]] = []
        for first in range(lowest // block * block, end, block):
            low, high = max(first, lowest), min(first + block, end)
            starts = {low} | {p for s, _ in writes for p in (s, s + 1) if low <= p < high}
            options = [(point, bytes(high - point)) for point in sorted(starts)]
            if first >= lowest:  # a block the file did not hold: it may be a freed one
                options += [(first, chunk[: high - first]) for chunk in sorted(stale)]
            blocks.append(options)
        if math.prod(len(b) + 1 for b in blocks) > _ZERO_VARIANTS:
            choices: list[tuple[tuple[int, bytes] | None, ...]] = []
            for index, options in enumerate(blocks):
                for option in options:
                    choice: list[tuple[int, bytes] | None] = [None] * len(blocks)
                    choice[index] = option
                    choices.append(tuple(choice))
        else:
            choices = list(itertools.product(*([None, *options] for options in blocks)))
        for chosen in choices:
            if all(c is None for c in chosen):
                continue
            content = bytearray(data[:end])
            for lost in chosen:
                if lost is not None:
                    content[lost[0] : lost[0] + len(lost[1])] = lost[1]
            reading = _reading(bytes(content))
            if reading not in seen:
                seen.add(reading)
                found.append(bytes(content))
    return tuple(found)


def _unique(options: Sequence[bytes | None]) -> tuple[bytes | None, ...]:
    return tuple(dict.fromkeys(options))


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


@dataclass(frozen=True, slots=True)
class Journaled:
    """Directory operations persist in order (a prefix including every synced one); see module docstring."""

    name: str = "journaled"
    summary: str = "directory operations persist in order; a directory sync persists entries and inodes"

    def space(self, baseline: Baseline, effects: Sequence[Effect]) -> ImageSpace:
        """Every image the model allows."""
        replay = _replay(baseline, effects)
        alternatives: list[Alternative] = []
        for kept in range(replay.synced_ops, len(replay.dir_ops) + 1):
            entries = _entries(replay, kept)
            names = tuple(sorted(entries))
            options = tuple(
                _unique(_contents(replay, entries[n], lowest=replay.synced_length[entries[n]])) for n in names
            )
            alternatives.append(Alternative(names, options))
        return ImageSpace(tuple(alternatives))


def _independent_space(replay: _Replay, *, inode_may_vanish: bool, zero_block: int = 0) -> ImageSpace:
    """The weak models: each name ends in its synced state or the state after any one unsynced op on it;
    with ``zero_block``, unsynced blocks of that size may also read as zeros."""
    durable = _entries(replay, replay.synced_ops)
    outcomes: dict[str, list[int | None]] = {name: [inode] for name, inode in durable.items()}
    for name, inode in replay.dir_ops[replay.synced_ops :]:
        outcomes.setdefault(name, [None]).append(inode)
    names = tuple(sorted(outcomes))
    options: list[tuple[bytes | None, ...]] = []
    for name in names:
        choices: list[bytes | None] = []
        for inode in dict.fromkeys(outcomes[name]):
            if inode is None:
                choices.append(None)
            elif inode_may_vanish and inode not in replay.durable_inodes:
                # ext4 without a journal: the entry persisted, its inode did not (docs/architecture.md
                # §Facts).
                choices.append(None)
                choices.extend(_contents(replay, inode, lowest=0))
                if zero_block:
                    choices.extend(_lost_blocks(replay, inode, lowest=0, block=zero_block))
            else:
                lowest = replay.synced_length[inode]
                choices.extend(_contents(replay, inode, lowest=lowest))
                if zero_block:
                    choices.extend(_lost_blocks(replay, inode, lowest=lowest, block=zero_block))
        options.append(_unique(choices))
    return ImageSpace((Alternative(names, tuple(options)),))


@dataclass(frozen=True, slots=True)
class WeakestPosix:
    """Unsynced creates, unlinks and appends may each be lost in any combination; see module docstring."""

    name: str = "weakest-posix"
    summary: str = "unsynced creates, unlinks and appends may each be lost, in any combination"

    def space(self, baseline: Baseline, effects: Sequence[Effect]) -> ImageSpace:
        """Every image the model allows."""
        return _independent_space(_replay(baseline, effects), inode_may_vanish=False)


@dataclass(frozen=True, slots=True)
class NoJournalExt4:
    """``weakest-posix`` plus: a synced entry's inode is lost unless fsynced or syncfs'd, and unsynced
    blocks of ``block_size`` bytes may read as zeros; see the module docstring. ``block_size=0`` is the
    model as it stood before the kernel study (no block reads as zeros), kept to show that it was
    unsound."""

    name: str = "ext4-nojournal"
    summary: str = (
        "as weakest-posix; a directory sync persists a new entry but not its unsynced inode, "
        "and unsynced blocks may read as zeros"
    )
    block_size: int = 4096

    def with_block_size(self, block_size: int) -> NoJournalExt4:
        """The same model for a file system with blocks of ``block_size`` bytes."""
        return NoJournalExt4(block_size=block_size)

    def space(self, baseline: Baseline, effects: Sequence[Effect]) -> ImageSpace:
        """Every image the model allows."""
        replay = _replay(baseline, effects)
        return _independent_space(replay, inode_may_vanish=True, zero_block=self.block_size)


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
    """
    chosen = MODELS[model] if isinstance(model, str) else model
    return chosen.space(baseline, effects)
