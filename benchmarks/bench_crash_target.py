"""Benchmark of ``capture-ledger crash --target``: crash images judged per second, traced from outside
against the seam study, side by side in one run (SPEC.md §Crash; docs/crash-target.md §Speed).

Our own store (``FileLineageStore``, the study's ``default`` configuration) on the same workloads and models,
recorded two ways: through its effects seam and explored by ``impl.study.crash.explore`` (images read by a
store in this process), and traced with strace and explored by ``spec.kit.crash.explore_points``
(images read back by a fresh handle in a child process, in batches). Then, as examples of other ledgers, the
SQLite and directory example ledgers traced from outside. Printed per row: images judged, seconds exploring,
images per second, seconds recording (tracing included), and the ratio of the two recorders' rates; with
the date and ``/proc/loadavg`` (the machine is shared: figures are noisy, the ratio less so).

Run: ``python benchmarks/bench_crash_target.py [--workload W ...] [--model M ...] [--budget N]``.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
import time
from pathlib import Path

from capture_ledger.impl.study.crash import CONFIGS, explore, record, store_target
from capture_ledger.spec.crash.durability import MODELS
from capture_ledger.spec.kit.crash import WORKLOADS, ReadBack, TargetReader, explore_points
from capture_ledger.spec.kit.crash.strace import Target, record_target, tracing_problem

DEFAULT_WORKLOADS = ("record-new", "retire-live", "delete-reuse", "mixed")
ROOT = Path(__file__).resolve().parent.parent


def _load() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def _outside(
    target: Target, workloads: list[str], models: list[str], budget: int
) -> tuple[int, float, float]:
    reader = TargetReader(target.target, dict(target.options), cwd=target.cwd)
    images, exploring, recording = 0, 0.0, 0.0
    try:
        for name in workloads:
            began = time.perf_counter()
            with tempfile.TemporaryDirectory() as scratch:
                traced = record_target(target, WORKLOADS[name], Path(scratch))
            recording += time.perf_counter() - began
            for model in models:
                found = explore_points(traced, model, ReadBack(reader), budget=budget)
                images += found.images
                exploring += found.seconds
    finally:
        reader.close()
    return images, exploring, recording


def _seam(workloads: list[str], models: list[str], budget: int) -> tuple[int, float, float]:
    images, exploring, recording = 0, 0.0, 0.0
    for name in workloads:
        began = time.perf_counter()
        with tempfile.TemporaryDirectory() as scratch:
            recorded = record(WORKLOADS[name], CONFIGS["default"], Path(scratch))
        recording += time.perf_counter() - began
        for model in models:
            found = explore(recorded, MODELS[model], budget=budget)
            images += found.images
            exploring += found.seconds
    return images, exploring, recording


def main() -> int:
    """Print the table; exit 2 when this machine cannot trace."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--workload", action="append", choices=sorted(WORKLOADS))
    parser.add_argument("--model", action="append", choices=sorted(MODELS))
    parser.add_argument("--budget", type=int, default=256, help="most images judged per crash point")
    args = parser.parse_args()
    problem = tracing_problem()
    if problem is not None:
        print(f"cannot trace: {problem}", file=sys.stderr)
        return 2
    workloads = list(args.workload or DEFAULT_WORKLOADS)
    models = list(args.model or MODELS)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# crash --target speed, {now}, load {_load()}")
    shown = f"workloads {', '.join(workloads)}; models {', '.join(models)}"
    print(f"{shown}; at most {args.budget} images per crash point\n")
    rows = [
        ("our store, seam study (in process)", _seam(workloads, models, args.budget)),
        ("our store, traced from outside", _outside(store_target("default"), workloads, models, args.budget)),
        (
            "examples.directory_ledger, traced",
            _outside(
                Target(target="examples.directory_ledger:open_ledger", cwd=ROOT),
                workloads,
                models,
                args.budget,
            ),
        ),
        (
            "examples.sqlite_ledger, traced",
            _outside(
                Target(target="examples.sqlite_ledger:open_ledger", cwd=ROOT), workloads, models, args.budget
            ),
        ),
    ]
    print("| recorder | images | s exploring | images/s | s recording |")
    print("|---|---|---|---|---|")
    rates = []
    for label, (images, exploring, recording) in rows:
        rate = images / exploring if exploring else 0.0
        rates.append(rate)
        print(f"| {label} | {images} | {exploring:.1f} | {rate:.0f} | {recording:.1f} |")
    if rates[0] and rates[1]:
        print(f"\nour store: traced from outside / seam = {rates[1] / rates[0]:.2f} of the seam study's rate")
    print(f"load after: {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
