"""``capture-ledger interleave``: explore the interleaving scenarios on the real file store (R-CONC-1..3).

``interleave [--scenario NAME]... [--bound N] [--slow]`` runs ``interleave.explore`` over every schedule of
each chosen scenario (``scenarios.SCENARIOS``; default all but ``scenarios.SLOW``, the explorer's slow
configurations, which ``--slow`` adds) with at most N preemptions (default 2) on the production store, and
prints per scenario the schedules explored, whether the bounded space was exhausted, the most decisions in
one run, the failing runs and the time. ``--ablate`` also switches each guard of ``scenarios.GUARDS`` off
in turn and prints the first counterexample found with the fewest preemptions (``--verbose``: its whole
trace). ``--dir`` puts the run directories there. Exit code 0 when the production store passed every
schedule and every guard-removed variant was caught, 1 otherwise (``exit_code`` of the worst verdict: each
``ScheduleExploration.result``, and a ``Violation`` for each variant not caught).

Not guaranteed: the wording of the output, or its times (wall clock).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from capture_ledger.impl.study import StoreVariant
from capture_ledger.impl.study.interleave import (
    GUARDS,
    SCENARIOS,
    SLOW,
    explore,
    find_counterexample,
    store_opener,
)
from capture_ledger.spec.core.verdicts import Verdict, Violation, exit_code, worst

__all__ = ["register", "run_cli"]


def register(subparsers: Any) -> None:
    """Add the ``interleave`` sub-command (``impl.cli``).

    Args:
        subparsers: the ``capture-ledger`` parser's sub-parsers.
    """
    parser = subparsers.add_parser(
        "interleave",
        help="run the real file store under every bounded schedule of the interleaving scenarios",
    )
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="a scenario")
    parser.add_argument("--bound", type=int, default=2, help="most preemptions per schedule (default 2)")
    parser.add_argument(
        "--slow", action="store_true", help="also the scenarios of the explorer's slow configurations"
    )
    parser.add_argument(
        "--ablate", action="store_true", help="also find each guard-removed variant's counterexample"
    )
    parser.add_argument("--verbose", action="store_true", help="print every counterexample trace")
    parser.add_argument("--dir", type=Path, default=None, help="where run directories go (default: temp)")
    parser.set_defaults(handler=run_cli)


def run_cli(args: Any) -> int:
    """Explore the chosen scenarios with the production store (and ``--ablate``: every variant).

    Args:
        args: the parsed ``interleave`` arguments.

    Returns:
        0 when the production store passed every schedule (and every variant was caught), else 1.
    """
    logging.getLogger("capture_ledger").setLevel(logging.ERROR)  # discarded late writes are expected here
    names = args.scenario or sorted(name for name in SCENARIOS if args.slow or name not in SLOW)
    verdicts: list[Verdict] = []
    for name in names:
        started = time.monotonic()
        found = explore(
            SCENARIOS[name], open_handle=store_opener(), preemption_bound=args.bound, base_dir=args.dir
        )
        print(
            f"{name:26} {found.runs:5d} schedules (<={args.bound} preemptions; exhausted={found.exhausted}) "
            f"<= {found.max_decisions} decisions, "
            f"{len(found.failures)} failing, {time.monotonic() - started:.1f}s"
        )
        verdicts.append(found.result)
        for failure in found.failures:
            print(failure.describe())
    if args.ablate:
        for guard in GUARDS:
            caught = False
            for name in names:
                started = time.monotonic()
                run, runs = find_counterexample(
                    SCENARIOS[name],
                    open_handle=store_opener(StoreVariant(**{guard: False})),
                    max_preemptions=args.bound,
                    base_dir=args.dir,
                )
                took = time.monotonic() - started
                if run is None:
                    print(f"{guard}=False {name:28} not caught in {runs} schedules, {took:.1f}s")
                    continue
                caught = True
                switches = ", ".join(f"after step {s} run T{t}" for s, t in run.switches) or "none"
                print(
                    f"{guard}=False {name:28} caught after {runs} schedules, {took:.1f}s: "
                    f"{run.preemptions} preemptions, {len(run.decisions)} decisions, switches: {switches}"
                )
                if args.verbose:
                    print(run.describe())
            if not caught:
                # A variant meant to fail that no schedule caught: the scenarios no longer show that the
                # guard is needed, so the study itself is broken.
                missed = f"{guard}=False was not caught by any schedule of {', '.join(names)}"
                verdicts.append(Violation(requirement="R-CONC-1", counterexample=missed, witness=guard))
    return exit_code(worst(verdicts))
