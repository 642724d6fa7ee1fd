"""The ordering study: which sync or ordering step protects which crash clause, under which model.

The catalogue (``configs``, and the kit's ``WORKLOADS``) defines the workloads and the store configurations:
for every step of the protocol (a field of ``variants.StoreVariant``) one configuration switches it off, next
to the default protocol and its ``fence_sync`` options. ``study`` runs each configuration on each workload
once through the recording seam (``recording.record_each``: a workload whose fault strikes each sync is one
cell per position) and explores it under every persistence model (``spec.crash.durability.MODELS``). The
result is a ``Study``: the kit's ``CrashStudy`` matrix *configuration × model → clauses broken*
(``spec.kit.crash``, shared with the study of ledgers traced from outside), plus the headline counterexample
of each configuration; ``render_markdown`` renders it as ``report.md`` from the kit's shared sections, and
``write_report`` adds the kit's SVG pictures (R-CRASH-1..4, SPEC.md §Crash).

``configs.SMALL`` is the study CI runs (the sync and ordering steps, a handful of small workloads, every
image); ``study(full=True)`` adds the guards that are not about crashes and larger, sampled workloads.
``configs.EXPECTED`` pins what the small study must find.

Not guaranteed: that a clean cell proves the step unnecessary on real hardware (the models are parameters),
or coverage beyond the recorded schedule of each workload.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from capture_ledger.impl.study.crash._configs import CONFIGS, SMALL
from capture_ledger.impl.study.crash._crash import explore
from capture_ledger.impl.study.crash._recording import record_each
from capture_ledger.spec.crash.durability import MODELS, DiskImage
from capture_ledger.spec.kit.crash import (
    SMALL_WORKLOADS,
    WORKLOADS,
    CrashCell,
    CrashStudy,
    CrashViolation,
    Observation,
    Workload,
    fence,
    op_label,
    per_workload_table,
    report_head,
    write_crash_report,
)

__all__ = ["Study", "render_markdown", "study", "write_report"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Study(CrashStudy):
    """The whole study (a ``CrashStudy`` whose rows are store configurations); ``full``: run with the
    full study's defaults."""

    full: bool = False

    def headline(self, config: str) -> CrashViolation | None:
        """The counterexample that shows what ``config`` breaks: under the strongest model where it fails
        and the default protocol does not (else the strongest where it fails), the shortest."""
        failing = [m for m in self.models if self.clauses(config, m)]
        own = [m for m in failing if "default" not in self.configs or not self.clauses("default", m)]
        for model in own or failing:
            return self.shortest(config, model)
        return None


def study(
    *,
    configs: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    workloads: Sequence[str] | None = None,
    full: bool = False,
    budget: int = 256,
    seed: int = 0,
    progress: Callable[[CrashCell], None] | None = None,
) -> Study:
    """Run the ordering study.

    Args:
        configs: configuration labels (default: ``SMALL``, or every one of ``CONFIGS`` when ``full``).
        models: model names (default: all).
        workloads: workload names (default: ``SMALL_WORKLOADS``, or all when ``full``).
        full: the full study's defaults.
        budget: most images judged per crash point (beyond it, a seeded sample).
        seed: the sampling seed.
        progress: called with each cell as it completes.

    Returns:
        The study.

    Raises:
        KeyError: an unknown configuration, model or workload.
    """
    chosen_configs = tuple(configs or (CONFIGS if full else SMALL))
    chosen_models = tuple(models or MODELS)
    chosen_workloads = tuple(workloads or (WORKLOADS if full else SMALL_WORKLOADS))
    started = time.perf_counter()
    cells: list[CrashCell] = []
    for label in chosen_configs:
        config = CONFIGS[label]
        for name in chosen_workloads:
            with tempfile.TemporaryDirectory(prefix="capture-ledger-record-") as directory:
                recordings = record_each(WORKLOADS[name], config, Path(directory))
            for recording in recordings:
                cache: dict[DiskImage, Observation] = {}
                explorations = tuple(
                    explore(recording, MODELS[m], budget=budget, seed=seed, observer_cache=cache)
                    for m in chosen_models
                )
                cells.append(
                    CrashCell(
                        config=label,
                        workload=recording.workload.name,
                        recording=recording,
                        explorations=explorations,
                    )
                )
                if progress is not None:
                    progress(cells[-1])
    return Study(
        cells=tuple(cells),
        models=chosen_models,
        configs=chosen_configs,
        workloads=tuple(dict.fromkeys(c.workload for c in cells)),
        seconds=time.perf_counter() - started,
        budget=budget,
        seed=seed,
        full=full,
    )


