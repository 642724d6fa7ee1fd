"""Retire and delete throughput over HTTP against the same calls on the store, and the system-call floor.

Run:  python benchmarks/bench_http.py [--ids 2048] [--batch 256] [--workers 1]

One run, side by side, each on a fresh directory with the same number of Live rollouts (one row each,
written through a ``FileLineageStore`` handle):

- http:   ``capture-ledger serve`` in its own process (file store), ``RolloutControlClient`` with
          ``batch_size=--batch``: retire every ID, then delete every ID (IDs per second);
- direct: the same batches called on a ``FileLineageStore`` in this process;
- floor:  the raw system calls the protocol needs per batch, with no store: create the fences, fsync the
          directory, unlink the ledgers, fsync the directory (retire); unlink ledger and fence, fsync
          the directory (delete).

Also the control plane's own overhead: deleting batches of IDs that are already Absent (no file
changes, one directory sync per batch) over HTTP and directly; and the cost of opening a client (the
first ``RolloutControlClient`` of a process builds the TLS context, later ones share it) against a bare
``httpx.Client()``, which builds its own each time. Figures depend on the disk and the load; the ratios
are the point. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
from capture_ledger.impl.http.client import RolloutControlClient
from capture_ledger.impl.simulate import ServerProcess
from capture_ledger.impl.store.file_store import FileLineageStore


def _batches(ids: Sequence[str], size: int) -> list[list[str]]:
    return [list(ids[i : i + size]) for i in range(0, len(ids), size)]


def _populate(directory: Path, ids: Sequence[str]) -> None:
    with FileLineageStore(directory) as store:
        for rollout_id in ids:
            store.record(rollout_id, {"model_call_id": "m0"})


def _rate(count: int, run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return count / (time.perf_counter() - start)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _floor(directory: Path, ids: Sequence[str], size: int) -> tuple[float, float]:
    for rollout_id in ids:  # ledgers to remove, written as the store writes them
        with open(directory / f"{rollout_id}.lineage.jsonl", "w") as ledger:
            ledger.write('{"model_call_id": "m0"}\n')
    _fsync_dir(directory)

    def retire() -> None:
        for batch in _batches(ids, size):
            for rollout_id in batch:
                os.close(
                    os.open(directory / f"{rollout_id}.lineage.retired", os.O_CREAT | os.O_WRONLY, 0o644)
                )
            _fsync_dir(directory)
            for rollout_id in batch:
                os.unlink(directory / f"{rollout_id}.lineage.jsonl")
            _fsync_dir(directory)

    def delete() -> None:
        for batch in _batches(ids, size):
            for rollout_id in batch:
                os.unlink(directory / f"{rollout_id}.lineage.retired")
            _fsync_dir(directory)

    return _rate(len(ids), retire), _rate(len(ids), delete)


def _opening(count: int = 20) -> tuple[float, float, float]:
    """Milliseconds to open and close: the first client, each later one, and each bare ``httpx.Client()``."""

    def clients() -> None:
        for _ in range(count):
            RolloutControlClient("http://127.0.0.1:1", auth_token="bench").close()

    def bare_clients() -> None:
        for _ in range(count):
            httpx.Client().close()

    start = time.perf_counter()
    RolloutControlClient("http://127.0.0.1:1", auth_token="bench").close()
    first = time.perf_counter() - start
    return first * 1e3, 1e3 / _rate(count, clients), 1e3 / _rate(count, bare_clients)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", type=int, default=2048, help="Live rollouts per run (default: 2048)")
    parser.add_argument("--batch", type=int, default=256, help="IDs per request / call (default: 256)")
    parser.add_argument("--workers", type=int, default=1, help="server worker processes (default: 1)")
    args = parser.parse_args()
    first, later, bare = _opening()
    ids = [f"bench-{i:06d}" for i in range(args.ids)]
    token = secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="bench-http-") as root:
        served, direct, floor = Path(root, "served"), Path(root, "direct"), Path(root, "floor")
        for directory in (served, direct, floor):
            directory.mkdir()
        _populate(served, ids)
        _populate(direct, ids)
        figures: dict[str, tuple[float, float, float]] = {}
        with ServerProcess(served, token=token, workers=args.workers) as server:
            client = RolloutControlClient(server.url, auth_token=token, timeout=120, batch_size=args.batch)
            with client, FileLineageStore(direct) as store:
                http_retire = _rate(len(ids), lambda: client.retire(ids))
                direct_retire = _rate(len(ids), lambda: [store.retire(b) for b in _batches(ids, args.batch)])
                http_delete = _rate(len(ids), lambda: client.delete(ids))
                direct_delete = _rate(len(ids), lambda: [store.delete(b) for b in _batches(ids, args.batch)])
                http_absent = _rate(len(ids), lambda: client.delete(ids))
                direct_absent = _rate(len(ids), lambda: [store.delete(b) for b in _batches(ids, args.batch)])
        floor_retire, floor_delete = _floor(floor, ids, args.batch)
        figures["retire (Live -> Retired)"] = (http_retire, direct_retire, floor_retire)
        figures["delete (Retired -> Absent)"] = (http_delete, direct_delete, floor_delete)
        figures["delete of Absent IDs"] = (http_absent, direct_absent, float("nan"))
    print(f"{args.ids} IDs, batches of {args.batch}, {args.workers} server worker(s); IDs per second")
    print(
        f"{'operation':28} {'http':>10} {'direct':>10} {'floor':>10} {'http/direct':>12} {'direct/floor':>13}"
    )
    for name, (http, on_store, raw) in figures.items():
        ratios = f"{http / on_store:12.2f} {on_store / raw:13.2f}"
        print(f"{name:28} {http:10.0f} {on_store:10.0f} {raw:10.0f} {ratios}")
    for name, (http, on_store, _) in figures.items():
        per_id = 1e6 / http
        print(f"{name}: {per_id:.1f} us per ID over HTTP, {1e6 / on_store:.1f} us per ID directly")
    print(
        f"opening a client: the first {first:.1f} ms, each later one {later:.2f} ms; "
        f"a bare httpx.Client() {bare:.1f} ms"
    )


if __name__ == "__main__":
    main()
