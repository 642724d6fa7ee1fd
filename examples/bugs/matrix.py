"""The kill matrix's layers: each a function from a ``module:callable`` target to a verdict (docs/bugs.md).

``LAYER_RUNNERS`` maps each layer of ``catalogue.LAYERS`` to a ``LayerRunner``: ``runner(target, budget)``
returns a ``LayerVerdict`` saying whether the layer killed the target, how long it took, the length of the
(shrunk) counterexample, and the requirements it named. ``benchmarks/bug_matrix.py`` prints the matrix and
tests/examples/test_bug_catalogue.py holds it.

- ``sequential`` runs the conformance kit in this process (``check_ledger``, three handles, the ``ci``
  profile with ``budget.examples`` examples; with ``budget.shrink`` false the search stops at the first
  failing example, which is the time to kill; the step count is then that of the unshrunk program).
- ``concurrency`` and ``crash`` run ``capture-ledger stress TARGET --json`` and ``capture-ledger crash
  --target TARGET --json`` in a child process from the repository root (SPEC.md R-CONC-1..3, R-CRASH-1..4),
  with the JSON objects those commands print. Until a command exists, its runner answers ``not built``
  without running anything, so the matrix has the column and the tests skip it with that reason.

Not guaranteed: that a runner's figures are comparable across machines (they are wall time, noisy under
load); what a layer's "length" counts is the layer's own: kit steps, calls in the linearizability witness,
lines of the crash timeline.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from examples.bugs.catalogue import Bug, Layer, load

__all__ = [
    "LAYER_RUNNERS",
    "ROOT",
    "Budget",
    "LayerRunner",
    "LayerVerdict",
    "budget_for",
    "command_available",
    "run_crash",
    "run_sequential",
    "run_stress",
]

#: The repository root: the layers' child processes run there, so that ``examples`` imports.
ROOT = Path(__file__).resolve().parents[2]

Outcome = Literal["killed", "passed", "unknown", "not built", "error"]


@dataclass(frozen=True, slots=True)
class Budget:
    """How hard a layer looks.

    Attributes:
        examples: the kit's examples (the ``ci`` profile's 60 by default).
        shrink: let the kit shrink a counterexample (slow: hundreds of extra examples).
        processes: worker processes for ``stress`` (0: threads only).
        model: the persistence model for ``crash`` (None: the command's default).
        rounds: ``stress``'s rounds (None: the command's default, 8). A run stops at its first violation,
            so more rounds cost only a run that finds none.
    """

    examples: int = 60
    shrink: bool = True
    processes: int = 0
    model: str | None = None
    rounds: int | None = None


@dataclass(frozen=True, slots=True)
class LayerVerdict:
    """What one layer did with one target.

    Attributes:
        layer: the layer.
        outcome: ``killed``, ``passed``, ``unknown`` (a budget ran out), ``not built`` or ``error``.
        seconds: wall time of the run (the time to kill when killed).
        length: the counterexample's length, when killed.
        requirements: the requirements (or crash clauses) the layer named, when killed.
        detail: the first line of the counterexample, or why there is none.
        program: the counterexample's steps on one line, when the layer gives them (the kit).
    """

    layer: Layer
    outcome: Outcome
    seconds: float = 0.0
    length: int | None = None
    requirements: tuple[str, ...] = ()
    detail: str = ""
    program: str = ""


LayerRunner = Callable[[str, Budget], LayerVerdict]

_REQUIREMENT = re.compile(r"R-[A-Z]+-\d+")


def budget_for(bug: Bug, *, examples: int = 60, shrink: bool = True) -> Budget:
    """The budget each layer gets for ``bug``: processes for a bug only they show, its crash model, and for
    a concurrency bug 24 rounds of stress: measured (benchmarks/stress_seeds.py), the least-hit bugs die in
    a third of the rounds, so 8 rounds miss one of them in about 4 runs of 100 and 24 in less than 1 in
    10,000."""
    rounds = 24 if bug.layer == "concurrency" else None
    processes = 2 if bug.processes else 0
    return Budget(examples=examples, shrink=shrink, processes=processes, model=bug.model, rounds=rounds)


# ------------------------------------------------------------------------------------------ sequential
def run_sequential(target: str, budget: Budget) -> LayerVerdict:
    """The conformance kit with three handles on one workspace (SPEC.md R-KIT-1..8)."""
    from capture_ledger.spec.kit import profile_settings
    from capture_ledger.spec.kit.sequential import KitError, check_ledger, count_steps
    from hypothesis import Phase
    from hypothesis import settings as Settings  # noqa: N812

    chosen = Settings(profile_settings("ci"), max_examples=budget.examples)
    if not budget.shrink:
        chosen = Settings(chosen, phases=[Phase.explicit, Phase.reuse, Phase.generate])
    factory = load(target)
    started = time.perf_counter()
    try:
        check_ledger(factory, handles=3, settings=chosen)
    except AssertionError as error:
        seconds = time.perf_counter() - started
        message = str(error)
        return LayerVerdict(
            "sequential",
            "killed",
            seconds,
            count_steps(message),
            kit_requirements(error),
            _failure_line(message),
            one_line_program(message),
        )
    except KitError as error:
        return LayerVerdict("sequential", "error", time.perf_counter() - started, detail=str(error))
    return LayerVerdict(
        "sequential", "passed", time.perf_counter() - started, detail=f"{budget.examples} examples"
    )


def kit_requirements(error: AssertionError) -> tuple[str, ...]:
    """The requirements the kit's verdict names: its ``verdict.broken`` when it carries one, else the IDs
    on the report's first line."""
    verdict: Any = getattr(error, "verdict", None)
    broken = getattr(verdict, "broken", None)
    if broken:
        return tuple(str(b.requirement) for b in broken)
    first = str(error).splitlines()[0] if str(error) else ""
    return tuple(_REQUIREMENT.findall(first))


