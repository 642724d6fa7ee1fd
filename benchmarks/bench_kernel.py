"""Benchmark of the kernel crash study: crash states recovered and judged per second, the floor of one
state, and how the cost grows with the writes in flight per epoch (docs/crash.md §The kernel study).

Measured side by side in one run, on the same recording of each workload (as root, with the ``kernel``
extra), in ``--rounds`` alternating rounds (medians reported, the machine being shared):

1. **The study**: ``kernel_cell`` on the recording: every state recovered by the kernel, read back by a
   fresh store, judged, and compared with the models; states per second.
2. **The floor**: the same states through the same ``Recoverer`` with nothing else: rewrite the image,
   ``e2fsck -fp`` when unjournaled, mount (journal replay), unmount. The ratio floor/study is what reading
   back, judging and comparing add.
3. **Growth**: per epoch size (block writes in flight between two flushes), the states built and the
   milliseconds per state: states grow as every prefix plus up to ``--subsets`` other subsets (all of
   them while 2^n - n - 1 is smaller), and the cost of one state stays flat.

CrashMonkey's published figure, for comparison: 100,000 crash states in about 10 minutes (HotStorage '17
slides), about 6 ms per state, with its kernel modules and a RAM block device.

Run: ``python benchmarks/bench_kernel.py [--rounds 3] [--fs ext4-ordered] [--workload mixed]``
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

from capture_ledger.impl.study.crash import StoreConfig
from capture_ledger.impl.study.kernel import (
    BLOCK_SIZE,
    FILESYSTEMS,
    KERNEL_WORKLOADS,
    KernelRecording,
    Recoverer,
    crash_states,
    epochs,
    kernel_cell,
    materialize,
    missing,
    record_on_kernel,
    workspace,
)

CRASHMONKEY_MS = 600_000 / 100_000  # HotStorage '17 slides: 100,000 crash states in ~10 min


def floor(root: Path, recorded: KernelRecording, subsets: int) -> float:
    """Seconds to recover every state of ``recorded`` with nothing else done."""
    found = epochs(recorded.records, block=BLOCK_SIZE)
    states, _ = crash_states(found, end=len(recorded.records), subsets=subsets)
    started = time.perf_counter()
    with Recoverer(root, recorded.fs, stripes=4) as recoverer:
        for state in states:
            with recoverer.recovered(recorded.base, materialize(found, state)):
                pass
    return time.perf_counter() - started


def load() -> str:
    with open("/proc/loadavg") as handle:
        return handle.read().strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--fs", action="append", choices=sorted(FILESYSTEMS))
    parser.add_argument("--workload", action="append", choices=sorted(KERNEL_WORKLOADS))
    parser.add_argument("--subsets", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if missing():
        print("cannot run: needs " + "; ".join(missing()), file=sys.stderr)
        return 2
    systems = args.fs or list(FILESYSTEMS)
    names = args.workload or ["retire-live", "delete-reuse", "mixed"]
    print(f"date {datetime.datetime.now().isoformat(timespec='seconds')}; loadavg {load()}")
    header = f"{'file system':>15} {'workload':>14} {'states':>6} {'study/s':>8} {'floor/s':>8}"
    print(f"{header} {'floor/study':>11}")
    growth: dict[int, tuple[int, float]] = {}
    study_ms: list[float] = []
    for fs_name in systems:
        fs = FILESYSTEMS[fs_name]
        for name in names:
            workload = KERNEL_WORKLOADS[name]
            with workspace() as root:
                recorded = record_on_kernel(workload, StoreConfig(), fs, root / "record")
                studied: list[float] = []
                floors: list[float] = []
                for round_ in range(args.rounds):
                    floors.append(floor(root / f"floor-{round_}", recorded, args.subsets))
                    scratch = root / f"study-{round_}"
                    cell = kernel_cell(
                        workload, StoreConfig(), fs, scratch, recorded=recorded, subsets=args.subsets
                    )
                    studied.append(cell.seconds)
                    for size, states, spent in cell.costs:
                        old = growth.get(size, (0, 0.0))
                        growth[size] = (old[0] + states, old[1] + spent)
            study, bare = statistics.median(studied), statistics.median(floors)
            study_ms.append(study / cell.states * 1000)
            print(
                f"{fs_name:>15} {name:>14} {cell.states:>6} {cell.states / study:>8.0f} "
                f"{cell.states / bare:>8.0f} {bare / study:>11.2f}"
            )
    per_state = statistics.median(study_ms)
    print(f"\nmedian over cells: {per_state:.1f} ms per state judged")
    ratio = per_state / CRASHMONKEY_MS
    print(f"CrashMonkey (HotStorage '17 slides): {CRASHMONKEY_MS:.1f} ms/state; ours / theirs {ratio:.1f}")
    print(f"\ngrowth with the writes in flight (loadavg {load()}):")
    print(f"{'writes':>6} {'states':>7} {'ms/state':>9}")
    for size, (states, spent) in sorted(growth.items()):
        print(f"{size:>6} {states // args.rounds:>7} {spent / states * 1000:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
