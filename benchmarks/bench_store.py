"""Benchmark of ``FileLineageStore`` against the raw system-call floor (SPEC.md R-STORE-3..5).

Each figure is measured side by side in one run with the same system calls issued directly with ``os``
(the floor the store cannot go below), in alternating rounds so that drift of a loaded machine hits both:

- ``record (Live ledger)``: the store appends to an existing ledger. Floor: open(O_APPEND) + write + fsync
  + close.
- ``record (new ledger)``: the store creates the ledger (under a temporary name, renamed into place:
  docs/store.md). Floor: open(O_CREAT) + write + fsync + close + fsync of the directory, the cheapest
  durable creation (two syncs, as the store's own since the rename; before it the store issued three).
- ``retire / ID``: a batch of ``--batch`` Live rollouts, retired by a handle that did not write them (the
  usual case: another worker serves the retire). Floor: create each fence (open O_EXCL + close), fsync the
  directory, unlink each ledger, fsync the directory.
- ``retire / ID (cached)``: the same, by the handle that wrote them.
- ``delete / ID``: a batch of Live rollouts. Floor: unlink each ledger and (missing) fence, fsync the
  directory.
- ``retire / ID, fence_sync=file`` and ``=syncfs`` against ``=directory`` (docs/architecture.md §Facts: a
directory fsync
  does not make a new file's inode durable without a journal).

Figures are medians and minima over all samples (µs); on a machine whose disk other jobs load, the minima
are the better estimate of what the calls themselves cost. Goals (docs/store.md): retire and delete within
1.3× of
the floor, a write within 1.2×.

Run: ``python benchmarks/bench_store.py [--rounds 7] [--batch 256] [--json]``
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from capture_ledger.impl.store import FenceSync
from capture_ledger.impl.store.file_store import FileLineageStore

LIBC = ctypes.CDLL(None, use_errno=True)
#: Per-operation times of the store and of the floor, in µs.
Samples = tuple[list[float], list[float]]

ROW = {"model_call_id": "m", "staging_key": "r/m", "model": "policy", "prompt_tokens": 812, "latency": 0.25}


def _line(call: str) -> bytes:
    row = dict(ROW, model_call_id=call)
    return ('{"record":' + json.dumps(row, sort_keys=True, separators=(",", ":")) + "}\n").encode()


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter_ns()
    action()
    return (time.perf_counter_ns() - start) / 1000


class Bench:
    def __init__(self, root: Path, batch: int) -> None:
        self.root = root
        self.batch = batch
        self.count = 0
        self.flip = False

    def fresh(self) -> Path:
        self.count += 1
        path = self.root / f"d{self.count}"
        path.mkdir()
        return path

    # ---------------------------------------------------------------- records
    def record_live(self, n: int) -> Samples:
        store_dir, floor_dir = self.fresh(), self.fresh()
        store = FileLineageStore(store_dir)
        store.record("r", dict(ROW, model_call_id="m-first"))
        floor_path = floor_dir / "r.lineage.jsonl"
        floor_path.write_bytes(_line("m-first"))
        store_times: list[float] = []
        floor_times: list[float] = []
        for i in range(n):
            row = dict(ROW, model_call_id=f"m{i}")
            data = _line(f"m{i}")

            def floor(data: bytes = data) -> None:
                fd = os.open(floor_path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
                os.write(fd, data)
                os.fsync(fd)
                os.close(fd)

            times = self._both(lambda row=row: store.record("r", row), floor, 1)  # type: ignore[misc]
            store_times.append(times[0])
            floor_times.append(times[1])
        store.close()
        return store_times, floor_times

    def record_new(self, n: int) -> Samples:
        store_dir, floor_dir = self.fresh(), self.fresh()
        store = FileLineageStore(store_dir)
        dir_fd = os.open(floor_dir, os.O_RDONLY | os.O_DIRECTORY)
        store_times: list[float] = []
        floor_times: list[float] = []
        for i in range(n):
            row = dict(ROW, model_call_id="m0")
            data = _line("m0")

            def floor(i: int = i, data: bytes = data) -> None:
                fd = os.open(
                    f"r{i}.lineage.jsonl",
                    os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                    0o644,
                    dir_fd=dir_fd,
                )
                os.write(fd, data)
                os.fsync(fd)
                os.close(fd)
                os.fsync(dir_fd)

            times = self._both(lambda i=i, row=row: store.record(f"r{i}", row), floor, 1)  # type: ignore[misc]
            store_times.append(times[0])
            floor_times.append(times[1])
        os.close(dir_fd)
        store.close()
        return store_times, floor_times

    # ---------------------------------------------------------------- batches
    def _populate(self, directory: Path, ids: list[str]) -> None:
        for rollout_id in ids:
            (directory / f"{rollout_id}.lineage.jsonl").write_bytes(_line("m0") + _line("m1"))
        os.sync()

    def _batch(self, ids: list[str], store: FileLineageStore, *, cached: bool = False) -> int:
        """Give the store and a fresh floor directory ``ids`` as Live ledgers; the floor's directory fd."""
        if cached:  # written by the handle that will remove them
            for rollout_id in ids:
                store.record(rollout_id, dict(ROW, model_call_id="m0"))
                store.record(rollout_id, dict(ROW, model_call_id="m1"))
            os.sync()
        else:
            self._populate(store.directory, ids)
        floor_dir = self.fresh()
        self._populate(floor_dir, ids)
        return os.open(floor_dir, os.O_RDONLY | os.O_DIRECTORY)

    def _removal(
        self, store: FileLineageStore, remove: Callable[[], object], floor: Callable[[], None], dir_fd: int
    ) -> Samples:
        """Time one batch removal by the store against the floor, per ID; then close both."""
        store_time, floor_time = self._both(remove, floor, self.batch)
        os.close(dir_fd)
        store.close()
        return [store_time], [floor_time]

    def retire_batch(self, *, fence_sync: FenceSync = "directory", cached: bool = False) -> Samples:
        ids = [f"rollout-{i:05d}" for i in range(self.batch)]
        store = FileLineageStore(self.fresh(), fence_sync=fence_sync)
        dir_fd = self._batch(ids, store, cached=cached)

        def floor() -> None:
            for rollout_id in ids:
                fd = os.open(
                    f"{rollout_id}.lineage.retired",
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                    0o644,
                    dir_fd=dir_fd,
                )
                if fence_sync == "file":
                    os.fsync(fd)
                os.close(fd)
            if fence_sync == "syncfs":
                if LIBC.syncfs(dir_fd) != 0:  # no os.syncfs in Python 3.11; the store also uses ctypes
                    raise OSError(ctypes.get_errno(), "syncfs")
            else:
                os.fsync(dir_fd)
            for rollout_id in ids:
                os.unlink(f"{rollout_id}.lineage.jsonl", dir_fd=dir_fd)
            os.fsync(dir_fd)

        return self._removal(store, lambda: store.retire(ids), floor, dir_fd)

    def _both(
        self, store: Callable[[], object], floor: Callable[[], object], count: int
    ) -> tuple[float, float]:
        """Time both, in alternating order from one call to the next (drift hits both alike)."""
        self.flip = not self.flip
        if self.flip:
            store_time = _timed(store)
            floor_time = _timed(floor)
        else:
            floor_time = _timed(floor)
            store_time = _timed(store)
        return store_time / count, floor_time / count

    def delete_batch(self) -> Samples:
        ids = [f"rollout-{i:05d}" for i in range(self.batch)]
        store = FileLineageStore(self.fresh())
        dir_fd = self._batch(ids, store)

        def floor() -> None:
            for rollout_id in ids:
                os.unlink(f"{rollout_id}.lineage.jsonl", dir_fd=dir_fd)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{rollout_id}.lineage.retired", dir_fd=dir_fd)
            os.fsync(dir_fd)

        return self._removal(store, lambda: store.delete(ids), floor, dir_fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="rounds per batch figure (median taken)")
    parser.add_argument("--records", type=int, default=300, help="records per record figure")
    parser.add_argument("--batch", type=int, default=256, help="IDs per retire/delete batch")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this text")
    args = parser.parse_args(argv)

    results: dict[str, dict[str, float]] = {}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-store-", dir=os.environ.get("BENCH_DIR")) as root:
        bench = Bench(Path(root), args.batch)
        cases: dict[str, Callable[[], Samples]] = {
            "record (Live ledger)": lambda: bench.record_live(args.records),
            "record (new ledger)": lambda: bench.record_new(max(20, args.records // 5)),
            "retire / ID": bench.retire_batch,
            "retire / ID (cached)": lambda: bench.retire_batch(cached=True),
            "delete / ID": bench.delete_batch,
            "retire / ID, fence_sync=file": lambda: bench.retire_batch(fence_sync="file"),
            "retire / ID, fence_sync=syncfs": lambda: bench.retire_batch(fence_sync="syncfs"),
        }
        for name, case in cases.items():
            if args.only not in name:
                continue
            store_samples: list[float] = []
            floor_samples: list[float] = []
            for _ in range(args.rounds if "/ ID" in name else 1):
                got = case()
                store_samples += got[0]
                floor_samples += got[1]
            store_us, floor_us = statistics.median(store_samples), statistics.median(floor_samples)
            results[name] = {
                "store_us": store_us,
                "floor_us": floor_us,
                "ratio": store_us / floor_us,
                "store_min_us": min(store_samples),
                "floor_min_us": min(floor_samples),
                "min_ratio": min(store_samples) / min(floor_samples),
            }
    for name in ("retire / ID, fence_sync=file", "retire / ID, fence_sync=syncfs"):
        if name in results and "retire / ID" in results:
            results[name]["vs_directory"] = results[name]["store_us"] / results["retire / ID"]["store_us"]
    load = (load_before, os.getloadavg()[0])
    if args.json:
        print(json.dumps({"batch": args.batch, "load": load, "results": results}, indent=2))
        return 0
    print(
        f"FileLineageStore vs the system-call floor (batch {args.batch}; µs per operation or per ID; "
        f"load average {load[0]:.2f} before, {load[1]:.2f} after)"
    )
    print(f"{'case':32} {'store':>9} {'floor':>9} {'ratio':>6} | {'min st':>8} {'min fl':>8} {'ratio':>6}")
    for name, f in results.items():
        extra = f"  {f['vs_directory']:.2f}× directory" if "vs_directory" in f else ""
        print(
            f"{name:32} {f['store_us']:9.1f} {f['floor_us']:9.1f} {f['ratio']:5.2f}× | "
            f"{f['store_min_us']:8.1f} {f['floor_min_us']:8.1f} {f['min_ratio']:5.2f}×{extra}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