def one_line_program(message: str) -> str:
    """The rule calls of the first counterexample in a kit report, on one line (``; `` between steps; an
    argument printed over several lines is joined back)."""
    steps: list[str] = []
    started = False
    for line in message.splitlines():
        text = line.split("  # ")[0].strip()  # Hypothesis notes "# or any other generated value"
        if text.startswith("state = "):
            if started:
                break  # a second counterexample (another broken requirement)
            started = True
            continue
        if not started or not text:
            continue
        if text.startswith("state.teardown"):
            break
        if text.startswith(("state.", "rollouts_")):
            steps.append(text.split("state.", 1)[1] if "state." in text else text)
        elif steps:
            steps[-1] += text  # the continuation of a step printed over several lines
    skipped = ("every_known_rollout", "first_rollout", "another_rollout")
    return "; ".join(step for step in steps if not step.startswith(skipped) and "another_rollout" not in step)


def _failure_line(message: str) -> str:
    """The line of the kit's report that says what the ledger did (after the heading)."""
    lines = [line for line in message.splitlines()[1:] if line.strip()]
    return lines[0].strip() if lines else message.splitlines()[0]


# ------------------------------------------------------------------------------- the command layers
@functools.cache
def command_available(command: str, option: str = "") -> bool:
    """Whether ``capture-ledger COMMAND`` exists (and, if given, takes ``option``)."""
    completed = subprocess.run(
        [sys.executable, "-m", "capture_ledger.impl.cli.main", command, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return completed.returncode == 0 and option in completed.stdout


def _command(layer: Layer, arguments: list[str]) -> tuple[LayerVerdict | None, dict[str, Any], float, int]:
    """Run ``capture-ledger ARGUMENTS --json`` from the root: an ``error`` verdict when it printed no JSON
    object, else the object, the seconds and the exit code."""
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "capture_ledger.impl.cli.main", *arguments, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    try:
        data = json.loads(completed.stdout)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        why = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        verdict = LayerVerdict(layer, "error", seconds, detail=f"exit {completed.returncode}: {why}")
        return verdict, {}, seconds, completed.returncode
    return None, data, seconds, completed.returncode


def run_stress(target: str, budget: Budget) -> LayerVerdict:
    """``capture-ledger stress``: concurrent histories judged for linearizability (SPEC.md R-CONC-1..3)."""
    if not command_available("stress"):
        return LayerVerdict("concurrency", "not built", detail="capture-ledger stress is not built yet")
    arguments = ["stress", target, "--seed", "0"]
    if budget.processes:
        arguments += ["--processes", str(budget.processes)]
    if budget.rounds is not None:
        arguments += ["--rounds", str(budget.rounds)]
    failed, data, seconds, _ = _command("concurrency", arguments)
    if failed is not None:
        return failed
    verdict = str(data.get("verdict"))
    witness = str(data.get("witness") or "")
    if verdict == "violation":
        lines = [line for line in witness.splitlines() if line.strip()]
        return LayerVerdict(
            "concurrency",
            "killed",
            seconds,
            len(lines),
            _named(data, witness),
            lines[0] if lines else "",
        )
    outcome: Outcome = "passed" if verdict == "ok" else "unknown"
    return LayerVerdict("concurrency", outcome, seconds, detail=f"{data.get('calls')} calls")


def _named(data: dict[str, Any], witness: str) -> tuple[str, ...]:
    """The requirement stress named (its JSON ``requirement``) first, then any other the witness cites."""
    first = [str(data["requirement"])] if data.get("requirement") else []
    return tuple(dict.fromkeys([*first, *_REQUIREMENT.findall(witness)]))


def run_crash(target: str, budget: Budget) -> LayerVerdict:
    """``capture-ledger crash --target``: crash states traced from outside (SPEC.md R-CRASH-1..4)."""
    if not command_available("crash", "--target"):
        return LayerVerdict("crash", "not built", detail="capture-ledger crash --target is not built yet")
    arguments = ["crash", "--target", target, "--first"]  # the time to kill: stop at the first violation
    if budget.model:
        arguments += ["--model", budget.model]
    failed, data, seconds, code = _command("crash", arguments)
    if failed is not None:
        return failed
    broken = data.get("broken") or []
    if broken:
        first = broken[0]
        timeline = [line for line in str(first.get("timeline", "")).splitlines() if line.strip()]
        return LayerVerdict(
            "crash",
            "killed",
            seconds,
            len(timeline),
            tuple(dict.fromkeys(str(b.get("clause")) for b in broken)),
            f"{first.get('clause')} under {first.get('model')}, workload {first.get('workload')}",
        )
    outcome: Outcome = "passed" if code == 0 else "unknown"
    return LayerVerdict("crash", outcome, seconds, detail=f"{data.get('images')} images")


#: Each layer and the function that runs it; a layer plugs in by making its command exist.
LAYER_RUNNERS: dict[Layer, LayerRunner] = {
    "sequential": run_sequential,
    "concurrency": run_stress,
    "crash": run_crash,
}
