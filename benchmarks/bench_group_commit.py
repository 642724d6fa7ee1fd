"""Benchmark of group commit: one-ID retires from many concurrent callers, shared syncs against each call's
own (SPEC.md R-STORE-9; docs/group-commit.md).

``--callers`` threads (default 256; a list sweeps) each retire ``--calls`` Live rollouts, one ID per call,
as a training framework that retires each rollout when it finishes would. Two placements, as in a model
server:

- ``one handle``: every thread calls one ``FileLineageStore`` (an HTTP worker's thread pool);
- ``N handles``: the threads are spread over ``--handles`` handles on the same directory in this process.

Each placement runs with ``group_commit=True`` and ``group_commit=False`` in alternating rounds (which one
goes first alternates too), each round on a fresh directory of Live ledgers, so that drift of a loaded
machine hits both alike. Printed per case: retires per second (calls over the wall time from the start
barrier to the last return), latency p50 and p99 over every call of every round, the syncs issued per call,
and the ratios on/off. A second table compares the fence syncs with group commit on (``--fence-syncs``):
the cost that decides what ``fence_sync="auto"`` picks on ext4 without a journal (R-STORE-10).

Run: ``python benchmarks/bench_group_commit.py [--callers 256 | --callers 8,32,256] [--calls 4] [--rounds 3]
[--json]`` (``BENCH_DIR`` chooses where the directories go; default the system's temporary directory).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capture_ledger.impl.store import detect
from capture_ledger.impl.store.file_store import FileLineageStore

LINE = b'{"record":{"model_call_id":"m0","staging_key":"r/m0","tokens":812}}\n'


@dataclass
class Round:
    """One timed round: wall seconds, every call's latency (s), syncs issued and calls made."""

    seconds: float
    latencies: list[float]
    syncs: int
    calls: int


def _populate(directory: Path, ids: list[str]) -> None:
    for rollout_id in ids:
        (directory / f"{rollout_id}.lineage.jsonl").write_bytes(LINE)
    os.sync()


def _round(
    root: Path, *, callers: int, calls: int, handles: int, group_commit: bool, fence_sync: str
) -> Round:
    directory = Path(tempfile.mkdtemp(prefix="gc-", dir=root))
    stores = [
        FileLineageStore(
            directory,
            group_commit=group_commit,
            combine_removals=False,  # shared syncs alone (benchmarks/bench_removals.py compares combining)
            fence_sync=fence_sync,  # type: ignore[arg-type]
        )
        for _ in range(handles)
    ]
    work = [[f"c{c:03d}-{k}" for k in range(calls)] for c in range(callers)]
    _populate(directory, [i for ids in work for i in ids])
    latencies: list[list[float]] = [[] for _ in range(callers)]
    barrier = threading.Barrier(callers + 1)
    failures: list[BaseException] = []

    def caller(number: int) -> None:
        store = stores[number % handles]
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
    if group_commit:  # shared: the directory's registers, counted once
        syncs = stores[0].statistics().syncs_issued
    else:
        syncs = sum(s.statistics().syncs_issued for s in stores)
    leftover = list(directory.glob("*.lineage.jsonl"))
    for store in stores:
        store.close()
    if leftover:
        raise AssertionError(f"{len(leftover)} ledgers left")
    return Round(seconds, [x for mine in latencies for x in mine], syncs, callers * calls)


