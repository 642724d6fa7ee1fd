"""Benchmark of lock choices for the store's stripes (SPEC.md R-STORE-2; docs/locks.md).

Uncontended acquire + release, measured side by side in alternating rounds of one run:

- ``filelock.FileLock`` on a lock file (opens and closes the file on every acquisition);
- ``fcntl.flock`` on a descriptor held open (the floor: two system calls);
- ``threading.Lock`` + ``fcntl.flock`` on a held-open descriptor: ``OsFileSystem.lock``/``unlock``, what the
  store uses, because ``flock`` does not exclude threads sharing one descriptor;
- the same through ``with stripe_lock(fs, stripe):``, the one way the store takes a stripe.

Medians over rounds, in µs per acquire + release, and ratios to the floor.

Run: ``python benchmarks/bench_locks.py [--rounds 9] [--per-round 2000] [--json]``
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import filelock
from capture_ledger.impl.store import stripe_lock
from capture_ledger.impl.store.fs import OsFileSystem, lock_file_name


def _per_op(action: Callable[[], None], count: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(count):
        action()
    return (time.perf_counter_ns() - start) / count / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--per-round", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-locks-", dir=os.environ.get("BENCH_DIR")) as root:
        fs = OsFileSystem(Path(root), stripes=4)
        path = os.path.join(root, lock_file_name(0))
        lock = filelock.FileLock(os.path.join(root, "filelock.lock"))
        fd = os.open(path, os.O_RDWR)

        def with_filelock() -> None:
            lock.acquire()
            lock.release()

        def with_flock() -> None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            fcntl.flock(fd, fcntl.LOCK_UN)

        def with_store_lock() -> None:
            fs.lock(1)
            fs.unlock(1)

        def with_stripe_lock() -> None:
            with stripe_lock(fs, 1):
                pass

        cases = {
            "filelock.FileLock": with_filelock,
            "fcntl.flock, held-open fd (floor)": with_flock,
            "threading.Lock + flock (store)": with_store_lock,
            "with stripe_lock(fs, 1) (store)": with_stripe_lock,
        }
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, case in cases.items():
                samples[name].append(_per_op(case, args.per_round))
        os.close(fd)
        fs.close_all()
    floor = statistics.median(samples["fcntl.flock, held-open fd (floor)"])
    results = {
        name: {
            "us": statistics.median(values),
            "min_us": min(values),
            "ratio": statistics.median(values) / floor,
        }
        for name, values in samples.items()
    }
    if args.json:
        print(json.dumps({"filelock_version": filelock.__version__, "results": results}, indent=2))
        return 0
    print(f"uncontended acquire + release, median of {args.rounds} rounds × {args.per_round} (µs)")
    print(f"{'lock':36} {'median':>8} {'min':>8} {'ratio':>8}")
    for name, figures in results.items():
        print(f"{name:36} {figures['us']:8.2f} {figures['min_us']:8.2f} {figures['ratio']:7.1f}×")
    print(f"filelock {filelock.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
