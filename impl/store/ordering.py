"""The one place that orders the store's durable effects (SPEC.md R-STORE-3..5, R-CONC-2..3; SPEC.md §Store).

Every create, fsync, directory sync, truncate and unlink of ``FileLineageStore`` happens in this module, in
this order:

- **append** (R-STORE-3): [truncate a torn tail], write the line, fsync the file [and the directory when
  the file held no row yet: its creator may have died before syncing its entry]. **Creating** a ledger:
  open with ``O_CREAT``, write, fsync the file, then fsync the directory before the record returns, all
  under the rollout's lock (so no other handle can append to, and return from, a file whose entry is not
  yet durable).
- **retire** (R-STORE-4): phase 1, under each ID's lock, note whether it has a ledger and create the fence if
  missing; then one directory sync for the non-empty batch even when no fence was written (an overlapping
  or crashed retire may have created it without syncing); phase 2, for IDs that had a ledger file, under
  the lock, re-check that the fence still exists (a delete and a reuse may have happened in between,
  R-CONC-3), bump the removal counter, unlink the ledger and forget cached rows; one more directory sync
  if anything was unlinked.
- **delete** (R-STORE-5): under each ID's lock, bump the removal counter, unlink ledger and fence, forget
  cached rows; one directory sync per non-empty batch.

``fence_sync`` chooses how phase 1 makes fences durable: ``"directory"`` (one directory fsync; enough on a
journaled file system), ``"file"`` (also fsync each new fence before that directory fsync: needed where a
directory fsync persists a new file's entry but not its inode, as on the unjournaled ext4 of
docs/architecture.md §Facts),
``"syncfs"`` (one ``syncfs(2)`` per batch instead of the directory fsync).

``StoreVariant`` switches single guards or ordering steps off. **It exists only to study the protocol**
(the crash explorer and the conformance kit must reject the broken variants); production code never
changes it. Not guaranteed here: anything about the persistence model itself (SPEC.md §Crash).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from capture_ledger.impl.store.fs import FileStat, FileSystem
from capture_ledger.impl.store.lines import fence_name, ledger_name
from capture_ledger.impl.store.locks import RolloutSlot

__all__ = [
    "FENCE_SYNCS",
    "FenceSync",
    "LockedRollouts",
    "RemovalOutcome",
    "StoreVariant",
    "append_line",
    "create_ledger",
    "delete",
    "retire",
]

#: How phase 1 of retire makes new fences durable (see the module docstring).
FenceSync = Literal["directory", "file", "syncfs"]
FENCE_SYNCS: tuple[FenceSync, ...] = get_args(FenceSync)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreVariant:
    """Guards and ordering steps of the store, each on by default. FOR STUDY ONLY.

    Each field set to ``False`` switches off exactly one guard or step, to show that the conformance kit,
    the interleaving scheduler or the crash explorer catches its absence. Never use a non-default variant
    to store data.

    Attributes:
        recheck_fence: retire phase 2 re-checks the fence under the lock before unlinking (R-CONC-3).
        fence_before_unlink: phase 1 (fences) completes before any unlink; off = unlink first, then fence.
        sync_after_fences: the directory sync after phase 1 (R-STORE-4).
        sync_when_nothing_written: that sync even when this retire wrote no fence (R-STORE-4).
        sync_after_unlinks: the directory sync after phase 2 (R-STORE-4).
        fsync_appends: the data fsync of an append (R-STORE-3).
        sync_dir_on_create: the directory sync when a ledger file is created (R-STORE-3).
        sync_delete: delete's directory sync (R-STORE-5).
        fence_lookup_on_write: a write to a rollout with no rows looks for the fence (R-WRITE-4, R-WRITE-6).
        admit_checks_fence: ``admit`` refuses fenced rollouts (R-ADMIT-2).
        cache_coherence: cached rows are validated (removal counter, inode, size) under the lock (R-STORE-7).
    """

    recheck_fence: bool = True
    fence_before_unlink: bool = True
    sync_after_fences: bool = True
    sync_when_nothing_written: bool = True
    sync_after_unlinks: bool = True
    fsync_appends: bool = True
    sync_dir_on_create: bool = True
    sync_delete: bool = True
    fence_lookup_on_write: bool = True
    admit_checks_fence: bool = True
    cache_coherence: bool = True

    def switched_off(self) -> list[str]:
        """The names of the guards this variant switches off (empty for the production store)."""
        return [name for name in self.__dataclass_fields__ if not getattr(self, name)]


class LockedRollouts(Protocol):
    """What retire and delete ask of the store; ``probe`` and ``forget`` run with the ID's lock held."""

    def slot(self, rollout_id: str) -> RolloutSlot:
        """The ID's lock stripe and removal-counter slot."""

    def probe(self, rollout_id: str) -> tuple[bool, bool]:
        """``(has rows, ledger file exists)``."""

    def forget(self, rollout_id: str) -> None:
        """Drop the handle's cached rows of the ID."""


