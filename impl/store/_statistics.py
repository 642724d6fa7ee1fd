"""A handle's statistics: its counters and the frozen records that report them (SPEC.md §Store; STYLE
"statistics are a method returning a frozen record").

``Counters`` is what one ``FileLineageStore`` handle counts while it serves calls: every call per operation
(including calls that raised, counted before the call is validated), fences its retires wrote, and late
writes a fence discarded (R-WRITE-4). ``FileLineageStore.statistics`` reads them into a ``StoreStatistics``
with ``OperationCounts``, together with the cache size and the removals' syncs it gets elsewhere.

Not guaranteed: that a snapshot is consistent with the cache size or the syncs' counts read beside it (each
is read under its own lock, a moment apart); counters of other handles or processes (each handle counts its
own calls, except the shared syncs of group commit); that counters survive ``close`` or a crash (they are
in memory only).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from capture_ledger.impl.store._ordering import FenceSync
from capture_ledger.spec.core.protocol import OPERATIONS

__all__ = ["Counters", "OperationCounts", "StoreStatistics"]


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationCounts:
    """Calls served by one handle, per operation (including calls that raised).

    One field per name of ``spec.core.protocol.OPERATIONS``, in its order (``tests/test_exports.py``).
    """

    record: int = 0
    record_failure: int = 0
    admit: int = 0
    manifest: int = 0
    has_rows: int = 0
    retire: int = 0
    delete: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreStatistics:
    """A snapshot of one handle's counters (``FileLineageStore.statistics``).

    ``syncs_issued`` and ``syncs_joined`` count the removals' syncs of every handle of this process on the
    directory when group commit is on (they share them), this handle's alone when it is off: syncs
    issued, and calls that returned on a sync another call issued. ``removal_batches`` and
    ``removals_combined`` count, when ``combine_removals`` is on, the removal batches every handle of this
    process on the directory ran and the calls that returned on another call's batch (0 when off).
    """

    cached_rollouts: int
    cached_rows: int
    fences_written: int
    late_writes_discarded: int
    operations: OperationCounts
    fence_sync: FenceSync = "directory"
    group_commit: bool = True
    syncs_issued: int = 0
    syncs_joined: int = 0
    combine_removals: bool = False
    removal_batches: int = 0
    removals_combined: int = 0


class Counters:
    """One handle's counters, safe to bump from any thread."""

    __slots__ = ("_discarded", "_fences_written", "_lock", "_operations")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._operations = dict.fromkeys(OPERATIONS, 0)
        self._fences_written = 0
        self._discarded = 0

    def served(self, operation: str) -> None:
        """Count one call of ``operation`` (a name of ``OPERATIONS``)."""
        with self._lock:
            self._operations[operation] += 1

    def fences_written(self, count: int) -> None:
        """Count ``count`` fences a retire wrote."""
        with self._lock:
            self._fences_written += count

    def discarded(self) -> None:
        """Count one late write a fence discarded (R-WRITE-4)."""
        with self._lock:
            self._discarded += 1

    def snapshot(
        self,
        *,
        cached: tuple[int, int],
        syncs: tuple[int, int],
        fence_sync: FenceSync,
        group_commit: bool,
        combining: tuple[int, int] | None = None,
    ) -> StoreStatistics:
        """The counters now, with what the handle reads elsewhere.

        Args:
            cached: the cache's ``(rollouts, rows)``.
            syncs: the removals' ``(issued, joined)`` syncs.
            fence_sync: the handle's resolved fence sync.
            group_commit: whether the handle shares its removals' syncs.
            combining: ``(batches run, calls combined)`` of the removal queues, ``None`` when not combining.

        Returns:
            The frozen record.
        """
        with self._lock:
            return StoreStatistics(
                cached_rollouts=cached[0],
                cached_rows=cached[1],
                fences_written=self._fences_written,
                late_writes_discarded=self._discarded,
                operations=OperationCounts(**self._operations),
                fence_sync=fence_sync,
                group_commit=group_commit,
                syncs_issued=syncs[0],
                syncs_joined=syncs[1],
                combine_removals=combining is not None,
                removal_batches=combining[0] if combining is not None else 0,
                removals_combined=combining[1] if combining is not None else 0,
            )