# ------------------------------------------------------------------------------------------- markdown
def _per_workload(study: Study) -> list[str]:
    """The default protocol, its fence_sync options and group commit off, per workload (which workload
    breaks what)."""
    options = ("default", "fence_sync=file", "fence_sync=syncfs", "group_commit=off")
    configs = [c for c in options if c in study.configs]
    if not configs:
        return []
    return [
        "## The default protocol, its fence_sync options and group commit off, per workload",
        "",
        *per_workload_table(study, (c for c in study.cells if c.config in configs), rows="configuration"),
        "",
    ]


def _describe(workload: Workload) -> str:
    parts = []
    if workload.setup:
        parts.append("setup: " + "; ".join(op_label(o) for o in workload.setup))
    parts.append("; ".join(f"`{op_label(o)}`" for o in workload.ops))
    if workload.pause is not None:
        calls = "/".join(sorted(workload.pause.calls))
        parts.append(f"op {workload.pause.op} parked before its {calls} #{workload.pause.occurrence}")
    parts += [f"op {f.op}'s {f.call} #{f.occurrence} fails (EIO)" for f in workload.faults]
    return "<br>".join(parts)


def render_markdown(study: Study, *, pictures: Iterable[str] = ()) -> str:
    """The study as a Markdown report (``pictures``: SVG file names to embed)."""
    images, distinct, seconds = study.totals()
    rate = images / seconds if seconds else 0.0
    summary = (
        f"{'Full' if study.full else 'Small (CI)'} study: {len(study.configs)} store configurations × "
        f"{len(study.workloads)} workloads × {len(study.models)} persistence models; "
        f"{images} crash images judged ({distinct} distinct images read by a fresh store) in "
        f"{seconds:.1f} s of exploration, **{rate:.0f} images/s**; {study.seconds:.1f} s in all "
        f"(recording included). At most {study.budget} images per crash point (seed {study.seed})."
    )
    parts = [
        *report_head(
            study,
            title="Crash-consistency study of `FileLineageStore`",
            summary=summary,
            rows="store configuration",
            pictures=pictures,
            intro="R-CRASH-1 a returned record is durable; R-CRASH-2 a returned retire leaves its batch "
            "Retired; R-CRASH-3 a returned delete leaves its batch Absent; R-CRASH-4 an operation in flight "
            "leaves each ID in its pre-state, its post-state or a state on its own path.",
        ),
        *_per_workload(study),
        "## Workloads",
        "",
        "| workload | operations | note |",
        "|---|---|---|",
        *(f"| {w} | {_describe(WORKLOADS[w])} | {WORKLOADS[w].note} |" for w in study.workloads),
        "",
        "## Shortest counterexample per configuration",
        "",
        "Under the strongest model where the configuration fails and the default protocol does not.",
        "",
    ]
    for config in study.configs:
        example = study.headline(config)
        if example is None:
            parts += [f"### {config}", "", "No violation under any model.", ""]
        else:
            parts += [f"### {config}", "", fence(example.render()), ""]
    parts += [
        "## Figures per exploration",
        "",
        "Schedule: whether the parked operation reached its pause point (`-` for sequential workloads; a "
        "variant without the call it parks at runs sequentially).",
        "",
        "| configuration | workload | model | crash points | images | space | verdict | violations | "
        "images/s | schedule |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in study.explorations():
        schedule = "-" if e.paused is None else ("reached" if e.paused else "not reached")
        parts.append(
            f"| {e.config} | {e.workload} | {e.model} | {e.crash_points} | {e.images} | {e.space} | "
            f"{e.verdict} | {e.violations} | {e.rate:.0f} | {schedule} |"
        )
    parts.append("")
    return "\n".join(parts)


def write_report(study: Study, directory: Path) -> Path:
    """Write ``report.md``, ``matrix.svg`` and one ``timeline-*.svg`` per headline counterexample.

    Returns:
        The path of ``report.md``.
    """
    timelines = [
        (config, example) for config in study.configs if (example := study.headline(config)) is not None
    ]
    return write_crash_report(
        study, directory, timelines=timelines, render=lambda names: render_markdown(study, pictures=names)
    )
