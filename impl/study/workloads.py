"""The crash study's catalogue: its workloads, the store configurations it compares, and what it must find
(R-CRASH-1..4, R-STORE-3..5; SPEC.md §Crash, docs/crash.md).

``WORKLOADS`` are the recorded runs (``recording.Workload``): setup operations, a few store operations,
perhaps one of them paused against the others or faulted; each note says which steps it exercises.
``SMALL_WORKLOADS`` are those of the study CI runs. ``STEPS`` are the protocol's sync and ordering steps
and ``OTHER_GUARDS`` its guards that are not about crashes, together every field of
``variants.StoreVariant``; ``CONFIGS`` are the store configurations by label (the default protocol, its
``fence_sync`` options, group commit off, each step or guard switched off, and each step switched off on
top of ``fence_sync=file``); ``SMALL`` the configurations of the CI study; ``EXPECTED`` what the small study
must find. Group commit is on in every configuration but ``group_commit=off`` (R-STORE-9). ``report``
runs and renders the study; this module only defines it.

Not guaranteed: that the workloads exercise every path of the store
(``tests/impl/study/test_guard_coverage.py`` checks only that every guard is ablated somewhere).
"""

from __future__ import annotations

from capture_ledger.impl.store.ordering import FenceSync
from capture_ledger.impl.study.recording import FaultAt, Pause, StoreConfig, Workload
from capture_ledger.impl.study.variants import StoreVariant
from capture_ledger.spec.core.model import Delete, Operation, Record, RecordFailure, Retire

__all__ = ["CONFIGS", "EXPECTED", "OTHER_GUARDS", "SMALL", "SMALL_WORKLOADS", "STEPS", "WORKLOADS"]


def _row(call: str, value: int = 1) -> dict[str, object]:
    return {"model_call_id": call, "value": value}


def _retried(
    name: str, op: Operation, call: str, note: str, *, setup: tuple[Operation, ...] = ()
) -> Workload:
    """``op`` fails (EIO) at its first seam call named ``call``, and the caller retries it."""
    return Workload(name=name, setup=setup, ops=(op, op), faults=(FaultAt(0, call),), note=note)


_SYNC = frozenset({"sync_dir", "syncfs"})

#: The study's workloads: each exercises the steps named in its note.
WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            name="record-new",
            ops=(Record("r1", _row("a")),),
            note="first record creates the ledger: data fsync, directory sync on create",
        ),
        Workload(
            name="record-append",
            setup=(Record("r1", _row("a")),),
            ops=(Record("r1", _row("b")), RecordFailure("r1", "c", "timeout")),
            note="appends to a durable ledger: data fsync",
        ),
        Workload(
            name="record-torn",
            setup=(Record("r1", _row("a")),),
            torn=("r1",),
            ops=(Record("r1", _row("b")),),
            note="append after a crash left a torn last line: truncate, write, fsync (R-STORE-6)",
        ),
        Workload(
            name="retire-live",
            setup=(Record("r1", _row("a")),),
            ops=(Retire(["r1", "r2"]),),
            note="retire a Live and an Absent ID: fences, sync, unlink, sync",
        ),
        Workload(
            name="retire-overlap",
            ops=(Retire(["r1"]), Retire(["r1"])),
            pause=Pause(0, _SYNC),
            note="a second retire runs while the first has written its fence but not synced it: "
            "the sync when nothing was written",
        ),
        Workload(
            name="delete-reuse",
            setup=(Record("r1", _row("a")), Retire(["r1"])),
            ops=(Delete(["r1"]), Record("r1", _row("b"))),
            note="delete a Retired ID, then reuse it: delete's sync",
        ),
        Workload(
            name="retire-delete-reuse",
            setup=(Record("r1", _row("a")),),
            ops=(Retire(["r1"]), Delete(["r1"]), Record("r1", _row("b"))),
            pause=Pause(0, frozenset({"lock"}), 2),
            note="a delete and a reuse run between retire's phases: the re-check (R-CONC-3)",
        ),
        _retried(
            "record-retry-eio",
            Record("r1", _row("a")),
            "sync_dir",
            "the first record's directory sync fails (EIO); the caller retries the same row, which is "
            "already there (R-WRITE-3)",
        ),
        _retried(
            "retire-retry-eio",
            Retire(["r1"]),
            "sync_dir",
            "a retire fails after writing its fence, before syncing it; the caller retries the batch: the "
            "sync when nothing was written",
        ),
        _retried(
            "retire-retry-fsync-eio",
            Retire(["r1"]),
            "fsync",
            "with fence_sync=file: the fence's fsync fails (EIO), or its process dies; the batch is retried",
        ),
        _retried(
            "delete-retry-eio",
            Delete(["r1"]),
            "sync_dir",
            "a delete fails at its directory sync; the caller retries: every non-empty batch syncs",
            setup=(Record("r1", _row("a")), Retire(["r1"])),
        ),
        Workload(
            name="mixed",
            setup=(Record("r1", _row("a")), Record("r2", _row("b")), Retire(["r4"])),
            ops=(
                Record("r3", _row("c")),
                Retire(["r1", "r2", "r3", "r4"]),
                Delete(["r2", "r4"]),
                Record("r2", _row("d")),
            ),
            note="larger: every kind of operation on four IDs",
        ),
        Workload(
            name="retires-share-syncs",
            setup=tuple(Record(f"r{i}", _row("a")) for i in (1, 2, 3)),
            ops=(Retire(["r1"]), Retire(["r2"]), Retire(["r3"])),
            threads=((0,), (1,), (2,)),
            note="three one-ID retires on three handles of one process, each asking for its syncs while "
            "another runs: group commit shares them (R-STORE-9)",
        ),
        Workload(
            name="removals-share-syncs",
            setup=(*(Record(f"r{i}", _row("a")) for i in (1, 2, 3)), Retire(["r3"])),
            ops=(Delete(["r1"]), Retire(["r2"]), Delete(["r3"]), Record("r3", _row("b"))),
            threads=((0,), (1,), (2, 3)),
            note="deletes and a retire share syncs (R-STORE-9); the deleted Retired ID is then re-used",
        ),
        Workload(
            name="retire-batch",
            setup=tuple(Record(f"r{i}", _row("a")) for i in range(8)),
            ops=(Retire([f"r{i}" for i in range(8)]),),
            note="a batch of eight Live IDs: the weak models' spaces grow as 2^8; sampled",
        ),
    )
}

