"""A failed fsync in the persistence models: the sectors it covered may be lost, even after a later sync
succeeds (SPEC.md §Decisions, "After a failed fsync"; ``spec.crash.durability``'s docstring).

Linux, after a failed write-back (``fsync`` returning ``EIO``), marks the dirty pages clean and reports the
error once; the next ``fsync`` may return 0 without writing them, and a crash then loses them (PostgreSQL's
"fsyncgate", 2018). Whether the failed call wrote some of them, or none (strace's fault injection skips the
call), the same images are possible: an over-approximation of both.

The rule, per file (``inode``) and 512-byte sector (``SECTOR``):

- ``FsyncFailed``: every sector a write touched since the file's last *successful* sync becomes *poisoned*:
  in every later image it may hold, instead of what the models say, any value it held from that last
  successful sync up to the failure (the durable value first: for bytes never synced, zeros). A sector
  already poisoned keeps the values it had.
- A later ``Write`` touching a poisoned sector marks it *re-dirtied*; a ``Truncate`` to a new size re-dirties
  the sector holding the new end (the kernel zeroes and dirties that block) and drops every poisoned sector
  wholly beyond it.
- A successful ``Fsync`` of the file (or ``Syncfs``) clears the poisoned sectors re-dirtied before it: the
  kernel writes the whole dirty block with its current bytes. The others stay poisoned.

``PoisonedContents`` wraps a file's options (a tuple or a lazy sequence): each option combined with each
choice, per poisoned sector, of keeping it or reading one of its lost values; exact size, lazy, so a large
product is sampled and judged "unknown", never "ok".

Not guaranteed: the exact kernel behaviour (per-page or per-block, which the sector rule over-approximates:
more is lost, never less); a failed sync of a *directory* or a failed ``syncfs`` (the parser records
neither; on ext4 a failed journal commit aborts the journal and remounts read-only); ``ENOSPC`` from a
thinly provisioned device losing other files' pages.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from capture_ledger.spec.crash._images import Content, LazyContents

if TYPE_CHECKING:
    from capture_ledger.spec.crash._replay import Replay

__all__ = [
    "SECTOR",
    "PoisonedContents",
    "cut",
    "fail",
    "file_moments",
    "poisoned_options",
    "redirty",
    "settle",
]

SECTOR = 512


def file_moments(state: Replay, inode: int) -> list[bytes]:
    """The file's bytes at its last successful sync and after each later write or resize (also the moments
    a rewritten file may be seen at, ``_replay.rewritten_contents``)."""
    current = bytearray(state.synced_data.get(inode, b""))
    moments = [bytes(current)]
    for step in state.pending.get(inode, []):
        if isinstance(step, int):
            del current[step:]
            current.extend(bytes(step - len(current)))
        else:
            start, data = step
            if start > len(current):
                current.extend(bytes(start - len(current)))
            current[start : start + len(data)] = data
        moments.append(bytes(current))
    return moments


def fail(state: Replay, inode: int) -> None:
    """``FsyncFailed(inode)``: poison every sector written since the last successful sync."""
    touched: set[int] = set()
    for step in state.pending.get(inode, []):
        if not isinstance(step, int) and step[1]:
            start, data = step
            touched.update(range(start // SECTOR, (start + len(data) - 1) // SECTOR + 1))
    if not touched:
        return
    moments = file_moments(state, inode)
    poisoned = state.poisoned.setdefault(inode, {})
    for sector in sorted(touched - set(poisoned)):
        low = sector * SECTOR
        values = [m[low : low + SECTOR] for m in moments[:-1]]
        kept = moments[-1][low : low + SECTOR]
        lost = tuple(dict.fromkeys(v for v in values if v != kept))
        if lost:  # a sector that held its present bytes all along loses nothing
            poisoned[sector] = lost
    state.redirtied.setdefault(inode, set()).difference_update(touched)


def redirty(state: Replay, inode: int, start: int, end: int) -> None:
    """A write of bytes ``[start, end)``: the poisoned sectors it touches are dirty again."""
    poisoned = state.poisoned.get(inode)
    if poisoned and end > start:
        hit = set(range(start // SECTOR, (end - 1) // SECTOR + 1)) & set(poisoned)
        state.redirtied.setdefault(inode, set()).update(hit)


def cut(state: Replay, inode: int, size: int, before: int) -> None:
    """A ``Truncate`` from ``before`` bytes to ``size``: drop the poisoned sectors beyond it, re-dirty the
    one holding the new end."""
    poisoned = state.poisoned.get(inode)
    if not poisoned or size == before:
        return
    for sector in [s for s in poisoned if s * SECTOR >= size]:
        del poisoned[sector]
        state.redirtied.get(inode, set()).discard(sector)
    if size % SECTOR and size // SECTOR in poisoned:
        state.redirtied.setdefault(inode, set()).add(size // SECTOR)


def settle(state: Replay, inode: int) -> None:
    """A successful sync of ``inode``: its re-dirtied poisoned sectors are durable now."""
    poisoned = state.poisoned.get(inode)
    if poisoned:
        for sector in state.redirtied.pop(inode, set()):
            poisoned.pop(sector, None)
        if not poisoned:
            del state.poisoned[inode]


class PoisonedContents(LazyContents):
    """Every option of ``base`` with each poisoned sector kept or read as one of its lost values (module
    docstring); ``len`` is exact, items may repeat (a sector beyond an option's size changes nothing)."""

    __slots__ = ("_base", "_sectors")

    def __init__(self, base: Sequence[Content], sectors: Sequence[tuple[int, tuple[bytes, ...]]]) -> None:
        self._base = base
        self._sectors = tuple(sectors)
        self._size = len(base) * math.prod(len(values) + 1 for _, values in self._sectors)

    def _at(self, index: int) -> Content:
        choices: list[tuple[int, bytes]] = []
        for sector, values in reversed(self._sectors):
            index, digit = divmod(index, len(values) + 1)
            if digit:
                choices.append((sector, values[digit - 1]))
        content = self._base[index]
        if not isinstance(content, bytes) or not choices:
            return content
        data = bytearray(content)
        for sector, value in choices:
            low = sector * SECTOR
            if low < len(data):
                high = min(len(data), low + SECTOR)
                data[low:high] = value[: high - low].ljust(high - low, b"\0")
        return bytes(data)


def poisoned_options(state: Replay, inode: int, base: Sequence[Content]) -> Sequence[Content]:
    """``base`` as it stands, or with the file's poisoned sectors (``PoisonedContents``)."""
    sectors = state.poisoned.get(inode)
    if not sectors:
        return base
    return PoisonedContents(base, sorted(sectors.items()))
