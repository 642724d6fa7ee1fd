"""Speed of the conformance kit: examples and steps per second, an earlier kit against this one, side by
side in one run (SPEC.md R-KIT-1..8; docs/kit.md §Speed).

The kit under study is only ``spec/kit``; everything else (the model, the reference ledger, the file
store) is the working tree's, so that a change to the store made meanwhile does not pass for a change of
the kit. The earlier kit is ``spec/kit`` as it was at ``--before`` (a commit; default: the last commit
before the kit learned partial ledgers and per-requirement verdicts), taken with ``git archive``; each kit
runs in a child interpreter whose ``sys.path`` starts with a temporary tree that lays ``capture_ledger``
out with symlinks (as ``tools/typecheck`` does), with ``spec/kit`` pointing at that kit's files.

Each child runs the machine of ``conformance_machine(factory, handles=N)`` under the ``ci`` profile
(derandomized, 60 examples of at most 25 steps) through Hypothesis's ``run_state_machine_as_test``, as
``check_ledger`` does, counting examples (teardowns) and steps (rule calls, the machine's own program
log, invariant checks excluded). The kits alternate, ``--rounds`` times, so that a loaded machine's drift
hits both; the figures are medians, and the ratios are this kit's steps per second (wall, and CPU) over
the earlier one's (above 1: faster; the CPU ratio is the steadier on a shared machine).
Targets: the reference ledger (1 handle) and the file store (1 and 3 handles).

Run: ``python benchmarks/bench_kit.py [--before COMMIT] [--rounds 3] [--json]``.
Not measured: shrinking (a passing ledger never shrinks) or the kit's ``--all`` rounds.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: ``spec/kit`` before partial ledgers, per-requirement verdicts and the split of ``conformance.py``.
BEFORE = "9f8c0e779566959d244e5afe7bfaa58f63621ea9"
TARGETS = (
    ("reference", "capture_ledger.reference.mutants:open_reference", 1),
    ("file store", "capture_ledger.impl.store.file_store:open_file_store", 1),
    ("file store", "capture_ledger.impl.store.file_store:open_file_store", 3),
)

CHILD = r"""
import importlib, json, sys, time
import capture_ledger
from capture_ledger.spec.kit.sequential import conformance_machine
from capture_ledger.spec.kit import PROFILES
from hypothesis.stateful import run_state_machine_as_test

target, handles = sys.argv[1], int(sys.argv[2])
module, _, attribute = target.partition(":")
factory = getattr(importlib.import_module(module), attribute)
machine = conformance_machine(factory, handles=handles)
counts = {"examples": 0, "steps": 0}

class Counted(machine):
    def teardown(self):
        counts["examples"] += 1
        counts["steps"] += sum(1 for line in self._steps if not line.startswith("state.every_known"))
        super().teardown()

wall, cpu = time.perf_counter(), time.process_time()
run_state_machine_as_test(Counted, settings=PROFILES["ci"])
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
print(json.dumps({**counts, "wall": wall, "cpu": cpu, "kit": capture_ledger.spec.kit.__file__}))
"""


def _layout(tree: Path, kit: Path) -> None:
    """``tree/capture_ledger`` as the package imports it, with ``spec/kit`` taken from ``kit``."""
    package = tree / "capture_ledger"
    package.mkdir()
    for name in ("__init__.py", "py.typed"):
        (package / name).symlink_to(ROOT / "pkg" / name)
    for sub in ("reference", "impl"):
        (package / sub).symlink_to(ROOT / sub)
    (package / "spec").mkdir()
    for entry in (ROOT / "spec").iterdir():
        if entry.name not in ("kit", "__pycache__"):
            (package / "spec" / entry.name).symlink_to(entry)
    (package / "spec" / "kit").symlink_to(kit)


def _extract_kit(commit: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "spec/kit"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "spec" / "kit"


def _copy_kit(into: Path) -> Path:
    """This tree's ``spec/kit``, copied, so that an edit during the run does not change the kit measured."""
    kit = into / "spec" / "kit"
    shutil.copytree(ROOT / "spec" / "kit", kit, ignore=shutil.ignore_patterns("__pycache__"))
    return kit


def _run(tree: Path, target: str, handles: int) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, target, str(handles)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    if done.returncode != 0:
        raise SystemExit(f"the kit failed on {target} (handles={handles}):\n{done.stderr[-3000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _ratio(row: dict[str, object], figure: str) -> float:
    after, before = row[f"after_{figure}"], row[f"before_{figure}"]
    assert isinstance(after, float) and isinstance(before, float)
    return after / before


def main(argv: list[str] | None = None) -> int:
    """Print the figures; the exit code is 0."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", default=BEFORE, help="the commit whose spec/kit is the earlier kit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-kit-") as scratch:
        base = Path(scratch)
        trees = {}
        for name, kit in (
            ("before", _extract_kit(args.before, base / "old")),
            ("after", _copy_kit(base / "new")),
        ):
            trees[name] = base / f"tree-{name}"
            trees[name].mkdir()
            _layout(trees[name], kit)
        rows = []
        for label, target, handles in TARGETS:
            samples: dict[str, list[dict[str, object]]] = {"before": [], "after": []}
            for _ in range(args.rounds):
                for name in ("before", "after"):
                    samples[name].append(_run(trees[name], target, handles))
            row: dict[str, object] = {"target": label, "handles": handles}
            for name, runs in samples.items():
                figures = [{k: float(v) for k, v in r.items() if k != "kit"} for r in runs]  # type: ignore[arg-type]
                row[f"{name}_examples_per_s"] = statistics.median(f["examples"] / f["wall"] for f in figures)
                row[f"{name}_steps_per_s"] = statistics.median(f["steps"] / f["wall"] for f in figures)
                row[f"{name}_steps"] = statistics.median(f["steps"] for f in figures)
                row[f"{name}_cpu_s"] = statistics.median(f["cpu"] for f in figures)
                row[f"{name}_steps_per_cpu_s"] = statistics.median(f["steps"] / f["cpu"] for f in figures)
            row["ratio_steps_per_s"] = _ratio(row, "steps_per_s")
            row["ratio_steps_per_cpu_s"] = _ratio(row, "steps_per_cpu_s")
            row["kits"] = sorted({str(r["kit"]) for runs in samples.values() for r in runs})
            rows.append(row)
    load = Path("/proc/loadavg").read_text().strip() if Path("/proc/loadavg").exists() else "n/a"
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    if args.json:
        print(json.dumps({"date": when, "loadavg": load, "before": args.before, "rows": rows}, indent=2))
        return 0
    print(f"{when}; /proc/loadavg: {load}; earlier kit: spec/kit at {args.before[:12]}; profile ci")
    print(f"medians of {args.rounds} alternating rounds; ratio = this kit's steps/s over the earlier one's\n")
    print(
        "| target | handles | examples/s before | after | steps/s before | after | steps before | after "
        "| CPU s before | after | ratio (wall) | ratio (CPU) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['target']} | {row['handles']} | {row['before_examples_per_s']:.1f} | "
            f"{row['after_examples_per_s']:.1f} | {row['before_steps_per_s']:.0f} | "
            f"{row['after_steps_per_s']:.0f} | {row['before_steps']:.0f} | {row['after_steps']:.0f} | "
            f"{row['before_cpu_s']:.2f} | {row['after_cpu_s']:.2f} | {row['ratio_steps_per_s']:.2f} | "
            f"{row['ratio_steps_per_cpu_s']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
