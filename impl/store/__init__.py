"""The production file store: what a model server embeds (SPEC.md §Store, R-STORE-1..10).

``file_store`` (``FileLineageStore``), the effects seam (``fs``), lock stripes (``locks``), the per-handle
cache (``cache``), the line format (``lines``) and its fast canonical JSON (``canonical``), the one module
that orders durable effects (``ordering``), the syncs concurrent removals share (``syncs``, R-STORE-9), the
file system under the directory and its fence sync (``filesystems``, R-STORE-10), and the checker of a
directory's consistency (``consistency``). Imports only ``spec.core``: never the
HTTP stack, the study tools or Hypothesis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capture_ledger._lazy import lazy_attributes

if TYPE_CHECKING:
    from capture_ledger.impl.store._cache import CachedLedger
    from capture_ledger.impl.store._canonical import parse_canonical, record_of_line, row_and_canonical
    from capture_ledger.impl.store._combining import RemovalQueue, shared_combiners
    from capture_ledger.impl.store._consistency import Finding, check, read_snapshot
    from capture_ledger.impl.store._filesystems import SYNCFS_FROM, choose, detect
    from capture_ledger.impl.store._ledgers import PROBE_BYTES
    from capture_ledger.impl.store._lines import (
        FENCE_SUFFIX,
        INCARNATION_BYTES,
        LEDGER_SUFFIX,
        CorruptLedgerError,
        bytes_have_rows,
        decode,
        encode,
        fence_name,
        incarnation_line,
        incarnation_seed,
        ledger_name,
        seal,
    )
    from capture_ledger.impl.store._locks import rollout_slot, stripe_lock, stripe_of
    from capture_ledger.impl.store._ordering import Ordering
    from capture_ledger.impl.store._removals import (
        CombiningSteps,
        FenceSync,
        LockedRollouts,
        RemovalOutcome,
        outcome,
        remove_ledger,
    )
    from capture_ledger.impl.store._statistics import OperationCounts, StoreStatistics
    from capture_ledger.impl.store._syncs import SyncRegister, Syncs, shared_syncs
    from capture_ledger.impl.store.file_store import FileLineageStore, open_file_store
    from capture_ledger.impl.store.fs import FileStat, FileSystem, OsFileSystem, SyncWait, lock_file_name

#: Public names and the private module each is loaded from on first use.
_LAZY = {
    "CachedLedger": "capture_ledger.impl.store._cache",
    "RemovalQueue": "capture_ledger.impl.store._combining",
    "shared_combiners": "capture_ledger.impl.store._combining",
    "parse_canonical": "capture_ledger.impl.store._canonical",
    "record_of_line": "capture_ledger.impl.store._canonical",
    "row_and_canonical": "capture_ledger.impl.store._canonical",
    "Finding": "capture_ledger.impl.store._consistency",
    "check": "capture_ledger.impl.store._consistency",
    "read_snapshot": "capture_ledger.impl.store._consistency",
    "choose": "capture_ledger.impl.store._filesystems",
    "detect": "capture_ledger.impl.store._filesystems",
    "SYNCFS_FROM": "capture_ledger.impl.store._filesystems",
    "CorruptLedgerError": "capture_ledger.impl.store._lines",
    "FENCE_SUFFIX": "capture_ledger.impl.store._lines",
    "INCARNATION_BYTES": "capture_ledger.impl.store._lines",
    "PROBE_BYTES": "capture_ledger.impl.store._ledgers",
    "bytes_have_rows": "capture_ledger.impl.store._lines",
    "incarnation_line": "capture_ledger.impl.store._lines",
    "incarnation_seed": "capture_ledger.impl.store._lines",
    "seal": "capture_ledger.impl.store._lines",
    "LEDGER_SUFFIX": "capture_ledger.impl.store._lines",
    "decode": "capture_ledger.impl.store._lines",
    "encode": "capture_ledger.impl.store._lines",
    "fence_name": "capture_ledger.impl.store._lines",
    "ledger_name": "capture_ledger.impl.store._lines",
    "rollout_slot": "capture_ledger.impl.store._locks",
    "stripe_lock": "capture_ledger.impl.store._locks",
    "stripe_of": "capture_ledger.impl.store._locks",
    "CombiningSteps": "capture_ledger.impl.store._removals",
    "FenceSync": "capture_ledger.impl.store._removals",
    "LockedRollouts": "capture_ledger.impl.store._removals",
    "Ordering": "capture_ledger.impl.store._ordering",
    "RemovalOutcome": "capture_ledger.impl.store._removals",
    "outcome": "capture_ledger.impl.store._removals",
    "remove_ledger": "capture_ledger.impl.store._removals",
    "OperationCounts": "capture_ledger.impl.store._statistics",
    "StoreStatistics": "capture_ledger.impl.store._statistics",
    "SyncRegister": "capture_ledger.impl.store._syncs",
    "Syncs": "capture_ledger.impl.store._syncs",
    "shared_syncs": "capture_ledger.impl.store._syncs",
    "FileLineageStore": "capture_ledger.impl.store.file_store",
    "open_file_store": "capture_ledger.impl.store.file_store",
    "FileStat": "capture_ledger.impl.store.fs",
    "FileSystem": "capture_ledger.impl.store.fs",
    "OsFileSystem": "capture_ledger.impl.store.fs",
    "SyncWait": "capture_ledger.impl.store.fs",
    "lock_file_name": "capture_ledger.impl.store.fs",
}

__all__ = [
    "FENCE_SUFFIX",
    "INCARNATION_BYTES",
    "LEDGER_SUFFIX",
    "PROBE_BYTES",
    "SYNCFS_FROM",
    "CachedLedger",
    "CombiningSteps",
    "CorruptLedgerError",
    "FenceSync",
    "FileLineageStore",
    "FileStat",
    "FileSystem",
    "Finding",
    "LockedRollouts",
    "OperationCounts",
    "Ordering",
    "OsFileSystem",
    "RemovalOutcome",
    "RemovalQueue",
    "StoreStatistics",
    "SyncRegister",
    "SyncWait",
    "Syncs",
    "bytes_have_rows",
    "check",
    "choose",
    "decode",
    "detect",
    "encode",
    "fence_name",
    "incarnation_line",
    "incarnation_seed",
    "ledger_name",
    "lock_file_name",
    "open_file_store",
    "outcome",
    "parse_canonical",
    "read_snapshot",
    "record_of_line",
    "remove_ledger",
    "rollout_slot",
    "row_and_canonical",
    "seal",
    "shared_combiners",
    "shared_syncs",
    "stripe_lock",
    "stripe_of",
]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
