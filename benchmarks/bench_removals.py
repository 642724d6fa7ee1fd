"""Benchmark of removals at scale: concurrent one-ID retires combined into batches, against one call at a
time and against group commit alone (SPEC.md R-STORE-4, R-STORE-9; docs/group-commit.md §Combining).

``--callers`` threads (default 256) each retire ``--calls`` Live rollouts, one ID per call, on one
``FileLineageStore`` handle (an HTTP worker's thread pool). Three modes, in rotating order per round, each
round on a fresh directory of Live ledgers:

- ``combine``: ``combine_removals=True`` (group commit on, as the default);
- ``one-at-a-time``: ``combine_removals=False, group_commit=False``: each call its own path and syncs;
- ``group commit``: ``combine_removals=False, group_commit=True``: each call its own path, shared syncs.

Printed per directory and mode: retires per second (calls over the wall time from the start barrier to the
last return; median over rounds), latency p50 and p99 over every call of every round, the process's CPU
time per retire (user + system, every thread; the machine may be shared, so CPU is steadier than wall
time), syncs per call, calls per batch, and the ratios against one-at-a-time; with ``--strace`` also system
calls per retired ID, counted by ``strace -f -c`` on a child process running the same load once per mode
(strace's own overhead makes its times meaningless; only its counts are used). The load average
(``os.getloadavg``) is printed before and after each directory.

``--dirs`` runs several file systems side by side in one run (``label=path`` pairs, comma-separated: e.g.
the disk, a journaled ext4 image, a tmpfs), each detected with ``detect`` and opened with ``fence_sync``
``"auto"`` unless ``--fence-sync`` says otherwise; without it, ``BENCH_DIR`` (or the temporary directory).

Run: ``BENCH_DIR=<dir> python benchmarks/bench_removals.py [--dirs disk=/a,journal=/b,tmpfs=/c]
[--callers 256] [--calls 4] [--rounds 3] [--strace] [--json]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capture_ledger.impl.store import detect
from capture_ledger.impl.store.file_store import FileLineageStore

LINE = b'{"record":{"model_call_id":"m0","staging_key":"r/m0","tokens":812}}\n'

#: mode -> (combine_removals, group_commit)
MODES: dict[str, tuple[bool, bool]] = {
    "combine": (True, True),
    "one-at-a-time": (False, False),
    "group commit": (False, True),
}


#: The system calls the store's seam makes (``impl/store/fs.py``); threads' futex and memory calls are not
#: counted (their number depends on the scheduler, and strace's own overhead inflates them).
FILE_CALLS = frozenset(
    {
        *("openat", "open", "close", "fstat", "newfstatat", "statx", "stat", "lstat", "pread64"),
        *("pwrite64", "write", "read", "fsync", "fdatasync", "unlinkat", "unlink", "flock", "lseek"),
        *("ftruncate", "renameat", "renameat2", "rename", "syncfs"),
    }
)


@dataclass
class Round:
    """One timed round: wall and CPU seconds, every call's latency (s), syncs issued, calls and batches."""

    seconds: float
    cpu: float
    latencies: list[float]
    syncs: int
    calls: int
    batches: int


def _populate(directory: Path, ids: list[str]) -> None:
    for rollout_id in ids:
        (directory / f"{rollout_id}.lineage.jsonl").write_bytes(LINE)
    os.sync()


