"""Run the conformance kit against every mutant and print what it found (SPEC.md §Conformance, R-KIT-6).

For each mutant of ``capture_ledger.reference.mutants``: the requirement it breaks, the requirement the
kit's verdict names (R-KIT-11; a mutant counts as caught only when they are the same), the length of the
shrunk counterexample (``count_steps``), and the seconds (wall and CPU) the kit took to find and shrink
it. The correct ``ReferenceLedger`` runs first under the same settings; its full passing run is the
baseline of the ``x ref`` ratio. Settings are those of tests/reference/test_mutants.py's ``slow`` tier:
derandomized, no database, 200 examples of 25 steps, one bug at a time.

Usage::

    CAPTURE_LEDGER_PROFILE=ci python benchmarks/mutant_report.py [--only NAME ...] [--json]

Not measured: how the figures vary with load; on a shared machine wall time is several times CPU time.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from capture_ledger.reference.mutants import MUTANTS, open_reference
from capture_ledger.spec.kit import PROFILES
from capture_ledger.spec.kit.sequential import Broken, LedgerFactory, judge_ledger
from hypothesis import settings


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One line of the report."""

    mutant: str
    requirement: str
    named: str
    caught: bool
    steps: int
    wall_seconds: float
    cpu_seconds: float
    first_failure: str


def _search(max_examples: int, steps: int) -> settings:
    return settings(
        PROFILES["ci"],
        max_examples=max_examples,
        stateful_step_count=steps,
        derandomize=True,
        database=None,
        deadline=None,
        report_multiple_bugs=False,
    )


def _run(factory: LedgerFactory, *, handles: int, search: settings) -> tuple[Broken | None, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    verdict = judge_ledger(factory, handles=handles, settings=search)
    first = verdict.broken[0] if verdict.broken else None
    return first, time.perf_counter() - wall, time.process_time() - cpu


def main(argv: Sequence[str] | None = None) -> int:
    """Print the report; the exit code is 1 when the kit misses a mutant or passes nothing."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", nargs="*", default=None, help="mutant names (default: all)")
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args(argv)
    search = _search(args.examples, args.steps)

    baseline, base_wall, base_cpu = _run(open_reference, handles=1, search=search)
    if baseline is not None:
        print(f"the reference ledger FAILED the kit:\n{baseline.message}\n{baseline.counterexample}")
        return 1
    if not args.json:
        print(f"settings: {args.examples} examples x {args.steps} steps, derandomized, one bug at a time")
        print(f"reference ledger passes: {base_wall:.2f} s wall, {base_cpu:.2f} s CPU (the 'x ref' baseline)")
        print()
        print(
            f"| {'mutant':<31} | {'requirement':<11} | {'kit names':<11} |  steps | wall s |  CPU s | x ref |"
        )
        print(f"|{'-' * 33}|{'-' * 13}|{'-' * 13}|-------:|-------:|-------:|------:|")

    missed = 0
    names = args.only or list(MUTANTS)
    for name in names:
        mutant = MUTANTS[name]
        broken, wall, cpu = _run(mutant.factory, handles=mutant.handles, search=search)
        row = Row(
            mutant=name,
            requirement=mutant.requirement,
            named=broken.requirement if broken else "",
            caught=broken is not None and broken.requirement == mutant.requirement,
            steps=broken.steps if broken else 0,
            wall_seconds=round(wall, 2),
            cpu_seconds=round(cpu, 2),
            first_failure=broken.message.splitlines()[0][:100] if broken else "",
        )
        missed += not row.caught
        if args.json:
            print(json.dumps(asdict(row)), flush=True)
        else:
            steps = str(row.steps) if row.caught else "MISSED"
            print(
                f"| {name:<31} | {mutant.requirement:<11} | {row.named:<11} | {steps:>6} | {wall:>6.1f} "
                f"| {cpu:>6.1f} | {cpu / base_cpu:>5.1f} |",
                flush=True,
            )
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