@dataclass(frozen=True, slots=True)
class RemovalOutcome:
    """What a retire or delete did: the result lists and the effects counted for ``statistics``."""

    removed: list[str]
    absent: list[str]
    fences_written: int = 0
    unlinked: int = 0


def append_line(
    fs: FileSystem, fd: int, line: bytes, *, torn_end: int | None, first_row: bool, variant: StoreVariant
) -> None:
    """Append ``line`` to an open ledger (R-STORE-3); first cut a torn tail to ``torn_end`` (R-STORE-6).

    ``first_row``: the file held no row yet (left empty by a creator that failed or crashed before its
    directory sync), so the append also syncs the directory, as a creation does.
    """
    if torn_end is not None:
        fs.truncate(fd, torn_end)
    fs.write(fd, line)
    if variant.fsync_appends:
        fs.fsync(fd)
    if first_row and variant.sync_dir_on_create:
        fs.sync_dir()


def confirm_existing(fs: FileSystem, fd: int, *, variant: StoreVariant) -> None:
    """Make an identical row that is already in the ledger durable before its re-record returns (R-CRASH-1).

    The earlier write of the row may have come from a call that failed or died before its fsync or its
    directory sync; a retry that returned without syncing would acknowledge a row a crash can still lose
    (found by the crash explorer, docs/crash.md). Costs nothing on the usual path: only re-records pay it.
    """
    if variant.fsync_appends:
        fs.fsync(fd)
    if variant.sync_dir_on_create:
        fs.sync_dir()


def create_ledger(fs: FileSystem, name: str, line: bytes, *, variant: StoreVariant) -> FileStat:
    """Create ledger ``name`` holding ``line``, durable with its directory entry (R-STORE-3).

    The caller holds the rollout's lock and has seen that no ledger file exists.

    Returns:
        The new file's inode and size.
    """
    fd = fs.open_append(name, create=True)
    assert fd is not None  # open_append(create=True) never returns None
    try:
        fs.write(fd, line)
        if variant.fsync_appends:
            fs.fsync(fd)
        stat = fs.fstat(fd)
    finally:
        fs.close(fd)
    if variant.sync_dir_on_create:
        fs.sync_dir()
    return stat


def _sync_fences(fs: FileSystem, fence_sync: FenceSync) -> None:
    if fence_sync == "syncfs":
        fs.syncfs()
    else:
        fs.sync_dir()


def _fence(fs: FileSystem, rollout_id: str, fence_sync: FenceSync) -> bool:
    fd = fs.create_file(fence_name(rollout_id))
    if fd is None:
        if fence_sync == "file":
            # An earlier retire that failed or died may have created this fence without its fsync; on a
            # file system without a journal it is not durable until someone syncs it (docs/crash.md).
            existing = fs.open_append(fence_name(rollout_id), create=False)
            if existing is not None:
                try:
                    fs.fsync(existing)
                finally:
                    fs.close(existing)
        return False
    try:
        if fence_sync == "file":
            fs.fsync(fd)
    finally:
        fs.close(fd)
    return True


def _unlink_ledger(fs: FileSystem, rollouts: LockedRollouts, rollout_id: str, slot: RolloutSlot) -> bool:
    # Bump before unlinking: a process dying in between only costs other handles a re-read (R-STORE-7).
    fs.advance_generation(*slot)
    unlinked = fs.unlink(ledger_name(rollout_id))
    rollouts.forget(rollout_id)
    return unlinked


