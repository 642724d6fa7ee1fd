"""How fast ``capture-ledger stress`` records and judges histories: calls per second (docs/stress.md).

Runs ``check_concurrency`` (4 threads, 3 handles, 3 IDs) on the example ledgers and our file store, and
prints, side by side in one run, the calls recorded per second (running the ledger's calls, so mostly the
ledger's own speed) and the calls judged per second (the linearizability checker on the recorded
histories), with the date and the load average. Usage::

    .venv/bin/python benchmarks/bench_stress.py [--rounds R] [--ops K]

Wall-clock figures: noisy on a shared machine; compare the two columns of one run, not runs.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from capture_ledger.impl.store.file_store import open_file_store  # noqa: E402
from capture_ledger.spec import check_concurrency  # noqa: E402

from examples.async_ledger import open_ledger as open_async  # noqa: E402
from examples.directory_ledger import open_ledger as open_directory  # noqa: E402
from examples.sqlite_ledger import open_ledger as open_sqlite  # noqa: E402

TARGETS = {
    "async (memory)": open_async,
    "directory": open_directory,
    "sqlite": open_sqlite,
    "FileLineageStore": open_file_store,
}


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--ops", type=int, default=120)
    args = parser.parse_args()
    logging.getLogger("capture_ledger").addHandler(logging.NullHandler())
    load = Path("/proc/loadavg").read_text().strip() if Path("/proc/loadavg").exists() else "n/a"
    print(f"# {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, load {load}")
    print(f"# {args.rounds} rounds of {args.ops} calls, 4 threads, 3 handles, 3 IDs, seed 0")
    print(f"{'target':18} {'calls':>6} {'verdict':>8} {'recorded/s':>11} {'judged/s':>10}")
    for name, factory in TARGETS.items():
        with tempfile.TemporaryDirectory() as workspace:
            report = check_concurrency(
                factory, seed=0, rounds=args.rounds, ops=args.ops, workspace=Path(workspace)
            )
        recorded = report.calls / report.recording_seconds if report.recording_seconds else 0.0
        judged = report.calls / report.checking_seconds if report.checking_seconds else 0.0
        print(f"{name:18} {report.calls:>6} {report.verdict.kind:>8} {recorded:>11,.0f} {judged:>10,.0f}")


if __name__ == "__main__":
    main()
