"""Benchmark of crash consistency: the explorer's throughput and the cost of ``fence_sync``.

Two sets of figures, each measured side by side in one run:

1. **Explorer throughput**: crash images judged per second on the small study, per persistence model, next
   to the floor of one image: writing its files into a scratch directory and reading them back with plain
   ``os`` calls (no store, no check, no judgement).
2. **fence_sync cost**: ``retire`` of a batch of Live rollouts with ``fence_sync="directory"`` (the default,
   safe on a journaled file system), ``"file"`` (fsync each new fence) and ``"syncfs"`` (one ``syncfs(2)``
   per batch), in alternating rounds on the same disk, next to the raw floor of the default protocol
   (create each fence, fsync the directory, unlink each ledger, fsync the directory). Per-ID medians (µs).

Run: ``python benchmarks/bench_crash.py [--rounds 5] [--batches 1,16,128]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from capture_ledger.impl.store import FenceSync
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.study.crash import StoreConfig, explore, record
from capture_ledger.spec.crash.durability import MODELS
from capture_ledger.spec.kit.crash import SMALL_WORKLOADS, WORKLOADS

ROW = {"model_call_id": "m", "value": 1}
OPTIONS: tuple[FenceSync, ...] = ("directory", "file", "syncfs")


def explorer_figures() -> None:
    print("explorer: crash images judged per second (small workloads, default store)")
    print(f"{'model':>16} {'images':>7} {'distinct':>8} {'seconds':>8} {'images/s':>9}")
    recordings = []
    for name in SMALL_WORKLOADS:
        with tempfile.TemporaryDirectory() as directory:
            recordings.append(record(WORKLOADS[name], StoreConfig(), Path(directory)))
    total_images = 0
    total_seconds = 0.0
    for model in MODELS:
        images = distinct = 0
        seconds = 0.0
        for recording in recordings:
            result = explore(recording, model)  # a fresh observation cache per model: no sharing
            images += result.images
            distinct += result.distinct
            seconds += result.seconds
        total_images += images
        total_seconds += seconds
        print(f"{model:>16} {images:>7} {distinct:>8} {seconds:>8.2f} {images / seconds:>9.0f}")
    # The floor of one image: write two small files, list and read them back, remove them.
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None) as scratch:
        rounds = 2000
        start = time.perf_counter()
        for _ in range(rounds):
            for name in ("r1.lineage.jsonl", "r1.lineage.retired"):
                Path(scratch, name).write_bytes(b'{"record":{"model_call_id":"a"}}\n')
            for name in os.listdir(scratch):
                Path(scratch, name).read_bytes()
                os.unlink(Path(scratch, name))
        floor = rounds / (time.perf_counter() - start)
    rate = total_images / total_seconds
    print(f"floor (materialize + read one image with os, no store): {floor:.0f} images/s; ")
    print(f"explorer over all models: {rate:.0f} images/s = {floor / rate:.1f}x below the floor")


def _retire_round(directory: Path, batch: int, fence_sync: FenceSync, tag: str) -> float:
    ids = [f"{tag}-{i}" for i in range(batch)]
    with FileLineageStore(directory, fence_sync=fence_sync) as writer:
        for rollout_id in ids:
            writer.record(rollout_id, ROW)
    with FileLineageStore(directory, fence_sync=fence_sync) as store:
        start = time.perf_counter_ns()
        store.retire(ids)
        elapsed = time.perf_counter_ns() - start
        store.delete(ids)
    return elapsed / 1000 / batch


def _floor_round(directory: Path, batch: int, tag: str) -> float:
    ids = [f"{tag}-{i}" for i in range(batch)]
    for rollout_id in ids:
        fd = os.open(directory / f"{rollout_id}.lineage.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(fd, b'{"record":{"model_call_id":"m","value":1}}\n')
        os.fsync(fd)
        os.close(fd)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dir_fd)
    start = time.perf_counter_ns()
    for rollout_id in ids:
        os.close(os.open(directory / f"{rollout_id}.lineage.retired", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    os.fsync(dir_fd)
    for rollout_id in ids:
        os.unlink(directory / f"{rollout_id}.lineage.jsonl")
    os.fsync(dir_fd)
    elapsed = time.perf_counter_ns() - start
    for rollout_id in ids:
        os.unlink(directory / f"{rollout_id}.lineage.retired")
    os.fsync(dir_fd)
    os.close(dir_fd)
    return elapsed / 1000 / batch


def fence_sync_figures(rounds: int, batches: list[int]) -> None:
    print()
    print("retire cost per ID (µs, median of rounds), fence_sync options side by side with the floor")
    columns = ("batch", "floor", "directory", "file", "syncfs", "file/dir", "syncfs/dir")
    widths = (6, 8, 10, 8, 8, 9, 11)
    print(" ".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True)))
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as base:
        directory = Path(base)
        for batch in batches:
            samples: dict[str, list[float]] = {"floor": [], "directory": [], "file": [], "syncfs": []}
            for r in range(rounds):  # alternate, so drift of a loaded machine hits every column alike
                samples["floor"].append(_floor_round(directory, batch, f"f{r}"))
                for option in OPTIONS:
                    samples[option].append(_retire_round(directory, batch, option, f"{option[0]}{r}"))
            med = {name: statistics.median(values) for name, values in samples.items()}
            print(
                f"{batch:>6} {med['floor']:>8.0f} {med['directory']:>10.0f} {med['file']:>8.0f} "
                f"{med['syncfs']:>8.0f} {med['file'] / med['directory']:>9.2f} "
                f"{med['syncfs'] / med['directory']:>11.2f}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", default="1,16,128")
    parser.add_argument("--skip-explorer", action="store_true")
    args = parser.parse_args(argv)
    if not args.skip_explorer:
        explorer_figures()
    fence_sync_figures(args.rounds, [int(b) for b in args.batches.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
