"""``FileLineageStore``: the production file-backed ledger (SPEC.md §Store, R-STORE-1..8; SPEC.md §Store).

One directory holds ``<id>.lineage.jsonl`` ledgers (``lines``), empty ``<id>.lineage.retired`` fences and
a fixed set of striped lock files (``locks``). Every operation on a rollout runs under its stripe's lock,
which excludes other threads and other processes; every file-system call goes through the ``FileSystem``
seam (``fs``); the order of creates, syncs and unlinks, and the fence checks, are decided by one
``ordering.Ordering`` (the production one unless a study passes another). Each handle caches
parsed rows (``cache``) and re-validates them under the lock, so handles in several processes on one
directory behave as the workers of one model server.

Concurrent removals in one process share their directory syncs (group commit, ``syncs``, R-STORE-9) unless
``group_commit=False``. ``fence_sync="auto"`` (the default) detects the directory's file system at open and
takes the cheapest fence sync the crash study shows safe there (``filesystems``, R-STORE-10).

Guaranteed (given the persistence model of SPEC.md §Crash): a returned ``record`` is durable; a returned
``retire`` leaves its batch Retired and no later write re-creates a ledger until a delete (R-CONC-2); a
returned ``delete`` leaves its batch Absent. Not guaranteed: atomicity of a batch across IDs (R-CONC-1);
exclusion on network file systems whose ``flock`` is node-local (use node-local directories); durability
of fences on a file system without a journal when ``fence_sync="directory"`` is forced there
(docs/architecture.md §Facts).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import pathlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

from capture_ledger.impl.store._cache import CachedLedger, LedgerCache
from capture_ledger.impl.store._canonical import parse_canonical, row_and_canonical
from capture_ledger.impl.store._filesystems import detect
from capture_ledger.impl.store._lines import decode, encode, fence_name, ledger_name
from capture_ledger.impl.store._locks import RolloutSlot, rollout_slot, stripe_lock
from capture_ledger.impl.store._ordering import FENCE_SYNCS, FenceSync, Ordering
from capture_ledger.impl.store._syncs import private_syncs, shared_syncs
from capture_ledger.impl.store.fs import FileSystem, OsFileSystem
from capture_ledger.spec.core.errors import ConflictingRecordError, RolloutRetiredError
from capture_ledger.spec.core.ids import staging_key, validate_rollout_id, validate_rollout_ids
from capture_ledger.spec.core.model import Entry, FailureEntry, RecordEntry
from capture_ledger.spec.core.protocol import OPERATIONS, FailureRow, Manifest, RolloutRemoval
from capture_ledger.spec.core.rows import row_staging_key, validate_failure, validate_model_call_id

__all__ = [
    "DEFAULT_CACHE_ROLLOUTS",
    "DEFAULT_CACHE_ROWS",
    "FileLineageStore",
    "OperationCounts",
    "StoreStatistics",
    "open_file_store",
]

logger = logging.getLogger("capture_ledger.impl.store.file_store")

#: Default cache bounds per handle: about the in-flight rollouts of one worker, and their rows.
DEFAULT_CACHE_ROLLOUTS = 2048
DEFAULT_CACHE_ROWS = 65536


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
    issued, and calls that returned on a sync another call issued.
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


class FileLineageStore:
    """A ``CaptureLedger`` kept in a lineage directory, shared by handles in any number of processes.

    Args:
        directory: the lineage directory (created if missing). With ``fs``, it only names the place.
        fs: the effects seam; default ``OsFileSystem(directory, stripes=stripes)``, closed by ``close``.
        stripes: lock stripes when ``fs`` is not given; every process on one directory must agree.
        cache_rollouts: most rollouts whose parsed rows this handle keeps (0 disables the cache).
        cache_rows: most rows kept over all cached rollouts.
        group_commit: concurrent removals of this process on this directory share their syncs (R-STORE-9);
            ``False`` gives each call its own.
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

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fs: FileSystem | None = None,
        stripes: int = 64,
        cache_rollouts: int = DEFAULT_CACHE_ROLLOUTS,
        cache_rows: int = DEFAULT_CACHE_ROWS,
        group_commit: bool = True,
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
        if fs is None:
            self._owned = OsFileSystem(self.directory, stripes=stripes)
            fs = self._owned
        how = "given"
        if ordering is None:
            if fence_sync == "auto":
                detection = detect(self.directory)
                fence_sync, how = detection.fence_sync, f"auto: {detection.reason}"
            ordering = Ordering(fence_sync=fence_sync)
        elif fence_sync == "auto":
            how = "given by the ordering"
        self._fs: FileSystem = fs
        self._stripes = fs.stripes
        self._ordering = ordering
        self._syncs = shared_syncs(self.directory) if group_commit else private_syncs()
        self._rollouts = _Rollouts(self)
        self._counts_lock = threading.Lock()
        self._counts = dict.fromkeys(OPERATIONS, 0)
        self._fences_written = 0
        self._discarded = 0
        #: Rollouts whose ledger had a write that failed and could not be undone: rollout ID -> the
        #: ledger's inode (``None``: unknown). Changed under the rollout's lock (R-STORE-13).
        self._poisoned: dict[str, int | None] = {}
        logger.info(
            "lineage store on %s: fence_sync=%s (%s), group_commit=%s",
            self.directory,
            ordering.fence_sync,
            how,
            "on" if group_commit else "off",
        )

    @property
    def fence_sync(self) -> FenceSync:
        """How this handle makes new fences durable: the resolved choice (never ``"auto"``)."""
        return self._ordering.fence_sync

    @property
    def group_commit(self) -> bool:
        """Whether this handle shares its removals' syncs with the process's other calls (R-STORE-9)."""
        return self._syncs.shared

    # ------------------------------------------------------------------------------------ life cycle
    def close(self) -> None:
        """Forget cached rows and close the descriptors this handle opened. The lock files stay."""
        self._cache.clear()
        if self._owned is not None:
            self._owned.close_all()
            self._owned = None

    def __enter__(self) -> FileLineageStore:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def statistics(self) -> StoreStatistics:
        """This handle's counters and cache size now."""
        rollouts, rows = self._cache.size()
        issued, joined = self._syncs.counts()
        with self._counts_lock:
            return StoreStatistics(
                cached_rollouts=rollouts,
                cached_rows=rows,
                fences_written=self._fences_written,
                late_writes_discarded=self._discarded,
                operations=OperationCounts(**self._counts),
                fence_sync=self.fence_sync,
                group_commit=self.group_commit,
                syncs_issued=issued,
                syncs_joined=joined,
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
        fs, order, stripes = self._fs, self._ordering, self._stripes
        dropped = 0
        for rollout_id, cached in self._cache.entries():
            stripe, slot = rollout_slot(rollout_id, stripes)
            if not order.cache_current(cached, fs.generation(stripe, slot)):
                dropped += self._cache.drop_if(rollout_id, cached)
        return dropped

    def _served(self, operation: str) -> None:
        with self._counts_lock:
            self._counts[operation] += 1

    # ----------------------------------------------------------------------------------------- writes
    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        """Append ``row`` to the rollout's ledger (R-WRITE-1..6).

        Raises:
            InvalidRolloutIdError: the ID is invalid.
            TypeError, ValueError: the row is not a valid row (nothing is written).
            ConflictingRecordError: a different row holds its ``model_call_id``.
            OSError: the file system failed; the row may or may not be durable.
        """
        self._served("record")
        _validated(rollout_id)
        plain, canonical, raw = row_and_canonical(row)  # validate_row and canonical_json, byte for byte
        entry = RecordEntry(plain["model_call_id"], canonical)
        line = encode(entry) if raw is None else b'{"record":' + raw + b"}\n"
        self._write(rollout_id, entry, plain, line)

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        """Append ``{"model_call_id", "reason"}`` unless the identical failure is there (R-WRITE-7).

        Raises:
            InvalidRolloutIdError: the ID is invalid.
            TypeError, ValueError: either argument is not a non-empty string.
            OSError: the file system failed.
        """
        self._served("record_failure")
        _validated(rollout_id)
        entry = FailureEntry(*validate_failure(model_call_id, reason))
        self._write(rollout_id, entry, None, encode(entry))

    def _write(self, rollout_id: str, entry: Entry, row: Mapping[str, Any] | None, line: bytes) -> None:
        if self._write_locked(rollout_id, entry, line):
            # Logged after the stripe is released: a slow or blocked log handler (a full pipe, a remote
            # sink) must never stall the other writers and the retires of that stripe (R-WRITE-5).
            key = row_staging_key(row) if row is not None else None
            logger.warning(
                "discarded a late write to retired rollout %s (staging key %s)",
                rollout_id,
                key if key is not None else "none",
            )

    def _write_locked(self, rollout_id: str, entry: Entry, line: bytes) -> bool:
        """Apply one write (``line`` is ``encode(entry)``) under the rollout's lock; ``True`` when a fence
        discarded it (R-WRITE-4)."""
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
                try:
                    stat = order.create_ledger(fs, name, line)
                except OSError:
                    if not order.undo_create(fs, name):
                        self._poison(rollout_id, None)
                    raise
                cached = CachedLedger(
                    inode=stat.inode, end=stat.size, generation=generation, durable=stat.size
                )
                cached.add(entry)
                self._cache.put(rollout_id, cached)
                return False
            try:
                size = fs.size(fd)
                loaded = self._load(rollout_id, generation, size=size)
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
                try:
                    order.append_line(fs, fd, line, torn_end=torn_end, first_row=first_row)
                except OSError:
                    start = loaded.end  # where the line began (after the torn tail's cut, if any)
                    if first_row:
                        self._cache.drop(rollout_id)
                    if not order.undo_append(fs, fd, name, start, first_row=first_row, slot=(stripe, slot)):
                        self._poison(rollout_id, fd)
                    raise
            finally:
                fs.close(fd)
            loaded.end += len(line)
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
        with self._counts_lock:
            self._discarded += 1
        return True

    # ------------------------------------------------------------------------------------------ reads
    def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        """The staging key for a new capture, or ``None`` when a fence exists (R-ADMIT-1..2)."""
        self._served("admit")
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
        self._served("manifest")
        entries = self._read(validate_rollout_id(rollout_id))
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
        self._served("has_rows")
        return bool(self._read(validate_rollout_id(rollout_id), copy=False))

    def _read(self, rollout_id: str, *, copy: bool = True) -> list[Entry]:
        """Under the lock: the rollout's entries (a copy, unless ``copy`` is off), or ``[]``; raises
        ``RolloutRetiredError`` when it is Retired (R-READ-3)."""
        fs = self._fs
        stripe, slot = rollout_slot(rollout_id, self._stripes)
        with stripe_lock(fs, stripe):
            loaded = self._load(rollout_id, fs.generation(stripe, slot), size=None)
            if loaded is not None:
                self._cache.put(rollout_id, loaded)
                if loaded.entries:
                    return list(loaded.entries) if copy else loaded.entries
            if fs.stat(fence_name(rollout_id)) is not None:
                raise RolloutRetiredError(rollout_id)  # R-READ-3
            return []

    def _load(self, rollout_id: str, generation: int, *, size: int | None) -> CachedLedger | None:
        """Under the lock: the ledger's current entries, from the cache and the new tail only.

        ``size`` is the ledger's size when the caller has it open (a write). Returns ``None`` when no
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
            got = fs.read(name, cached.end)
            if got is not None and order.cache_matches(cached, got[0]):
                decoded = decode(got[1], start=cached.end, name=name)
                cached.extend(decoded.entries)
                cached.end = decoded.end
                return cached
        self._cache.drop(rollout_id)
        got = fs.read(name, 0)
        if got is None:
            return None
        stat, data = got
        decoded = decode(data, name=name)
        fresh = CachedLedger(inode=stat.inode, end=decoded.end, generation=generation)
        fresh.extend(decoded.entries)
        return fresh

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
        self._served(operation)
        batch = validate_rollout_ids(rollout_ids)
        remove = self._ordering.retire if operation == "retire" else self._ordering.delete
        outcome = remove(self._fs, batch, self._rollouts, self._syncs)
        if outcome.fences_written:
            with self._counts_lock:
                self._fences_written += outcome.fences_written
        return {"removed": outcome.removed, "absent": outcome.absent}

    def _probe(self, rollout_id: str) -> tuple[bool, bool]:
        cached = self._cache.get(rollout_id)
        if cached is not None and cached.entries:
            slot = rollout_slot(rollout_id, self._stripes)
            if self._ordering.cache_current(cached, self._fs.generation(*slot)):
                return True, True  # rows vanish only by a removal, which bumps the generation
        # Uncached: a removal needs to know only whether a complete line exists, not to parse them all
        # (a corrupt ledger is removed like any other; reads are what report corruption).
        got = self._fs.read(ledger_name(rollout_id), 0)
        if got is None:
            return False, False
        return b"\n" in got[1], True


class _Rollouts:
    """The store's side of ``ordering.LockedRollouts``: one per handle."""

    __slots__ = ("_store",)

    def __init__(self, store: FileLineageStore) -> None:
        self._store = store

    def slot(self, rollout_id: str) -> RolloutSlot:
        return rollout_slot(rollout_id, self._store._stripes)

    def probe(self, rollout_id: str) -> tuple[bool, bool]:
        return self._store._probe(rollout_id)

    def forget(self, rollout_id: str) -> None:
        self._store._cache.drop(rollout_id)
        self._store._poisoned.pop(rollout_id, None)  # removed: the ledger it described is gone


def _validated(rollout_id: object) -> str:
    """``validate_rollout_id``, remembered for the last 4096 valid IDs (every write validates its ID)."""
    if type(rollout_id) is str:
        return _valid_id(rollout_id)
    return validate_rollout_id(rollout_id)  # raises InvalidRolloutIdError


@functools.lru_cache(maxsize=4096)
def _valid_id(rollout_id: str) -> str:
    return validate_rollout_id(rollout_id)  # an invalid ID raises, and nothing is remembered


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


def open_file_store(
    workspace: str | os.PathLike[str],
    *,
    group_commit: bool = True,
    fence_sync: FenceSync | Literal["auto"] = "auto",
) -> FileLineageStore:
    """Open a ``FileLineageStore`` handle on ``workspace`` (the default ``capture-ledger verify`` target).

    Args:
        workspace: the lineage directory.
        group_commit: as for ``FileLineageStore`` (R-STORE-9).
        fence_sync: as for ``FileLineageStore`` (R-STORE-10).

    Returns:
        The handle.
    """
    return FileLineageStore(workspace, group_commit=group_commit, fence_sync=fence_sync)