#: The workloads of the CI study.
SMALL_WORKLOADS = (
    "record-new",
    "retire-live",
    "retire-overlap",
    "retire-retry-eio",
    "delete-reuse",
    "retire-delete-reuse",
    "retires-share-syncs",
    "removals-share-syncs",
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
)
#: Guards that are not about crashes; studied in the full run only.
OTHER_GUARDS = ("fence_lookup_on_write", "admit_checks_fence", "cache_coherence")


def _without(step: str, *, fence_sync: FenceSync = "directory") -> StoreConfig:
    prefix = "" if fence_sync == "directory" else f"fence_sync={fence_sync}, "
    return StoreConfig(
        label=f"{prefix}no {step}", variant=StoreVariant(**{step: False}), fence_sync=fence_sync
    )


#: Every configuration of the study, by label.
CONFIGS: dict[str, StoreConfig] = {
    c.label: c
    for c in (
        StoreConfig(label="default"),
        StoreConfig(label="fence_sync=file", fence_sync="file"),
        StoreConfig(label="fence_sync=syncfs", fence_sync="syncfs"),
        StoreConfig(label="group_commit=off", group_commit=False),
        *(_without(step) for step in (*STEPS, *OTHER_GUARDS)),
        # The full study also ablates each step from the configuration that is safe without a journal.
        *(_without(step, fence_sync="file") for step in STEPS),
    )
}
SMALL = (
    "default",
    "fence_sync=file",
    "fence_sync=syncfs",
    "group_commit=off",
    *(f"no {s}" for s in STEPS),
)

#: What the small study must find: configuration → model → clauses broken (R-STATE-3/R-STORE-8 never).
#: Under ext4-nojournal a re-used ID's new ledger may come back holding a block of its removed one
#: (spec/crash/durability.py), which breaks R-CRASH-3 whatever the fence sync (docs/crash.md).
EXPECTED: dict[str, dict[str, frozenset[str]]] = {
    "default": {
        "journaled": frozenset(),
        "weakest-posix": frozenset(),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-3", "R-CRASH-4"}),
    },
    "fence_sync=file": {
        "journaled": frozenset(),
        "weakest-posix": frozenset(),
        "ext4-nojournal": frozenset({"R-CRASH-3"}),
    },
    "fence_sync=syncfs": {
        "journaled": frozenset(),
        "weakest-posix": frozenset(),
        "ext4-nojournal": frozenset({"R-CRASH-3"}),
    },
    "group_commit=off": {
        "journaled": frozenset(),
        "weakest-posix": frozenset(),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-3", "R-CRASH-4"}),
    },
    "no sync_after_fences": {
        "journaled": frozenset({"R-CRASH-2"}),
        "weakest-posix": frozenset({"R-CRASH-2", "R-CRASH-4"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-3", "R-CRASH-4"}),
    },
    "no sync_when_nothing_written": {
        "journaled": frozenset({"R-CRASH-2"}),
        "weakest-posix": frozenset({"R-CRASH-2"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-3", "R-CRASH-4"}),
    },
    "no recheck_fence": {
        "journaled": frozenset({"R-CRASH-1", "R-CRASH-4"}),
        "weakest-posix": frozenset({"R-CRASH-1", "R-CRASH-4"}),
        "ext4-nojournal": frozenset({"R-CRASH-1", "R-CRASH-2", "R-CRASH-3", "R-CRASH-4"}),
    },
    "no sync_after_unlinks": {
        "journaled": frozenset({"R-CRASH-2"}),
        "weakest-posix": frozenset({"R-CRASH-2"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-3"}),
    },
    "no fsync_appends": {
        "journaled": frozenset({"R-CRASH-1"}),
        "weakest-posix": frozenset({"R-CRASH-1"}),
        "ext4-nojournal": frozenset({"R-CRASH-1", "R-CRASH-2", "R-CRASH-3", "R-CRASH-4"}),
    },
    "no sync_dir_on_create": {
        "journaled": frozenset({"R-CRASH-1"}),
        "weakest-posix": frozenset({"R-CRASH-1"}),
        "ext4-nojournal": frozenset({"R-CRASH-1", "R-CRASH-2", "R-CRASH-3", "R-CRASH-4"}),
    },
    "no sync_delete": {
        "journaled": frozenset({"R-CRASH-3"}),
        "weakest-posix": frozenset({"R-CRASH-3"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-3", "R-CRASH-4"}),
    },
    "no fence_before_unlink": {
        "journaled": frozenset({"R-CRASH-2", "R-CRASH-4"}),
        "weakest-posix": frozenset({"R-CRASH-2", "R-CRASH-4"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-3", "R-CRASH-4"}),
    },
    # A removal that goes on while another's shared sync runs returns with its fences and unlinks not
    # durable: its retire comes back Live, its delete's ID Retired (R-STORE-9).
    "no await_shared_sync": {
        "journaled": frozenset({"R-CRASH-2", "R-CRASH-3"}),
        "weakest-posix": frozenset({"R-CRASH-2", "R-CRASH-3"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-3", "R-CRASH-4"}),
    },
}
