"""``capture-ledger stress TARGET``: concurrent histories of any ledger judged for linearizability (SPEC.md
R-CONC-1..3, R-KIT-4, R-KIT-5, R-KIT-7, R-KIT-8, R-KIT-12; docs/stress.md).

``stress TARGET [--handles N] [--threads T] [--processes P] [--ops K] [--ids M] [--rounds R] [--seed S]
[--operations a,b] [--no-conflicts] [--option KEY=VALUE] [--budget STEPS] [--kill] [--report DIR] [--json]``
loads the ``module:callable`` factory (``targets.load_target``; ``--option`` passes keyword arguments, a
value read as JSON when it is JSON; ``--budget`` bounds the checker's search steps per round) and runs
``check_concurrency`` on it: ``T`` threads (asyncio tasks for a coroutine ledger) over ``N`` handles per
round. With ``--processes P``, ``P`` worker processes each open their own
handles on the shared workspace and run ``T`` clients each (``stress_processes``); with ``--kill``, one
worker per round is SIGKILLed mid-run and a fresh handle reads everything back (R-CRASH-1..4).

Exit 0 when every round is linearizable, 1 on a violation (its minimal witness printed as a timeline;
``--report DIR`` also writes ``witness.svg``), 2 when the target cannot be loaded or the verdict is unknown
(the checker's budget ran out, or the handles could not be opened): ``exit_code`` of the report's verdict.
``--json`` prints one object:
``{"target", "verdict": "ok"|"violation"|"unknown", "calls", "witness": str|null, "seconds"}`` (``verdict``
is the verdict's ``kind``) and, beyond
the pinned keys, ``seed``, ``rounds``, ``requirement``, ``rollout_id``, ``witness_calls``, ``processes``,
``recording_seconds``, ``checking_seconds`` and ``interrupted`` (calls a ``--kill`` cut short).

The seed reproduces the operation mix, not the interleaving (the OS chooses that). Not guaranteed: the
wording of the text output.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from capture_ledger.impl.cli._options import UsageError
from capture_ledger.impl.cli._preflight import open_once
from capture_ledger.impl.cli._progress import Progress, showing
from capture_ledger.spec.core.protocol import OPERATIONS
from capture_ledger.spec.core.verdicts import Violation, exit_code
from capture_ledger.spec.kit import bind_options, call_budget, load_target, parse_options
from capture_ledger.spec.kit.stress import (
    DEFAULT_CHECK_BUDGET,
    DEFAULT_OPS,
    DEFAULT_ROUNDS,
    MixSettings,
    StressReport,
    check_concurrency,
    present_operations,
)

__all__ = ["register", "report_json"]


def register(subparsers: Any) -> None:
    """Add ``stress`` to the ``capture-ledger`` parser."""
    parser = subparsers.add_parser(
        "stress",
        help="stress any ledger with concurrent calls and judge the histories for linearizability",
        description="Exit 0 if every history is linearizable, 1 on a violation (with a minimal witness), "
        "2 if the target cannot be loaded or the verdict is unknown. The seed reproduces the operation mix, "
        "not the interleaving.",
    )
    parser.add_argument("target", metavar="TARGET", help="module:callable opening a handle on a workspace")
    parser.add_argument("--handles", type=int, default=3, help="handles per process and round (default 3)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="concurrent clients per process (default 4, or 4 // P with --processes P, at least 1)",
    )
    parser.add_argument(
        "--processes", type=int, default=0, help="worker processes on one workspace (default 0)"
    )
    parser.add_argument(
        "--ops", type=int, default=DEFAULT_OPS, help=f"calls per round (default {DEFAULT_OPS})"
    )
    parser.add_argument("--ids", type=int, default=3, help="rollout IDs the calls share (default 3)")
    parser.add_argument(
        "--rounds", type=int, default=DEFAULT_ROUNDS, help=f"rounds at most (default {DEFAULT_ROUNDS})"
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="reproduces the operation mix (default: drawn)"
    )
    parser.add_argument("--operations", default=None, help="protocol methods to call, comma-separated")
    parser.add_argument(
        "--no-conflicts", action="store_true", help="no records of one call with different rows"
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a keyword argument for the factory",
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=DEFAULT_CHECK_BUDGET,
        help=f"the checker's search steps per round, 0 for no limit (default {DEFAULT_CHECK_BUDGET:,})",
    )
    parser.add_argument(
        "--kill", action="store_true", help="SIGKILL a worker each round; judge the read-back"
    )
    parser.add_argument(
        "--report", default=None, metavar="DIR", help="write witness.svg (and witness.txt) there"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=_stress)


def report_json(target: str, report: StressReport, seconds: float, processes: int) -> dict[str, Any]:
    """The ``--json`` object (the pinned keys first)."""
    verdict = report.verdict
    witness = verdict.witness if isinstance(verdict, Violation) else None  # a StressWitness
    return {
        "target": target,
        "verdict": verdict.kind,
        "calls": report.calls,
        "witness": report.witness,
        "seconds": round(seconds, 3),
        "seed": report.seed,
        "rounds": report.rounds,
        "requirement": verdict.requirement if isinstance(verdict, Violation) else None,
        "rollout_id": None if witness is None else witness.rollout_id,
        "witness_calls": 0 if witness is None else len(witness.calls),
        "processes": processes,
        "recording_seconds": round(report.recording_seconds, 3),
        "checking_seconds": round(report.checking_seconds, 3),
        "setup": report.setup,
        "interrupted": report.interrupted,
    }


def _check(args: argparse.Namespace) -> None:
    for name in ("handles", "threads", "ops", "ids", "rounds"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name} must be at least 1")
    if args.processes < 0:
        raise UsageError("--processes cannot be negative")
    if args.kill and args.processes < 1:
        args.processes = 2
    if args.threads is None:
        args.threads = max(1, 4 // args.processes) if args.processes else 4  # about 4 clients in all


def _stress(args: argparse.Namespace) -> int:
    _check(args)
    logging.getLogger("capture_ledger").addHandler(logging.NullHandler())  # discarded writes warn, by design
    options = parse_options(args.option)
    open_once(args.target, options)  # a factory raising at the first open: exit 2, one line
    factory = bind_options(load_target(args.target), options)
    requested = (
        None if args.operations is None else [n.strip() for n in args.operations.split(",") if n.strip()]
    )
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
    started = time.perf_counter()
    base = Path(tempfile.mkdtemp(prefix="capture-ledger-stress-"))
    try:
        with Progress(showing(json=args.json), label="stress") as bar:
            bar.phase(f"{args.rounds} round(s) on {'processes' if args.processes else 'threads'}")
            report = _run(args, factory, requested, seed, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    seconds = time.perf_counter() - started
    if args.report and isinstance(report.verdict, Violation):
        _write_report(Path(args.report), report.verdict)
    if args.json:
        print(json.dumps(report_json(args.target, report, seconds, args.processes), indent=2))
    else:
        print(f"{args.target}: {report}")
        print(f"recorded in {report.recording_seconds:.2f} s, judged in {report.checking_seconds:.2f} s")
    return exit_code(report.verdict)


def _run(
    args: argparse.Namespace, factory: Any, requested: list[str] | None, seed: int, base: Path
) -> StressReport:
    try:
        if args.processes:
            return _run_processes(args, factory, requested, seed, base)
        return check_concurrency(
            factory,
            handles=args.handles,
            threads=args.threads,
            operations=requested,
            seed=seed,
            ops=args.ops,
            ids=args.ids,
            rounds=args.rounds,
            conflicts=not args.no_conflicts,
            check_budget=args.budget or None,
            workspace=base,
        )
    except ValueError as error:
        raise UsageError(str(error)) from None


def _run_processes(
    args: argparse.Namespace, factory: Any, requested: list[str] | None, seed: int, base: Path
) -> StressReport:
    from capture_ledger.spec.kit import select_operations
    from capture_ledger.spec.kit.stress import run_processes

    present: tuple[str, ...] = OPERATIONS
    if requested is None:
        probe = base / "probe"
        probe.mkdir()
        try:
            present = present_operations(factory, probe)
        except Exception:  # the workers report the factory's failure
            present = OPERATIONS
    chosen = select_operations(requested, present)
    clients = args.processes * args.threads
    settings = MixSettings(
        clients=clients, ops=args.ops, ids=args.ids, operations=chosen, conflicts=not args.no_conflicts
    )
    return run_processes(
        args.target,
        args.option,
        settings,
        processes=args.processes,
        threads=args.threads,
        handles=args.handles,
        seed=seed,
        rounds=args.rounds,
        budget=call_budget(),
        check_budget=args.budget or None,
        base=base,
        kill=args.kill,
    )


def _write_report(directory: Path, violation: Violation) -> None:
    from capture_ledger.spec.kit.stress import witness_svg

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "witness.txt").write_text(violation.counterexample + "\n", encoding="utf-8")
    (directory / "witness.svg").write_text(witness_svg(violation), encoding="utf-8")
    print(f"wrote {directory / 'witness.svg'}", file=sys.stderr)
