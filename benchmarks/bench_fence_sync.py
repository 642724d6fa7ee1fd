"""Benchmark of retire's fence sync options by batch size, against the directory-protocol floor (SPEC.md
R-STORE-4, R-STORE-10; docs/store.md §Choosing the fence sync).

For each batch size (``--batches``, default 1, 16, 256 and 4096 IDs) a batch of Live ledgers is retired by a
handle that did not write them, once per option, in rotating order so that drift of a loaded machine hits
every option alike:

- ``directory``: one directory fsync after the fences (safe only with a journal);
- ``file``: also an fsync of each new fence before it (safe without a journal: what ``"auto"`` picks there);
- ``syncfs``: one ``syncfs(2)`` instead (safe everywhere; flushes every dirty page of the file system).

The floor is the directory protocol issued directly with ``os``: create each fence (``O_EXCL``), fsync the
directory, unlink each ledger, fsync the directory, on a fresh copy of the same batch. Figures are medians
over ``--rounds`` (µs per ID) with each option's ratio to the floor and to ``file``, and the load average
before and after. ``--writer MIB`` runs a thread that keeps dirtying that many MiB (unsynced) in a file of
the same file system meanwhile: another job's writes, which ``syncfs`` must flush and the others need not.

Run: ``python benchmarks/bench_fence_sync.py [--dir DIR] [--batches 1,16,256,4096] [--rounds 3]
[--writer 64] [--json]``; ``--dir`` picks the file system (default: a temporary directory under
``$BENCH_DIR`` or ``/tmp``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from capture_ledger.impl.store import FenceSync, detect
from capture_ledger.impl.store.file_store import FileLineageStore

OPTIONS: tuple[FenceSync, ...] = ("directory", "file", "syncfs")
_LINE = b'{"record":{"model_call_id":"m0","value":1}}\n'


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter_ns()
    action()
    return (time.perf_counter_ns() - start) / 1000


class _Writer:
    """A thread that keeps ``mib`` MiB of a file dirty (rewritten, never synced) until stopped."""

    def __init__(self, path: Path, mib: int) -> None:
        self.path, self.mib = path, mib
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        chunk = os.urandom(1 << 20)
        with self.path.open("wb") as out:
            while not self.stop.is_set():
                out.seek(0)
                for _ in range(self.mib):
                    out.write(chunk)
                    if self.stop.is_set():
                        break
                time.sleep(0.01)

    def __enter__(self) -> _Writer:
        if self.mib:
            self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        if self.mib:
            self.thread.join()
        self.path.unlink(missing_ok=True)


class Bench:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = 0

    def fresh(self, ids: list[str]) -> Path:
        """A new directory holding a Live ledger per ID, made durable."""
        self.count += 1
        path = self.root / f"d{self.count}"
        path.mkdir()
        for rollout_id in ids:
            (path / f"{rollout_id}.lineage.jsonl").write_bytes(_LINE)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.sync()
        finally:
            os.close(fd)
        return path

    def store(self, ids: list[str], fence_sync: FenceSync) -> float:
        """µs per ID of one retire of ``ids`` with ``fence_sync``."""
        directory = self.fresh(ids)
        with FileLineageStore(directory, fence_sync=fence_sync) as store:
            return _timed(lambda: store.retire(ids)) / len(ids)

    def floor(self, ids: list[str]) -> float:
        """µs per ID of the directory protocol issued directly (the floor of every option)."""
        directory = self.fresh(ids)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)

        def protocol() -> None:
            for rollout_id in ids:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
                os.close(os.open(f"{rollout_id}.lineage.retired", flags, 0o644, dir_fd=dir_fd))
            os.fsync(dir_fd)
            for rollout_id in ids:
                os.unlink(f"{rollout_id}.lineage.jsonl", dir_fd=dir_fd)
            os.fsync(dir_fd)

        try:
            return _timed(protocol) / len(ids)
        finally:
            os.close(dir_fd)


def measure(root: Path, batches: list[int], rounds: int, writer: int) -> dict[str, dict[str, float]]:
    """Per batch size: median µs per ID of the floor and of each option (see the module docstring)."""
    bench = Bench(root)
    results: dict[str, dict[str, float]] = {}
    with _Writer(root / "other-job.bin", writer):
        for batch in batches:
            ids = [f"rollout-{i:05d}" for i in range(batch)]
            samples: dict[str, list[float]] = {name: [] for name in ("floor", *OPTIONS)}
            order = ["floor", *OPTIONS]
            for round_ in range(rounds):
                for name in order[round_ % len(order) :] + order[: round_ % len(order)]:
                    if name == "floor":
                        samples[name].append(bench.floor(ids))
                    else:
                        samples[name].append(bench.store(ids, name))  # type: ignore[arg-type]
            results[str(batch)] = {name: statistics.median(values) for name, values in samples.items()}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="a directory on the file system to measure")
    parser.add_argument("--batches", default="1,16,256,4096", help="comma-separated batch sizes")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per batch size (median taken)")
    parser.add_argument("--writer", type=int, default=0, help="MiB another job keeps dirty meanwhile")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",") if b]
    base = args.dir or Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir())
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-fence-sync-", dir=base) as root:
        detection = detect(root)
        results = measure(Path(root), batches, args.rounds, args.writer)
    load = (load_before, os.getloadavg()[0])
    if args.json:
        print(
            json.dumps(
                {
                    "file_system": detection.file_system,
                    "journal": detection.journal,
                    "auto": detection.fence_sync,
                    "writer_mib": args.writer,
                    "load": load,
                    "results": results,
                },
                indent=2,
            )
        )
        return 0
    print(
        f"retire µs per ID by fence sync on {detection.file_system} (journal: {detection.journal}; "
        f"auto picks {detection.fence_sync!r}); writer {args.writer} MiB; load average {load[0]:.2f} before, "
        f"{load[1]:.2f} after; ratios to the directory-protocol floor, and to 'file'"
    )
    print(f"{'batch':>6} {'floor':>9} | " + " | ".join(f"{o:>22}" for o in OPTIONS))
    for batch, figures in results.items():
        floor = figures["floor"]
        cells = [
            f"{figures[o]:9.1f} {figures[o] / floor:5.2f}× {figures[o] / figures['file']:4.2f}f"
            for o in OPTIONS
        ]
        print(f"{batch:>6} {floor:9.1f} | " + " | ".join(f"{c:>22}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
