"""``FileLineageStore``: the production file-backed ledger (SPEC.md §Store, R-STORE-1..13).

One directory holds ``<id>.lineage.jsonl`` ledgers (``lines``), empty ``<id>.lineage.retired`` fences and
a fixed set of striped lock files (``locks``). Every operation on a rollout runs under its stripe's lock,
which excludes other threads and other processes; every file-system call goes through the ``FileSystem``
seam (``fs``); the order of creates, syncs and unlinks, and the fence checks, are decided by one
``ordering.Ordering`` (the production one unless a study passes another). Each handle caches
parsed rows (``cache``) and re-validates them under the lock (``ledgers``, which holds everything a handle
does with a rollout's lock held), so handles in several processes on one directory behave as the workers
of one model server. This module holds the public methods, their validation, counting (``statistics``) and
logging, and the handle's life cycle.

Concurrent removals in one process share their directory syncs with ``group_commit=True`` (``_syncs``,
R-STORE-9), and with ``combine_removals`` run as one batch (``_combining``; by default where fences sync
with the directory).
``fence_sync="auto"`` (the default) detects the directory's file system at open and
takes the cheapest fence sync the crash study shows safe there (``filesystems``, R-STORE-10).

A handle that opened its own ``OsFileSystem`` holds one descriptor per lock stripe and one of the
directory until ``close``; a handle collected unclosed has them closed by its finalizer, with a
``ResourceWarning``, as an unclosed file object does.

Guaranteed (given the persistence model of SPEC.md §Crash): a returned ``record`` is durable; a returned
``retire`` leaves its batch Retired and no later write re-creates a ledger until a delete (R-CONC-2); a
returned ``delete`` leaves its batch Absent. Not guaranteed: atomicity of a batch across IDs (R-CONC-1);
exclusion on network file systems whose ``flock`` is node-local (use node-local directories); durability
of fences on a file system without a journal when ``fence_sync="directory"`` is forced there
(docs/architecture.md §Facts); that the finalizer runs at a given moment (it runs when the handle is
collected, which a reference cycle or interpreter exit may delay or skip: call ``close``).
"""

from __future__ import annotations

import functools
import logging
import os
import pathlib
import warnings
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

from capture_ledger.impl.store._cache import LedgerCache
from capture_ledger.impl.store._canonical import parse_canonical, row_and_canonical
from capture_ledger.impl.store._combining import shared_combiners
from capture_ledger.impl.store._filesystems import detect
from capture_ledger.impl.store._ledgers import Ledgers
from capture_ledger.impl.store._lines import entry_json
from capture_ledger.impl.store._ordering import FENCE_SYNCS, FenceSync, Ordering, RemovalOutcome
from capture_ledger.impl.store._statistics import Counters, OperationCounts, StoreStatistics
from capture_ledger.impl.store._syncs import private_syncs, shared_syncs
from capture_ledger.impl.store.fs import FileSystem, OsFileSystem
from capture_ledger.spec.core.ids import staging_key, validate_rollout_id, validate_rollout_ids
from capture_ledger.spec.core.model import Entry, FailureEntry, RecordEntry
from capture_ledger.spec.core.protocol import FailureRow, Manifest, RolloutRemoval
from capture_ledger.spec.core.rows import row_staging_key, validate_failure, validate_model_call_id

__all__ = [
    "DEFAULT_CACHE_ROLLOUTS",
    "DEFAULT_CACHE_ROWS",
    "DEFAULT_COMBINE_REMOVALS",
    "DEFAULT_GROUP_COMMIT",
    "FileLineageStore",
    "OperationCounts",
    "StoreStatistics",
    "open_file_store",
]

logger = logging.getLogger("capture_ledger.impl.store.file_store")

#: Default cache bounds per handle: about the in-flight rollouts of one worker, and their rows.
DEFAULT_CACHE_ROLLOUTS = 2048
DEFAULT_CACHE_ROWS = 65536
#: Whether removals share their syncs (R-STORE-9) and whether they are combined, unless told
#: (decided by the benchmarks: docs/group-commit.md §The decision).
DEFAULT_GROUP_COMMIT = False
DEFAULT_COMBINE_REMOVALS: Literal["auto"] = "auto"


