"""Benchmark of removals at scale: concurrent one-ID retires combined into batches, against one call at a
time and against group commit alone (SPEC.md R-STORE-4, R-STORE-9; docs/group-commit.md §Combining).

``--callers`` threads (default 256) each retire ``--calls`` Live rollouts, one ID per call, on one
``FileLineageStore`` handle (an HTTP worker's thread pool). Three modes, in rotating order per round, each
round on a fresh directory of Live ledgers:

- ``combine``: ``combine_removals=True`` (group commit on, as the default);
- ``one-at-a-time``: ``combine_removals=False, group_commit=False``: each call its own path and syncs;
- ``group commit``: ``combine_removals=False, group_commit=True``: each call its own path, shared syncs.

Printed per mode: retires per second (calls over the wall time from the start barrier to the last return;
median over rounds), latency p50 and p99 over every call of every round, syncs per call, and the ratios
against one-at-a-time; with ``--strace`` also system calls per retired ID, counted by ``strace -f -c`` on a
child process running the same load once per mode (strace's own overhead makes its times meaningless; only
its counts are used). The load average (``os.getloadavg``) is printed before and after.

Run: ``BENCH_DIR=<dir> python benchmarks/bench_removals.py [--callers 256] [--calls 4] [--rounds 3]
[--strace] [--json]``.
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
    """One timed round: wall seconds, every call's latency (s), syncs issued, calls and batches."""

    seconds: float
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
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - began
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
    return Round(seconds, latencies_all, stats.syncs_issued, callers * calls, batches)


def _summary(rounds: list[Round]) -> dict[str, float]:
    every = sorted(x for r in rounds for x in r.latencies)
    rates = [r.calls / r.seconds for r in rounds]
    return {
        "retires_per_s": statistics.median(rates),
        "p50_ms": 1000 * every[len(every) // 2],
        "p99_ms": 1000 * every[min(len(every) - 1, int(len(every) * 0.99))],
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    results["load_before"] = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-rm-", dir=os.environ.get("BENCH_DIR")) as name:
        root = Path(name)
        detected = detect(root)
        results["file_system"] = detected.reason
        results["fence_sync"] = detected.fence_sync if args.fence_sync == "auto" else args.fence_sync
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
    base = summaries.get("one-at-a-time")
    for summary in summaries.values():
        if base is not None:
            summary["throughput_vs_one_at_a_time"] = summary["retires_per_s"] / base["retires_per_s"]
            summary["p99_vs_one_at_a_time"] = summary["p99_ms"] / base["p99_ms"]
    results["modes"] = summaries
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        f"{started}  {results['file_system']}  fence_sync={results['fence_sync']}  "
        f"callers={args.callers} calls={args.calls} rounds={args.rounds}"
    )
    print(f"load average before {results['load_before']}, after {results['load_after']}")
    header = f"{'mode':<15}{'retires/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'syncs/call':>11}{'calls/batch':>12}"
    print(header + f"{'x thr':>7}{'x p99':>7}{'syscalls/ID':>12}")
    for mode, s in summaries.items():
        print(
            f"{mode:<15}{s['retires_per_s']:>10,.0f}{s['p50_ms']:>9.1f}{s['p99_ms']:>9.1f}"
            f"{s['syncs_per_call']:>11.2f}{s['calls_per_batch']:>12.1f}"
            f"{s.get('throughput_vs_one_at_a_time', 0):>7.2f}{s.get('p99_vs_one_at_a_time', 0):>7.2f}"
            f"{s.get('syscalls_per_id', float('nan')):>12.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
