"""The removals' half of the store's ordering: retire and delete, and their syncs and fence checks (SPEC.md
R-STORE-4, R-STORE-5, R-STORE-9, R-CONC-2..3; SPEC.md §Store).

``RemovalOrdering`` holds the order of a retire's and a delete's fences, syncs and unlinks, each step one
small method (``sync_fences``, ``fence_still_there``, ``sync_unlinks``, ``sync_delete``, ``fence``), and the
two batch operations that call them (``retire``, ``delete``). ``_ordering.Ordering`` extends it with the
writes' half; the store and the study tools use ``Ordering`` (its module docstring gives the whole
protocol). Not guaranteed here: anything about the persistence model itself (SPEC.md §Crash).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from capture_ledger.impl.store._lines import fence_name, ledger_name
from capture_ledger.impl.store._locks import RolloutSlot, stripe_lock
from capture_ledger.impl.store._syncs import Syncs
from capture_ledger.impl.store.fs import FileSystem

__all__ = [
    "FENCE_SYNCS",
    "CombiningSteps",
    "FenceSync",
    "LockedRollouts",
    "RemovalOrdering",
    "RemovalOutcome",
    "by_stripe",
    "outcome",
    "remove_ledger",
    "unlink_ledger",
    "unlink_ledgers",
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


@dataclass(frozen=True, slots=True, kw_only=True)
class CombiningSteps:
    """The steps of combining removals (``_combining``), each on in production.

    Attributes:
        await_combined_batch: a waiter returns only once the batch that took its request completed; off
            (BROKEN, study only), as soon as its request was taken, reporting every ID ``absent``.
        results_after_syncs: the combiner hands out results after the batch's last sync; off (BROKEN), when
            phase 1 ends, before its syncs.
        same_retire_result: every retire request asking for an ID gets the batch's result for it; off
            (BROKEN: not linearizable when a delete comes between the batch's phases), a later request
            gets ``absent``.
    """

    await_combined_batch: bool = True
    results_after_syncs: bool = True
    same_retire_result: bool = True


@dataclass(frozen=True, slots=True)
class RemovalOutcome:
    """What a retire or delete did: the result lists and the effects counted for ``statistics``."""

    removed: list[str]
    absent: list[str]
    fences_written: int = 0
    unlinked: int = 0


class RemovalOrdering:
    """The production order of retire's and delete's durable effects and fence checks.

    Args:
        fence_sync: how retire makes new fences durable: ``"directory"``, ``"file"`` or ``"syncfs"``.
        syncfs_from: with ``fence_sync="file"``, a retire of at least this many IDs makes its fences
            durable with one ``syncfs(2)`` instead of an fsync per fence and a directory fsync (measured
            cheaper from 16 IDs on ext4 without a journal, docs/store.md); ``None``: never.

    Raises:
        ValueError: ``fence_sync`` is none of those, or ``syncfs_from`` is given with another fence sync or
            is below 1.
    """

    __slots__ = ("fence_sync", "syncfs_failed", "syncfs_from")

    def __init__(self, *, fence_sync: FenceSync = "directory", syncfs_from: int | None = None) -> None:
        if fence_sync not in FENCE_SYNCS:
            raise ValueError(f"fence_sync must be one of {', '.join(FENCE_SYNCS)}, not {fence_sync!r}")
        if syncfs_from is not None and (fence_sync != "file" or syncfs_from < 1):
            raise ValueError(
                f"syncfs_from goes with fence_sync='file' and is at least 1, not {syncfs_from!r}"
            )
        self.fence_sync: FenceSync = fence_sync
        self.syncfs_from = syncfs_from
        #: A batch's ``syncfs`` failed: from then on every fence is fsynced on its own (``by_syncfs``).
        self.syncfs_failed = False

    def by_syncfs(self, size: int) -> bool:
        """Whether a retire of ``size`` IDs makes its fences durable with one ``syncfs`` (``syncfs_from``)."""
        if self.fence_sync == "syncfs":
            return True
        return self.syncfs_from is not None and not self.syncfs_failed and size >= self.syncfs_from

    # ---------------------------------------------------------------------------------------- the steps
    def sync_fences(self, fs: FileSystem, syncs: Syncs, written: int, *, syncfs: bool = False) -> None:
        """The sync after retire's phase 1 (R-STORE-4): made even when ``written`` (this retire's new
        fences) is 0, because an overlapping or crashed retire may have created them without syncing.
        Shared with concurrent callers under group commit (R-STORE-9). ``syncfs``: this batch's fences are
        made durable by one ``syncfs`` (``by_syncfs``)."""
        if syncfs or self.fence_sync == "syncfs":
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

    def combining(self) -> CombiningSteps:
        """How a combined batch serves its requests (``_combining``): each waiter returns once its batch
        completed, with results handed out after the batch's syncs, and every retire request asking for an
        ID gets the batch's result for it. Study variants switch single steps off (R-STORE-4, R-STORE-5,
        R-STORE-9, R-CONC-1)."""
        return CombiningSteps()

    # ------------------------------------------------------------------------------------- the removals
    def retire(
        self,
        fs: FileSystem,
        batch: Sequence[str],
        rollouts: LockedRollouts,
        syncs: Syncs,
        *,
        fenced: Callable[[Mapping[str, bool]], None] | None = None,
    ) -> RemovalOutcome:
        """Retire a validated, de-duplicated batch (R-RETIRE-1..4, R-STORE-4). An empty batch touches nothing.

        Each phase takes each stripe's lock once for all the batch's IDs in it (``by_stripe``), and R-CONC-3's
        re-check of every ID stays under it.

        Args:
            fs: the seam.
            batch: valid, distinct rollout IDs.
            rollouts: the store's per-ID callbacks.
            syncs: the store's sync registers (shared under group commit, R-STORE-9).
            fenced: for study only (``_combining`` without ``results_after_syncs``): called with each ID's
                "had rows" once phase 1 made the fences, before their sync. Production never passes it.

        Returns:
            Which IDs had rows (``removed``) and which did not (``absent``), and the effects counted.
        """
        if not batch:
            return RemovalOutcome([], [])
        had_rows: dict[str, bool] = {}
        had_file: list[tuple[str, RolloutSlot]] = []
        written = 0
        whole = self.by_syncfs(len(batch))
        for stripe, group in by_stripe(batch, rollouts):  # phase 1
            with stripe_lock(fs, stripe):
                for rollout_id, slot in group:
                    rows, exists = rollouts.probe(rollout_id)
                    written += self.fence(fs, rollout_id, each=not whole)
                    had_rows[rollout_id] = rows
                    if exists:
                        had_file.append((rollout_id, slot))
        if fenced is not None:
            fenced(had_rows)
        try:
            self.sync_fences(fs, syncs, written, syncfs=whole)
        except OSError:
            if whole and self.fence_sync == "file":
                # R-STORE-13 for a batch's syncfs: Linux reports a writeback error once per descriptor, so a
                # retry's syncfs could return 0 on fences it never wrote. This handle goes back to an fsync
                # per fence (the retry fsyncs each fence, new or found, and then the directory).
                self.syncfs_failed = True
            raise
        unlinked = 0
        for stripe, group in by_stripe([rid for rid, _ in had_file], rollouts):  # phase 2
            with stripe_lock(fs, stripe):
                # R-CONC-3: a delete (and a new attempt reusing the ID) may have run since phase 1.
                still: list[tuple[str, RolloutSlot]] = []
                for rollout_id, slot in group:
                    if self.fence_still_there(fs, rollout_id):
                        still.append((rollout_id, slot))
                    else:
                        rollouts.forget(rollout_id)
                unlinked += unlink_ledgers(fs, rollouts, stripe, still)
        if unlinked:
            self.sync_unlinks(fs, syncs)
        return outcome(batch, had_rows, written, unlinked)

    def fence(self, fs: FileSystem, rollout_id: str, *, each: bool = True) -> bool:
        """Create the ID's fence unless it exists (with ``fence_sync="file"`` and ``each``, fsync it either
        way: an earlier retire that failed or died may have created it without its fsync; without ``each``
        the batch's ``syncfs`` makes it durable). Whether it was new.

        A new fence whose fsync fails is unlinked again before the error is raised (R-STORE-13); an
        existing one whose fsync fails is left (it may be another, returned retire's), and the error raised.
        """
        per_fence = self.fence_sync == "file" and each
        fd = fs.create_file(fence_name(rollout_id))
        if fd is None:
            if per_fence:
                # On a file system without a journal it is not durable until someone syncs it (docs/crash.md).
                existing = fs.open_append(fence_name(rollout_id), create=False)
                if existing is not None:
                    try:
                        fs.fsync(existing)
                    finally:
                        fs.close(existing)
            return False
        try:
            if per_fence:
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
        self,
        fs: FileSystem,
        batch: Sequence[str],
        rollouts: LockedRollouts,
        syncs: Syncs,
        *,
        fenced: Callable[[Mapping[str, bool]], None] | None = None,
    ) -> RemovalOutcome:
        """Delete a validated, de-duplicated batch (R-DELETE-1..3, R-STORE-5). An empty batch touches nothing.

        Each stripe's lock is taken once for all the batch's IDs in it (``by_stripe``). ``fenced`` is as for
        ``retire`` (study only): called once the unlinks are made, before their sync.

        Returns:
            Which IDs had rows (``removed``) and which did not (``absent``), and the effects counted.
        """
        if not batch:
            return RemovalOutcome([], [])
        had_rows: dict[str, bool] = {}
        unlinked = 0
        for stripe, group in by_stripe(batch, rollouts):
            with stripe_lock(fs, stripe):
                for rollout_id, slot in group:
                    had_rows[rollout_id], removed = remove_ledger(fs, rollouts, rollout_id, slot)
                    unlinked += removed + fs.unlink(fence_name(rollout_id))
        if fenced is not None:
            fenced(had_rows)
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


def unlink_ledgers(
    fs: FileSystem, rollouts: LockedRollouts, stripe: int, group: Sequence[tuple[str, RolloutSlot]]
) -> int:
    """Under stripe ``stripe``'s lock: ``unlink_ledger`` for each of ``group``, with their removal counters
    bumped by one read and one write of the stripe's counters before any unlink (R-STORE-7). How many
    files were unlinked."""
    if not group:
        return 0
    fs.advance_generations(stripe, [slot for _, (_, slot) in group])
    unlinked = 0
    for rollout_id, _ in group:
        unlinked += fs.unlink(ledger_name(rollout_id))
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


def by_stripe(
    batch: Sequence[str], rollouts: LockedRollouts
) -> list[tuple[int, list[tuple[str, RolloutSlot]]]]:
    """The batch's IDs grouped by lock stripe, each group in batch order, the stripes in the order of
    their first ID (so a batch whose IDs have distinct stripes keeps its order of effects).

    A removal holds one stripe at a time and never two, so the order of the stripes cannot deadlock
    against another thread or process (R-STORE-2).
    """
    groups: dict[int, list[tuple[str, RolloutSlot]]] = {}
    for rollout_id in batch:
        slot = rollouts.slot(rollout_id)
        groups.setdefault(slot[0], []).append((rollout_id, slot))
    return list(groups.items())


def outcome(batch: Sequence[str], had_rows: dict[str, bool], written: int, unlinked: int) -> RemovalOutcome:
    """A batch's ``RemovalOutcome``: IDs that had rows are ``removed``, the others ``absent``, in order."""
    removed = [rid for rid in batch if had_rows[rid]]
    absent = [rid for rid in batch if not had_rows[rid]]
    return RemovalOutcome(removed, absent, written, unlinked)