def retire(
    fs: FileSystem,
    batch: Sequence[str],
    rollouts: LockedRollouts,
    *,
    variant: StoreVariant,
    fence_sync: FenceSync,
) -> RemovalOutcome:
    """Retire a validated, de-duplicated batch (R-RETIRE-1..4, R-STORE-4). An empty batch touches nothing.

    Args:
        fs: the seam.
        batch: valid, distinct rollout IDs.
        rollouts: the store's per-ID callbacks.
        variant: the guards (all on in production).
        fence_sync: how new fences are made durable.

    Returns:
        Which IDs had rows (``removed``) and which did not (``absent``), and the effects counted.
    """
    if not batch:
        return RemovalOutcome([], [])
    if not variant.fence_before_unlink:
        return _retire_unlink_first(fs, batch, rollouts, variant=variant, fence_sync=fence_sync)
    had_rows: dict[str, bool] = {}
    had_file: list[str] = []
    written = 0
    for rollout_id in batch:  # phase 1
        slot = rollouts.slot(rollout_id)
        fs.lock(slot[0])
        try:
            rows, exists = rollouts.probe(rollout_id)
            written += _fence(fs, rollout_id, fence_sync)
        finally:
            fs.unlock(slot[0])
        had_rows[rollout_id] = rows
        if exists:
            had_file.append(rollout_id)
    if variant.sync_after_fences and (written or variant.sync_when_nothing_written):
        _sync_fences(fs, fence_sync)
    unlinked = 0
    for rollout_id in had_file:  # phase 2
        slot = rollouts.slot(rollout_id)
        fs.lock(slot[0])
        try:
            # R-CONC-3: a delete (and a new attempt reusing the ID) may have run since phase 1.
            if variant.recheck_fence and fs.stat(fence_name(rollout_id)) is None:
                rollouts.forget(rollout_id)
                continue
            unlinked += _unlink_ledger(fs, rollouts, rollout_id, slot)
        finally:
            fs.unlock(slot[0])
    if unlinked and variant.sync_after_unlinks:
        fs.sync_dir()
    return _outcome(batch, had_rows, written, unlinked)


def _retire_unlink_first(
    fs: FileSystem,
    batch: Sequence[str],
    rollouts: LockedRollouts,
    *,
    variant: StoreVariant,
    fence_sync: FenceSync,
) -> RemovalOutcome:
    # The broken order (StoreVariant.fence_before_unlink=False): remove ledgers, then fence them.
    had_rows: dict[str, bool] = {}
    unlinked = 0
    for rollout_id in batch:
        slot = rollouts.slot(rollout_id)
        fs.lock(slot[0])
        try:
            rows, exists = rollouts.probe(rollout_id)
            if exists:
                unlinked += _unlink_ledger(fs, rollouts, rollout_id, slot)
        finally:
            fs.unlock(slot[0])
        had_rows[rollout_id] = rows
    if unlinked and variant.sync_after_unlinks:
        fs.sync_dir()
    written = 0
    for rollout_id in batch:
        slot = rollouts.slot(rollout_id)
        fs.lock(slot[0])
        try:
            written += _fence(fs, rollout_id, fence_sync)
        finally:
            fs.unlock(slot[0])
    if variant.sync_after_fences and (written or variant.sync_when_nothing_written):
        _sync_fences(fs, fence_sync)
    return _outcome(batch, had_rows, written, unlinked)


def delete(
    fs: FileSystem, batch: Sequence[str], rollouts: LockedRollouts, *, variant: StoreVariant
) -> RemovalOutcome:
    """Delete a validated, de-duplicated batch (R-DELETE-1..3, R-STORE-5). An empty batch touches nothing.

    Returns:
        Which IDs had rows (``removed``) and which did not (``absent``), and the effects counted.
    """
    if not batch:
        return RemovalOutcome([], [])
    had_rows: dict[str, bool] = {}
    unlinked = 0
    for rollout_id in batch:
        slot = rollouts.slot(rollout_id)
        fs.lock(slot[0])
        try:
            rows, exists = rollouts.probe(rollout_id)
            if exists:
                unlinked += _unlink_ledger(fs, rollouts, rollout_id, slot)
            else:
                rollouts.forget(rollout_id)
            unlinked += fs.unlink(fence_name(rollout_id))
        finally:
            fs.unlock(slot[0])
        had_rows[rollout_id] = rows
    # R-STORE-5: every non-empty batch syncs, even when nothing was there (a crashed delete may not have).
    if variant.sync_delete:
        fs.sync_dir()
    return _outcome(batch, had_rows, 0, unlinked)


def _outcome(batch: Sequence[str], had_rows: dict[str, bool], written: int, unlinked: int) -> RemovalOutcome:
    removed = [rid for rid in batch if had_rows[rid]]
    absent = [rid for rid in batch if not had_rows[rid]]
    return RemovalOutcome(removed, absent, written, unlinked)
