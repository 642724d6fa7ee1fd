"""A handle's ledgers under their locks: reading, appending, and what removals ask (SPEC.md §Store,
R-STORE-3, R-STORE-6, R-STORE-7, R-STORE-13; R-WRITE-3..7, R-READ-3).

``Ledgers`` is the part of one ``FileLineageStore`` handle that runs with a rollout's stripe lock held: it
loads a ledger's entries from the handle's cache and the bytes appended since (``load``), applies one write
(``write``: create the ledger, or cut a torn tail and append), reads the entries (``read``), and is the
store's side of ``ordering.LockedRollouts`` for retire and delete (``slot``, ``probe``, ``forget``). It
remembers the ledgers whose failed write could not be undone ("poisoned", R-STORE-13). The order of the
durable effects is the ``Ordering``'s, never decided here; every file-system call goes through the seam.
The public methods, the validation of IDs and rows, the counting of calls, the logging and the handle's
life cycle stay in ``file_store``.

Not guaranteed: anything across handles beyond what the stripe lock and the removal counters give
(R-STORE-7: another handle's removal is found, not prevented); that a poisoned ledger is remembered after
``close`` or by another handle (each handle refuses only the re-records it cannot vouch for, R-STORE-13).
"""

from __future__ import annotations

import errno

from capture_ledger.impl.store._cache import CachedLedger, LedgerCache
from capture_ledger.impl.store._lines import (
    decode,
    fence_name,
    has_rows,
    incarnation_line,
    incarnation_seed,
    ledger_name,
    seal,
)
from capture_ledger.impl.store._locks import RolloutSlot, rollout_slot, stripe_lock
from capture_ledger.impl.store._ordering import Ordering
from capture_ledger.impl.store._statistics import Counters
from capture_ledger.impl.store.fs import FileSystem
from capture_ledger.spec.core.errors import ConflictingRecordError, RolloutRetiredError
from capture_ledger.spec.core.model import Entry, RecordEntry

__all__ = ["Ledgers"]


#: Bytes a removal's probe reads of an uncached ledger (``probe``): the incarnation line and a first row fit
#: in them but for rows longer than about 4 KiB, which cost a second, whole read.
PROBE_BYTES = 4096


