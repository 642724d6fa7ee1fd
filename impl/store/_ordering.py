"""The one place that orders the store's durable effects (SPEC.md R-STORE-3..5, R-STORE-9, R-CONC-2..3;
SPEC.md §Store).

``Ordering`` holds the protocol's order of creates, fsyncs, directory syncs, truncates and unlinks, and the
fence checks that go with them (the removals' half is inherited from ``_removals.RemovalOrdering``).
``FileLineageStore`` makes every such call through one ``Ordering``, in
this order:

- **append** (R-STORE-3): [truncate a torn tail], write the line, fsync the file [and the directory when
  the file held no row yet: its creator may have died before syncing its entry]. If any of it fails,
  still under the lock, cut the file back to where the line began (``undo_append``; a ledger the
  record created is unlinked, ``undo_create``): a failed fsync's pages cannot be trusted (R-STORE-13).
  **Creating** a ledger: create it exclusively under its temporary name (``lines.creation_name``,
  ``.<id>.lineage.jsonl.new``; a leftover of a crashed creator is unlinked first), write its incarnation
  line and the row (R-STORE-14) in one write, fsync it, ``rename`` it into place, then fsync the directory
  before the record returns, all under the rollout's lock (so no other handle can append to, and return
  from, a file whose entry is not yet durable). The name thus only ever reaches a file that is durable
  whole: without a journal a directory sync persists a new entry but not an unsynced inode, and a name
  re-created over a deleted ledger then came back as that ledger, rows and all (the kernel study,
  docs/crash.md); with the rename no crash image holds the ledger's name on an unsynced inode. Any failing
  step is undone under the lock (``undo_create``: both names unlinked, R-STORE-13); a crash may leave the
  temporary behind, which readers ignore and ``check`` reports as ``interrupted-create``. Two syncs per
  new ledger (the file, the directory), one fewer than writing it in place with its incarnation line
  fsynced first.
- **retire** (R-STORE-4): phase 1, under each ID's lock, note whether it has a ledger and create the fence if
  missing; then one directory sync for the non-empty batch even when no fence was written (an overlapping
  or crashed retire may have created it without syncing); phase 2, for IDs that had a ledger file, under
  the lock, re-check that the fence still exists (a delete and a reuse may have happened in between,
  R-CONC-3), bump the removal counters (one read and one write per stripe, before any unlink), unlink
  the ledgers and forget cached rows; one more directory sync if anything was unlinked. Each phase takes
  each stripe's lock once for all the batch's IDs in it.
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

from capture_ledger.impl.store._cache import CachedLedger
from capture_ledger.impl.store._lines import creation_name, fence_name
from capture_ledger.impl.store._locks import RolloutSlot
from capture_ledger.impl.store._removals import (
    FENCE_SYNCS,
    FenceSync,
    LockedRollouts,
    RemovalOrdering,
    RemovalOutcome,
    outcome,
    remove_ledger,
    unlink_ledger,
)
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


class Ordering(RemovalOrdering):
    """The production order of the store's durable effects and fence checks (see the module docstring).

    Args:
        fence_sync: how retire makes new fences durable: ``"directory"``, ``"file"`` or ``"syncfs"``.

    Raises:
        ValueError: ``fence_sync`` is none of those.
    """

    __slots__ = ()

    # ---------------------------------------------------------------------------------------- the steps
    def sync_data(self, fs: FileSystem, fd: int) -> None:
        """The data fsync of an appended or created ledger, before the record returns (R-STORE-3)."""
        fs.fsync(fd)

    def sync_created(self, fs: FileSystem) -> None:
        """The directory sync that makes a new ledger's entry durable (R-STORE-3)."""
        fs.sync_dir()

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
        """After creating ledger ``name`` failed at any step, under the lock: unlink its temporary
        (``creation_name``) and, if the rename already happened, the ledger itself (R-STORE-13). No handle
        saw it; a retry creates it anew, with a directory sync that has an entry to write. Whether it
        worked (a name that is not there is no failure)."""
        try:
            fs.unlink(creation_name(name))
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
        (R-STORE-3, R-STORE-14; the module docstring gives the steps).

        The caller holds the rollout's lock and has seen that no ledger file exists; on an ``OSError`` it
        calls ``undo_create``. A temporary left by a creator that crashed (only creators, under this lock,
        make one) is unlinked before the new one is made. Guaranteed when it returns: the file, whole, and
        its name are durable. Not guaranteed after it raised: anything, until ``undo_create`` ran.

        Returns:
            The new file's inode and size.

        Raises:
            OSError: a step failed (the temporary, or the renamed ledger, may still exist).
        """
        temporary = creation_name(name)
        fd = fs.create_file(temporary)
        if fd is None:  # crash residue of an earlier creator of this rollout
            fs.unlink(temporary)
            fd = fs.create_file(temporary)
            if fd is None:  # pragma: no cover - we hold the lock every creator takes
                raise FileExistsError(temporary)
        try:
            fs.write(fd, incarnation + line)
            self.sync_data(fs, fd)
            stat = fs.fstat(fd)
        finally:
            fs.close(fd)
        fs.rename(temporary, name)
        self.sync_created(fs)
        return stat
