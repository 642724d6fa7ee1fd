"""Real processes on one directory: their merged history is linearizable (R-CONC-1..2, R-WRITE-4).

Four processes (``multiprocessing`` with ``spawn``) each open their own ``FileLineageStore`` on one
directory and run ``histories.phased_client``: their operations phase by phase, every process crossing one
barrier before each phase. Each call's invocation and return are recorded with ``time.monotonic_ns``
(system-wide on one machine, so the clocks agree) and journaled as JSON lines (``spec.kit``). The
test merges the files, reads every ID back at the end (so the final states are observed) and judges the
whole history with ``spec.concurrency.linearizability.check_history``.

- Phase 0: seeded random operations by every client over three rollout IDs (record, record_failure,
  admit, manifest, has_rows, retire and delete of one or two IDs), so removals race with writes and with
  each other as the operating system interleaves them.
- Phases 1 to 3, on a fourth ID, in an order the barriers fix: client 0 records, client 0 retires, then
  client 1 records and reads. The production store discards the late write (R-WRITE-4); a store without
  the write-side fence lookup re-creates the ledger, and the checker must say ``Violation``, in every run.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.study import StoreVariant
from capture_ledger.impl.study.interleave import phased_client, random_operations
from capture_ledger.spec.concurrency.history import Event
from capture_ledger.spec.concurrency.linearizability import Ok, Violation, check_history
from capture_ledger.spec.core.model import Delete, Operation, ReadManifest, Record, Retire
from capture_ledger.spec.kit import HistoryRecorder, read_history, write_history

ROLLOUT_IDS = ("a", "b", "c")
LATE = "z"  # the ID of the fixed phases
CLIENTS = 4
OPERATIONS = 120
SEED = 5


def _phases(client: int) -> list[list[Operation]]:
    """Client ``client``'s operations: the random phase, then its part of the fixed late-write race."""
    random_phase = random_operations(SEED, client, OPERATIONS, ROLLOUT_IDS)
    race: list[list[Operation]] = [[], [], []]
    if client == 0:
        race[0] = [Record(LATE, {"model_call_id": "early"})]
        race[1] = [Retire([LATE])]
    elif client == 1:
        race[2] = [Record(LATE, {"model_call_id": "late"}), ReadManifest(LATE)]
    return [random_phase, *race]


def _run_clients(directory: Path, *, variant: dict[str, bool] | None = None) -> list[Event]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(CLIENTS)
    outs = [directory.parent / f"{directory.name}-client-{client}.jsonl" for client in range(CLIENTS)]
    processes = [
        ctx.Process(
            target=phased_client,
            args=(str(directory), str(outs[client])),
            kwargs={"client": client, "phases": _phases(client), "barrier": barrier, "variant": variant},
        )
        for client in range(CLIENTS)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
        assert process.exitcode == 0, f"client process failed with {process.exitcode}"
    events = read_history(*outs)
    # Read every ID back after every client returned, so the final states are part of the history.
    recorder = HistoryRecorder()
    ordering = StoreVariant(**(variant or {})).ordering()
    with FileLineageStore(directory, ordering=ordering) as store:
        for rollout_id in (*ROLLOUT_IDS, LATE):
            recorder.call(CLIENTS, store, ReadManifest(rollout_id))
    merged = events + recorder.events
    write_history(merged, directory.parent / f"{directory.name}-merged.jsonl")
    return merged


def _touches(event: Event, rollout_id: str) -> bool:
    op = event.op
    if isinstance(op, Retire | Delete):
        return rollout_id in op.rollout_ids  # type: ignore[operator]
    return bool(op.rollout_id == rollout_id)


def _contended_pairs(events: list[Event]) -> int:
    """How many pairs of calls by different clients on a common ID overlapped in time (a figure: the
    operating system decides it)."""
    pairs = 0
    ordered = sorted(events, key=lambda e: e.invoked)
    for i, first in enumerate(ordered):
        end = first.returned if first.returned is not None else float("inf")
        for second in ordered[i + 1 :]:
            if second.invoked >= end:
                break
            if second.client != first.client and any(_touches(second, r) for r in (*ROLLOUT_IDS, LATE)):
                pairs += any(_touches(first, r) and _touches(second, r) for r in (*ROLLOUT_IDS, LATE))
    return pairs


def test_merged_history_of_four_processes_is_linearizable(tmp_path: Path) -> None:
    events = _run_clients(tmp_path / "lineage")
    verdict = check_history(events)
    print(f"{len(events)} events, {_contended_pairs(events)} overlapping pairs on a common ID: {verdict!r}")
    assert len(events) == CLIENTS * OPERATIONS + 4 + len(ROLLOUT_IDS) + 1
    assert all(event.returned is not None for event in events)
    assert any(isinstance(e.op, Retire) for e in events) and any(isinstance(e.op, Record) for e in events)
    assert isinstance(verdict, Ok), verdict
    late = [e for e in events if _touches(e, LATE)]
    assert [e.client for e in late] == [0, 0, 1, 1, CLIENTS]  # the barriers ordered the fixed phases


def test_processes_catch_a_store_without_the_write_fence_lookup(tmp_path: Path) -> None:
    events = _run_clients(tmp_path / "lineage", variant={"fence_lookup_on_write": False})
    assert isinstance(check_history(events), Violation)
    # Not by luck of the random phase: the fixed phases alone are rejected; the witness is a read of the
    # late row alone (the retire removed the early one, the late write re-created the ledger).
    verdict = check_history([e for e in events if _touches(e, LATE)])
    print(f"fence_lookup_on_write=False, fixed phases: {verdict!r}")
    assert isinstance(verdict, Violation) and verdict.witness.rollout_id == LATE
    assert any(isinstance(e.op, ReadManifest) and "late" in repr(e.result) for e in verdict.witness.events)
