"""``check_target``: every layer of the kit on one ledger, with one verdict and what each layer exercised
(SPEC.md §Conformance, R-KIT-1..13; docs/check.md).

The layers run in order, cheapest first: the sequential kit (``judge_ledger``, the model-driven state
machine: R-READ, R-WRITE, R-RETIRE, R-DELETE, R-ADMIT, R-BATCH, R-ID, R-KIT-4), ``stress`` (concurrent
histories judged for linearizability, R-CONC-1..3: on threads, then on worker processes when the ledger's
handles share state across processes), the crash layer (``check_crashes``: every crash state the
persistence models allow, R-CRASH-1..4 and R-STATE-3) and the kernel layer (the same against the real
kernel's block writes). A layer answers ``ok``, ``broken`` (each broken requirement with its
counterexample), ``unknown`` (it ran and could not decide: a budget ran out, images were sampled, a
requested fault was never injected) or ``skipped`` (it could not run here, with why). The target's
verdict is ``broken`` if a layer is, else ``incomplete`` if a requested layer is ``unknown`` or
``skipped``, else ``conforms``.

Requested: the layers given (``layers=``), or by default ``kit``, ``stress`` and ``crash``; ``kernel`` runs
only when asked for, and is reported ``skipped`` otherwise, with why. A layer is never left out silently:
every layer appears in the verdict.

Not guaranteed: that ``conforms`` proves conformance (each layer found no counterexample in what it ran);
the interleavings ``stress`` saw (the OS picks them); anything of a layer marked ``skipped``.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from capture_ledger.spec.core.verdicts import Ok, Unknown, Verdict, Violation
from capture_ledger.spec.kit._sharing import shares_across_processes, shares_between_handles

__all__ = [
    "DEFAULT_LAYERS",
    "LAYERS",
    "LayerReport",
    "TargetVerdict",
    "check_target",
]

#: Every layer, in the order they run.
LAYERS: tuple[str, ...] = ("kit", "stress", "crash", "kernel")
#: The layers run when none are named.
DEFAULT_LAYERS: tuple[str, ...] = ("kit", "stress", "crash")

LayerKind = Literal["ok", "broken", "unknown", "skipped"]
TargetKind = Literal["conforms", "broken", "incomplete"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerReport:
    """One layer's answer.

    Attributes:
        layer: ``kit``, ``stress``, ``crash`` or ``kernel``.
        verdict: ``ok``, ``broken``, ``unknown`` or ``skipped``.
        requested: whether the caller asked for this layer (a requested layer that is ``unknown`` or
            ``skipped`` makes the target ``incomplete``).
        why_skipped: why it did not run, or why it could not decide; ``None`` when it decided.
        seconds: wall time.
        broken: ``{"requirement", "counterexample"}`` for each broken requirement.
        coverage: what the layer exercised and what it did not (its keys depend on the layer; every
            layer has ``checked`` and ``not_checked`` requirement lists).
        text: the layer's own report, as its command prints it.
        detail: the objects behind ``text``, for pictures (``write_check_report``): the kit's
            ``LedgerVerdict``, the stress layer's ``StressReport`` tuple (threads, then processes), the
            ``CrashVerdict``; ``None`` when the layer did not run. Not part of ``to_json``.
    """

    layer: str
    verdict: LayerKind
    requested: bool
    why_skipped: str | None = None
    seconds: float = 0.0
    broken: tuple[dict[str, str], ...] = ()
    coverage: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    detail: Any = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The pinned ``--json`` shape of one layer."""
        return {
            "layer": self.layer,
            "verdict": self.verdict,
            "why_skipped": self.why_skipped,
            "seconds": round(self.seconds, 3),
            "broken": [dict(b) for b in self.broken],
            "coverage": self.coverage,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetVerdict:
    """What ``check_target`` found: one verdict over every layer.

    Attributes:
        target: the ``module:callable`` checked.
        layers: one ``LayerReport`` per layer of ``LAYERS``, in that order.
        seconds: wall time over every layer.
    """

    target: str
    layers: tuple[LayerReport, ...]
    seconds: float

    @property
    def verdict(self) -> TargetKind:
        """``broken`` if a layer is; ``incomplete`` if a requested layer did not decide; ``conforms``."""
        if any(layer.verdict == "broken" for layer in self.layers):
            return "broken"
        if any(layer.requested and layer.verdict in ("unknown", "skipped") for layer in self.layers):
            return "incomplete"
        return "conforms"

    @property
    def exit_code(self) -> int:
        """0 conforms, 1 broken, 3 incomplete (2, a target that cannot load, is raised before)."""
        return {"conforms": 0, "broken": 1, "incomplete": 3}[self.verdict]

    def to_json(self) -> dict[str, Any]:
        """The pinned ``check --json`` object."""
        return {
            "target": self.target,
            "verdict": self.verdict,
            "layers": [layer.to_json() for layer in self.layers],
            "seconds": round(self.seconds, 3),
        }

    def summary(self) -> str:
        """One line per layer, then the verdict: what a person reads first."""
        lines = []
        for layer in self.layers:
            why = f": {layer.why_skipped}" if layer.why_skipped else ""
            asked = "" if layer.requested or layer.why_skipped == "not requested" else " (not requested)"
            names = ", ".join(b["requirement"] for b in layer.broken)
            broken = f": {names}" if names else ""
            lines.append(f"  {layer.layer:<7} {layer.verdict:<8}{broken}{why}{asked} [{layer.seconds:.1f} s]")
        return f"{self.target}: {self.verdict.upper()}\n" + "\n".join(lines)


#: Reports one line of progress (``layer``, ``what``).
Progress = Callable[[str, str], None]


def _quiet(layer: str, what: str) -> None:
    """No progress."""


def check_target(
    target: str,
    *,
    layers: Sequence[str] | None = None,
    handles: int | None = None,
    processes: int | None = None,
    options: dict[str, Any] | None = None,
    profile: str | None = None,
    progress: Progress = _quiet,
    kernel: Callable[[], LayerReport] | None = None,
) -> TargetVerdict:
    """Run every requested layer on ``target`` and give one verdict (see the module docstring).

    Args:
        target: ``module:callable`` opening a handle on a workspace directory.
        layers: the layers to run (``LAYERS``); ``None``: ``DEFAULT_LAYERS``.
        handles: handles the kit and ``stress`` open on one workspace; ``None``: 3 when two handles on one
            workspace share rows (``shares_between_handles``), else 1, and R-KIT-4 is then not checked
            (the kit's coverage says so).
        processes: ``stress``'s worker processes; ``None``: 2 when the handles share state across
            processes (``shares_across_processes``), else none (and the coverage says why); 0: threads only.
        options: keyword arguments for the factory.
        profile: the Hypothesis profile of the sequential kit (default: the active one).
        progress: called with ``(layer, what)`` as each layer starts and ends.
        kernel: runs the kernel layer when it is requested (``capture-ledger check`` hands in
            ``impl/cli/_check_kernel.kernel_layer``: ``spec`` cannot import the kernel study); ``None``: the
            layer is ``skipped``, saying why.

    Returns:
        The ``TargetVerdict``; whatever the ledger does is judged in it.

    Raises:
        TargetError: the target cannot be loaded (before any layer runs).
        ValueError: an unknown layer, or a setting out of range.
    """
    from capture_ledger.spec.kit._targets import bind_options, load_target

    chosen = tuple(DEFAULT_LAYERS if layers is None else layers)
    unknown = sorted(set(chosen) - set(LAYERS))
    if unknown:
        raise ValueError(f"unknown layer {', '.join(unknown)}; the layers are {', '.join(LAYERS)}")
    if (handles is not None and handles < 1) or (processes is not None and processes < 0):
        raise ValueError("handles must be at least 1 and processes not negative")
    factory = bind_options(load_target(target), dict(options or {}))
    started = time.perf_counter()
    single = ""
    if handles is None:
        shared, why = shares_between_handles(target, options)
        handles = 3 if shared else 1
        single = "" if shared else why
    n = handles
    runners: dict[str, Callable[[bool], LayerReport]] = {
        "kit": lambda asked: _kit(
            factory, target, handles=n, profile=profile, requested=asked, single=single
        ),
        "stress": lambda asked: _stress(
            factory, target, handles=n, processes=processes, options=options or {}, requested=asked
        ),
        "crash": lambda asked: _crash(target, options=options or {}, requested=asked),
        "kernel": (lambda asked: kernel()) if kernel is not None else _kernel,
    }
    reports = []
    for layer in LAYERS:
        asked = layer in chosen
        if not asked:
            reports.append(_kernel(False) if layer == "kernel" else _not_requested(layer))
            continue
        progress(layer, "running")
        report = runners[layer](asked)
        progress(layer, f"{report.verdict} in {report.seconds:.1f} s")
        reports.append(report)
    return TargetVerdict(target=target, layers=tuple(reports), seconds=time.perf_counter() - started)


def _not_requested(layer: str) -> LayerReport:
    return LayerReport(layer=layer, verdict="skipped", requested=False, why_skipped="not requested")


def _layer_of(verdict: Verdict) -> LayerKind:
    if isinstance(verdict, Violation):
        return "broken"
    return "ok" if isinstance(verdict, Ok) else "unknown"


# ------------------------------------------------------------------------------------------ the layers
def _kit(
    factory: Any, target: str, *, handles: int, profile: str | None, requested: bool, single: str
) -> LayerReport:
    from capture_ledger.spec.kit._profiles import profile_settings
    from capture_ledger.spec.kit.sequential import KitError, judge_ledger

    started = time.perf_counter()
    try:
        verdict = judge_ledger(factory, handles=handles, settings=profile_settings(profile), target=target)
    except KitError as error:
        return LayerReport(
            layer="kit",
            verdict="unknown",
            requested=requested,
            why_skipped=f"the kit could not judge the ledger: {error}",
            seconds=time.perf_counter() - started,
        )
    coverage = {
        "operations": list(verdict.operations),
        "checked": list(verdict.checked),
        "not_checked": list(verdict.not_checked),
        "examples": verdict.examples,
        "steps": verdict.steps,
        "handles": handles,
    }
    if single:
        coverage["one_handle_because"] = single
    return LayerReport(
        layer="kit",
        verdict=_layer_of(verdict.result),
        requested=requested,
        seconds=verdict.seconds,
        broken=tuple(
            {"requirement": b.requirement, "counterexample": b.counterexample} for b in verdict.broken
        ),
        coverage=coverage,
        text=verdict.report(),
        detail=verdict,
    )


_STRESS_CHECKED = ["R-CONC-1", "R-CONC-2", "R-CONC-3", "R-KIT-5", "R-KIT-7", "R-KIT-8"]


def _stress(
    factory: Any,
    target: str,
    *,
    handles: int,
    processes: int | None,
    options: dict[str, Any],
    requested: bool,
) -> LayerReport:
    from capture_ledger.spec.kit.stress import check_concurrency

    started = time.perf_counter()
    threads = check_concurrency(factory, handles=handles)
    runs: dict[str, Any] = {"threads": _stress_run(threads)}
    reports = [threads]
    if isinstance(threads.verdict, Violation):
        runs["processes"] = "not run: the threads' run already broke"
        processes = 0
    elif processes is None:
        shared, why = shares_across_processes(target, options)
        processes = 2 if shared else 0
        if not shared:
            runs["processes"] = f"not run: {why}"
    elif processes == 0:
        runs["processes"] = "not run: --processes 0"
    if processes:
        across = _stress_processes(target, options, processes=processes, handles=handles)
        runs["processes"] = _stress_run(across)
        reports.append(across)
    kinds = [_layer_of(report.verdict) for report in reports]
    verdict: LayerKind = "broken" if "broken" in kinds else "unknown" if "unknown" in kinds else "ok"
    broken = tuple(
        {
            "requirement": str(report.verdict.requirement),
            "counterexample": str(report.verdict.counterexample),
        }
        for report in reports
        if isinstance(report.verdict, Violation)
    )
    undecided = [str(report) for report in reports if isinstance(report.verdict, Unknown)]
    coverage = {
        "checked": [] if verdict == "unknown" else _STRESS_CHECKED,
        "not_checked": _STRESS_CHECKED if verdict == "unknown" else [],
        "runs": runs,
    }
    return LayerReport(
        layer="stress",
        verdict=verdict,
        requested=requested,
        why_skipped="; ".join(undecided) or None,
        seconds=time.perf_counter() - started,
        broken=broken,
        coverage=coverage,
        text="\n".join(str(report) for report in reports),
        detail=tuple(reports),
    )


def _stress_run(report: Any) -> dict[str, Any]:
    return {
        "verdict": report.verdict.kind,
        "calls": report.calls,
        "rounds": report.rounds,
        "seed": report.seed,
    }


def _stress_processes(target: str, options: dict[str, Any], *, processes: int, handles: int) -> Any:
    from capture_ledger.spec.kit._calls import call_budget
    from capture_ledger.spec.kit.stress import (
        DEFAULT_CHECK_BUDGET,
        DEFAULT_OPS,
        DEFAULT_ROUNDS,
        MixSettings,
        run_processes,
    )

    threads = max(1, 4 // processes)
    pairs = [f"{key}={json.dumps(value)}" for key, value in options.items()]
    with tempfile.TemporaryDirectory(prefix="capture-ledger-check-") as base:
        return run_processes(
            target,
            pairs,
            MixSettings(clients=processes * threads, ops=DEFAULT_OPS),
            processes=processes,
            threads=threads,
            handles=handles,
            seed=0,
            rounds=DEFAULT_ROUNDS,
            budget=call_budget(),
            check_budget=DEFAULT_CHECK_BUDGET,
            base=Path(base),
        )


_CRASH_CHECKED = ["R-CRASH-1", "R-CRASH-2", "R-CRASH-3", "R-CRASH-4", "R-STATE-3"]


def _crash(target: str, *, options: dict[str, Any], requested: bool) -> LayerReport:
    from capture_ledger.spec.kit.crash import check_crashes
    from capture_ledger.spec.kit.crash.strace import Target, TraceError

    started = time.perf_counter()
    try:
        found = check_crashes(target, options=options)
    except (TraceError, TypeError) as error:
        return LayerReport(
            layer="crash",
            verdict="skipped",
            requested=requested,
            why_skipped=str(error),
            seconds=time.perf_counter() - started,
            coverage={"checked": [], "not_checked": _CRASH_CHECKED},
        )
    # The strongest model studied decides, as ``crash --target``'s exit code; the weaker ones inform.
    name = Target(target=target, options=tuple(options.items())).name
    deciding = found.models[0] if found.models else None
    per_model = {model: _layer_of(found.study.result(name, model)) for model in found.models}
    decided = found.study.result(name, deciding) if deciding else Unknown(reason="no model studied")
    verdict = _layer_of(decided)
    coverage = {
        "checked": _CRASH_CHECKED if verdict != "unknown" else [],
        "not_checked": [] if verdict != "unknown" else _CRASH_CHECKED,
        "deciding_model": deciding,
        "models": per_model,
        "workloads": list(found.workloads),
        "workloads_not_run": [{"workload": w, "why": why} for w, why in found.skipped],
        "sampled": [{"workload": w, "model": m} for w, m in found.sampled],
        "unsupported": [{"workload": w, "why": why} for w, why in found.unsupported],
        "faults_not_injected": [{"workload": w, "fault": f} for w, f in found.not_exercised],
        "images": found.images,
    }
    broken: tuple[dict[str, str], ...] = ()
    if isinstance(decided, Violation):
        broken = ({"requirement": str(decided.requirement), "counterexample": str(decided.counterexample)},)
    why = (
        None
        if verdict != "unknown" or not isinstance(decided, Unknown)
        else f"{decided.reason}; {decided.spent}"
    )
    return LayerReport(
        layer="crash",
        verdict=verdict,
        requested=requested,
        why_skipped=why,
        seconds=found.seconds,
        broken=broken,
        coverage=coverage,
        text=str(found),
        detail=found,
    )


def _kernel(requested: bool) -> LayerReport:
    return LayerReport(
        layer="kernel",
        verdict="skipped",
        requested=requested,
        why_skipped=(
            "the kernel layer needs the real kernel's block log (root, /dev/fuse, loop devices): "
            "capture-ledger check --layers kernel runs it (crash --target TARGET --kernel on each --fs); "
            "check_target runs it only when handed kernel="
        ),
        coverage={"checked": [], "not_checked": _CRASH_CHECKED},
    )
