"""Replaying a trace prefix into what the persistence models need, and each file's possible contents after
a crash (SPEC.md §Crash; the rules are stated in ``spec.crash.durability``'s docstring).

``replay(baseline, effects)`` folds the effects into a ``Replay``: the directory operations in issue order
(each a tuple of *bindings* ``(name, inode or None)``; a rename binds two names at once) and which bindings
a later directory sync made durable; per file its bytes, its synced length and bytes, its appends and what
it did since its last sync; the inodes a model with separate inode writeback may rely on; the bytes of
removed files. ``contents`` and ``lost_blocks`` enumerate a file's possible contents:

- a file only *appended to* since its last sync (and perhaps cut short by a ``Truncate``) holds a prefix of
  its bytes; the prefixes are enumerated up to what a reader tells apart: the synced length, and for each
  later write its start, first interior byte, last interior byte and end, and, when the bytes are not
  newline-ended text, every sector boundary inside the write (a binary reader may tell those apart). For
  text lines every other prefix reads the same as one of these (the same complete lines, and a torn tail or
  none): the *line-reader reduction*, valid only for such files;
- a file *rewritten in place* since its last sync (a write inside its bytes or past its end, or a
  ``Truncate`` that extends it; SQLite's pages) gets no reduction: ``UnitContents`` lists, lazily, every
  combination in which each 512-byte sector holds its bytes from the last sync or from any later moment,
  at any size the file had (or reached part way through an extension).

A failed file sync (``FsyncFailed``) poisons the sectors it covered; ``spec.crash._failed`` holds that rule,
and the models wrap a file's options with it.

Pure. Not guaranteed: that the reductions suit readers other than those described; distinct options.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

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
    parent_of,
)
from capture_ledger.spec.crash._failed import cut, fail, file_moments, redirty, settle
from capture_ledger.spec.crash._images import Baseline, Content, LazyContents

__all__ = [
    "SECTOR",
    "Replay",
    "UnitContents",
    "UnsupportedEffectError",
    "contents",
    "lost_blocks",
    "replay",
    "unique",
    "zeroed_tails",
]

#: The unit a write may be torn at: a disk sector.
SECTOR = 512

#: The most lost-block variants of one prefix enumerated block by block; beyond it, one block at a time.
_ZERO_VARIANTS = 4096

Binding = tuple[str, int | None]


class UnsupportedEffectError(ValueError):
    """A trace holds an effect no model follows (``Unsupported``); the message says which."""


@dataclass(kw_only=True, slots=True)
class Replay:
    """What a trace prefix did, in the terms every model needs (see the module docstring)."""

    baseline: dict[str, int]
    directories: set[int]  # inodes that are directories
    dir_ops: list[tuple[Binding, ...]]
    bindings_synced: list[list[bool]]
    synced_ops: int  # the ops up to the last one a sync made durable (a prefix of dir_ops)
    data: dict[int, bytearray]
    writes: dict[int, list[tuple[int, int]]]  # appends: (start, end)
    synced_length: dict[int, int]
    durable_inodes: set[int]  # inodes whose metadata a model with separate inode writeback may rely on
    untruncated: dict[int, bytes]  # content before an unsynced truncate, which a crash may undo
    freed: list[bytes]  # the bytes of removed files, which freed blocks may still hold
    synced_data: dict[int, bytes]  # each file's bytes at its last sync
    pending: dict[int, list[tuple[int, bytes] | int]]  # since it: writes (offset, bytes) and new sizes
    rewritten: set[int]  # files rewritten in place since their last sync
    binary: set[int]  # files some write to which was not newline-ended text
    links: dict[int, int]  # entries naming each inode now
    #: after a failed fsync (``spec.crash._failed``): per file, each poisoned sector's lost values
    poisoned: dict[int, dict[int, tuple[bytes, ...]]] = field(default_factory=dict)
    redirtied: dict[int, set[int]] = field(default_factory=dict)  # poisoned sectors written again
    names: dict[str, int] = field(default_factory=dict)  # the namespace now
    named: dict[int, set[str]] = field(default_factory=dict)  # and per inode, its names now
    #: since the last ``Syncfs``: per file, the names it had at each ``Fsync`` and its length then
    #: since the last ``Syncfs``, each name a file had at an ``Fsync`` (btrfs's log tree): (name, inode, the
    #: ``Unlink`` ops of that name since, each of which drops it from the log)
    ghosts: list[tuple[str, int, list[int]]] = field(default_factory=list)
    logged: dict[tuple[str, int], int] = field(default_factory=dict)  # (name, inode) -> its live entry
    #: the ops that made a synced directory reachable: per ``SyncDir(d)``, the op that last bound ``d`` and
    #: each of its ancestors (``journaled`` keeps them, with what their directories held before)
    anchored: set[int] = field(default_factory=set)


def _sync_file(state: Replay, inode: int) -> None:
    settle(state, inode)
    for name in sorted(state.named.get(inode, ())):  # the names the sync logged (btrfs's log tree)
        if (name, inode) not in state.logged:
            state.logged[name, inode] = len(state.ghosts)
            state.ghosts.append((name, inode, []))
    state.synced_length[inode] = len(state.data.get(inode, b""))
    state.synced_data[inode] = bytes(state.data.get(inode, b""))
    state.pending[inode] = []
    state.rewritten.discard(inode)
    state.durable_inodes.add(inode)
    state.untruncated.pop(inode, None)


def _bind(state: Replay, bindings: tuple[Binding, ...]) -> None:
    state.dir_ops.append(bindings)
    state.bindings_synced.append([False] * len(bindings))
    for name, inode in bindings:
        before = state.names.pop(name, None)
        if before is not None:
            state.named.get(before, set()).discard(name)
        if inode is not None:
            state.names[name] = inode
            state.named.setdefault(inode, set()).add(name)


def _new_file(state: Replay, inode: int) -> None:
    state.data[inode] = bytearray()
    state.writes[inode] = []
    state.synced_length[inode] = 0
    state.synced_data[inode] = b""
    state.pending[inode] = []


def _unname(state: Replay, inode: int | None) -> None:
    """One entry fewer names ``inode``; the last one gone frees its bytes."""
    if inode is None or inode in state.directories:
        return
    state.links[inode] = state.links.get(inode, 1) - 1
    if state.links[inode] <= 0 and state.data.get(inode):
        state.freed.append(bytes(state.data[inode]))


def _write(state: Replay, effect: Write) -> None:
    buffer = state.data.setdefault(effect.inode, bytearray())
    start = len(buffer) if effect.offset is None else effect.offset
    if not effect.data.endswith(b"\n") or b"\0" in effect.data:
        state.binary.add(effect.inode)
    state.pending.setdefault(effect.inode, []).append((start, effect.data))
    redirty(state, effect.inode, start, start + len(effect.data))
    if start == len(buffer):
        buffer += effect.data
        state.writes.setdefault(effect.inode, []).append((start, len(buffer)))
        return
    state.rewritten.add(effect.inode)
    if start > len(buffer):
        buffer.extend(bytes(start - len(buffer)))
    buffer[start : start + len(effect.data)] = effect.data


def _truncate(state: Replay, effect: Truncate) -> None:
    inode = effect.inode
    buffer = state.data.setdefault(inode, bytearray())
    state.pending.setdefault(inode, []).append(effect.size)
    cut(state, inode, effect.size, len(buffer))
    if effect.size > len(buffer):
        state.rewritten.add(inode)
        buffer.extend(bytes(effect.size - len(buffer)))
        return
    state.untruncated.setdefault(inode, bytes(buffer[: state.synced_length.get(inode, 0)]))
    del buffer[effect.size :]
    state.writes[inode] = [(s, min(e, effect.size)) for s, e in state.writes.get(inode, [])]
    state.synced_length[inode] = min(state.synced_length.get(inode, 0), effect.size)


def _sync_directory(state: Replay, directory: str | None) -> None:
    """Mark durable every binding so far in ``directory`` (``None``: every directory)."""
    for index, op in enumerate(state.dir_ops):
        for position, (name, _) in enumerate(op):
            if directory is None or parent_of(name) == directory:
                state.bindings_synced[index][position] = True
                state.synced_ops = max(state.synced_ops, index + 1)


def _anchor(state: Replay, directory: str | None) -> None:
    """Record the ops that last bound ``directory`` and each of its ancestors (``Replay.anchored``)."""
    name = directory
    while name:
        for index in reversed(range(len(state.dir_ops))):
            if any(bound == name and inode is not None for bound, inode in state.dir_ops[index]):
                state.anchored.add(index)
                break
        parent = parent_of(name)
        name = parent if parent != name else None


def replay(baseline: Baseline, effects: Sequence[Effect]) -> Replay:
    """Fold ``effects`` over ``baseline`` (see the module docstring).

    Raises:
        UnsupportedEffectError: an ``Unsupported`` effect is among them.
    """
    state = Replay(
        baseline={name: inode for name, inode, _ in baseline.files},
        directories={inode for _, inode in baseline.directories},
        dir_ops=[],
        bindings_synced=[],
        synced_ops=0,
        data={inode: bytearray(data) for _, inode, data in baseline.files},
        writes={inode: [] for _, inode, _ in baseline.files},
        synced_length={inode: len(data) for _, inode, data in baseline.files},
        durable_inodes={inode for _, inode, _ in baseline.files} | {i for _, i in baseline.directories},
        untruncated={},
        freed=[data for data in baseline.freed if data],
        synced_data={inode: data for _, inode, data in baseline.files},
        pending={inode: [] for _, inode, _ in baseline.files},
        rewritten=set(),
        binary=set(),
        links={},
    )
    state.baseline.update({name: inode for name, inode in baseline.directories})
    for name, inode in state.baseline.items():
        state.names[name] = inode
        state.named.setdefault(inode, set()).add(name)
    for _, inode, _ in baseline.files:
        state.links[inode] = state.links.get(inode, 0) + 1
    for effect in effects:
        if isinstance(effect, Create):
            _bind(state, ((effect.name, effect.inode),))
            _new_file(state, effect.inode)
            state.links[effect.inode] = 1
        elif isinstance(effect, Mkdir):
            _bind(state, ((effect.name, effect.inode),))
            state.directories.add(effect.inode)
        elif isinstance(effect, Unlink | Rmdir):
            if (effect.name, effect.inode) in state.logged:
                state.ghosts[state.logged.pop((effect.name, effect.inode))][2].append(len(state.dir_ops))
            _bind(state, ((effect.name, None),))
            _unname(state, effect.inode)
        elif isinstance(effect, Rename):
            _bind(state, ((effect.old, None), (effect.new, effect.inode)))
            _unname(state, effect.replaced)
        elif isinstance(effect, Link):
            _bind(state, ((effect.name, effect.inode),))
            state.links[effect.inode] = state.links.get(effect.inode, 0) + 1
        elif isinstance(effect, Write):
            _write(state, effect)
        elif isinstance(effect, Truncate):
            _truncate(state, effect)
        elif isinstance(effect, Fsync):
            _sync_file(state, effect.inode)
        elif isinstance(effect, FsyncFailed):
            fail(state, effect.inode)
        elif isinstance(effect, SyncDir):
            _sync_directory(state, effect.directory)
            _anchor(state, effect.directory)
            own: int | None = state.baseline.get(effect.directory) if effect.directory else None
            for op in state.dir_ops:  # the directory's own inode is written by its sync
                for name, bound in op:
                    if name == effect.directory and bound is not None:
                        own = bound
            if own is not None:
                state.durable_inodes.add(own)
        elif isinstance(effect, Syncfs):
            _sync_directory(state, None)
            for inode in state.data:
                _sync_file(state, inode)
            state.logged.clear()  # the transaction committed: nothing is replayed from a log
            state.ghosts.clear()
            state.durable_inodes |= state.directories
        elif isinstance(effect, Unsupported):
            raise UnsupportedEffectError(effect.reason)
        elif not isinstance(effect, SyncRange):  # pragma: no cover - the union is exhausted above
            raise TypeError(f"not an effect: {effect!r}")
    return state


def unique(options: Sequence[Content]) -> tuple[Content, ...]:
    """The options without repeats, in order."""
    return tuple(dict.fromkeys(options))


# ---------------------------------------------------------------------------------------- appended files
def contents(state: Replay, inode: int, *, lowest: int) -> tuple[bytes, ...]:
    """The distinguishable prefixes of an appended file's bytes at least ``lowest`` long (module
    docstring)."""
    data = bytes(state.data.get(inode, b""))
    points = {lowest, len(data)}
    binary = inode in state.binary
    for start, end in state.writes.get(inode, []):
        cuts = [start, start + 1, end - 1, end]
        if binary:
            cuts += range((start // SECTOR + 1) * SECTOR, end, SECTOR)
        for point in cuts:
            if lowest <= point <= end and start <= point:
                points.add(point)
    found = [data[:point] for point in sorted(points)]
    if inode in state.untruncated:
        found.append(state.untruncated[inode])  # the truncate itself was lost
    return tuple(found)


def _reading(data: bytes, *, lines: bool) -> tuple[bytes, str]:
    """What a reader tells apart: for text lines, the complete lines and the tail (none, text, or zeros);
    for anything else, every byte."""
    if not lines:
        return data, ""
    cut = data.rfind(b"\n") + 1
    tail = data[cut:]
    return data[:cut], ("" if not tail else "zeros" if b"\0" in tail else "text")


def _stale_blocks(state: Replay, block: int) -> tuple[bytes, ...]:
    """The blocks of ``block`` bytes that removed files' bytes filled (the last one padded with zeros),
    without repeats, in order: what a freed block may still hold. Empty when ``block`` is 0."""
    if not block:
        return ()
    return tuple(
        dict.fromkeys(
            f[k : k + block].ljust(block, b"\0") for f in state.freed for k in range(0, len(f), block)
        )
    )


def lost_blocks(state: Replay, inode: int, *, lowest: int, block: int) -> tuple[bytes, ...]:
    """Prefixes of an appended file's bytes (at least ``lowest`` long) in which unsynced blocks were lost:
    read as zeros from some point, or, for a block the file did not hold yet, as a block of a removed file's
    bytes (stale data). One per reading that no plain prefix already has (see ``_reading``)."""
    data = bytes(state.data.get(inode, b""))
    lines = inode not in state.binary
    plain = contents(state, inode, lowest=lowest)
    seen = {_reading(content, lines=lines) for content in plain}
    found: list[bytes] = []
    writes = state.writes.get(inode, [])
    stale = sorted(_stale_blocks(state, block))
    for end in sorted({len(c) for c in plain}, reverse=True):
        if end <= lowest:
            continue
        blocks: list[list[tuple[int, bytes]]] = []
        for first in range(lowest // block * block, end, block):
            low, high = max(first, lowest), min(first + block, end)
            starts = {low} | {p for s, _ in writes for p in (s, s + 1) if low <= p < high}
            options = [(point, bytes(high - point)) for point in sorted(starts)]
            if first >= lowest:  # a block the file did not hold: it may be a freed one
                options += [(first, chunk[: high - first]) for chunk in stale]
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
            reading = _reading(bytes(content), lines=lines)
            if reading not in seen:
                seen.add(reading)
                found.append(bytes(content))
    return tuple(found)


def zeroed_tails(state: Replay, inode: int, *, lowest: int, block: int) -> tuple[bytes, ...]:
    """Prefixes of an appended file's bytes (at least ``lowest`` long) whose blocks the file did not hold at
    ``lowest`` read as zeros from some block boundary on, to the end: the size and an unwritten extent
    reached the disk, the data did not (ext4 ``data=ordered``). Empty when ``block`` is 0."""
    if not block:
        return ()
    first = -(-lowest // block) * block
    found = [
        content[:boundary] + bytes(len(content) - boundary)
        for content in contents(state, inode, lowest=lowest)
        for boundary in range(first, len(content), block)
    ]
    return tuple(dict.fromkeys(found))


# ------------------------------------------------------------------------------------- rewritten files
class UnitContents(LazyContents):
    """Every content of a rewritten file, lazily: for each possible size, every choice of each sector's
    bytes among its ``values`` (module docstring). ``len`` is exact; items may repeat."""

    __slots__ = ("_counts", "_sizes", "_unit", "_values")

    def __init__(self, sizes: Sequence[int], values: Sequence[Sequence[bytes]], unit: int = SECTOR) -> None:
        self._sizes = tuple(sorted(set(sizes)))
        self._values = tuple(tuple(v) for v in values)
        self._unit = unit
        self._counts = tuple(
            math.prod(len(self._values[u]) for u in range(-(-size // unit))) for size in self._sizes
        )
        self._size = sum(self._counts)

    def _at(self, index: int) -> Content:
        for size, count in zip(self._sizes, self._counts, strict=True):
            if index < count:
                units = -(-size // self._unit)
                parts: list[bytes] = []
                for u in reversed(range(units)):
                    index, digit = divmod(index, len(self._values[u]))
                    parts.append(self._values[u][digit])
                return b"".join(reversed(parts))[:size]
            index -= count
        raise AssertionError("unreachable")  # pragma: no cover


def rewritten_contents(state: Replay, inode: int, *, block: int = 0) -> UnitContents:
    """A rewritten file's possible contents (module docstring); with ``block``, each sector the file did
    not hold at its last sync may also read as zeros or as the matching sector of a removed file's block."""
    moments = file_moments(state, inode)
    sizes = {len(m) for m in moments}
    for before, after in itertools.pairwise(moments):
        if len(after) > len(before):  # an extension may persist part way, at a sector or a byte
            sizes |= {len(before) + 1, len(after) - 1}
            sizes |= set(range((len(before) // SECTOR + 1) * SECTOR, len(after), SECTOR))
    longest = max(sizes)
    synced = len(moments[0])
    stale = _stale_blocks(state, block)
    values: list[list[bytes]] = []
    for unit in range(-(-longest // SECTOR)):
        low = unit * SECTOR
        found = [m[low : low + SECTOR].ljust(SECTOR, b"\0") for m in moments if len(m) > low]
        if block and low >= synced:
            found.append(bytes(SECTOR))
            offset = low % block
            found += [chunk[offset : offset + SECTOR] for chunk in stale]
        values.append(list(dict.fromkeys(found)) or [bytes(SECTOR)])
    return UnitContents(sorted(sizes), values)
