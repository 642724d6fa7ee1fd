"""``capture-ledger explore``: the exhaustive explorer of the step-level model (R-CONC-1..3).

``explore [--config NAME] [--ablate] [--json]`` runs the exhaustive explorer of the step-level model
(``spec/concurrency/explore.py``) over the pinned configurations: states explored, complete executions,
time, and any counterexample as a numbered step trace. With ``--ablate`` it also switches each guard off
in turn and prints the ablation table (guard x configuration -> the violated property and the
counterexample's length, or "-" for no violation). ``--json`` prints the manifest format of
``spec/concurrency/manifest.json`` (no times, so the output is reproducible). Exit code 0 when every
configuration with every guard on is free of violations, else 1 (``exit_code`` of the worst
``StepExploration.result``).

Recorded histories are judged by ``capture-ledger check-history`` (``impl/cli/history.py``).

Not guaranteed: the human-readable wording; ``--json`` output is stable.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from capture_ledger.spec.concurrency.explore import (
    CONFIGURATIONS,
    StepExploration,
    ablation,
    explore,
    manifest_data,
)
from capture_ledger.spec.concurrency.steps import GUARD_NAMES
from capture_ledger.spec.core.verdicts import exit_code, worst

__all__ = ["format_ablation", "register"]

_SHORT = {
    "linearizability": "lin",
    "R-CONC-2 retired stays retired": "CONC-2",
    "R-CONC-3 write after delete survives": "CONC-3",
    "R-STORE-9 shared sync finished first": "STORE-9",
    "R-STORE-9 no return before its batch synced": "STORE-9b",
    "deadlock": "deadlock",
}


def register(subparsers: Any) -> None:
    """Add ``explore`` to the ``capture-ledger`` parser."""
    parser = subparsers.add_parser(
        "explore",
        help="exhaustively explore interleavings of the step-level model",
        description="Explore every interleaving of bounded configurations of the file store's protocol.",
    )
    parser.add_argument("--config", choices=sorted(CONFIGURATIONS), help="only this configuration")
    parser.add_argument("--ablate", action="store_true", help="also switch each guard off in turn")
    parser.add_argument("--json", action="store_true", help="print the manifest format as JSON")
    parser.set_defaults(handler=_explore)


def _describe(run: StepExploration) -> str:
    verdict = "ok" if run.ok else f"VIOLATION of {run.counterexample.property}"  # type: ignore[union-attr]
    counts = f"{run.states} states, {run.complete} complete executions"
    return f"{run.config}: {counts}, {run.seconds:.2f} s: {verdict}"


def _short(prop: str) -> str:
    """A property's short name in the table; a property without one is shown whole (never a crash)."""
    return _SHORT.get(prop, prop)


def format_ablation(table: dict[str, dict[str, StepExploration]]) -> str:
    """The ablation table: one row per configuration, one column per guard switched off.

    A cell names the violated property and the counterexample's length in steps (``CONC-2@22``), or ``-``.
    """
    guards = [g for g in table if g != "none"]
    configs = list(table["none"])
    width = max(len(c) for c in configs)
    cells = {
        (g, c): "-" if run.ok else f"{_short(run.counterexample.property)}@{len(run.counterexample.steps)}"  # type: ignore[union-attr]
        for g in table
        for c, run in table[g].items()
    }
    widths = {g: max(len(g), *(len(cells[g, c]) for c in configs)) for g in ["none", *guards]}
    header = " | ".join([f"{'configuration':<{width}}", *(f"{g:<{widths[g]}}" for g in ["none", *guards])])
    lines = [header, "-" * len(header)]
    for c in configs:
        lines.append(
            " | ".join([f"{c:<{width}}", *(f"{cells[g, c]:<{widths[g]}}" for g in ["none", *guards])])
        )
    lines.append(
        "cells: violated property @ counterexample length in steps (setup steps included); - no violation. "
        "lin = linearizability, CONC-2 = retired stays retired, CONC-3 = write after delete survives, "
        "STORE-9 = shared sync finished first, STORE-9b = no return before its batch synced."
    )
    return "\n".join(lines)


def _explore(args: argparse.Namespace) -> int:
    configs = {args.config: CONFIGURATIONS[args.config]} if args.config else CONFIGURATIONS
    began = time.perf_counter()
    if args.ablate:
        table = ablation(configs)
    else:
        table = {"none": {name: explore(config) for name, config in configs.items()}}
    code = exit_code(worst(run.result for run in table["none"].values()))
    if args.json:
        data = (
            manifest_data(table)
            if args.ablate
            else {"configurations": manifest_data(table)["configurations"]}
        )
        counterexamples = {
            name: {"property": run.counterexample.property, "steps": list(run.counterexample.steps)}
            for name, run in table["none"].items()
            if run.counterexample is not None
        }
        if counterexamples:
            data["counterexamples"] = counterexamples
        print(json.dumps(data, indent=2, sort_keys=False))
        return code
    for run in table["none"].values():
        print(_describe(run))
        if run.counterexample is not None:
            print(run.counterexample)
    total = sum(run.states for run in table["none"].values())
    print(f"total: {total} states in {len(table['none'])} configurations, guards {', '.join(GUARD_NAMES)} on")
    if args.ablate:
        print()
        print(format_ablation(table))
        for guard, row in table.items():
            found = [run for run in row.values() if run.counterexample is not None]
            if guard != "none" and found:
                shortest = min(found, key=lambda run: len(run.counterexample.steps))  # type: ignore[union-attr]
                print(f"\nwithout {guard}, shortest counterexample ({shortest.config}):")
                print(shortest.counterexample)
    print(f"time: {time.perf_counter() - began:.2f} s")
    return code