class Ledgers:
    """One handle's access to its ledgers with the rollout's lock held (see the module docstring).

    Args:
        fs: the handle's effects seam.
        ordering: the handle's order of durable effects and fence checks.
        cache: the handle's cache of parsed rows (R-STORE-7).
        counters: the handle's counters (late writes discarded are counted here).
    """

    __slots__ = ("_cache", "_counters", "_fs", "_ordering", "_poisoned", "_stripes")

    def __init__(self, fs: FileSystem, ordering: Ordering, cache: LedgerCache, counters: Counters) -> None:
        self._fs = fs
        self._stripes = fs.stripes
        self._ordering = ordering
        self._cache = cache
        self._counters = counters
        #: Rollouts whose ledger had a write that failed and could not be undone: rollout ID -> the
        #: ledger's inode (``None``: unknown). Changed under the rollout's lock (R-STORE-13).
        self._poisoned: dict[str, int | None] = {}

    # ----------------------------------------------------------------------------------------- writes
    def write(self, rollout_id: str, entry: Entry, body: bytes) -> bool:
        """Apply one write (``body`` is ``entry_json(entry)``, sealed here with the ledger's incarnation,
        R-STORE-14) under the rollout's lock; ``True`` when a fence discarded it (R-WRITE-4)."""
        fs, order = self._fs, self._ordering
        stripe, slot = rollout_slot(rollout_id, self._stripes)
        name = ledger_name(rollout_id)
        with stripe_lock(fs, stripe):
            generation = fs.generation(stripe, slot)
            fd = fs.open_append(name, create=False)
            if fd is None:
                if self._poisoned:
                    self._poisoned.pop(rollout_id, None)  # that ledger is gone: nothing left to refuse
                # No ledger, so no rows: the one case in which a write looks for the fence (R-WRITE-6).
                if self._fenced_for_write(rollout_id):
                    return True
                created = incarnation_line()
                created_seed = incarnation_seed(created)
                try:
                    stat = order.create_ledger(fs, name, seal(body, created_seed), incarnation=created)
                except OSError:
                    if not order.undo_create(fs, name):
                        self._poison(rollout_id, None)
                    raise
                cached = CachedLedger(
                    inode=stat.inode,
                    end=stat.size,
                    generation=generation,
                    durable=stat.size,
                    seed=created_seed,
                )
                cached.add(entry)
                self._cache.put(rollout_id, cached)
                return False
            try:
                size = fs.size(fd)
                loaded = self.load(rollout_id, generation, size=size, fd=fd)
                if loaded is None:  # pragma: no cover - the file is open and we hold the lock
                    raise FileNotFoundError(name)
                if not loaded.entries and self._fenced_for_write(rollout_id):
                    self._cache.put(rollout_id, loaded)
                    return True
                if _already_there(loaded, entry, rollout_id):
                    self._refuse_if_poisoned(rollout_id, fd)
                    # R-CRASH-1: the row may come from a call that failed or died before its syncs; only
                    # when this handle itself made every row it knows durable is there nothing to do.
                    if loaded.durable < loaded.end:
                        try:
                            order.confirm_existing(fs, fd)
                        except OSError:
                            # R-STORE-13: the row cannot be written again (it would be there twice), and
                            # a later fsync may succeed without it on disk: refuse its re-records.
                            self._poison(rollout_id, fd)
                            raise
                        loaded.durable = loaded.end
                    self._cache.put(rollout_id, loaded)
                    return False
                torn_end = loaded.end if size > loaded.end else None
                first_row = not loaded.entries
                seed, incarnation = loaded.seed, None
                if first_row and seed is None:
                    # No complete line (loaded.end is 0): the ledger starts a new incarnation (R-STORE-14).
                    incarnation = incarnation_line()
                    seed = incarnation_seed(incarnation)
                line = seal(body, seed)
                try:
                    order.append_line(
                        fs, fd, line, torn_end=torn_end, first_row=first_row, incarnation=incarnation
                    )
                except OSError:
                    start = loaded.end  # where the line began (after the torn tail's cut, if any)
                    if first_row:
                        self._cache.drop(rollout_id)
                    if not order.undo_append(fs, fd, name, start, first_row=first_row, slot=(stripe, slot)):
                        self._poison(rollout_id, fd)
                    raise
            finally:
                fs.close(fd)
            loaded.end += len(line) + (len(incarnation) if incarnation is not None else 0)
            loaded.seed = seed
            loaded.durable = loaded.end  # the fsync of this append covered every byte before it
            loaded.add(entry)
            self._cache.put(rollout_id, loaded)
            return False

    def _poison(self, rollout_id: str, fd: int | None) -> None:
        """Under the lock: a write to the ledger failed and could not be undone, so rows in it may not be
        durable although a later fsync would succeed (R-STORE-13). Remembered with the file's inode."""
        try:
            inode = self._fs.fstat(fd).inode if fd is not None else None
        except OSError:
            inode = None
        self._poisoned[rollout_id] = inode
        self._cache.drop(rollout_id)

    def _refuse_if_poisoned(self, rollout_id: str, fd: int) -> None:
        """Under the lock, before a re-record is acknowledged: raise ``OSError(EIO)`` while the ledger this
        handle poisoned is still the one open (R-STORE-13); forget the poison once it was replaced."""
        if not self._poisoned or rollout_id not in self._poisoned:
            return
        inode = self._poisoned[rollout_id]
        if inode is not None and self._fs.fstat(fd).inode != inode:
            del self._poisoned[rollout_id]
            return
        raise OSError(
            errno.EIO,
            f"an earlier write or sync of the ledger of {rollout_id!r} failed and could not be undone, so "
            "this handle cannot vouch that its rows are durable (a later fsync may succeed without them on "
            "disk); re-records of rows already in it are refused until the rollout is retired or deleted",
        )

    def _fenced_for_write(self, rollout_id: str) -> bool:
        """Whether a write to a rollout without rows is discarded by a fence (R-WRITE-4, R-WRITE-6)."""
        if not self._ordering.fenced_for_write(self._fs, rollout_id):
            return False
        self._counters.discarded()
        return True

    # ------------------------------------------------------------------------------------------ reads
    def read(self, rollout_id: str, *, copy: bool = True) -> list[Entry]:
        """Under the lock: the rollout's entries (a copy, unless ``copy`` is off), or ``[]``; raises
        ``RolloutRetiredError`` when it is Retired (R-READ-3)."""
        fs = self._fs
        stripe, slot = rollout_slot(rollout_id, self._stripes)
        with stripe_lock(fs, stripe):
            loaded = self.load(rollout_id, fs.generation(stripe, slot), size=None)
            if loaded is not None:
                self._cache.put(rollout_id, loaded)
                if loaded.entries:
                    return list(loaded.entries) if copy else loaded.entries
            if fs.stat(fence_name(rollout_id)) is not None:
                raise RolloutRetiredError(rollout_id)  # R-READ-3
            return []

    def load(
        self, rollout_id: str, generation: int, *, size: int | None, fd: int | None = None
    ) -> CachedLedger | None:
        """Under the lock: the ledger's current entries, from the cache and the new tail only.

        ``size`` is the ledger's size when the caller has it open (a write), and ``fd`` the descriptor:
        bytes are then read through it (``read_open``), with no second open. Returns ``None`` when no
        ledger file exists. The result is not yet in the cache; the caller puts it there.

        R-STORE-7: a cached entry is used only while the rollout's removal counter is the one it saw
        (``cache_current``); then the file under the name is the one it describes. A write whose open
        ledger has exactly the cached size reads nothing more (the hot path); whenever bytes are read, the
        inode and size are compared too (``cache_matches``), and a mismatch re-reads from byte 0.
        """
        fs, order = self._fs, self._ordering
        name = ledger_name(rollout_id)
        cached = self._cache.peek(rollout_id)  # every caller puts the result back, marking it used
        if cached is not None and not order.cache_current(cached, generation):
            cached = None  # another handle removed this ledger since (R-STORE-7)
        if cached is not None:
            if size is None:
                stat = fs.stat(name)
                if not order.cache_matches(cached, stat):
                    if stat is None:
                        self._cache.drop(rollout_id)
                        return None
                    cached = None
                elif stat is None or stat.size == cached.end:
                    return cached  # the read's hot path: nothing new, nothing read
            elif size == cached.end:
                return cached  # the write's hot path: nothing appended since, nothing read
        if cached is not None:
            got = fs.read(name, cached.end) if fd is None else fs.read_open(fd, cached.end)
            if got is not None and order.cache_matches(cached, got[0]):
                decoded = decode(got[1], start=cached.end, name=name, seed=cached.seed)
                cached.extend(decoded.entries)
                cached.end = decoded.end
                cached.seed = decoded.seed
                return cached
        self._cache.drop(rollout_id)
        got = fs.read(name, 0) if fd is None else fs.read_open(fd, 0)
        if got is None:
            return None
        stat, data = got
        decoded = decode(data, name=name)
        fresh = CachedLedger(inode=stat.inode, end=decoded.end, generation=generation, seed=decoded.seed)
        fresh.extend(decoded.entries)
        return fresh

    def sweep(self) -> int:
        """Drop every cached ledger whose removal counter moved since it was cached (R-STORE-7), without
        the stripe lock: an entry dropped that was still good costs one re-read later; one kept is
        validated under the lock before any use. Returns how many were dropped."""
        fs, order, stripes = self._fs, self._ordering, self._stripes
        dropped = 0
        for rollout_id, cached in self._cache.entries():
            stripe, slot = rollout_slot(rollout_id, stripes)
            if not order.cache_current(cached, fs.generation(stripe, slot)):
                dropped += self._cache.drop_if(rollout_id, cached)
        return dropped

    # -------------------------------------------------------------------- what removals ask, locked
    def slot(self, rollout_id: str) -> RolloutSlot:
        """The ID's lock stripe and removal-counter slot."""
        return rollout_slot(rollout_id, self._stripes)

    def probe(self, rollout_id: str) -> tuple[bool, bool]:
        """``(has rows, ledger file exists)``; the caller holds the ID's lock."""
        cached = self._cache.get(rollout_id)
        if cached is not None and cached.entries:
            slot = rollout_slot(rollout_id, self._stripes)
            if self._ordering.cache_current(cached, self._fs.generation(*slot)):
                return True, True  # rows vanish only by a removal, which bumps the generation
        # Uncached: a removal needs to know only whether a complete line exists, not to parse them all
        # (a corrupt ledger is removed like any other; reads are what report corruption). The first
        # ``PROBE_BYTES`` decide unless they are all complete-line-less and the file may go on.
        name = ledger_name(rollout_id)
        head = self._fs.head(name, PROBE_BYTES)
        if head is None:
            return False, False
        if has_rows(head) or len(head) < PROBE_BYTES:
            return has_rows(head), True
        got = self._fs.read(name, 0)  # a first row longer than the probe
        return (got is not None and has_rows(got[1])), True

    def forget(self, rollout_id: str) -> None:
        """Drop the cached rows of a removed ID, and its poison: the ledger it described is gone."""
        self._cache.drop(rollout_id)
        self._poisoned.pop(rollout_id, None)


def _already_there(loaded: CachedLedger, entry: Entry, rollout_id: str) -> bool:
    """R-WRITE-3 and R-WRITE-7: an identical row is a no-op; a different record raises."""
    if isinstance(entry, RecordEntry):
        existing = loaded.records.get(entry.model_call_id)
        if existing is None:
            return False
        if existing == entry.canonical:
            return True
        raise ConflictingRecordError(rollout_id, entry.model_call_id)
    return entry in loaded.failures
