"""Benchmark of the kernel crash study: crash states recovered and judged per second, the floor of one
state, and how the cost grows with the writes in flight per epoch (docs/crash.md §The kernel study).

Measured side by side in one run, on the same recording of each workload (as root, with the ``kernel``
extra), in ``--rounds`` alternating rounds (medians reported, the machine being shared):

1. **The study**: ``kernel_cell`` on the recording: every state recovered by the kernel, read back by a
   fresh store, judged, and compared with the models; states per second, one state at a time (``ahead``
   0) and pipelined (``ahead`` 1: the next state recovered in a worker thread while one is judged).
2. **The floor**: the same states through the same ``Recoverer`` with nothing else, one at a time:
   rewrite the image, ``e2fsck -fp`` when unjournaled, mount (journal replay), read the files, unmount;
   its milliseconds per state by phase (``Recoverer.phases``), and what judging adds (the one-at-a-time
   study less the floor). ``study/floor`` is the one-at-a-time study's time over the floor's (the goal:
   under 2). Before 2026-12-02 the floor cut 4 KiB images into 1 KiB blocks (more, different states than the
   study's); it now uses the file system's block. *cold/s* is the first round's one-at-a-time study, the
   only one that enumerates the models' classes along the recording (later rounds of the same recording
   reuse them, as ``kernel_cell`` shares them per recording): what one run of the study pays. *cpu* is the
   CPU milliseconds per state (this process and its children, user and system) of the one-at-a-time study
   and of the floor, and their ratio: on a shared machine the wall clock waits for other jobs, the CPU
   time much less so.
3. **Growth**: per epoch size (block writes in flight between two flushes), the states built and the
   milliseconds per state (one at a time): states grow as every prefix plus up to ``--subsets`` other subsets
   (all of them while 2^n - n - 1 is smaller), and the cost of one state stays flat.

Every row ends with the 1-minute load average when it was printed (2 cores: above 2 the figures are shared).

CrashMonkey's published figure, for comparison: 100,000 crash states in about 10 minutes (HotStorage '17
slides), about 6 ms per state, with its kernel modules and a RAM block device.

Run: ``python benchmarks/bench_kernel.py [--rounds 3] [--fs ext4-ordered] [--workload mixed]``
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import statistics
import sys
import time
from pathlib import Path

from capture_ledger.impl.study.crash import StoreConfig
from capture_ledger.impl.study.kernel import (
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

#: The recoverer's phases (``Recoverer.phases``), in the order a state goes through them.
PHASES = ("write", "fsck", "mount", "read", "unmount")
CRASHMONKEY_MS = 600_000 / 100_000  # HotStorage '17 slides: 100,000 crash states in ~10 min


def floor(root: Path, recorded: KernelRecording, subsets: int) -> tuple[float, dict[str, float]]:
    """Seconds to recover every state of ``recorded`` with nothing else done, and per phase."""
    found = epochs(recorded.records, block=recorded.fs.block)
    states, _ = crash_states(found, end=len(recorded.records), subsets=subsets)
    started = time.perf_counter()
    with Recoverer(root, recorded.fs, stripes=4) as recoverer:
        for state in states:
            with recoverer.recovered(recorded.base, materialize(found, state)):
                pass
    return time.perf_counter() - started, dict(recoverer.phases)


def cpu() -> float:
    """CPU seconds of this process and its finished children so far (user and system: the kernel's mount,
    log replay and unmount run in the calling thread's system time; the loop device's own I/O threads
    are not counted)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def load() -> str:
    """The 1-minute load average."""
    return f"{os.getloadavg()[0]:.1f}"


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
    print(f"date {datetime.datetime.now().isoformat(timespec='seconds')}; loadavg {os.getloadavg()}")
    print("states/s: one at a time (ahead 0, the default), pipelined (ahead 1), the floor; study/floor: the")
    print("one-at-a-time study's ms per state over the floor's; the floor's ms per state by phase, and what")
    print("judging adds (the one-at-a-time study less the floor); cold/s: the first round's one-at-a-time")
    print("study (it enumerates the models' classes along the recording, which later rounds of the same")
    print("recording reuse); cpu: CPU ms per state of the study and of the floor (median), and their ratio")
    print(
        f"{'file system':>15} {'workload':>14} {'states':>6} {'seq/s':>6} {'cold/s':>6} {'pipe/s':>6} "
        f"{'floor/s':>7} {'study/floor':>11} | {' '.join(f'{p:>7}' for p in PHASES)} {'judge':>7} | "
        f"{'cpu':>6} {'floor':>6} {'ratio':>5} | load"
    )
    growth: dict[int, tuple[int, float]] = {}
    study_ms: list[float] = []
    for fs_name in systems:
        fs = FILESYSTEMS[fs_name]
        for name in names:
            workload = KERNEL_WORKLOADS[name]
            with workspace() as root:
                recorded = record_on_kernel(workload, StoreConfig(), fs, root / "record")
                times: dict[int, list[float]] = {0: [], 1: []}
                floors: list[float] = []
                cpus: dict[str, list[float]] = {"study": [], "floor": []}
                phases: dict[str, list[float]] = {p: [] for p in PHASES}
                for round_ in range(args.rounds):
                    before = cpu()
                    bare_s, spent = floor(root / f"floor-{round_}", recorded, args.subsets)
                    cpus["floor"].append(cpu() - before)
                    floors.append(bare_s)
                    for phase in PHASES:
                        phases[phase].append(spent[phase])
                    for ahead in (0, 1):
                        scratch = root / f"study-{round_}-{ahead}"
                        before = cpu()
                        cell = kernel_cell(
                            workload,
                            StoreConfig(),
                            fs,
                            scratch,
                            recorded=recorded,
                            subsets=args.subsets,
                            ahead=ahead,
                        )
                        times[ahead].append(cell.seconds)
                        if not ahead:
                            cpus["study"].append(cpu() - before)
                            for size, states, cost in cell.costs:
                                old = growth.get(size, (0, 0.0))
                                growth[size] = (old[0] + states, old[1] + cost)
            one, pipe = statistics.median(times[0]), statistics.median(times[1])
            bare = statistics.median(floors)
            n = cell.states
            cold = times[0][0]
            cpu_study, cpu_floor = (statistics.median(cpus[k]) / n * 1000 for k in ("study", "floor"))
            study_ms.append(one / n * 1000)
            split = " ".join(f"{statistics.median(phases[p]) / n * 1000:>7.2f}" for p in PHASES)
            print(
                f"{fs_name:>15} {name:>14} {n:>6} {n / one:>6.0f} {n / cold:>6.0f} {n / pipe:>6.0f} "
                f"{n / bare:>7.0f} {one / bare:>11.2f} | {split} {(one - bare) / n * 1000:>7.2f} | "
                f"{cpu_study:>6.2f} {cpu_floor:>6.2f} {cpu_study / cpu_floor:>5.2f} | {load()}",
                flush=True,
            )
    per_state = statistics.median(study_ms)
    print(f"\nmedian over cells: {per_state:.1f} ms per state judged")
    ratio = per_state / CRASHMONKEY_MS
    print(f"CrashMonkey (HotStorage '17 slides): {CRASHMONKEY_MS:.1f} ms/state; ours / theirs {ratio:.1f}")
    print(f"\ngrowth with the writes in flight, one at a time (loadavg {load()}):")
    print(f"{'writes':>6} {'states':>7} {'ms/state':>9}")
    for size, (states, seconds) in sorted(growth.items()):
        print(f"{size:>6} {states // args.rounds:>7} {seconds / states * 1000:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