def _summary(rounds: list[Round]) -> dict[str, float]:
    every = sorted(x for r in rounds for x in r.latencies)
    rates = [r.calls / r.seconds for r in rounds]
    return {
        "retires_per_s": statistics.median(rates),
        "p50_ms": 1000 * every[len(every) // 2],
        "p99_ms": 1000 * every[min(len(every) - 1, int(len(every) * 0.99))],
        "syncs_per_call": sum(r.syncs for r in rounds) / sum(r.calls for r in rounds),
    }


def _alternate(
    rounds: int, first: Callable[[], Round], second: Callable[[], Round]
) -> tuple[list[Round], list[Round]]:
    a: list[Round] = []
    b: list[Round] = []
    for n in range(rounds):
        if n % 2 == 0:
            a.append(first())
            b.append(second())
        else:
            b.append(second())
            a.append(first())
    return a, b


def _case(root: Path, args: argparse.Namespace, callers: int, handles: int) -> dict[str, Any]:
    """Group commit on and off for ``callers`` threads over ``handles`` handles, in alternating rounds."""
    on_round = functools.partial(
        _round,
        root,
        callers=callers,
        calls=args.calls,
        handles=handles,
        group_commit=True,
        fence_sync=args.fence_sync,
    )
    off_round = functools.partial(on_round, group_commit=False)
    on, off = _alternate(args.rounds, on_round, off_round)
    s_on, s_off = _summary(on), _summary(off)
    return {
        "callers": callers,
        "handles": handles,
        "on": s_on,
        "off": s_off,
        "throughput_ratio": s_on["retires_per_s"] / s_off["retires_per_s"],
        "p99_ratio": s_on["p99_ms"] / s_off["p99_ms"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--callers", default="256", help="concurrent callers (threads); a comma-separated list sweeps"
    )
    parser.add_argument("--calls", type=int, default=4, help="one-ID retires per caller per round")
    parser.add_argument("--handles", type=int, default=8, help="handles of the several-handles case")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per case (alternating on/off)")
    parser.add_argument(
        "--fence-sync", default="auto", help="fence_sync of the on/off comparison (default: auto)"
    )
    parser.add_argument(
        "--fence-syncs",
        default="directory,file,syncfs",
        help="fence syncs compared with group commit on (comma-separated; empty: skip)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    callers = [int(c) for c in args.callers.split(",")]

    def load() -> str:
        path = Path("/proc/loadavg")
        return path.read_text().strip() if path.exists() else "?"

    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    results: dict[str, Any] = {"date": started, "calls": args.calls, "load_before": load()}
    with tempfile.TemporaryDirectory(prefix="bench-gc-", dir=os.environ.get("BENCH_DIR")) as name:
        root = Path(name)
        results["file_system"] = detect(root).reason
        cases: list[dict[str, Any]] = []
        for count in callers:
            cases.append({"label": "one handle", **_case(root, args, count, 1)})
            cases.append({"label": f"{args.handles} handles", **_case(root, args, count, args.handles)})
        results["group_commit"] = cases
        fences: dict[str, dict[str, float]] = {}
        for option in [o for o in args.fence_syncs.split(",") if o]:
            rounds = [
                _round(
                    root,
                    callers=callers[-1],
                    calls=args.calls,
                    handles=1,
                    group_commit=True,
                    fence_sync=option,
                )
                for _ in range(args.rounds)
            ]
            fences[option] = _summary(rounds)
        results["fence_syncs"] = fences
    results["load_after"] = load()
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"group commit: one-ID retires, {args.calls} per caller per round, {args.rounds} rounds per case")
    print(f"date {results['date']}; load before {results['load_before']}; after {results['load_after']}")
    print(f"directory: {results['file_system']}; fence_sync={args.fence_sync}")
    print(
        f"{'callers':>7} {'case':11} {'mode':4} {'retires/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'syncs/call':>10}"
    )
    for case in cases:
        for mode in ("on", "off"):
            f = case[mode]
            print(
                f"{case['callers']:7d} {case['label']:11} {mode:4} {f['retires_per_s']:10.0f} "
                f"{f['p50_ms']:8.1f} {f['p99_ms']:8.1f} {f['syncs_per_call']:10.2f}"
            )
        print(
            f"{case['callers']:7d} {case['label']:11} on/off: throughput {case['throughput_ratio']:.2f}x, "
            f"p99 {case['p99_ratio']:.2f}x"
        )
    if fences:
        print(f"\nfence syncs with group commit on ({callers[-1]} callers, one handle)")
        for option, f in fences.items():
            print(
                f"{option:19} {'':4} {f['retires_per_s']:10.0f} {f['p50_ms']:8.1f} {f['p99_ms']:8.1f} "
                f"{f['syncs_per_call']:10.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
