"""``capture-ledger crash``: run the crash-consistency study and write its report.

``capture-ledger crash`` runs the small study (every sync and ordering step switched off in turn, plus the
default protocol and its ``fence_sync`` options, on the small workloads, under all three persistence
models) and prints the matrix. ``--full`` adds every guard and the larger, sampled workloads; ``--model``,
``--workload`` and ``--config`` narrow it; ``--report DIR`` writes ``report.md`` with ``matrix.svg`` and
one timeline picture per counterexample. Exit code 0 when the default protocol shows no violation under
the journaled model (the study's own acceptance), 1 otherwise.

Not guaranteed: the wording of the human-readable output.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from capture_ledger.impl.study.report import StudyCell, matrix_table, study, write_report
from capture_ledger.impl.study.workloads import CONFIGS, WORKLOADS
from capture_ledger.spec.crash.durability import MODELS

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``crash`` sub-command."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "crash",
        help="explore crash states of the file store under persistence models; write the ordering study",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    parser.add_argument("--model", action="append", choices=sorted(MODELS), help="a persistence model")
    parser.add_argument(
        "--workload",
        action="append",
        choices=sorted(WORKLOADS),
        metavar="NAME",
        help=f"a workload (repeatable): {', '.join(WORKLOADS)}",
    )
    parser.add_argument(
        "--config",
        action="append",
        choices=sorted(CONFIGS),
        metavar="LABEL",
        help="a store configuration (repeatable): 'default', 'fence_sync=file', 'fence_sync=syncfs', "
        "'no <step>' for a StoreVariant field switched off, 'fence_sync=file, no <step>'",
    )
    parser.add_argument("--report", type=Path, metavar="DIR", help="write report.md and SVG pictures here")
    parser.add_argument("--full", action="store_true", help="every configuration and workload")
    parser.add_argument("--budget", type=int, default=256, help="most images judged per crash point")
    parser.add_argument("--seed", type=int, default=0, help="seed for sampled crash points")
    parser.add_argument("--verbose", action="store_true", help="one line per configuration and workload")
    parser.set_defaults(handler=run)


def _progress(cell: StudyCell) -> None:
    figures = ", ".join(f"{e.model} {e.images} images {e.verdict}" for e in cell.explorations)
    seconds = sum(e.seconds for e in cell.explorations)
    print(f"  {cell.config} / {cell.workload}: {figures} ({seconds:.1f} s)", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Run the study ``args`` describe; print the matrix and the figures."""
    result = study(
        configs=args.config,
        models=args.model,
        workloads=args.workload,
        full=args.full,
        budget=args.budget,
        seed=args.seed,
        progress=_progress if args.verbose else None,
    )
    images, distinct, seconds = result.totals()
    print(matrix_table(result))
    print()
    print(
        f"{images} crash images judged ({distinct} distinct read) in {seconds:.1f} s: "
        f"{images / seconds if seconds else 0.0:.0f} images/s; {result.seconds:.1f} s in all"
    )
    if args.report is not None:
        print(f"report: {write_report(result, args.report)}")
    if "default" in result.configs and "journaled" in result.models:
        return 0 if result.verdict("default", "journaled") != "violation" else 1
    return 0
