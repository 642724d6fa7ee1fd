"""The ordering study: which sync or ordering step protects which crash clause, under which model.

For every step of the protocol (``ordering.StoreVariant``) one store configuration switches it off; the
default protocol and its ``fence_sync`` options are studied next to them. Each configuration runs every
``WORKLOADS`` entry once through the recording seam (``crash.record``) and is explored under every
persistence model (``spec.durability.MODELS``). The result is a matrix *configuration × model → clauses
broken*, with the shortest counterexample of each cell, rendered by ``render_markdown`` as ``report.md``;
``write_report`` adds the SVG pictures that ``impl.crash_pictures`` draws (R-CRASH-1..4, SPEC.md §Crash).

``SMALL`` is the study CI runs (the sync and ordering steps, a handful of small workloads, every image);
``study(full=True)`` adds the guards that are not about crashes and larger, sampled workloads.
``EXPECTED`` pins what the small study must find: the default protocol clean under ``journaled`` and
``weakest-posix``, each ablated step caught under at least one model.

Not guaranteed: that a clean cell proves the step unnecessary on real hardware (the models are parameters),
or coverage beyond the recorded schedule of each workload.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from capture_ledger.impl.store.ordering import FenceSync, StoreVariant
from capture_ledger.impl.study.crash import (
    CrashViolation,
    Exploration,
    FaultAt,
    Observation,
    Pause,
    Recording,
    StoreConfig,
    Workload,
    explore,
    record,
)
from capture_ledger.impl.study.pictures import matrix_svg, op_label, timeline_svg
from capture_ledger.spec.core.model import Delete, Record, RecordFailure, Retire
from capture_ledger.spec.crash.durability import MODELS, DiskImage

__all__ = [
    "CONFIGS",
    "EXPECTED",
    "SMALL",
    "WORKLOADS",
    "Study",
    "StudyCell",
    "matrix_table",
    "render_markdown",
    "study",
    "write_report",
]


def _row(call: str, value: int = 1) -> dict[str, object]:
    return {"model_call_id": call, "value": value}


_SYNC = frozenset({"sync_dir", "syncfs"})

#: The study's workloads: each exercises the steps named in its note.
WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            name="record-new",
            ops=(Record("r1", _row("a")),),
            note="first record creates the ledger: data fsync, directory sync on create",
        ),
        Workload(
            name="record-append",
            setup=(Record("r1", _row("a")),),
            ops=(Record("r1", _row("b")), RecordFailure("r1", "c", "timeout")),
            note="appends to a durable ledger: data fsync",
        ),
        Workload(
            name="record-torn",
            setup=(Record("r1", _row("a")),),
            torn=("r1",),
            ops=(Record("r1", _row("b")),),
            note="append after a crash left a torn last line: truncate, write, fsync (R-STORE-6)",
        ),
        Workload(
            name="retire-live",
            setup=(Record("r1", _row("a")),),
            ops=(Retire(["r1", "r2"]),),
            note="retire a Live and an Absent ID: fences, sync, unlink, sync",
        ),
        Workload(
            name="retire-overlap",
            ops=(Retire(["r1"]), Retire(["r1"])),
            pause=Pause(0, _SYNC),
            note="a second retire runs while the first has written its fence but not synced it: "
            "the sync when nothing was written",
        ),
        Workload(
            name="delete-reuse",
            setup=(Record("r1", _row("a")), Retire(["r1"])),
            ops=(Delete(["r1"]), Record("r1", _row("b"))),
            note="delete a Retired ID, then reuse it: delete's sync",
        ),
        Workload(
            name="retire-delete-reuse",
            setup=(Record("r1", _row("a")),),
            ops=(Retire(["r1"]), Delete(["r1"]), Record("r1", _row("b"))),
            pause=Pause(0, frozenset({"lock"}), 2),
            note="a delete and a reuse run between retire's phases: the re-check (R-CONC-3)",
        ),
        Workload(
            name="record-retry-eio",
            ops=(Record("r1", _row("a")), Record("r1", _row("a"))),
            faults=(FaultAt(0, "sync_dir"),),
            note="the first record's directory sync fails (EIO); the caller retries the same row, "
            "which is already there (R-WRITE-3)",
        ),
        Workload(
            name="retire-retry-eio",
            ops=(Retire(["r1"]), Retire(["r1"])),
            faults=(FaultAt(0, "sync_dir"),),
            note="a retire fails after writing its fence, before syncing it; the caller retries the batch: "
            "the sync when nothing was written",
        ),
        Workload(
            name="retire-retry-fsync-eio",
            ops=(Retire(["r1"]), Retire(["r1"])),
            faults=(FaultAt(0, "fsync"),),
            note="with fence_sync=file: the fence's fsync fails (EIO), or its process dies; the batch is "
            "retried",
        ),
        Workload(
            name="delete-retry-eio",
            setup=(Record("r1", _row("a")), Retire(["r1"])),
            ops=(Delete(["r1"]), Delete(["r1"])),
            faults=(FaultAt(0, "sync_dir"),),
            note="a delete fails at its directory sync; the caller retries: every non-empty batch syncs",
        ),
        Workload(
            name="mixed",
            setup=(Record("r1", _row("a")), Record("r2", _row("b")), Retire(["r4"])),
            ops=(
                Record("r3", _row("c")),
                Retire(["r1", "r2", "r3", "r4"]),
                Delete(["r2", "r4"]),
                Record("r2", _row("d")),
            ),
            note="larger: every kind of operation on four IDs",
        ),
        Workload(
            name="retire-batch",
            setup=tuple(Record(f"r{i}", _row("a")) for i in range(8)),
            ops=(Retire([f"r{i}" for i in range(8)]),),
            note="a batch of eight Live IDs: the weak models' spaces grow as 2^8; sampled",
        ),
    )
}

#: The workloads of the CI study.
SMALL_WORKLOADS = (
    "record-new",
    "retire-live",
    "retire-overlap",
    "retire-retry-eio",
    "delete-reuse",
    "retire-delete-reuse",
)

#: The protocol's sync and ordering steps, each switched off alone.
STEPS = (
    "sync_after_fences",
    "sync_when_nothing_written",
    "recheck_fence",
    "sync_after_unlinks",
    "fsync_appends",
    "sync_dir_on_create",
    "sync_delete",
    "fence_before_unlink",
)
#: Guards that are not about crashes; studied in the full run only.
OTHER_GUARDS = ("fence_lookup_on_write", "admit_checks_fence", "cache_coherence")


def _without(step: str, *, fence_sync: FenceSync = "directory") -> StoreConfig:
    prefix = "" if fence_sync == "directory" else f"fence_sync={fence_sync}, "
    return StoreConfig(
        label=f"{prefix}no {step}", variant=StoreVariant(**{step: False}), fence_sync=fence_sync
    )


#: Every configuration of the study, by label.
CONFIGS: dict[str, StoreConfig] = {
    c.label: c
    for c in (
        StoreConfig(label="default"),
        StoreConfig(label="fence_sync=file", fence_sync="file"),
        StoreConfig(label="fence_sync=syncfs", fence_sync="syncfs"),
        *(_without(step) for step in (*STEPS, *OTHER_GUARDS)),
        # The full study also ablates each step from the configuration that is safe without a journal.
        *(_without(step, fence_sync="file") for step in STEPS),
    )
}
SMALL = ("default", "fence_sync=file", "fence_sync=syncfs", *(f"no {s}" for s in STEPS))

#: What the small study must find: configuration → model → clauses broken (R-STATE-3/R-STORE-8 never).
EXPECTED: dict[str, dict[str, frozenset[str]]] = {
    "default": {
        "journaled": frozenset(),
        "weakest-posix": frozenset(),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-4"}),
    },
    "fence_sync=file": {
        "journaled": frozenset(),
        "weakest-posix": frozenset(),
        "ext4-nojournal": frozenset(),
    },
    "fence_sync=syncfs": {
        "journaled": frozenset(),
        "weakest-posix": frozenset(),
        "ext4-nojournal": frozenset(),
    },
    "no sync_after_fences": {
        "journaled": frozenset({"R-CRASH-2"}),
        "weakest-posix": frozenset({"R-CRASH-2", "R-CRASH-4"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-4"}),
    },
    "no sync_when_nothing_written": {
        "journaled": frozenset({"R-CRASH-2"}),
        "weakest-posix": frozenset({"R-CRASH-2"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-4"}),
    },
    "no recheck_fence": {
        "journaled": frozenset({"R-CRASH-1", "R-CRASH-4"}),
        "weakest-posix": frozenset({"R-CRASH-1", "R-CRASH-4"}),
        "ext4-nojournal": frozenset({"R-CRASH-1", "R-CRASH-2", "R-CRASH-4"}),
    },
    "no sync_after_unlinks": {
        "journaled": frozenset({"R-CRASH-2"}),
        "weakest-posix": frozenset({"R-CRASH-2"}),
        "ext4-nojournal": frozenset({"R-CRASH-2"}),
    },
    "no fsync_appends": {
        "journaled": frozenset({"R-CRASH-1"}),
        "weakest-posix": frozenset({"R-CRASH-1"}),
        "ext4-nojournal": frozenset({"R-CRASH-1", "R-CRASH-2", "R-CRASH-4"}),
    },
    "no sync_dir_on_create": {
        "journaled": frozenset({"R-CRASH-1"}),
        "weakest-posix": frozenset({"R-CRASH-1"}),
        "ext4-nojournal": frozenset({"R-CRASH-1", "R-CRASH-2", "R-CRASH-4"}),
    },
    "no sync_delete": {
        "journaled": frozenset({"R-CRASH-3"}),
        "weakest-posix": frozenset({"R-CRASH-3"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-3", "R-CRASH-4"}),
    },
    "no fence_before_unlink": {
        "journaled": frozenset({"R-CRASH-2", "R-CRASH-4"}),
        "weakest-posix": frozenset({"R-CRASH-2", "R-CRASH-4"}),
        "ext4-nojournal": frozenset({"R-CRASH-2", "R-CRASH-4"}),
    },
}


@dataclass(frozen=True, slots=True)
class StudyCell:
    """One configuration on one workload: its recording and one exploration per model."""

    config: str
    workload: str
    recording: Recording
    explorations: tuple[Exploration, ...]


@dataclass(frozen=True, slots=True)
class Study:
    """The whole study: every cell, and the figures over all of them."""

    cells: tuple[StudyCell, ...]
    models: tuple[str, ...]
    configs: tuple[str, ...]
    workloads: tuple[str, ...]
    seconds: float
    budget: int
    seed: int
    full: bool = False
    notes: tuple[str, ...] = field(default=())

    def explorations(self) -> list[Exploration]:
        """Every exploration, in study order."""
        return [e for cell in self.cells for e in cell.explorations]

    def clauses(self, config: str, model: str) -> frozenset[str]:
        """The clauses broken by ``config`` under ``model``, over every workload."""
        found: set[str] = set()
        for e in self.explorations():
            if e.config == config and e.model == model:
                found |= e.clauses
        return frozenset(found)

    def matrix(self) -> dict[str, dict[str, frozenset[str]]]:
        """configuration → model → clauses broken."""
        return {c: {m: self.clauses(c, m) for m in self.models} for c in self.configs}

    def verdict(self, config: str, model: str) -> str:
        """``violation``, ``ok`` (every image of every workload judged) or ``unknown`` (some sampled)."""
        found = [e for e in self.explorations() if e.config == config and e.model == model]
        if any(e.violations for e in found):
            return "violation"
        return "unknown" if any(e.sampled for e in found) else "ok"

    def shortest(self, config: str, model: str | None = None) -> CrashViolation | None:
        """The shortest counterexample of ``config`` (under ``model``, or any model)."""
        examples = [
            v
            for e in self.explorations()
            if e.config == config and (model is None or e.model == model)
            for v in e.examples
        ]
        return min(examples, key=lambda v: (*v.size(), v.model), default=None)

    def headline(self, config: str) -> CrashViolation | None:
        """The counterexample that shows what ``config`` breaks: under the strongest model where it fails
        and the default protocol does not (else the strongest where it fails), the shortest."""
        failing = [m for m in self.models if self.clauses(config, m)]
        own = [m for m in failing if "default" not in self.configs or not self.clauses("default", m)]
        for model in own or failing:
            return self.shortest(config, model)
        return None

    def totals(self) -> tuple[int, int, float]:
        """Images judged, distinct images read, seconds spent exploring."""
        explorations = self.explorations()
        return (
            sum(e.images for e in explorations),
            sum(e.distinct for e in explorations),
            sum(e.seconds for e in explorations),
        )


def study(
    *,
    configs: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    workloads: Sequence[str] | None = None,
    full: bool = False,
    budget: int = 256,
    seed: int = 0,
    progress: Callable[[StudyCell], None] | None = None,
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
    cells: list[StudyCell] = []
    for label in chosen_configs:
        config = CONFIGS[label]
        for name in chosen_workloads:
            with tempfile.TemporaryDirectory(prefix="capture-ledger-record-") as directory:
                recording = record(WORKLOADS[name], config, Path(directory))
            cache: dict[DiskImage, Observation] = {}
            explorations = tuple(
                explore(recording, MODELS[m], budget=budget, seed=seed, observer_cache=cache)
                for m in chosen_models
            )
            cells.append(StudyCell(label, name, recording, explorations))
            if progress is not None:
                progress(cells[-1])
    return Study(
        tuple(cells),
        chosen_models,
        chosen_configs,
        chosen_workloads,
        time.perf_counter() - started,
        budget,
        seed,
        full,
    )


# ------------------------------------------------------------------------------------------- markdown
def _cell_text(study: Study, config: str, model: str) -> str:
    clauses = sorted(study.clauses(config, model))
    if clauses:
        return ", ".join(clauses)
    return "no violation" if study.verdict(config, model) == "ok" else "none found (sampled)"


def matrix_table(study: Study) -> str:
    """The matrix as a Markdown table: configuration × model → clauses broken."""
    lines = [
        "| store configuration | " + " | ".join(study.models) + " |",
        "|---|" + "---|" * len(study.models),
    ]
    for config in study.configs:
        cells = " | ".join(_cell_text(study, config, m) for m in study.models)
        lines.append(f"| {config} | {cells} |")
    return "\n".join(lines)


def _per_workload(study: Study) -> list[str]:
    """The default protocol and its fence_sync options, per workload (which workload breaks what)."""
    configs = [c for c in ("default", "fence_sync=file", "fence_sync=syncfs") if c in study.configs]
    if not configs:
        return []
    lines = [
        "## The default protocol and its fence_sync options, per workload",
        "",
        "| configuration | workload | " + " | ".join(study.models) + " |",
        "|---|---|" + "---|" * len(study.models),
    ]
    for cell in study.cells:
        if cell.config in configs:
            texts = [", ".join(sorted(e.clauses)) or e.verdict for e in cell.explorations]
            lines.append(f"| {cell.config} | {cell.workload} | " + " | ".join(texts) + " |")
    return [*lines, ""]


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


def _fence(text: str) -> str:
    return "```\n" + text + "\n```"


def render_markdown(study: Study, *, pictures: Iterable[str] = ()) -> str:
    """The study as a Markdown report (``pictures``: SVG file names to embed)."""
    images, distinct, seconds = study.totals()
    rate = images / seconds if seconds else 0.0
    parts = [
        "# Crash-consistency study of `FileLineageStore`",
        "",
        f"{'Full' if study.full else 'Small (CI)'} study: {len(study.configs)} store configurations × "
        f"{len(study.workloads)} workloads × {len(study.models)} persistence models; "
        f"{images} crash images judged ({distinct} distinct images read by a fresh store) in "
        f"{seconds:.1f} s of exploration, **{rate:.0f} images/s**; {study.seconds:.1f} s in all "
        f"(recording included). At most {study.budget} images per crash point (seed {study.seed}).",
        "",
        "## Persistence models",
        "",
        *(f"- **{m}**: {MODELS[m].summary}." for m in study.models),
        "",
        "## Matrix: which contract clause breaks",
        "",
        "R-CRASH-1 a returned record is durable; R-CRASH-2 a returned retire leaves its batch Retired; "
        "R-CRASH-3 a returned delete leaves its batch Absent; R-CRASH-4 an operation in flight leaves "
        "each ID in its pre-state, its post-state or a state on its own path.",
        "",
        matrix_table(study),
        "",
        *(f"![{Path(p).stem}]({p})\n" for p in pictures),
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
            parts += [f"### {config}", "", _fence(example.render()), ""]
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
    directory.mkdir(parents=True, exist_ok=True)
    pictures = ["matrix.svg"]
    (directory / "matrix.svg").write_text(matrix_svg(study), encoding="utf-8")
    for config in study.configs:
        example = study.headline(config)
        if example is None:
            continue
        cell = next(c for c in study.cells if c.config == config and c.workload == example.workload)
        name = "timeline-" + re.sub(r"[^A-Za-z0-9_]+", "-", config) + ".svg"
        (directory / name).write_text(timeline_svg(cell.recording, example), encoding="utf-8")
        pictures.append(name)
    report = directory / "report.md"
    report.write_text(render_markdown(study, pictures=pictures), encoding="utf-8")
    return report
