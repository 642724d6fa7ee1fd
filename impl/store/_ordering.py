"""The one place that orders the store's durable effects (SPEC.md R-STORE-3..5, R-STORE-9, R-CONC-2..3;
SPEC.md §Store).

``Ordering`` holds the protocol's order of creates, fsyncs, directory syncs, truncates and unlinks, and the
fence checks that go with them. ``FileLineageStore`` makes every such call through one ``Ordering``, in
this order:

- **append** (R-STORE-3): [truncate a torn tail], write the line, fsync the file [and the directory when
  the file held no row yet: its creator may have died before syncing its entry]. If any of it fails,
  still under the lock, cut the file back to where the line began (``undo_append``; a ledger the
  record created is unlinked, ``undo_create``): a failed fsync's pages cannot be trusted (R-STORE-13).
  **Creating** a ledger: open with ``O_CREAT``, write its incarnation line and fsync it (R-STORE-14), write
  the row, fsync the file, then fsync the directory before
  the record returns, all under the rollout's lock (so no other handle can append to, and return from, a
  file whose entry is not yet durable).
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
docs/architecture.md §Facts), ``"syncfs"`` (one ``syncfs(2)`` per batch instead of the directory fsync).

The removals' syncs (``sync_fences``, ``sync_unlinks``, ``sync_delete``) go through the store's ``Syncs``
(``syncs.py``, R-STORE-9): with group commit, concurrent callers in one process share one sync that began
after each of them asked; without it, each call issues its own. Either way the sync itself is a seam call.
A ledger's creation keeps its own directory sync (it runs under the rollout's lock).

Each step of the protocol is one small method (``sync_data``, ``sync_created``, ``sync_fences``,
``fence_still_there``, ``sync_unlinks``, ``sync_delete``, ``fenced_for_write``, ``fenced_for_admission``,
``cache_current``, ``cache_matches``). This class does each step the one correct way and has no switches;
the study tools subclass it to leave single steps out (``impl/study/variants.py``), which production code
never does. Not guaranteed here: anything about the persistence model itself (SPEC.md §Crash).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from capture_ledger.impl.store._cache import CachedLedger
from capture_ledger.impl.store._lines import fence_name, ledger_name
from capture_ledger.impl.store._locks import RolloutSlot, stripe_lock
from capture_ledger.impl.store._syncs import Syncs
from capture_ledger.impl.store.fs import FileStat, FileSystem

__all__ = [
    "FENCE_SYNCS",
    "FenceSync",
    "LockedRollouts",
    "Ordering",
    "RemovalOutcome",
    "outcome",
    "remove_ledger",
    "unlink_ledger",
]

#: How phase 1 of retire makes new fences durable (see the module docstring).
FenceSync = Literal["directory", "file", "syncfs"]
FENCE_SYNCS: tuple[FenceSync, ...] = get_args(FenceSync)


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


class Ordering:
    """The production order of the store's durable effects and fence checks (see the module docstring).

    Args:
        fence_sync: how retire makes new fences durable: ``"directory"``, ``"file"`` or ``"syncfs"``.

    Raises:
        ValueError: ``fence_sync`` is none of those.
    """

    __slots__ = ("fence_sync",)

    def __init__(self, *, fence_sync: FenceSync = "directory") -> None:
        if fence_sync not in FENCE_SYNCS:
            raise ValueError(f"fence_sync must be one of {', '.join(FENCE_SYNCS)}, not {fence_sync!r}")
        self.fence_sync: FenceSync = fence_sync

    # ---------------------------------------------------------------------------------------- the steps
    def sync_data(self, fs: FileSystem, fd: int) -> None:
        """The data fsync of an appended or created ledger, before the record returns (R-STORE-3)."""
        fs.fsync(fd)

    def sync_created(self, fs: FileSystem) -> None:
        """The directory sync that makes a new ledger's entry durable (R-STORE-3)."""
        fs.sync_dir()

    def sync_fences(self, fs: FileSystem, syncs: Syncs, written: int) -> None:
        """The sync after retire's phase 1 (R-STORE-4): made even when ``written`` (this retire's new
        fences) is 0, because an overlapping or crashed retire may have created them without syncing.
        Shared with concurrent callers under group commit (R-STORE-9)."""
        if self.fence_sync == "syncfs":
            syncs.filesystem.sync(fs)
        else:
            syncs.directory.sync(fs)

    def fence_still_there(self, fs: FileSystem, rollout_id: str) -> bool:
        """Retire's phase 2 re-check, under the lock, that the ID's fence still exists (R-CONC-3)."""
        return fs.stat(fence_name(rollout_id)) is not None

    def sync_unlinks(self, fs: FileSystem, syncs: Syncs) -> None:
        """The directory sync after retire's phase 2 removed at least one ledger (R-STORE-4, R-STORE-9)."""
        syncs.directory.sync(fs)

    def sync_delete(self, fs: FileSystem, syncs: Syncs) -> None:
        """Delete's directory sync, once per non-empty batch even when nothing was there (R-STORE-5,
        R-STORE-9)."""
        syncs.directory.sync(fs)

    def fenced_for_write(self, fs: FileSystem, rollout_id: str) -> bool:
        """Whether a fence discards a write to a rollout without rows (R-WRITE-4, R-WRITE-6)."""
        return fs.stat(fence_name(rollout_id)) is not None

    def fenced_for_admission(self, fs: FileSystem, rollout_id: str) -> bool:
        """Whether ``admit`` refuses the rollout: its fence exists (R-ADMIT-2); one stat, no lock."""
        return fs.stat(fence_name(rollout_id)) is not None

    def cache_current(self, cached: CachedLedger, generation: int) -> bool:
        """Whether no handle removed the ledger since ``cached`` was read: same removal count (R-STORE-7)."""
        return cached.generation == generation

    def cache_matches(self, cached: CachedLedger, stat: FileStat | None) -> bool:
        """Whether the file found (``None``: no file) is the one ``cached`` describes, grown or not
        (R-STORE-7): the same inode, no shorter than the cached offset."""
        return stat is not None and stat.inode == cached.inode and stat.size >= cached.end

    # --------------------------------------------------------------------------------------- the writes
    def append_line(
        self,
        fs: FileSystem,
        fd: int,
        line: bytes,
        *,
        torn_end: int | None,
        first_row: bool,
        incarnation: bytes | None = None,
    ) -> None:
        """Append ``line`` to an open ledger (R-STORE-3); first cut a torn tail to ``torn_end`` (R-STORE-6).

        ``first_row``: the file held no row yet (left empty by a creator that failed or crashed before its
        directory sync), so the append also syncs the directory, as a creation does; and it first makes the
        ledger's incarnation line durable (R-STORE-14): ``incarnation``, written here when the file had
        none, or the one a creator left, which it may not have synced.
        """
        if torn_end is not None:
            fs.truncate(fd, torn_end)
        if first_row:
            if incarnation is not None:
                fs.write(fd, incarnation)
            self.sync_data(fs, fd)
        fs.write(fd, line)
        self.sync_data(fs, fd)
        if first_row:
            self.sync_created(fs)

    def undo_append(
        self, fs: FileSystem, fd: int, name: str, start: int, *, first_row: bool, slot: RolloutSlot
    ) -> bool:
        """After an append failed (its write, its fsync or its directory sync raised), still under the
        rollout's lock: cut the ledger back to ``start``, where the line began (R-STORE-13).

        After a failed fsync Linux may drop the dirty pages, or keep them marked clean, and report success
        to the next fsync: a retry that found the line in the page cache and only fsynced again would
        acknowledge a row that is not on disk. Cut away, the line is gone from the page cache too, so a
        retry writes it again and its own fsync covers it. No other handle saw it (they read under the
        lock). When the file held no row yet (``first_row``: its entry may be what failed to sync), it is
        also removed (removal counter first, R-STORE-7), so a retry creates it anew and its directory sync
        has a change to write.

        Returns:
            Whether the undo succeeded; ``False`` (it raised too) means the line may still be there and
            the caller must not acknowledge it later (the store poisons the ledger).
        """
        try:
            fs.truncate(fd, start)
            if first_row:
                fs.advance_generation(*slot)
                fs.unlink(name)
        except OSError:
            return False
        return True

    def undo_create(self, fs: FileSystem, name: str) -> bool:
        """After creating a ledger failed at any step, under the lock: unlink it (R-STORE-13). No handle saw
        it; a retry creates it anew, with a directory sync that has an entry to write. Whether it worked."""
        try:
            fs.unlink(name)
        except OSError:
            return False
        return True

    def confirm_existing(self, fs: FileSystem, fd: int) -> None:
        """Make an identical row already in the ledger durable before its re-record returns (R-CRASH-1).

        The earlier write of the row may have come from a call that failed or died before its fsync or its
        directory sync; a retry that returned without syncing would acknowledge a row a crash can still lose
        (found by the crash explorer, docs/crash.md). Costs nothing on the usual path: only re-records pay.
        """
        self.sync_data(fs, fd)
        self.sync_created(fs)

    def create_ledger(self, fs: FileSystem, name: str, line: bytes, *, incarnation: bytes) -> FileStat:
        """Create ledger ``name`` holding ``incarnation`` and then ``line``, durable with its directory entry
        (R-STORE-3).

        The incarnation line is fsynced before the row is written (R-STORE-14): without a journal, a block
        the file did not hold at its last fsync may read back as a removed file's block after a crash, so
        the first block must be the file's own before any row follows it. The caller holds the rollout's
        lock and has seen that no ledger file exists.

        Returns:
            The new file's inode and size.
        """
        fd = fs.open_append(name, create=True)
        assert fd is not None  # open_append(create=True) never returns None
        try:
            fs.write(fd, incarnation)
            self.sync_data(fs, fd)
            fs.write(fd, line)
            self.sync_data(fs, fd)
            stat = fs.fstat(fd)
        finally:
            fs.close(fd)
        self.sync_created(fs)
        return stat

    # ------------------------------------------------------------------------------------- the removals
    def retire(
        self, fs: FileSystem, batch: Sequence[str], rollouts: LockedRollouts, syncs: Syncs
    ) -> RemovalOutcome:
        """Retire a validated, de-duplicated batch (R-RETIRE-1..4, R-STORE-4). An empty batch touches nothing.

        Args:
            fs: the seam.
            batch: valid, distinct rollout IDs.
            rollouts: the store's per-ID callbacks.
            syncs: the store's sync registers (shared under group commit, R-STORE-9).

        Returns:
            Which IDs had rows (``removed``) and which did not (``absent``), and the effects counted.
        """
        if not batch:
            return RemovalOutcome([], [])
        had_rows: dict[str, bool] = {}
        had_file: list[tuple[str, RolloutSlot]] = []
        written = 0
        for rollout_id in batch:  # phase 1
            slot = rollouts.slot(rollout_id)
            with stripe_lock(fs, slot[0]):
                rows, exists = rollouts.probe(rollout_id)
                written += self.fence(fs, rollout_id)
            had_rows[rollout_id] = rows
            if exists:
                had_file.append((rollout_id, slot))
        self.sync_fences(fs, syncs, written)
        unlinked = 0
        for rollout_id, slot in had_file:  # phase 2
            with stripe_lock(fs, slot[0]):
                # R-CONC-3: a delete (and a new attempt reusing the ID) may have run since phase 1.
                if self.fence_still_there(fs, rollout_id):
                    unlinked += unlink_ledger(fs, rollouts, rollout_id, slot)
                else:
                    rollouts.forget(rollout_id)
        if unlinked:
            self.sync_unlinks(fs, syncs)
        return outcome(batch, had_rows, written, unlinked)

    def fence(self, fs: FileSystem, rollout_id: str) -> bool:
        """Create the ID's fence unless it exists (with ``fence_sync="file"``, fsync it either way: an
        earlier retire that failed or died may have created it without its fsync). Whether it was new.

        A new fence whose fsync fails is unlinked again before the error is raised (R-STORE-13); an
        existing one whose fsync fails is left (it may be another, returned retire's), and the error raised.
        """
        fd = fs.create_file(fence_name(rollout_id))
        if fd is None:
            if self.fence_sync == "file":
                # On a file system without a journal it is not durable until someone syncs it (docs/crash.md).
                existing = fs.open_append(fence_name(rollout_id), create=False)
                if existing is not None:
                    try:
                        fs.fsync(existing)
                    finally:
                        fs.close(existing)
            return False
        try:
            if self.fence_sync == "file":
                try:
                    fs.fsync(fd)
                except OSError:
                    # R-STORE-13's rule, for fences: a second fsync of this inode may succeed without it on
                    # disk, so the fence goes (still under the lock: no other retire saw it) and the retry
                    # creates a new one. The ledger is untouched: the ID is back in its pre-state.
                    with contextlib.suppress(OSError):
                        fs.unlink(fence_name(rollout_id))
                    raise
        finally:
            fs.close(fd)
        return True

    def delete(
        self, fs: FileSystem, batch: Sequence[str], rollouts: LockedRollouts, syncs: Syncs
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
            with stripe_lock(fs, slot[0]):
                had_rows[rollout_id], removed = remove_ledger(fs, rollouts, rollout_id, slot)
                unlinked += removed + fs.unlink(fence_name(rollout_id))
        self.sync_delete(fs, syncs)
        return outcome(batch, had_rows, 0, unlinked)


# ------------------------------------------------------------------------- shared by orderings (study too)
def unlink_ledger(fs: FileSystem, rollouts: LockedRollouts, rollout_id: str, slot: RolloutSlot) -> bool:
    """Under the ID's lock: bump its removal counter, unlink its ledger, forget its cached rows (R-STORE-7).

    Bumped before unlinking: a process dying in between only costs other handles a re-read. Returns whether
    a file was unlinked.
    """
    fs.advance_generation(*slot)
    unlinked = fs.unlink(ledger_name(rollout_id))
    rollouts.forget(rollout_id)
    return unlinked


def remove_ledger(
    fs: FileSystem, rollouts: LockedRollouts, rollout_id: str, slot: RolloutSlot
) -> tuple[bool, int]:
    """Under the ID's lock: whether the ID had rows, and its ledger unlinked if it has one (0 or 1 unlink)."""
    rows, exists = rollouts.probe(rollout_id)
    if not exists:
        rollouts.forget(rollout_id)
        return rows, 0
    return rows, int(unlink_ledger(fs, rollouts, rollout_id, slot))


def outcome(batch: Sequence[str], had_rows: dict[str, bool], written: int, unlinked: int) -> RemovalOutcome:
    """A batch's ``RemovalOutcome``: IDs that had rows are ``removed``, the others ``absent``, in order."""
    removed = [rid for rid in batch if had_rows[rid]]
    absent = [rid for rid in batch if not had_rows[rid]]
    return RemovalOutcome(removed, absent, written, unlinked)
