"""The per-handle cache of parsed ledger rows (SPEC.md R-STORE-7; SPEC.md §Store).

Each ``FileLineageStore`` handle keeps, per rollout, what it last parsed of the ledger file: the file's
inode, the offset past the last complete line, the removal counter (generation) it saw, and the entries.
Reads and writes then parse only the bytes appended since. The cache is bounded by rollouts and by rows
(least recently used first out); an entry larger than the row bound is not kept at all.

The store validates an entry under the rollout's lock before using it: same generation (no handle of any
process removed the ledger since), same inode, and a size not below the cached offset. Otherwise the entry
is re-read from byte 0. The handle that removes a ledger drops its own entry. So no handle serves rows, or
appends after rows, that another handle removed or replaced (R-STORE-7).

Thread-safe: the index is guarded by a lock; one ``CachedLedger`` is changed only under its rollout's
stripe lock. Not guaranteed: any hit rate; entries of other handles are not dropped, only found stale (or
swept: ``FileLineageStore.sweep_cache`` drops every entry whose removal counter moved).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from capture_ledger.spec.core.model import Entry, RecordEntry

__all__ = ["CachedLedger", "LedgerCache"]


@dataclass(slots=True, kw_only=True)
class CachedLedger:
    """What one handle knows of one ledger file. Mutable; changed only under the rollout's lock."""

    inode: int
    end: int
    generation: int
    #: Bytes this handle itself made durable (its fsync of an append, or of a re-recorded row, returned).
    durable: int = 0
    entries: list[Entry] = field(default_factory=list)
    #: model_call_id -> canonical JSON of its record, for R-WRITE-3 without a scan.
    records: dict[str, str] = field(default_factory=dict)
    #: failure entries already present, for R-WRITE-7.
    failures: set[Entry] = field(default_factory=set)
    counted: int = 0
    #: The ledger's incarnation seed (``lines.incarnation_seed``); ``None``: a legacy ledger, or none yet.
    seed: int | None = None

    def extend(self, entries: tuple[Entry, ...] | list[Entry]) -> None:
        """Add parsed or appended entries in file order."""
        for entry in entries:
            self.add(entry)

    def add(self, entry: Entry) -> None:
        """Add one parsed or appended entry at the end."""
        self.entries.append(entry)
        if type(entry) is RecordEntry:
            self.records.setdefault(entry.model_call_id, entry.canonical)
        else:
            self.failures.add(entry)


class LedgerCache:
    """A bounded LRU map from rollout ID to ``CachedLedger``.

    Args:
        max_rollouts: most ledgers kept; 0 disables the cache.
        max_rows: most entries kept over all ledgers.
    """

    def __init__(self, *, max_rollouts: int, max_rows: int) -> None:
        if max_rollouts < 0 or max_rows < 0:
            raise ValueError("cache bounds must not be negative")
        self.max_rollouts = max_rollouts
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, CachedLedger] = OrderedDict()
        self._rows = 0

    def get(self, rollout_id: str) -> CachedLedger | None:
        """The entry of ``rollout_id``, marked most recently used; ``None`` when not cached."""
        with self._lock:
            entry = self._entries.get(rollout_id)
            if entry is not None:
                self._entries.move_to_end(rollout_id)
            return entry

    def peek(self, rollout_id: str) -> CachedLedger | None:
        """The entry of ``rollout_id`` without marking it used (the caller puts it back after)."""
        return self._entries.get(rollout_id)  # one dict lookup: atomic, no lock needed

    def put(self, rollout_id: str, entry: CachedLedger) -> None:
        """Keep ``entry`` (after a parse or an append), then evict down to the bounds."""
        with self._lock:
            old = self._entries.get(rollout_id)
            if old is entry:  # the hot path: the same ledger, perhaps with rows added
                grown = len(entry.entries) - entry.counted
                self._entries.move_to_end(rollout_id)
                if not grown:
                    return
                if entry.counted + grown <= self.max_rows:
                    entry.counted += grown
                    self._rows += grown
                    self._evict()
                    return
            if old is not None:
                del self._entries[rollout_id]
                self._rows -= old.counted
            entry.counted = len(entry.entries)
            if entry.counted > self.max_rows or self.max_rollouts == 0:
                return
            self._entries[rollout_id] = entry
            self._rows += entry.counted
            self._evict()

    def _evict(self) -> None:
        # Called with the lock held: least recently used out until within both bounds.
        while len(self._entries) > self.max_rollouts or self._rows > self.max_rows:
            _, evicted = self._entries.popitem(last=False)
            self._rows -= evicted.counted

    def drop(self, rollout_id: str) -> None:
        """Forget ``rollout_id`` (its ledger was removed by this handle, or found stale)."""
        with self._lock:
            old = self._entries.pop(rollout_id, None)
            if old is not None:
                self._rows -= old.counted

    def entries(self) -> list[tuple[str, CachedLedger]]:
        """A snapshot of every ``(rollout ID, entry)`` held now, least recently used first."""
        with self._lock:
            return list(self._entries.items())

    def drop_if(self, rollout_id: str, entry: CachedLedger) -> bool:
        """Forget ``rollout_id`` if ``entry`` is still what is held for it; whether it was dropped."""
        with self._lock:
            if self._entries.get(rollout_id) is not entry:
                return False
            del self._entries[rollout_id]
            self._rows -= entry.counted
            return True

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._entries.clear()
            self._rows = 0

    def size(self) -> tuple[int, int]:
        """``(rollouts, rows)`` held now."""
        with self._lock:
            return len(self._entries), self._rows
