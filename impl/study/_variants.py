"""Store variants for study: the production ordering with single guards or steps left out (SPEC.md
R-STORE-3..7, R-STORE-9, R-CONC-2..3, R-WRITE-6, R-ADMIT-2).

``StoreVariant`` names the protocol's guards and ordering steps, each on by default; ``variant.ordering()``
is the ``Ordering`` that runs it, for ``FileLineageStore(..., ordering=...)``: the production
``store.ordering.Ordering`` itself when every step is on, else a ``VariantOrdering``, which overrides each
step method of ``Ordering`` to skip that step when its switch is off and, with ``fence_before_unlink`` off,
retires in the broken order (unlink every ledger first, fence afterwards); the three combining steps
off, a combined batch serves its waiters too early or with a later retire ``absent`` (``combining``); with
``await_shared_sync`` off, a removal that finds another caller's shared sync running counts on it and goes
on at once, neither waiting for it to finish nor for a sync that began after it asked
(``counting_on_a_running_sync``). The crash study, the interleaving scheduler, the conformance kit and the
multi-process history test switch guards off to show that each catches the guard's absence
(``tests/impl/study/test_guard_coverage.py`` checks that every field is ablated somewhere).

Not guaranteed: anything at all about a non-default variant's data. Never store data with one; the
production path (``impl.store``, ``impl.http``) never imports this module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from capture_ledger.impl.store import (
    CachedLedger,
    CombiningSteps,
    FenceSync,
    LockedRollouts,
    Ordering,
    RemovalOutcome,
    SyncRegister,
    Syncs,
    outcome,
    remove_ledger,
    stripe_lock,
)
from capture_ledger.impl.store.fs import FileStat, FileSystem

__all__ = ["STEP_NAMES", "StoreVariant", "VariantOrdering", "counting_on_a_running_sync"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreVariant:
    """Guards and ordering steps of the store, each on by default. FOR STUDY ONLY.

    Each field set to ``False`` switches off exactly one guard or step, to show that the conformance kit,
    the interleaving scheduler or the crash explorer catches its absence. Built from a mapping of field
    names too (``StoreVariant(**{"recheck_fence": False})``, as a child process receives it).

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
        await_shared_sync: a removal that shares a sync waits for one that began after it asked to finish
            (R-STORE-9); off, it goes on at once when it finds another caller's sync running.
        await_combined_batch: with ``combine_removals``, a removal combined into another caller's batch
            returns only once that batch completed; off, as soon as its request was taken (every ID
            ``absent``) (R-STORE-4, R-STORE-5, R-STORE-9).
        results_after_syncs: with ``combine_removals``, the combiner hands out results after the batch's
            syncs; off, when phase 1 ends (the values right, the waiters too early).
        same_retire_result: with ``combine_removals``, every retire request asking for an ID gets the
            batch's result; off, a later one gets ``absent`` (not linearizable, R-CONC-1).
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
    await_shared_sync: bool = True
    await_combined_batch: bool = True
    results_after_syncs: bool = True
    same_retire_result: bool = True

    def ordering(self, *, fence_sync: FenceSync = "directory", syncfs_from: int | None = None) -> Ordering:
        """The ordering that runs this variant: the production ``Ordering`` when every step is on.

        Args:
            fence_sync: how retire makes new fences durable (``Ordering``'s option).
            syncfs_from: ``Ordering``'s option of that name.

        Returns:
            An ``Ordering`` for ``FileLineageStore(..., ordering=...)``.
        """
        if self == StoreVariant():
            return Ordering(fence_sync=fence_sync, syncfs_from=syncfs_from)
        return VariantOrdering(self, fence_sync=fence_sync, syncfs_from=syncfs_from)


#: Every guard and step a ``StoreVariant`` can switch off.
STEP_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(StoreVariant))


