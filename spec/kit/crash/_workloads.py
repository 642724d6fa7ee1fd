"""The crash workloads every ledger's crash layer runs (R-CRASH-1..4, R-STORE-3..5; SPEC.md §Crash).

``WORKLOADS`` are the recorded runs (``Workload``): setup operations, a few ledger operations, perhaps one
of them paused against the others, run on threads of their own, or faulted; each note says which steps of
a careful protocol it exercises. ``SMALL_WORKLOADS`` are those the CI study of our own store runs.

Not guaranteed: that the workloads exercise every path of a ledger (each layer says what it did not run).
"""

from __future__ import annotations

import errno

from capture_ledger.spec.core.model import Delete, Operation, Record, RecordFailure, Retire
from capture_ledger.spec.kit.crash._trace import Fault, FaultAt, Pause, Workload

__all__ = ["SMALL_WORKLOADS", "WORKLOADS"]


def _row(call: str, value: int = 1) -> dict[str, object]:
    return {"model_call_id": call, "value": value}


def _retried(
    name: str, op: Operation, call: str, note: str, *, setup: tuple[Operation, ...] = ()
) -> Workload:
    """``op`` fails (EIO) at its first seam call named ``call``, and the caller retries it."""
    return Workload(name=name, setup=setup, ops=(op, op), faults=(FaultAt(op=0, call=call),), note=note)


def _each_sync(name: str, op: Operation, note: str, *, setup: tuple[Operation, ...] = ()) -> Workload:
    """``op`` fails (EIO, after: its pages may be lost) at one of its syncs, whichever the ledger makes
    (one run per sync it makes, ``<name>@<n>``), and the caller retries it in the same history."""
    fault = FaultAt(op=0, call="sync", occurrence=0, fault=Fault(errno.EIO, "after"))
    return Workload(name=name, setup=setup, ops=(op, op), faults=(fault,), note=note)


def _each_unlink(
    name: str, ops: tuple[Operation, ...], note: str, *, setup: tuple[Operation, ...]
) -> Workload:
    """``ops[0]`` fails (EIO, the call skipped) at one of its unlinks, whichever the ledger makes (one run
    per unlink, ``<name>@<n>``): a removal left half-done; the later ``ops`` are the caller's next try."""
    fault = FaultAt(op=0, call="unlink", occurrence=0)
    return Workload(name=name, setup=setup, ops=ops, faults=(fault,), note=note)


_SYNC = frozenset({"sync_dir", "syncfs"})
#: A rollout of three rows: a ledger storing one file per row removes them one at a time.
_ROWS: tuple[Operation, ...] = tuple(Record("r1", _row(call)) for call in ("a", "b", "c"))
#: ``r1`` Live with three rows, ``r2`` Retired (one row, then retired); ``r3`` stays Absent.
_MIXED: tuple[Operation, ...] = (*_ROWS, Record("r2", _row("a")), Retire(["r2"]))

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
            ops=(
                Record("r1", _row("b")),
                RecordFailure("r1", "c", "timeout"),
            ),
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
            pause=Pause(op=0, calls=_SYNC),
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
            pause=Pause(op=0, calls=frozenset({"lock"}), occurrence=2),
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
        _each_sync(
            "record-new-fsync-eio",
            Record("r1", _row("a")),
            "each sync of the creating record in turn (file or directory, whichever the ledger makes) fails "
            "with EIO after the call: the pages it covered may be lost even when a later fsync succeeds "
            "(spec.crash._failed); the caller retries the same row (R-STORE-13)",
        ),
        _each_sync(
            "record-append-fsync-eio",
            Record("r1", _row("b")),
            "each sync of an append to a durable ledger in turn fails with EIO after the call; the caller "
            "retries the same row, which must be written anew, not confirmed by a second fsync (R-STORE-13)",
            setup=(Record("r1", _row("a")),),
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
        Workload(
            name="retire-rows",
            setup=_ROWS,
            ops=(Retire(["r1"]),),
            note="retire a rollout of three rows: a crash part-way through removing them must leave all "
            "of them or none, fenced or not (R-CRASH-4; a partial removal is R-CRASH-4)",
        ),
        Workload(
            name="delete-rows",
            setup=_ROWS,
            ops=(Delete(["r1"]),),
            note="delete a Live rollout of three rows: all of them or none after a crash (R-CRASH-4)",
        ),
        Workload(
            name="retire-rows-torn",
            setup=_ROWS,
            torn=("r1",),
            ops=(Retire(["r1"]),),
            note="retire three rows and the torn tail a crashed append left (R-STORE-6); our store only: "
            "a torn line is written in its own format",
        ),
        _each_unlink(
            "retire-rows-retry-eio",
            (Retire(["r1"]), Retire(["r1"])),
            "a retire of three rows fails at one of its unlinks (EIO), leaving the removal half-done; "
            "the caller retries the batch, which must finish it",
            setup=_ROWS,
        ),
        _each_unlink(
            "retire-rows-eio-delete",
            (Retire(["r1"]), Delete(["r1"])),
            "a retire of three rows fails at one of its unlinks (EIO); the caller deletes the rollout "
            "instead, from whatever the half-done retire left",
            setup=_ROWS,
        ),
        _each_unlink(
            "delete-rows-retry-eio",
            (Delete(["r1"]), Delete(["r1"])),
            "a delete of three rows fails at one of its unlinks (EIO), leaving some rows; the caller "
            "retries the batch, which must remove the rest",
            setup=_ROWS,
        ),
        Workload(
            name="retire-mixed-batch",
            setup=_MIXED,
            ops=(Retire(["r1", "r2", "r3"]),),
            note="one retire of a Live ID of three rows, a Retired ID and an Absent ID (R-RETIRE-1..4)",
        ),
        Workload(
            name="delete-mixed-batch",
            setup=_MIXED,
            ops=(Delete(["r3", "r2", "r1"]),),
            note="one delete of an Absent ID, a Retired ID and a Live ID of three rows (R-DELETE-1..3)",
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
