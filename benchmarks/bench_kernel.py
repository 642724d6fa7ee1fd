"""Benchmark of the kernel crash study: crash states recovered and judged per second, the floor of one
state, and how the cost grows with the writes in flight per epoch (docs/crash.md §The kernel study).

Measured side by side in one run, on the same recordings (as root, with the ``kernel`` extra):

1. **The study**: ``kernel_cell`` per workload and file system: states recovered by the kernel, read back
   by a fresh store and judged, per second (recording excluded).
2. **The floor**: the same states through the same ``Recoverer`` with nothing else: rewrite the image,
   ``e2fsck -fp`` when unjournaled, mount (journal replay), unmount. The ratio is what reading back,
   judging and comparing with the models add.
3. **Growth**: per epoch size (block writes in flight between two flushes), the states built and the
   seconds per state: states grow as every prefix plus up to ``--subsets`` other subsets (all of them
   while 2^n - n - 1 is smaller), the cost of one state stays flat.

CrashMonkey's published figure, for comparison: 100,000 crash states in about 10 minutes (HotStorage '17
slides), about 6 ms per state, in a VM with its kernel modules and a RAM block device.

Run: ``python benchmarks/bench_kernel.py [--fs ext4-ordered --fs ext4-nojournal] [--workload mixed]``
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

from capture_ledger.impl.study.kernel.filesystems import BLOCK_SIZE, FILESYSTEMS
from capture_ledger.impl.study.kernel.host import missing, workspace
from capture_ledger.impl.study.kernel.recorder import record_on_kernel
from capture_ledger.impl.study.kernel.recovery import Recoverer
from capture_ledger.impl.study.kernel.states import crash_states, epochs, materialize
from capture_ledger.impl.study.kernel.study import kernel_cell
from capture_ledger.impl.study.kernel.workloads import KERNEL_WORKLOADS
from capture_ledger.impl.study.recording import StoreConfig

CRASHMONKEY_MS = 600_000 / 100_000  # HotStorage '17 slides: 100,000 crash states in ~10 min


def floor(root: Path, workload: str, fs_name: str, subsets: int) -> tuple[int, float]:
    """States of one recording through the recoverer alone: (states, seconds)."""
    fs = FILESYSTEMS[fs_name]
    recorded = record_on_kernel(KERNEL_WORKLOADS[workload], StoreConfig(), fs, root / "record")
    found = epochs(recorded.records, block=BLOCK_SIZE)
    states, _ = crash_states(found, end=len(recorded.records), subsets=subsets)
    started = time.perf_counter()
    with Recoverer(root / "recover", fs, stripes=4) as recoverer:
        for state in states:
            with recoverer.recovered(recorded.base, materialize(found, state)):
                pass
    return len(states), time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--fs", action="append", choices=sorted(FILESYSTEMS))
    parser.add_argument("--workload", action="append", choices=sorted(KERNEL_WORKLOADS))
    parser.add_argument("--subsets", type=int, default=16)
    args = parser.parse_args()
    if missing():
        print("cannot run: needs " + "; ".join(missing()), file=sys.stderr)
        return 2
    systems = args.fs or list(FILESYSTEMS)
    names = args.workload or ["retire-live", "delete-reuse", "mixed"]
    with open("/proc/loadavg") as handle:
        load = handle.read().strip()
    print(f"date {datetime.datetime.now().isoformat(timespec='seconds')}; loadavg {load}")
    print(f"{'file system':>15} {'workload':>14} {'states':>6} {'study/s':>8} {'floor/s':>8} {'ratio':>6}")
    growth: dict[int, tuple[int, float]] = {}
    total_states = 0
    total_seconds = 0.0
    for fs_name in systems:
        for name in names:
            with workspace() as root:
                workload, fs = KERNEL_WORKLOADS[name], FILESYSTEMS[fs_name]
                cell = kernel_cell(workload, StoreConfig(), fs, root / "a", subsets=args.subsets)
                count, seconds = floor(root / "b", name, fs_name, args.subsets)
            study_rate = cell.states / cell.seconds
            floor_rate = count / seconds
            total_states += cell.states
            total_seconds += cell.seconds
            print(
                f"{fs_name:>15} {name:>14} {cell.states:>6} {study_rate:>8.0f} {floor_rate:>8.0f} "
                f"{floor_rate / study_rate:>6.2f}"
            )
            for size, states, spent in cell.costs:
                old = growth.get(size, (0, 0.0))
                growth[size] = (old[0] + states, old[1] + spent)
    per_state = total_seconds / total_states * 1000
    print(f"\nall: {total_states} states in {total_seconds:.1f} s: {per_state:.1f} ms per state")
    ratio = per_state / CRASHMONKEY_MS
    print(f"CrashMonkey (HotStorage '17 slides): {CRASHMONKEY_MS:.1f} ms/state; ours / theirs {ratio:.1f}")
    with open("/proc/loadavg") as handle:
        load = handle.read().strip()
    print(f"\ngrowth with the writes in flight (loadavg {load}):")
    print(f"{'writes':>6} {'states':>7} {'ms/state':>9}")
    for size, (states, spent) in sorted(growth.items()):
        print(f"{size:>6} {states:>7} {spent / states * 1000:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
