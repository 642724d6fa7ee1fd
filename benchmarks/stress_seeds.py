"""The kill matrix's concurrency column on several seeds, with threads and with ``--processes 2``
(docs/stress.md §The kill matrix's concurrency column).

For every concurrency bug of ``examples.bugs.catalogue``, runs ``capture-ledger stress TARGET --seed S
--json`` (default rounds, 4 threads) and ``... --processes 2`` for each seed, from the repository root as
``examples.bugs.matrix.run_stress`` does, and prints per bug and mode: the seeds killed, the rounds run in
all and the per-round kill rate (kills over rounds run: a run stops at its first violation), and the
requirements named; then the load average before and after. Usage::

    .venv/bin/python benchmarks/stress_seeds.py [--seeds 5] [--bug NAME ...]

Wall-clock and load dependent: a race is found when the OS interleaves the calls into its window, so the
rates are of this machine at this load, not guarantees.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from examples.bugs.catalogue import CATALOGUE  # noqa: E402
from examples.bugs.matrix import _command  # noqa: E402


def _load() -> str:
    path = Path("/proc/loadavg")
    return " ".join(path.read_text().split()[:3]) if path.exists() else "n/a"


def _run(target: str, seed: int, processes: int) -> tuple[bool, int, str]:
    arguments = ["stress", target, "--seed", str(seed)]
    if processes:
        arguments += ["--processes", str(processes)]
    failed, data, _, _ = _command("concurrency", arguments)
    if failed is not None:
        return False, 0, f"error: {failed.detail}"
    killed = data.get("verdict") == "violation"
    return killed, int(data.get("rounds") or 0), str(data.get("requirement") or data.get("verdict"))


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--bug", action="append", default=[])
    args = parser.parse_args()
    print(f"# {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, load {_load()}")
    print(f"# seeds 0..{args.seeds - 1}, default rounds; per-round rate = kills / rounds run")
    print(f"{'bug':42} {'mode':11} {'seeds':>6} {'rounds':>6} {'rate':>5}  named")
    for bug in CATALOGUE:
        if bug.layer != "concurrency" or (args.bug and bug.name not in args.bug):
            continue
        for processes in (0, 2):
            kills = rounds = 0
            named: Counter[str] = Counter()
            for seed in range(args.seeds):
                killed, ran, requirement = _run(bug.target, seed, processes)
                kills += killed
                rounds += ran
                named[requirement] += 1
            mode = f"processes {processes}" if processes else "threads"
            rate = kills / rounds if rounds else 0.0
            names = ", ".join(f"{k} x{v}" for k, v in sorted(named.items()))
            seeds = f"{kills}/{args.seeds}"
            print(f"{bug.name:42} {mode:11} {seeds:>6} {rounds:>6} {rate:>5.2f}  {names}", flush=True)
    print(f"# load at the end {_load()}")


if __name__ == "__main__":
    main()
