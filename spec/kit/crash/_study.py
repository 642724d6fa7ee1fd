"""The crash study of any ledger traced from outside: each crash workload the target supports, recorded
under strace, explored under every persistence model (SPEC.md §Crash, R-CRASH-1..4; docs/crash-target.md).

``study_targets(targets, ...)`` opens each target once in a reader child (which also says which protocol
operations it has), runs every workload of the catalogue (``workloads.WORKLOADS``, or those given) that the
target supports (``strace.supported``: a ledger without ``retire`` or ``delete``, like NeMo Gym's, skips the
workloads that need them, and the study says which ran), records each (``strace.record_positions``: a workload
whose fault strikes each position of a kind of call is one cell per position, ``<name>@<n>``) and explores it
under each model (``exploration.explore_points``). The result is a ``TargetStudy``: the ``CrashStudy`` matrix
*target × model → clauses broken* (``matrix``), with every counterexample's recording for its timeline, plus
what was skipped and the reader children's figures. ``report`` renders it; ``check.check_crashes`` is the
library form of the whole command.

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
from capture_ledger.spec.kit.crash._exploration import explore_points
from capture_ledger.spec.kit.crash._matrix import CrashCell, CrashStudy
from capture_ledger.spec.kit.crash._readback import ReadBack
from capture_ledger.spec.kit.crash._reader import TargetReader
from capture_ledger.spec.kit.crash._workloads import WORKLOADS
from capture_ledger.spec.kit.crash.strace import PARK_DELAY, Target, TraceError, record_positions, supported

__all__ = ["TargetStudy", "study_targets"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetStudy(CrashStudy):
    """A ``CrashStudy`` whose rows are traced targets, with what only tracing has.

    Attributes:
        skipped: ``(target, workload, why)`` for each workload not run (the target lacks an operation it
            needs, or it writes our own store's format).
        operations: the protocol methods each target has, by target.
        reads: images read back by the reader children.
        read_seconds: seconds the reader children spent on them.
    """

    skipped: tuple[tuple[str, str, str], ...] = ()
    operations: dict[str, tuple[str, ...]] = field(default_factory=dict)
    reads: int = 0
    read_seconds: float = 0.0

    def workload_rank(self, workload: str) -> tuple[int, str]:
        """Of two equally short counterexamples, the one whose workload comes first by name: the choice
        ``crash --target`` has always reported (its ``--json`` and report stay as they were)."""
        return (0, workload)


def study_targets(
    targets: Sequence[Target],
    *,
    models: Sequence[str] | None = None,
    workloads: Sequence[str] | None = None,
    budget: int = 256,
    seed: int = 0,
    park_delay: float = PARK_DELAY,
    progress: Callable[[CrashCell], None] | None = None,
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
    cells: list[CrashCell] = []
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
                    recordings = record_positions(target, workload, Path(scratch), park_delay=park_delay)
                took = (time.perf_counter() - begun) / len(recordings)
                for recording in recordings:
                    explorations = tuple(
                        explore_points(
                            recording, model, ReadBack(reader), budget=budget, seed=seed, first=first
                        )
                        for model in chosen_models
                    )
                    cells.append(
                        CrashCell(
                            config=target.name,
                            workload=recording.workload.name,
                            recording=recording,
                            explorations=explorations,
                            record_seconds=took,
                        )
                    )
                    if progress is not None:
                        progress(cells[-1])
                    if first and explorations[0].verdict == "violation":
                        break
                if first and cells and cells[-1].explorations[0].verdict == "violation":
                    break
        finally:
            reads += reader.reads
            read_seconds += reader.seconds
            reader.close()
    ran = tuple(dict.fromkeys(c.workload for c in cells))
    return TargetStudy(
        cells=tuple(cells),
        models=chosen_models,
        configs=tuple(t.name for t in targets),
        workloads=ran,
        skipped=tuple(skipped),
        operations=operations,
        seconds=time.perf_counter() - started,
        budget=budget,
        seed=seed,
        reads=reads,
        read_seconds=read_seconds,
    )