class VariantOrdering(Ordering):
    """``Ordering`` with the steps ``variant`` switches off left out (see the module docstring).

    Args:
        variant: which steps to leave out.
        fence_sync, syncfs_from: as for ``Ordering``.
    """

    __slots__ = ("variant",)

    def __init__(
        self, variant: StoreVariant, *, fence_sync: FenceSync = "directory", syncfs_from: int | None = None
    ) -> None:
        super().__init__(fence_sync=fence_sync, syncfs_from=syncfs_from)
        self.variant = variant

    def sync_data(self, fs: FileSystem, fd: int) -> None:
        if self.variant.fsync_appends:
            super().sync_data(fs, fd)

    def sync_created(self, fs: FileSystem) -> None:
        if self.variant.sync_dir_on_create:
            super().sync_created(fs)

    def sync_fences(self, fs: FileSystem, syncs: Syncs, written: int, *, syncfs: bool = False) -> None:
        if not (self.variant.sync_after_fences and (written or self.variant.sync_when_nothing_written)):
            return
        if self.variant.await_shared_sync:
            super().sync_fences(fs, syncs, written, syncfs=syncfs)
        else:
            counting_on_a_running_sync(
                syncs.filesystem if syncfs or self.fence_sync == "syncfs" else syncs.directory, fs
            )

    def fence_still_there(self, fs: FileSystem, rollout_id: str) -> bool:
        return not self.variant.recheck_fence or super().fence_still_there(fs, rollout_id)

    def sync_unlinks(self, fs: FileSystem, syncs: Syncs) -> None:
        if not self.variant.sync_after_unlinks:
            return
        if self.variant.await_shared_sync:
            super().sync_unlinks(fs, syncs)
        else:
            counting_on_a_running_sync(syncs.directory, fs)

    def sync_delete(self, fs: FileSystem, syncs: Syncs) -> None:
        if not self.variant.sync_delete:
            return
        if self.variant.await_shared_sync:
            super().sync_delete(fs, syncs)
        else:
            counting_on_a_running_sync(syncs.directory, fs)

    def fenced_for_write(self, fs: FileSystem, rollout_id: str) -> bool:
        return self.variant.fence_lookup_on_write and super().fenced_for_write(fs, rollout_id)

    def fenced_for_admission(self, fs: FileSystem, rollout_id: str) -> bool:
        return self.variant.admit_checks_fence and super().fenced_for_admission(fs, rollout_id)

    def cache_current(self, cached: CachedLedger, generation: int) -> bool:
        return not self.variant.cache_coherence or super().cache_current(cached, generation)

    def cache_matches(self, cached: CachedLedger, stat: FileStat | None) -> bool:
        return not self.variant.cache_coherence or super().cache_matches(cached, stat)

    def combining(self) -> CombiningSteps:
        v = self.variant
        return CombiningSteps(
            await_combined_batch=v.await_combined_batch,
            results_after_syncs=v.results_after_syncs,
            same_retire_result=v.same_retire_result,
        )

    def retire(
        self,
        fs: FileSystem,
        batch: Sequence[str],
        rollouts: LockedRollouts,
        syncs: Syncs,
        *,
        fenced: Callable[[Mapping[str, bool]], None] | None = None,
    ) -> RemovalOutcome:
        if self.variant.fence_before_unlink or not batch:
            return super().retire(fs, batch, rollouts, syncs, fenced=fenced)
        # The broken order: remove the ledgers, sync, then fence them and sync.
        had_rows: dict[str, bool] = {}
        unlinked = 0
        for rollout_id in batch:
            slot = rollouts.slot(rollout_id)
            with stripe_lock(fs, slot[0]):
                had_rows[rollout_id], removed = remove_ledger(fs, rollouts, rollout_id, slot)
                unlinked += removed
        if unlinked:
            self.sync_unlinks(fs, syncs)
        written = 0
        for rollout_id in batch:
            with stripe_lock(fs, rollouts.slot(rollout_id)[0]):
                written += self.fence(fs, rollout_id)
        self.sync_fences(fs, syncs, written)
        return outcome(batch, had_rows, written, unlinked)


def counting_on_a_running_sync(register: SyncRegister, fs: FileSystem) -> bool:
    """BROKEN, for study: group commit's sync step as a hurried implementation writes it. When another
    caller's sync is running, return at once (it began before this caller asked, and has not finished);
    otherwise sync as the production register does. Whether this caller issued a sync.
    """
    if register.shared and register.running:
        return False
    return register.sync(fs)
