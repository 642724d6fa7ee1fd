"""``capture-ledger simulate``: the source's stress run through real servers (docs/simulate.md;
R-RETIRE-1..4, R-DELETE-1..3, R-WRITE-4..6, R-STORE-7).

``simulate [--servers N] [--workers W] [--rollouts R] [--calls C] [--in-flight F] [--batch B]
[--duplicates FRACTION] [--abandon FRACTION] [--removal retire|delete] [--report DIR] [--json]`` starts
N real ``capture-ledger serve`` servers per arm on loopback, drives R rollouts through them with a fake
inference route and a framework driver (``impl.simulate``), writes ``DIR/report.md`` with pictures, and
prints the summary (``--json``: the object of ``impl.simulate``). The defaults are the source's mix at
an eighth of its scale (``Scenario.quick()``, about a minute here); ``--source`` starts from the source's
numbers (20,000 rollouts, up to 30 minutes on two cores); ``--ci`` from the small scenario the test suite
runs. Options given set their knob on whichever is chosen. Progress goes to standard error.

Exit codes: 0 every invariant held; 1 an invariant broke, or the run passed ``--timeout``; 2 a usage
mistake or a missing optional dependency (``pip install 'capture-ledger[simulate]'``); 130 interrupted
(every server is stopped first). Nothing heavy is imported to build the parser.
Not guaranteed: time-based figures comparable between machines or loads (the report states both).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capture_ledger.impl.cli._options import UsageError
from capture_ledger.spec.kit import load_target

if TYPE_CHECKING:
    from capture_ledger.impl.simulate import Scenario

__all__ = ["register", "run_simulate", "scenario_from"]


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a fraction between 0 and 1, not {text}")
    return value


def register(subparsers: Any) -> None:
    """Add ``simulate`` to the command line.

    Args:
        subparsers: the ``capture-ledger`` parser's sub-parsers.
    """
    parser = subparsers.add_parser(
        "simulate",
        help="run the source's stress run through real servers and report it next to the source's figures",
        description="Start real `capture-ledger serve` servers on loopback, drive rollouts through a fake "
        "inference route with a framework driver that reads manifests, retires or deletes, sends "
        "duplicates, abandons attempts and asks the wrong server, then write report.md with pictures. "
        "Defaults: the source's mix at an eighth of its scale (2,500 rollouts of 4 calls, 256 in flight, "
        "batches of 256, and a 500-rollout duplicate experiment), about a minute; --source for the "
        "source's numbers (20,000 rollouts, 1,024 in flight, the 4,000-rollout duplicate experiment).",
    )
    add = parser.add_argument
    add("--servers", type=int, default=None, help="servers per arm, each with its own directory (default 2)")
    add("--workers", type=int, default=None, help="worker processes per server (default 2)")
    add(
        "--rollouts",
        type=int,
        default=None,
        help="rollouts of the removal and baseline arms (default 2500; --source 20000)",
    )
    add("--calls", type=int, default=None, help="model calls per rollout (default 4)")
    add(
        "--in-flight",
        type=int,
        default=None,
        help="rollouts running at once, per arm (default 256; --source 1024)",
    )
    add(
        "--batch",
        type=int,
        default=None,
        help="IDs per removal request; 1: one request per rollout (default 256)",
    )
    add("--duplicates", type=_fraction, default=None, help="fraction of rollouts sent twice (default 0.25)")
    add(
        "--abandon",
        type=_fraction,
        default=None,
        help="fraction of attempts abandoned part-way (default 0.02)",
    )
    add("--failures", type=_fraction, default=None, help="fraction of model calls that fail (default 0.02)")
    add(
        "--wrong-server",
        type=_fraction,
        default=None,
        help="fraction of finished attempts also removed on a server with another directory (default 0.02)",
    )
    add(
        "--removal",
        choices=["retire", "delete"],
        default=None,
        help="the main arm's removal (default retire)",
    )
    add(
        "--duplicate-rollouts",
        type=int,
        default=None,
        help="rollouts of each arm of the duplicate experiment, under delete and under retire; 0 skips it "
        "(default 500; --source 4000)",
    )
    add(
        "--combining-rollouts",
        type=int,
        default=None,
        help="rollouts of each arm of the combining experiment (one retire request per rollout, the "
        "store's combined removals on and off); 0 skips it (default 500; --source 4000; --ci 0)",
    )
    add("--no-baseline", action="store_true", help="skip the arm without removal")
    add("--seed", type=int, default=None, help="seed of every random choice (default 0)")
    add(
        "--timeout",
        type=float,
        default=None,
        help="seconds before the run is stopped (default 600; --source 1800)",
    )
    scale = parser.add_mutually_exclusive_group()
    scale.add_argument(
        "--source", action="store_true", help="start from the source's numbers (about 30 minutes here)"
    )
    scale.add_argument("--ci", action="store_true", help="start from the small scenario of the test suite")
    add(
        "--report",
        default="simulate-report",
        help="folder for report.md and its pictures (default: simulate-report)",
    )
    add("--work", default=None, help="folder for the servers' directories, kept (default: a temporary one)")
    add(
        "--ledger",
        default=None,
        help="module:callable opening the ledger each server worker serves from its directory, as "
        "`serve --ledger` (default: the file store)",
    )
    add("--json", action="store_true", help="print the summary as one JSON object")
    parser.set_defaults(handler=run_simulate)


#: The options that set a ``Scenario`` field of the same name when given.
_KNOBS = (
    "servers",
    "workers",
    "rollouts",
    "calls",
    "in_flight",
    "batch",
    "duplicates",
    "abandon",
    "failures",
    "wrong_server",
    "removal",
    "duplicate_rollouts",
    "combining_rollouts",
    "seed",
    "timeout",
)


def scenario_from(args: argparse.Namespace) -> Scenario:
    """The scenario ``args`` ask for: ``--ci``, ``--source`` or the quick default, with each knob given.

    Raises:
        UsageError: a knob out of range.
    """
    from capture_ledger.impl.simulate import Scenario

    changes: dict[str, Any] = {
        knob: getattr(args, knob) for knob in _KNOBS if getattr(args, knob) is not None
    }
    if args.no_baseline:
        changes["baseline"] = False
    try:
        base = Scenario.ci() if args.ci else Scenario() if args.source else Scenario.quick()
        return base.with_(**changes)
    except ValueError as error:
        raise UsageError(str(error)) from error


def run_simulate(args: argparse.Namespace) -> int:
    """Run the simulation; see the module docstring for the exit codes.

    Args:
        args: the parsed ``simulate`` arguments.

    Returns:
        The exit code.

    Raises:
        UsageError: a knob out of range, or ``aiohttp`` missing.
    """
    if importlib.util.find_spec("aiohttp") is None:
        raise UsageError(
            "the simulation's driver needs aiohttp, which is not installed: "
            "pip install 'capture-ledger[simulate]'"
        )
    if args.ledger is not None:
        load_target(args.ledger)  # a target that cannot be loaded is exit 2, named
    from capture_ledger.impl.simulate import SimulationTimeoutError, simulate, summary, write_report

    scenario = scenario_from(args)
    if importlib.util.find_spec("matplotlib") is None:
        print(
            "capture-ledger simulate: matplotlib is not installed, so the report will have no pictures "
            "(pip install 'capture-ledger[simulate]')",
            file=sys.stderr,
        )
    try:
        result = simulate(scenario, work=Path(args.work) if args.work else None, ledger=args.ledger)
    except SimulationTimeoutError as error:
        print(f"capture-ledger simulate: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("capture-ledger simulate: interrupted; every server was stopped", file=sys.stderr)
        return 130
    command = shlex.join(
        ["capture-ledger", "simulate", *sys.argv[2:]]
        if sys.argv[1:2] == ["simulate"]
        else ["capture-ledger", "simulate"]
    )
    report = write_report(result, Path(args.report), command=command)
    figures = summary(result, report=report)
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        _print_human(figures)
    return 0 if figures["ok"] else 1


def _print_human(figures: dict[str, Any]) -> None:
    record, baseline = figures["record_ms"], figures["record_ms_without_removal"]
    lines = [
        f"{figures['rollouts']:,} rollouts x {figures['calls']} calls, {figures['in_flight']:,} in flight, "
        f"batches of {figures['batch']}, removal {figures['removal']}: {figures['seconds']:.0f} s",
        f"left after the run: {figures['ledger_bytes_left']:,} ledger bytes, {figures['fence_files_left']:,} "
        f"fence files, {figures['cached_rows_left']:,} cached rows",
        f"duplicates sent {figures['duplicates_sent']:,}; ledgers re-created under retire "
        f"{figures['ledgers_recreated']}, under delete {figures['ledgers_recreated_under_delete']}",
        f"wrong server: {figures['wrong_server_absent']:,} of {figures['wrong_server_sent']:,} absent; "
        f"discarded late writes {figures['discarded_writes']:,}",
    ]
    if record is not None:
        off = f", without removal {baseline['mean']} ms" if baseline else ""
        lines.append(f"record: mean {record['mean']} ms, p50 {record['p50']} ms, p99 {record['p99']} ms{off}")
    retire, delete = figures["retire_us_per_rollout"], figures["delete_us_per_rollout"]
    lines.append(f"per rollout: retire {retire} us, delete {delete} us")
    broken = [name for name, holds in figures["invariants"].items() if not holds]
    lines.append("every invariant holds" if not broken else "BROKEN: " + "; ".join(broken))
    lines.append(f"report: {figures['report']}")
    print("\n".join(lines))
