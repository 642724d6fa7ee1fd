"""Run the catalogue of seeded bugs through every layer that exists and print the kill matrix (docs/bugs.md).

For each bug of ``examples.bugs.catalogue.CATALOGUE`` the layers run in order (sequential kit, then
``stress``, then ``crash --target``; ``examples.bugs.matrix.LAYER_RUNNERS``) until one kills it: that layer
is "killed by", its time is the time to kill, and the length is its counterexample's (the kit's shrunk
steps; the witness's calls; the crash timeline's lines). A bug killed by a layer before its own is in the
wrong row, and one that its own layer does not kill is missed. A layer whose command does not exist yet
shows ``not built`` and the row is pending. The three correct example ledgers run first through the
layers that apply to them, and must pass.

The sequential time to kill comes from a search that stops at the first failing example; with shrinking
(the default) a second run shrinks the counterexample for its length, and its time is shown apart. Settings
are the ``ci`` profile's (derandomized, no database), three handles.

Usage (from the repository root, where ``examples`` imports)::

    python benchmarks/bug_matrix.py [--only NAME ...] [--layers sequential,concurrency,crash]
                                    [--examples N] [--no-shrink] [--json]

Not measured: how the figures vary with load (they are wall time; the header gives the load average).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # examples/ is a folder of the checkout, not an installed package
    sys.path.insert(0, str(ROOT))

from examples.bugs.catalogue import CATALOGUE, EXAMPLES, LAYERS, Bug, Layer  # noqa: E402
from examples.bugs.matrix import LAYER_RUNNERS, Budget, LayerVerdict, budget_for  # noqa: E402


@dataclass(frozen=True, slots=True)
class Row:
    """One bug's line of the matrix."""

    bug: str
    base: str
    expected: Layer
    requirement: str
    killed_by: str
    seconds: float | None
    length: int | None
    shrink_seconds: float | None
    named: tuple[str, ...]
    status: str
    verdicts: list[LayerVerdict] = field(default_factory=list)


def _status(bug: Bug, killed_by: str, verdicts: Sequence[LayerVerdict]) -> str:
    if killed_by == bug.layer:
        return "ok"
    order = {layer: index for index, layer in enumerate(LAYERS)}
    if killed_by in order and order[killed_by] < order[bug.layer]:
        return "WRONG ROW"
    if any(v.outcome in ("not built", "error", "unknown") for v in verdicts):
        return "pending"
    return "MISSED"


def run_bug(bug: Bug, layers: Sequence[Layer], *, examples: int, shrink: bool) -> Row:
    """Run ``bug`` through ``layers`` in order until one kills it (only the layers that apply to its base:
    no crash layer for the asynchronous ledger)."""
    verdicts: list[LayerVerdict] = []
    killed_by, seconds, length, shrink_seconds = "-", None, None, None
    named: tuple[str, ...] = ()
    applicable = next(e.layers for e in EXAMPLES if e.name == bug.base)
    for layer in (layer for layer in layers if layer in applicable):
        budget = budget_for(bug, examples=examples, shrink=False)
        verdict = LAYER_RUNNERS[layer](bug.target, budget)
        verdicts.append(verdict)
        if verdict.outcome != "killed":
            continue
        killed_by, seconds, length, named = layer, verdict.seconds, verdict.length, verdict.requirements
        if layer == "sequential" and shrink:
            shrunk = LAYER_RUNNERS[layer](bug.target, Budget(examples=examples, shrink=True))
            length, shrink_seconds, named = shrunk.length, shrunk.seconds, shrunk.requirements
            verdicts.append(shrunk)
        break
    return Row(
        bug.name,
        bug.base,
        bug.layer,
        bug.requirement,
        killed_by,
        seconds,
        length,
        shrink_seconds,
        named,
        _status(bug, killed_by, verdicts),
        verdicts,
    )


def _cell(verdicts: Sequence[LayerVerdict], layer: Layer) -> str:
    found = [v for v in verdicts if v.layer == layer]
    return found[0].outcome if found else "."


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: Sequence[str] | None = None) -> int:
    """Print the matrix; exit 1 when a bug is in the wrong row, missed, or an example fails."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="bug names (default: every bug)")
    parser.add_argument("--layers", default=",".join(LAYERS), help="comma-separated layers to run")
    parser.add_argument("--examples", type=int, default=60, help="the kit's examples (default: 60, ci)")
    parser.add_argument("--no-shrink", action="store_true", help="do not shrink the kit's counterexamples")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    layers: list[Layer] = [layer for layer in LAYERS if layer in args.layers.split(",")]
    bugs = [b for b in CATALOGUE if args.only is None or b.name in args.only]
    with open("/proc/loadavg", encoding="ascii") as load:
        loadavg = load.read().strip()
    header = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "loadavg": loadavg,
        "command": " ".join(["python", "benchmarks/bug_matrix.py", *(argv or sys.argv[1:])]),
        "layers": layers,
        "examples": args.examples,
        "shrink": not args.no_shrink,
    }
    if not args.json:
        print(f"# {header['date']}  load {loadavg}\n# {header['command']}\n")
    controls: list[dict[str, Any]] = []
    for example in EXAMPLES if args.only is None else ():
        budget = Budget(examples=args.examples, shrink=False)
        applicable = [layer for layer in layers if layer in example.layers]
        verdicts = [LAYER_RUNNERS[layer](example.target, budget) for layer in applicable]
        controls.append({"example": example.name, "verdicts": [asdict(v) for v in verdicts]})
        if not args.json:
            cells = ", ".join(f"{v.layer} {v.outcome} {v.seconds:.2f} s" for v in verdicts)
            print(f"control {example.name:10} {cells}")
    rows = []
    if not args.json:
        print(
            f"\n{'bug':42} {'base':9} {'expected':11} {'requirement':11} {'killed by':11} {'kill s':>7} "
            f"{'length':>6} {'shrink s':>8}  {'seq':8} {'conc':9} {'crash':9} status"
        )
    for bug in bugs:
        row = run_bug(bug, layers, examples=args.examples, shrink=not args.no_shrink)
        rows.append(row)
        if not args.json:
            print(
                f"{row.bug:42} {row.base:9} {row.expected:11} {row.requirement:11} {row.killed_by:11} "
                f"{_fmt(row.seconds):>7} {row.length if row.length is not None else '-':>6} "
                f"{_fmt(row.shrink_seconds):>8}  {_cell(row.verdicts, 'sequential'):8} "
                f"{_cell(row.verdicts, 'concurrency'):9} {_cell(row.verdicts, 'crash'):9} {row.status}",
                flush=True,
            )
    bad_controls = [c for c in controls if any(v["outcome"] == "killed" for v in c["verdicts"])]
    bad_rows = [r for r in rows if r.status in ("WRONG ROW", "MISSED")]
    if args.json:
        print(json.dumps({**header, "controls": controls, "bugs": [asdict(r) for r in rows]}, indent=2))
    else:
        counts = {s: sum(r.status == s for r in rows) for s in ("ok", "pending", "WRONG ROW", "MISSED")}
        print(f"\n{len(rows)} bugs: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        print("\ncounterexamples (the last kill of each bug; the kit's steps, then what it saw):")
        for row in rows:
            kills = [v for v in row.verdicts if v.outcome == "killed"]
            if kills:
                shown = f"{kills[-1].program}  =>  " if kills[-1].program else ""
                detail = kills[-1].detail
                print(f"  {row.bug}: {shown}{detail[:160]}{'...' if len(detail) > 160 else ''}")
    return 1 if bad_controls or bad_rows else 0


if __name__ == "__main__":
    sys.exit(main())