def run_round(root: Path, *, callers: int, calls: int, mode: str, fence_sync: str = "auto") -> Round:
    """One round of ``mode``: ``callers`` threads, ``calls`` one-ID retires each, on a fresh directory."""
    combine, group_commit = MODES[mode]
    directory = Path(tempfile.mkdtemp(prefix="rm-", dir=root))
    work = [[f"c{c:03d}-{k}" for k in range(calls)] for c in range(callers)]
    _populate(directory, [i for ids in work for i in ids])
    store = FileLineageStore(
        directory,
        group_commit=group_commit,
        combine_removals=combine,
        fence_sync=fence_sync,  # type: ignore[arg-type]
    )
    latencies: list[list[float]] = [[] for _ in range(callers)]
    barrier = threading.Barrier(callers + 1)
    failures: list[BaseException] = []

    def caller(number: int) -> None:
        mine = latencies[number]
        barrier.wait()
        try:
            for rollout_id in work[number]:
                began = time.perf_counter()
                result = store.retire([rollout_id])
                mine.append(time.perf_counter() - began)
                if result["removed"] != [rollout_id]:
                    raise AssertionError(f"{rollout_id}: {result}")
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(callers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    began, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.join()
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    if failures:
        raise failures[0]
    stats = store.statistics()
    store.close()
    leftover = list(directory.glob("*.lineage.jsonl"))
    shutil.rmtree(directory)
    if leftover:
        raise AssertionError(f"{len(leftover)} ledgers left")
    batches = stats.removal_batches if combine else callers * calls
    latencies_all = [x for mine in latencies for x in mine]
    return Round(seconds, cpu, latencies_all, stats.syncs_issued, callers * calls, batches)


def _summary(rounds: list[Round]) -> dict[str, float]:
    every = sorted(x for r in rounds for x in r.latencies)
    rates = [r.calls / r.seconds for r in rounds]
    return {
        "retires_per_s": statistics.median(rates),
        "p50_ms": 1000 * every[len(every) // 2],
        "p99_ms": 1000 * every[min(len(every) - 1, int(len(every) * 0.99))],
        "cpu_us_per_call": 1e6 * sum(r.cpu for r in rounds) / sum(r.calls for r in rounds),
        "syncs_per_call": sum(r.syncs for r in rounds) / sum(r.calls for r in rounds),
        "calls_per_batch": sum(r.calls for r in rounds) / sum(r.batches for r in rounds),
    }


def strace_counts(
    root: Path, *, callers: int, calls: int, mode: str, fence_sync: str = "auto"
) -> dict[str, float]:
    """System calls per retired ID of one round of ``mode`` in a child process under ``strace -f -c``.

    Counted over the child's whole run minus a child that populates and opens the store but retires
    nothing (the same setup), so that only the retires' calls remain.
    """

    def total(retire: bool) -> int:
        out = root / f"strace-{mode.replace(' ', '_')}-{int(retire)}.txt"
        code = (
            f"import sys; sys.path[:0] = [{str(Path(__file__).parent)!r}]\n"
            "from pathlib import Path\n"
            "import bench_removals as b\n"
            f"b.run_round(Path({str(root)!r}), callers={callers}, calls={calls if retire else 0}, "
            f"mode={mode!r}, fence_sync={fence_sync!r})\n"
        )
        subprocess.run(
            ["strace", "-f", "-c", "-o", str(out), sys.executable, "-c", code],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        counted = 0
        for line in out.read_text().splitlines():  # "% time, seconds, usecs/call, calls, [errors], name"
            fields = line.split()
            if len(fields) >= 5 and fields[-1] in FILE_CALLS:
                counted += int(fields[3])
        return counted

    with_retires, without = total(True), total(False)
    ids = callers * calls
    return {"syscalls_per_id": (with_retires - without) / ids}


def bench_directory(base: Path, args: argparse.Namespace, modes: list[str]) -> dict[str, Any]:
    """Every mode of ``modes`` on a temporary directory under ``base``, rounds in rotating order."""
    results: dict[str, Any] = {"load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bench-rm-", dir=base) as name:
        root = Path(name)
        detected = detect(root)
        results["file_system"] = detected.reason
        results["fence_sync"] = detected.fence_sync if args.fence_sync == "auto" else args.fence_sync
        results["syncfs_from"] = detected.syncfs_from if args.fence_sync == "auto" else None
        results["combine_auto"] = FileLineageStore(root, fence_sync=args.fence_sync).combine_removals
        rounds: dict[str, list[Round]] = {m: [] for m in modes}
        for n in range(args.rounds):
            for mode in modes[n % len(modes) :] + modes[: n % len(modes)]:
                rounds[mode].append(
                    run_round(
                        root, callers=args.callers, calls=args.calls, mode=mode, fence_sync=args.fence_sync
                    )
                )
        summaries = {m: _summary(r) for m, r in rounds.items()}
        if args.strace and shutil.which("strace"):
            for mode in modes:
                summaries[mode].update(
                    strace_counts(root, callers=args.callers, calls=1, mode=mode, fence_sync=args.fence_sync)
                )
    results["load_after"] = os.getloadavg()
    base_mode = summaries.get("one-at-a-time")
    for summary in summaries.values():
        if base_mode is not None:
            summary["throughput_vs_one_at_a_time"] = summary["retires_per_s"] / base_mode["retires_per_s"]
            summary["p99_vs_one_at_a_time"] = summary["p99_ms"] / base_mode["p99_ms"]
            summary["cpu_vs_one_at_a_time"] = summary["cpu_us_per_call"] / base_mode["cpu_us_per_call"]
    results["modes"] = summaries
    return results


def _directories(spec: str) -> dict[str, Path]:
    if not spec:
        return {"dir": Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir())}
    found: dict[str, Path] = {}
    for item in spec.split(","):
        label, _, path = item.rpartition("=")
        found[label or path] = Path(path)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dirs", default="", help="label=path pairs, comma-separated (default: BENCH_DIR)")
    parser.add_argument("--callers", type=int, default=256, help="concurrent callers (threads)")
    parser.add_argument("--calls", type=int, default=4, help="one-ID retires per caller per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per mode (rotating order)")
    parser.add_argument("--modes", default=",".join(MODES), help="modes to run, comma-separated")
    parser.add_argument("--fence-sync", default="auto", help="the store's fence_sync (default: auto)")
    parser.add_argument("--strace", action="store_true", help="also count system calls per ID (strace)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    results: dict[str, Any] = {"date": started, "callers": args.callers, "calls": args.calls}
    results["directories"] = {
        label: bench_directory(path, args, modes) for label, path in _directories(args.dirs).items()
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{started}  callers={args.callers} calls={args.calls} rounds={args.rounds}")
    header = f"{'dir':<9}{'mode':<15}{'retires/s':>10}{'p50 ms':>8}{'p99 ms':>8}{'CPU us':>8}{'syncs':>7}"
    print(header + f"{'/batch':>8}{'x thr':>7}{'x p99':>7}{'x CPU':>7}{'calls/ID':>9}")
    for label, found in results["directories"].items():
        print(
            f"{label}: {found['file_system']}; fence_sync={found['fence_sync']} "
            f"syncfs_from={found['syncfs_from']} combine auto={found['combine_auto']}; load average "
            f"{' '.join(f'{x:.2f}' for x in found['load_before'])} -> "
            f"{' '.join(f'{x:.2f}' for x in found['load_after'])}"
        )
        for mode, s in found["modes"].items():
            print(
                f"{label:<9}{mode:<15}{s['retires_per_s']:>10,.0f}{s['p50_ms']:>8.1f}{s['p99_ms']:>8.1f}"
                f"{s['cpu_us_per_call']:>8.0f}{s['syncs_per_call']:>7.2f}{s['calls_per_batch']:>8.1f}"
                f"{s.get('throughput_vs_one_at_a_time', 0):>7.2f}{s.get('p99_vs_one_at_a_time', 0):>7.2f}"
                f"{s.get('cpu_vs_one_at_a_time', 0):>7.2f}{s.get('syscalls_per_id', float('nan')):>9.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
