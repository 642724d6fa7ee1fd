"""The crash study of any ledger traced from outside: each crash workload the target supports, recorded
under strace, explored under every persistence model (SPEC.md §Crash, R-CRASH-1..4; docs/crash-target.md).

``study_targets(targets, ...)`` opens each target once in a reader child (which also says which protocol
operations it has), runs every workload of the model study's catalogue (``impl.study.workloads.WORKLOADS``,
or those given) that the target supports (``recorder.supported``: a ledger without ``retire`` or
``delete``, like NeMo Gym's, skips the workloads that need them, and the study says which ran), records
each (``recorder.record_target``) and explores it under each model (``spec.kit.crash.explore_points``). The
result is a ``TargetStudy``: a matrix *target × model → clauses broken*, the ``MatrixSource`` the model
study's picture takes (``impl.study.pictures.matrix_svg``), with every counterexample's recording for its
timeline. ``report`` renders it.

A target that cannot be opened or traced is a ``TraceError`` (the command's exit 2); everything the target
does once it runs — raise, hang, leave bytes it cannot read — is judged.

Not guaranteed: coverage beyond the catalogue's workloads and their recorded schedules.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from capture_ledger.spec.crash.durability import MODELS
from capture_ledger.spec.kit.crash._exploration import CrashExploration, explore_points
from capture_ledger.spec.kit.crash._judgement import CrashViolation
from capture_ledger.spec.kit.crash._readback import ReadBack
from capture_ledger.spec.kit.crash._reader import TargetReader
from capture_ledger.spec.kit.crash._trace import Recording
from capture_ledger.spec.kit.crash._workloads import WORKLOADS
from capture_ledger.spec.kit.crash.strace import PARK_DELAY, Target, TraceError, record_target, supported

__all__ = ["TargetCell", "TargetStudy", "study_targets"]


@dataclass(frozen=True, slots=True)
class TargetCell:
    """One target on one workload: its recording and one exploration per model."""

    target: str
    workload: str
    recording: Recording
    explorations: tuple[CrashExploration, ...]
    record_seconds: float


@dataclass(frozen=True, slots=True)
class TargetStudy:
    """Every cell of a study of traced targets, what was skipped and why, and the figures."""

    cells: tuple[TargetCell, ...]
    models: tuple[str, ...]
    configs: tuple[str, ...]
    workloads: tuple[str, ...]
    skipped: tuple[tuple[str, str, str], ...]  # (target, workload, why)
    operations: dict[str, tuple[str, ...]]
    seconds: float
    budget: int
    seed: int
    reads: int = 0
    read_seconds: float = 0.0
    notes: tuple[str, ...] = field(default=())

    def explorations(self, config: str | None = None, model: str | None = None) -> list[CrashExploration]:
        """The explorations of ``config`` under ``model`` (each ``None``: all)."""
        return [
            e
            for cell in self.cells
            if config is None or cell.target == config
            for e in cell.explorations
            if model is None or e.model == model
        ]

    def clauses(self, config: str, model: str) -> frozenset[str]:
        """The clauses ``config`` (a target's label) breaks under ``model``, over every workload."""
        found: set[str] = set()
        for e in self.explorations(config, model):
            found |= e.clauses
        return frozenset(found)

    def verdict(self, config: str, model: str) -> str:
        """``violation``, ``ok`` (every image of every workload judged) or ``unknown``."""
        found = self.explorations(config, model)
        if any(e.verdict == "violation" for e in found):
            return "violation"
        return "unknown" if any(e.verdict == "unknown" for e in found) or not found else "ok"

    def examples(self, model: str | None = None) -> list[tuple[CrashViolation, Recording]]:
        """Every kept counterexample (the shortest per clause, workload and model) with its recording."""
        return [
            (v, cell.recording)
            for cell in self.cells
            for e in cell.explorations
            if model is None or e.model == model
            for v in e.examples
        ]

    def totals(self) -> tuple[int, int, float]:
        """Images judged, distinct images read, seconds spent exploring."""
        found = self.explorations()
        return (
            sum(e.images for e in found),
            sum(e.distinct for e in found),
            sum(e.seconds for e in found),
        )

    def unsupported(self) -> list[tuple[str, str, str]]:
        """``(target, workload, reason)`` for each recording with an effect no model follows."""
        seen = {}
        for cell in self.cells:
            for e in cell.explorations:
                if e.unsupported:
                    seen[cell.target, cell.workload] = e.unsupported
        return [(t, w, r) for (t, w), r in seen.items()]


def study_targets(
    targets: Sequence[Target],
    *,
    models: Sequence[str] | None = None,
    workloads: Sequence[str] | None = None,
    budget: int = 256,
    seed: int = 0,
    park_delay: float = PARK_DELAY,
    progress: Callable[[TargetCell], None] | None = None,
    first: bool = False,
) -> TargetStudy:
    """Study ``targets`` (see the module docstring).

    Args:
        targets: the ledger factories.
        models: persistence model names (default: all, strongest first).
        workloads: workload names (default: every workload of the catalogue).
        budget: most images judged per crash point (beyond it, a seeded sample).
        seed: the sampling seed.
        park_delay: seconds a parked operation is held.
        progress: called with each cell as it completes.
        first: stop at the first violation under the strongest model (``models[0]``): the time to kill,
            as the kill matrix measures it; the other models are then not explored.

    Returns:
        The study.

    Raises:
        TraceError: a target cannot be opened or traced.
        KeyError: an unknown model or workload.
    """
    for model in models or ():
        MODELS[model]
    chosen_models = tuple(m for m in MODELS if m in (models or MODELS))  # strongest first
    if first:
        chosen_models = chosen_models[:1]
    chosen_workloads = tuple(workloads or WORKLOADS)
    started = time.perf_counter()
    cells: list[TargetCell] = []
    skipped: list[tuple[str, str, str]] = []
    operations: dict[str, tuple[str, ...]] = {}
    reads, read_seconds = 0, 0.0
    for target in targets:
        reader = TargetReader(target.target, dict(target.options), cwd=target.cwd)
        try:
            try:
                operations[target.name] = tuple(reader.operations())
            except RuntimeError as error:
                raise TraceError(str(error)) from error
            for name in chosen_workloads:
                workload = WORKLOADS[name]
                why = supported(workload, operations[target.name])
                if why is not None:
                    skipped.append((target.name, name, why))
                    continue
                begun = time.perf_counter()
                with tempfile.TemporaryDirectory(prefix="capture-ledger-trace-") as scratch:
                    recording = record_target(target, workload, Path(scratch), park_delay=park_delay)
                took = time.perf_counter() - begun
                explorations = tuple(
                    explore_points(recording, model, ReadBack(reader), budget=budget, seed=seed, first=first)
                    for model in chosen_models
                )
                cells.append(TargetCell(target.name, name, recording, explorations, took))
                if progress is not None:
                    progress(cells[-1])
                if first and explorations[0].verdict == "violation":
                    break
        finally:
            reads += reader.reads
            read_seconds += reader.seconds
            reader.close()
    ran = tuple(dict.fromkeys(c.workload for c in cells))
    return TargetStudy(
        tuple(cells),
        chosen_models,
        tuple(t.name for t in targets),
        ran,
        tuple(skipped),
        operations,
        time.perf_counter() - started,
        budget,
        seed,
        reads,
        read_seconds,
    )
