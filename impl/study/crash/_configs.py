"""The crash study's store configurations and what it must find (R-CRASH-1..4, R-STORE-3..5; SPEC.md
§Crash, docs/crash.md). The workloads are the kit's (``spec.kit.crash.WORKLOADS``), shared with every
ledger's crash layer.

``STEPS`` are the protocol's sync and ordering steps
and ``OTHER_GUARDS`` its guards that are not about crashes, together every field of
``variants.StoreVariant``; ``CONFIGS`` are the store configurations by label (the default protocol, its
``fence_sync`` options, group commit off, each step or guard switched off, and each step switched off on
top of ``fence_sync=file``); ``SMALL`` the configurations of the CI study; ``EXPECTED`` what the small study
must find. Group commit is on in every configuration but ``group_commit=off`` (R-STORE-9); removals are
combined in ``combine=on`` and in the ablations of the combining steps (``CombiningConfig``). ``report``
runs and renders the study; this module only defines it.

Not guaranteed: that the workloads exercise every path of the store
(``tests/impl/study/test_guard_coverage.py`` checks only that every guard is ablated somewhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from capture_ledger.impl.store import FenceSync
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import FileSystem
from capture_ledger.impl.study._variants import StoreVariant
from capture_ledger.impl.study.crash._recording import StoreConfig

__all__ = ["COMBINING", "CONFIGS", "EXPECTED", "OTHER_GUARDS", "SMALL", "STEPS", "CombiningConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CombiningConfig(StoreConfig):
    """A ``StoreConfig`` whose handles combine their concurrent removals (``combine_removals=True``)."""

    combine_removals: bool = True

    def open(self, directory: Path, fs: FileSystem) -> FileLineageStore:
        """A handle of this configuration on ``directory`` over ``fs``, combining removals."""
        return FileLineageStore(
            directory,
            fs=fs,
            ordering=self.ordering(),
            group_commit=self.group_commit,
            combine_removals=self.combine_removals,
        )


#: The protocol's sync and ordering steps, each switched off alone.
STEPS = (
    "sync_after_fences",
    "sync_when_nothing_written",
    "recheck_fence",
    "sync_after_unlinks",
    "fsync_appends",
    "sync_dir_on_create",
    "sync_delete",
    "fence_before_unlink",
    "await_shared_sync",
    "await_combined_batch",
    "results_after_syncs",
)
#: Guards that are not about crashes; studied in the full run only.
OTHER_GUARDS = ("fence_lookup_on_write", "admit_checks_fence", "cache_coherence", "same_retire_result")
#: The steps that act only when removals are combined: ablated on a ``CombiningConfig``.
COMBINING = frozenset({"await_combined_batch", "results_after_syncs", "same_retire_result"})


def _without(step: str, *, fence_sync: FenceSync = "directory") -> StoreConfig:
    prefix = "" if fence_sync == "directory" else f"fence_sync={fence_sync}, "
    kind = CombiningConfig if step in COMBINING else StoreConfig
    return kind(label=f"{prefix}no {step}", variant=StoreVariant(**{step: False}), fence_sync=fence_sync)


#: Every configuration of the study, by label.
CONFIGS: dict[str, StoreConfig] = {
    c.label: c
    for c in (
        StoreConfig(label="default"),
        StoreConfig(label="fence_sync=file", fence_sync="file"),
        StoreConfig(label="fence_sync=syncfs", fence_sync="syncfs"),
        # What "auto" picks without a journal, its threshold lowered so that the workloads' two-ID retires
        # take the syncfs path and their one-ID retires the per-fence path.
        StoreConfig(label="fence_sync=file+syncfs", fence_sync="file", syncfs_from=2),
        StoreConfig(label="group_commit=off", group_commit=False),
        CombiningConfig(label="combine=on"),
        *(_without(step) for step in (*STEPS, *OTHER_GUARDS)),
        # The full study also ablates each step from the configuration that is safe without a journal.
        *(_without(step, fence_sync="file") for step in STEPS),
    )
}
SMALL = (
    "default",
    "fence_sync=file",
    "fence_sync=syncfs",
    "fence_sync=file+syncfs",
    "group_commit=off",
    "combine=on",
    *(f"no {s}" for s in STEPS),
)

#: What the small study must find: configuration → model → clauses broken (R-STATE-3/R-STORE-8 never).
#: Under ext4-nojournal a re-used ID's new ledger may come back holding a block of its removed one
#: (spec/crash/durability.py); since every line tells its incarnation (R-STORE-14) such a block is crash
#: residue, so R-CRASH-3 shows there only where a delete's own sync is left out (``no sync_delete``, ``no
#: await_shared_sync``) or the fsync of the incarnation line is (``no fsync_appends``: the first block of
#: a new ledger may then still be the removed one's, incarnation line and rows alike; docs/crash.md).
EXPECTED: dict[str, dict[str, frozenset[str]]] = {
    "default": {
        "journaled": frozenset(),
        "weakest-posix": frozenset(),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-4"}),
    },
    "fence_sync=file": {
        "journaled": frozenset(),
        "weakest-posix": frozenset(),
        "ext4-nojournal": frozenset(),
    },
    "fence_sync=syncfs": {
        "journaled": frozenset(),
        "weakest-posix": frozenset(),
        "ext4-nojournal": frozenset(),
    },
    "fence_sync=file+syncfs": {
        "journaled": frozenset(),
        "weakest-posix": frozenset(),
        "ext4-nojournal": frozenset(),
    },
    "group_commit=off": {
        "journaled": frozenset(),
        "weakest-posix": frozenset(),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-4"}),
    },
    # Combining keeps every clause: the same as the default (R-STORE-4, R-STORE-5, R-STORE-9).
    "combine=on": {
        "journaled": frozenset(),
        "weakest-posix": frozenset(),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-4"}),
    },
    "no sync_after_fences": {
        "journaled": frozenset({"R-CRASH-2"}),
        "weakest-posix": frozenset({"R-CRASH-2", "R-CRASH-4"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-4"}),
    },
    "no sync_when_nothing_written": {
        "journaled": frozenset({"R-CRASH-2"}),
        "weakest-posix": frozenset({"R-CRASH-2"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-4"}),
    },
    "no recheck_fence": {
        "journaled": frozenset({"R-CRASH-1", "R-CRASH-4"}),
        "weakest-posix": frozenset({"R-CRASH-1", "R-CRASH-4"}),
        "ext4-nojournal": frozenset({"R-CRASH-1", "R-CRASH-2", "R-CRASH-4"}),
    },
    "no sync_after_unlinks": {
        "journaled": frozenset({"R-CRASH-2"}),
        "weakest-posix": frozenset({"R-CRASH-2"}),
        "ext4-nojournal": frozenset({"R-CRASH-2"}),
    },
    "no fsync_appends": {
        "journaled": frozenset({"R-CRASH-1"}),
        "weakest-posix": frozenset({"R-CRASH-1"}),
        "ext4-nojournal": frozenset({"R-CRASH-1", "R-CRASH-2", "R-CRASH-3", "R-CRASH-4"}),
    },
    "no sync_dir_on_create": {
        "journaled": frozenset({"R-CRASH-1"}),
        "weakest-posix": frozenset({"R-CRASH-1"}),
        "ext4-nojournal": frozenset({"R-CRASH-1", "R-CRASH-2", "R-CRASH-4"}),
    },
    "no sync_delete": {
        "journaled": frozenset({"R-CRASH-3"}),
        "weakest-posix": frozenset({"R-CRASH-3"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-3", "R-CRASH-4"}),
    },
    "no fence_before_unlink": {
        "journaled": frozenset({"R-CRASH-2", "R-CRASH-4"}),
        "weakest-posix": frozenset({"R-CRASH-2", "R-CRASH-4"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-4"}),
    },
    # A removal that goes on while another's shared sync runs returns with its fences and unlinks not
    # durable: its retire comes back Live, its delete's ID Retired (R-STORE-9).
    "no await_shared_sync": {
        "journaled": frozenset({"R-CRASH-2", "R-CRASH-3"}),
        "weakest-posix": frozenset({"R-CRASH-2", "R-CRASH-3"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-3", "R-CRASH-4"}),
    },
    # A combined waiter that returns once its request was taken, or on results handed out when phase 1
    # ends, returns before its batch's fences are durable: a crash brings its ID back Live.
    "no await_combined_batch": {
        "journaled": frozenset({"R-CRASH-2"}),
        "weakest-posix": frozenset({"R-CRASH-2"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-4"}),
    },
    "no results_after_syncs": {
        "journaled": frozenset({"R-CRASH-2"}),
        "weakest-posix": frozenset({"R-CRASH-2"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-4"}),
    },
}