class FileLineageStore:
    """A ``CaptureLedger`` kept in a lineage directory, shared by handles in any number of processes.

    Args:
        directory: the lineage directory (created if missing). With ``fs``, it only names the place.
        fs: the effects seam; default ``OsFileSystem(directory, stripes=stripes)``, closed by ``close``
            (or, with a ``ResourceWarning``, when the handle is collected unclosed).
        stripes: lock stripes when ``fs`` is not given; every process on one directory must agree.
        cache_rollouts: most rollouts whose parsed rows this handle keeps (0 disables the cache).
        cache_rows: most rows kept over all cached rollouts.
        group_commit: concurrent removals of this process on this directory share their syncs (R-STORE-9);
            ``False`` (the default: it did not pay, docs/group-commit.md §The decision) gives each call its
            own.
        combine_removals: concurrent retires (and deletes) of this process on this directory run as one
            batch (``_combining``, docs/group-commit.md §Combining); ``False`` runs each call on its own;
            ``"auto"`` (the default) combines when the store opened its own seam (no ``fs``) and chose its
            own ordering (no ``ordering``), and that syncs fences with
            ``fence_sync="directory"`` (journaled file systems, tmpfs), where combining measured 1.7-2x
            faster, and not with ``"file"`` or ``"syncfs"`` (ext4 without a journal), where one combiner
            serialized the disk's costly creates, unlinks and fence fsyncs (0.2-0.8x; 0.25-1.13x with the
            batch's one ``syncfs``, bounded by the kernel's inode allocation for each new fence).
        fence_sync: how retire makes new fences durable: ``"auto"`` (the default: the cheapest option safe
            on the directory's file system, detected at open, R-STORE-10), ``"directory"``, ``"file"`` or
            ``"syncfs"``; shorthand for ``ordering=Ordering(fence_sync=...)``. Read the choice back as
            ``fence_sync``.
        ordering: the order of durable effects and fence checks, the second seam; default the production
            ``Ordering``. Only the study tools pass another (``impl/study/variants.py``).

    Raises:
        ValueError: a bound is negative, ``stripes`` is below 1, ``fence_sync`` is unknown, or both
            an explicit ``fence_sync`` and ``ordering`` are given.
    """

    def __init__(  # noqa: PLR0913 - the store's options, all keyword-only
        self,
        directory: str | os.PathLike[str],
        *,
        fs: FileSystem | None = None,
        stripes: int = 64,
        cache_rollouts: int = DEFAULT_CACHE_ROLLOUTS,
        cache_rows: int = DEFAULT_CACHE_ROWS,
        group_commit: bool = DEFAULT_GROUP_COMMIT,
        combine_removals: bool | Literal["auto"] = DEFAULT_COMBINE_REMOVALS,
        fence_sync: FenceSync | Literal["auto"] = "auto",
        ordering: Ordering | None = None,
    ) -> None:
        if fence_sync != "auto" and fence_sync not in FENCE_SYNCS:
            raise ValueError(
                f"fence_sync must be 'auto' or one of {', '.join(FENCE_SYNCS)}, not {fence_sync!r}"
            )
        if ordering is not None and fence_sync != "auto":
            raise ValueError("give fence_sync to the Ordering, not to the store as well")
        self._cache = LedgerCache(max_rollouts=cache_rollouts, max_rows=cache_rows)  # validates first
        self.directory = pathlib.Path(directory)
        self._owned: OsFileSystem | None = None
        self._finalizer: weakref.finalize[[OsFileSystem, str], FileLineageStore] | None = None
        if fs is None:
            self._owned = fs = OsFileSystem(self.directory, stripes=stripes)
            # Registered at once, so that no later failure of this constructor leaks the descriptors. The
            # callback holds the file system and the directory's name, never the handle (which it would
            # keep alive); ``close`` detaches it, so exactly one of the two closes the descriptors.
            self._finalizer = weakref.finalize(self, _close_unclosed, fs, str(self.directory))
            self._finalizer.atexit = False  # at exit the process's descriptors go anyway: no warning then
        how = "given"
        own_ordering = ordering is None
        if ordering is None:
            syncfs_from = None
            if fence_sync == "auto":
                detection = detect(self.directory)
                fence_sync, how = detection.fence_sync, f"auto: {detection.reason}"
                syncfs_from = detection.syncfs_from
                if syncfs_from is not None:
                    how += f"; one syncfs for a retire of {syncfs_from} IDs or more"
            ordering = Ordering(fence_sync=fence_sync, syncfs_from=syncfs_from)
        elif fence_sync == "auto":
            how = "given by the ordering"
        self._fs: FileSystem = fs
        self._ordering = ordering
        self._syncs = shared_syncs(self.directory) if group_commit else private_syncs()
        if combine_removals == "auto":
            # Only a store on its own seam and its own ordering: a study's or test's seam gets it when asked.
            combine_removals = self._owned is not None and own_ordering and ordering.fence_sync == "directory"
        # Handles share queues only when a batch run by either does what the other would: the same kind
        # of seam, the same ordering and its settings, the same stripes (R-STORE-15).
        settings: Hashable = (
            type(fs),
            type(ordering),
            ordering.fence_sync,
            ordering.syncfs_from,
            getattr(ordering, "variant", None),
            stripes,
        )
        self._combiners = shared_combiners(self.directory, settings) if combine_removals else None
        self._counters = Counters()
        self._ledgers = Ledgers(fs, ordering, self._cache, self._counters)
        logger.info(
            "lineage store on %s: fence_sync=%s (%s), group_commit=%s, combine_removals=%s",
            self.directory,
            ordering.fence_sync,
            how,
            "on" if group_commit else "off",
            "on" if combine_removals else "off",
        )

    @property
    def fence_sync(self) -> FenceSync:
        """How this handle makes new fences durable: the resolved choice (never ``"auto"``)."""
        return self._ordering.fence_sync

    @property
    def group_commit(self) -> bool:
        """Whether this handle shares its removals' syncs with the process's other calls (R-STORE-9)."""
        return self._syncs.shared

    @property
    def combine_removals(self) -> bool:
        """Whether this handle combines its concurrent removals with the process's other calls."""
        return self._combiners is not None

    # ------------------------------------------------------------------------------------ life cycle
    def close(self) -> None:
        """Forget cached rows and close the descriptors this handle opened. The lock files stay.

        Closing again, or after another thread closed, does nothing more.
        """
        self._cache.clear()
        # ``detach`` hands the descriptors to exactly one caller: this close or the finalizer, never both.
        if self._finalizer is not None and self._finalizer.detach() is not None and self._owned is not None:
            self._owned.close_all()

    def __enter__(self) -> FileLineageStore:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def statistics(self) -> StoreStatistics:
        """This handle's counters and cache size now."""
        return self._counters.snapshot(
            cached=self._cache.size(),
            syncs=self._syncs.counts(),
            fence_sync=self.fence_sync,
            group_commit=self.group_commit,
            combining=self._combiners.counts() if self._combiners is not None else None,
        )

    def sweep_cache(self) -> int:
        """Drop every cached ledger that some handle removed since it was cached (R-STORE-7).

        A handle forgets the rows of the ledgers it removes itself; those another handle (or process)
        removed stay cached until they are used (and then found stale) or evicted. This finds them: one
        read of the removal counter per cached ledger, without the stripe lock (an entry dropped that was
        still good costs one re-read later; one kept is validated under the lock before any use).
        A server may call it when its metrics are read.

        Returns:
            How many cached ledgers were dropped.
        """
        return self._ledgers.sweep()

    # ----------------------------------------------------------------------------------------- writes
    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        """Append ``row`` to the rollout's ledger (R-WRITE-1..6).

        Raises:
            InvalidRolloutIdError: the ID is invalid.
            TypeError, ValueError: the row is not a valid row (nothing is written).
            ConflictingRecordError: a different row holds its ``model_call_id``.
            OSError: the file system failed; the row may or may not be durable.
        """
        self._counters.served("record")
        _validated(rollout_id)
        plain, canonical, raw = row_and_canonical(row)  # validate_row and canonical_json, byte for byte
        entry = RecordEntry(plain["model_call_id"], canonical)
        body = entry_json(entry) if raw is None else b'{"record":' + raw + b"}"
        self._write(rollout_id, entry, plain, body)

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        """Append ``{"model_call_id", "reason"}`` unless the identical failure is there (R-WRITE-7).

        Raises:
            InvalidRolloutIdError: the ID is invalid.
            TypeError, ValueError: either argument is not a non-empty string.
            OSError: the file system failed.
        """
        self._counters.served("record_failure")
        _validated(rollout_id)
        entry = FailureEntry(*validate_failure(model_call_id, reason))
        self._write(rollout_id, entry, None, entry_json(entry))

    def _write(self, rollout_id: str, entry: Entry, row: Mapping[str, Any] | None, body: bytes) -> None:
        if self._ledgers.write(rollout_id, entry, body):
            # Logged after the stripe is released: a slow or blocked log handler (a full pipe, a remote
            # sink) must never stall the other writers and the retires of that stripe (R-WRITE-5).
            key = row_staging_key(row) if row is not None else None
            logger.warning(
                "discarded a late write to retired rollout %s (staging key %s)",
                rollout_id,
                key if key is not None else "none",
            )

    # ------------------------------------------------------------------------------------------ reads
    def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        """The staging key for a new capture, or ``None`` when a fence exists (R-ADMIT-1..2)."""
        self._counters.served("admit")
        validate_rollout_id(rollout_id)
        validate_model_call_id(model_call_id)
        # One stat is atomic on its own: no lock needed.
        if self._ordering.fenced_for_admission(self._fs, rollout_id):
            return None
        return staging_key(rollout_id, model_call_id)

    def manifest(self, rollout_id: str) -> Manifest:
        """The rollout's rows in append order (R-READ-1..3).

        Raises:
            InvalidRolloutIdError: the ID is invalid.
            RolloutRetiredError: the rollout is Retired.
        """
        self._counters.served("manifest")
        entries = self._ledgers.read(validate_rollout_id(rollout_id))
        records: list[dict[str, Any]] = []
        failures: list[FailureRow] = []
        for entry in entries:
            if isinstance(entry, RecordEntry):
                records.append(parse_canonical(entry.canonical))
            else:
                failures.append({"model_call_id": entry.model_call_id, "reason": entry.reason})
        return {"rollout_id": rollout_id, "records": records, "failures": failures}

    def has_rows(self, rollout_id: str) -> bool:
        """Whether the rollout is Live (R-READ-4); ``RolloutRetiredError`` when Retired."""
        self._counters.served("has_rows")
        return bool(self._ledgers.read(validate_rollout_id(rollout_id), copy=False))

    # -------------------------------------------------------------------------------------- removals
    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Make every ID Retired: fence it, sync, then remove its ledger (R-RETIRE-1..4, R-STORE-4).

        Raises:
            TypeError: a bare string or a non-sequence (R-BATCH-1).
            InvalidRolloutIdError: any ID is invalid; nothing was changed (R-BATCH-2).
            OSError: the file system failed; retry the same batch.
        """
        return self._remove("retire", rollout_ids)

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Make every ID Absent: remove ledger and fence, then sync (R-DELETE-1..3, R-STORE-5).

        Raises:
            TypeError: a bare string or a non-sequence (R-BATCH-1).
            InvalidRolloutIdError: any ID is invalid; nothing was changed (R-BATCH-2).
            OSError: the file system failed; retry the same batch.
        """
        return self._remove("delete", rollout_ids)

    def _remove(self, operation: str, rollout_ids: Sequence[str]) -> RolloutRemoval:
        self._counters.served(operation)
        batch = validate_rollout_ids(rollout_ids)
        remove = self._ordering.retire if operation == "retire" else self._ordering.delete
        if self._combiners is None or not batch:
            outcome = remove(self._fs, batch, self._ledgers, self._syncs)
        else:

            def run(
                ids: Sequence[str], fenced: Callable[[Mapping[str, bool]], None] | None
            ) -> RemovalOutcome:
                return remove(self._fs, ids, self._ledgers, self._syncs, fenced=fenced)

            queue = self._combiners.retire if operation == "retire" else self._combiners.delete
            outcome, ran = queue.submit(self._fs, batch, run, self._ordering.combining())
            if not ran:
                return {"removed": outcome.removed, "absent": outcome.absent}
        if outcome.fences_written:
            self._counters.fences_written(outcome.fences_written)
        return {"removed": outcome.removed, "absent": outcome.absent}


