"""Real processes on one directory: their merged history is linearizable (R-CONC-1..2).

Four processes (``multiprocessing`` with ``spawn``) each open their own ``FileLineageStore`` on one
directory and perform seeded random operations over three rollout IDs, recording every call's invocation
and return with ``time.monotonic_ns`` (system-wide on one machine, so the clocks agree), and write JSON
lines (``impl.histories``). The test merges the files, reads every ID back sequentially at the end (so the
final states are observed), and judges the whole history with ``spec.linearizability.check_history``.

Every client records, records failures, admits, reads, retires and deletes (batches of one or two IDs),
so removals race with writes and with each other. The same workload on a store without the write-side
fence lookup must be rejected. Seeds 1 to 5 were all judged ``Ok`` here; the test runs seed 5.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.ordering import StoreVariant
from capture_ledger.impl.study.histories import HistoryRecorder, random_client, read_history, write_history
from capture_ledger.spec.concurrency.history import Event
from capture_ledger.spec.concurrency.linearizability import Ok, Violation, check_history
from capture_ledger.spec.core.model import Delete, ReadManifest, Record, Retire

ROLLOUT_IDS = ("a", "b", "c")
CLIENTS = 4
OPERATIONS = 120


def _run_clients(directory: Path, *, seed: int, variant: dict[str, bool] | None = None) -> list[Event]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(CLIENTS)
    outs = [directory.parent / f"{directory.name}-client-{client}.jsonl" for client in range(CLIENTS)]
    processes = [
        ctx.Process(
            target=random_client,
            args=(str(directory), str(outs[client])),
            kwargs={
                "client": client,
                "seed": seed,
                "operations": OPERATIONS,
                "rollout_ids": ROLLOUT_IDS,
                "removals": True,
                "variant": variant,
                "barrier": barrier,
            },
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
    with FileLineageStore(directory, variant=StoreVariant(**(variant or {}))) as store:
        for rollout_id in ROLLOUT_IDS:
            recorder.call(CLIENTS, store, ReadManifest(rollout_id))
    merged = events + recorder.events
    write_history(merged, directory.parent / f"{directory.name}-merged.jsonl")
    return merged


def _contended_pairs(events: list[Event]) -> int:
    """How many pairs of calls by different clients on a common ID overlapped in time."""

    def ids(event: Event) -> set[str]:
        op = event.op
        if isinstance(op, Retire | Delete):
            return {str(i) for i in op.rollout_ids}  # type: ignore[attr-defined]
        return {str(op.rollout_id)}

    pairs = 0
    ordered = sorted(events, key=lambda e: e.invoked)
    for i, first in enumerate(ordered):
        end = first.returned if first.returned is not None else float("inf")
        for second in ordered[i + 1 :]:
            if second.invoked >= end:
                break
            if second.client != first.client and ids(first) & ids(second):
                pairs += 1
    return pairs


def test_merged_history_of_four_processes_is_linearizable(tmp_path: Path) -> None:
    started = time.monotonic()
    events = _run_clients(tmp_path / "lineage", seed=5)
    contended = _contended_pairs(events)
    checked = time.monotonic()
    verdict = check_history(events)
    print(
        f"{len(events)} events from {CLIENTS} processes, {contended} overlapping pairs on a common ID; "
        f"run {checked - started:.1f}s, check {time.monotonic() - checked:.2f}s: {verdict!r}"
    )
    assert len(events) == CLIENTS * OPERATIONS + len(ROLLOUT_IDS)
    assert all(event.returned is not None for event in events)
    assert contended > 50  # the processes really raced on the same IDs
    assert any(isinstance(e.op, Retire) for e in events) and any(isinstance(e.op, Record) for e in events)
    assert isinstance(verdict, Ok), verdict


def test_processes_catch_a_store_without_the_write_fence_lookup(tmp_path: Path) -> None:
    events = _run_clients(tmp_path / "lineage", seed=5, variant={"fence_lookup_on_write": False})
    verdict = check_history(events)
    print(f"fence_lookup_on_write=False: {verdict!r}")
    assert isinstance(verdict, Violation)
