"""Crash states from a block-write log, the CrashMonkey way (SPEC.md §Crash; docs/crash.md §The kernel study).

The log between ``START`` and ``END`` is cut at every flush into *epochs*: the writes after one flush and up
to the next (the writes after the last flush form a last epoch). Every write is split into file-system
blocks: a merged request is not atomic on a real disk, a block is. A crash in epoch ``k`` leaves every
write of the epochs before it (they were flushed) and any subset of epoch ``k``'s writes (a disk cache may
persist them in any order). ``crash_states`` enumerates, per epoch, every *prefix* of its writes (in issue
order) and a bounded, seeded sample of other *subsets* (all of them when few), and drops states whose
image equals one already listed.

Each ``CrashState`` carries its *window*: the log positions between which the crash happened —
after the epoch's opening flush and after the last write it keeps, before the flush that closes the epoch
(after that, every write of the epoch is durable). The study judges a state at every point of its window.

Pure: no kernel, no root. Not guaranteed: writes nobody waited for (background writeback) are taken in log
order, a slight under-approximation, as in CrashMonkey; a block is never torn (sector-level tearing is not
modelled).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from capture_ledger.impl.study.kernel._blocklog import FLUSH, WRITE, LogRecord

__all__ = ["BlockWrite", "CrashState", "Epoch", "crash_states", "epochs", "materialize"]


@dataclass(kw_only=True, frozen=True, slots=True)
class BlockWrite:
    """One block of a logged write: the record's position in the log, the byte offset, the bytes."""

    position: int
    offset: int
    data: bytes


@dataclass(kw_only=True, frozen=True, slots=True)
class Epoch:
    """The writes between two flushes: ``opened`` is the log position of the flush before it (-1: the
    start), ``closed`` that of the flush ending it (``None``: the last epoch, ended by ``END``)."""

    index: int
    writes: tuple[BlockWrite, ...]
    opened: int
    closed: int | None


@dataclass(kw_only=True, frozen=True, slots=True)
class CrashState:
    """Every write of the epochs before ``epoch``, and the writes of ``epoch`` whose indexes are in
    ``kept``; ``kind`` is ``prefix`` or ``subset``. The crash happened in the log window
    ``[low, high)``: after record ``low``, before record ``high`` was served."""

    epoch: int
    kept: tuple[int, ...]
    kind: str
    low: int
    high: int

    @property
    def label(self) -> str:
        """A stable name, e.g. ``e3+[0,2]/4``; the study's seed rebuilds the same state from it."""
        return f"e{self.epoch}+[{','.join(map(str, self.kept))}]"


def epochs(records: Sequence[LogRecord], *, block: int) -> list[Epoch]:
    """Cut ``records`` at every flush, splitting each write into ``block``-byte pieces."""
    found: list[Epoch] = []
    writes: list[BlockWrite] = []
    opened = -1
    for position, record in enumerate(records):
        if record.op == WRITE:
            for start in range(0, len(record.data), block):
                writes.append(
                    BlockWrite(
                        position=position,
                        offset=record.offset + start,
                        data=record.data[start : start + block],
                    )
                )
        elif record.op == FLUSH:
            found.append(Epoch(index=len(found), writes=tuple(writes), opened=opened, closed=position))
            writes, opened = [], position
    found.append(Epoch(index=len(found), writes=tuple(writes), opened=opened, closed=None))
    return found


def _subsets(count: int, budget: int, rng: random.Random) -> Iterator[tuple[int, ...]]:
    """Proper, non-empty subsets of ``range(count)`` that are not prefixes: all when at most ``budget``,
    else ``budget`` distinct ones drawn by ``rng``."""
    total = 2**count - 1 - count  # proper non-empty subsets (2^n - 2) less the proper non-empty prefixes
    if total <= budget:
        for size in range(1, count):
            for chosen in itertools.combinations(range(count), size):
                if chosen != tuple(range(size)):
                    yield chosen
        return
    seen: set[tuple[int, ...]] = set()
    attempts = 0
    while len(seen) < budget and attempts < budget * 20:
        attempts += 1
        size = rng.randint(1, count - 1)
        chosen = tuple(sorted(rng.sample(range(count), size)))
        if chosen != tuple(range(size)) and chosen not in seen:
            seen.add(chosen)
            yield chosen


def crash_states(
    found: Sequence[Epoch], *, end: int, subsets: int = 16, seed: int = 0
) -> tuple[list[CrashState], int]:
    """Every prefix and up to ``subsets`` other subsets of each epoch, distinct images only.

    Args:
        found: the epochs of the log (``epochs``).
        end: the log position of ``END`` (the window of the last epoch closes there).
        subsets: the most non-prefix subsets per epoch; fewer when the epoch has fewer.
        seed: seeds the sample (epoch ``k`` draws with ``seed + k``).

    Returns:
        The states, in epoch order, and how many candidates were dropped as duplicates of an earlier image.
    """
    states: list[CrashState] = []
    seen: set[frozenset[tuple[int, bytes]]] = set()
    durable: dict[int, bytes] = {}
    duplicates = 0
    for epoch in found:
        high = epoch.closed if epoch.closed is not None else end
        count = len(epoch.writes)
        last = epoch.closed is None
        prefixes = [tuple(range(size)) for size in range(count + (1 if last else 0))]
        rng = random.Random(seed + epoch.index)
        candidates = [(kept, "prefix") for kept in prefixes]
        candidates += [(kept, "subset") for kept in _subsets(count, subsets, rng)]
        for kept, kind in candidates:
            blocks = dict(durable)
            for index in kept:
                blocks[epoch.writes[index].offset] = epoch.writes[index].data
            signature = frozenset(blocks.items())
            if signature in seen:
                duplicates += 1
                continue
            seen.add(signature)
            low = max([epoch.opened, *(epoch.writes[i].position for i in kept)])
            states.append(CrashState(epoch=epoch.index, kept=kept, kind=kind, low=low, high=high))
        for write in epoch.writes:
            durable[write.offset] = write.data
    return states, duplicates


def materialize(found: Sequence[Epoch], state: CrashState) -> list[tuple[int, bytes]]:
    """The writes that make ``state`` from the image at ``START``, in order: every write of the earlier
    epochs, then the kept ones (later writes to a block win)."""
    writes = [(w.offset, w.data) for epoch in found[: state.epoch] for w in epoch.writes]
    writes += [(found[state.epoch].writes[i].offset, found[state.epoch].writes[i].data) for i in state.kept]
    return writes