def _close_unclosed(fs: OsFileSystem, directory: str) -> None:
    """The finalizer of a handle collected without ``close``: close its descriptors, then warn.

    Closed first, so that a ``ResourceWarning`` turned into an error (``-W error``) cannot keep them open.
    """
    try:
        fs.close_all()
    finally:
        warnings.warn(
            f"unclosed FileLineageStore on {directory!r}: call close() or use it as a context manager",
            ResourceWarning,
            stacklevel=1,  # run by the collector: no caller's line to point at
        )


def _validated(rollout_id: object) -> str:
    """``validate_rollout_id``, remembered for the last 4096 valid IDs (every write validates its ID)."""
    if type(rollout_id) is str:
        return _valid_id(rollout_id)
    return validate_rollout_id(rollout_id)  # raises InvalidRolloutIdError


@functools.lru_cache(maxsize=4096)
def _valid_id(rollout_id: str) -> str:
    return validate_rollout_id(rollout_id)  # an invalid ID raises, and nothing is remembered


def open_file_store(
    workspace: str | os.PathLike[str],
    *,
    group_commit: bool = DEFAULT_GROUP_COMMIT,
    combine_removals: bool | Literal["auto"] = DEFAULT_COMBINE_REMOVALS,
    fence_sync: FenceSync | Literal["auto"] = "auto",
) -> FileLineageStore:
    """Open a ``FileLineageStore`` handle on ``workspace`` (the default ``capture-ledger verify`` target).

    Args:
        workspace: the lineage directory.
        group_commit: as for ``FileLineageStore`` (R-STORE-9).
        combine_removals: as for ``FileLineageStore``.
        fence_sync: as for ``FileLineageStore`` (R-STORE-10).

    Returns:
        The handle.
    """
    return FileLineageStore(
        workspace, group_commit=group_commit, combine_removals=combine_removals, fence_sync=fence_sync
    )
