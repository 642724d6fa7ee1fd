"""The reports of the crash studies: the Markdown both write, and the traced-target study's own report and
pinned JSON object (SPEC.md §Crash, R-CRASH-1..4; docs/crash.md, docs/crash-target.md).

Shared by the seam study of our own store (``impl.study.crash``) and the study of any ledger traced from
outside: ``report_head`` (title, figures, the persistence models, the matrix ``matrix_table`` draws and the
pictures), ``per_workload_table`` (each row on each workload, with columns of the study's own), ``fence``,
and ``write_crash_report``, which writes ``matrix.svg`` (``matrix_svg``), one ``timeline-*.svg`` per
counterexample the study chooses (``timeline_svg``, from the recording ``CrashStudy.recording_of`` finds)
and ``report.md``.

For a ``TargetStudy``: ``render_markdown`` is the whole report and ``write_study_report`` writes it with one
timeline per target and model that breaks a clause. ``study_summary`` is the object ``capture-ledger crash
--target --json`` prints: ``{"target", "verdict", "images", "broken": [{"clause", "model", "workload",
"timeline"}], "seconds"}``, each broken clause once per model (its shortest counterexample over the
workloads, rendered as text), plus ``models``, ``operations``, ``workloads``, ``skipped``, ``unsupported``,
``faults`` (per workload that requests faults: those requested and those actually injected, read off the
trace), ``not_exercised`` (each requested fault never injected: that workload's verdict is "unknown"),
``distinct_images`` and ``images_per_second``; ``verdict`` is the kind of the ``worst`` of the target's
results under every model. ``study_exit_code`` is the command's: 1 when a clause breaks under the strongest
model studied (journaled when it runs), else 0 (``CrashStudy.exit_code``).

Not guaranteed: the wording and layout of the Markdown and the pictures.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from capture_ledger.spec.core.verdicts import worst
from capture_ledger.spec.crash.durability import MODELS
from capture_ledger.spec.kit.crash._judgement import CrashViolation
from capture_ledger.spec.kit.crash._matrix import CrashCell, CrashStudy
from capture_ledger.spec.kit.crash._pictures import matrix_svg, matrix_table, op_label, timeline_svg
from capture_ledger.spec.kit.crash._study import TargetStudy

__all__ = [
    "fence",
    "per_workload_table",
    "render_markdown",
    "report_head",
    "study_exit_code",
    "study_summary",
    "write_crash_report",
    "write_study_report",
]


# ---------------------------------------------------------------------------- shared by both studies
def fence(text: str) -> str:
    """``text`` as a fenced Markdown block."""
    return "```\n" + text + "\n```"


def report_head(
    study: CrashStudy,
    *,
    title: str,
    summary: str,
    rows: str,
    pictures: Iterable[str] = (),
    intro: str = "",
) -> list[str]:
    """The lines every crash report opens with: ``title``, the ``summary`` paragraph, the persistence
    models, the matrix (``rows`` names its rows' column; ``intro``, when given, precedes it) and the
    ``pictures`` (SVG file names) embedded."""
    return [
        f"# {title}",
        "",
        summary,
        "",
        "## Persistence models",
        "",
        *(f"- **{m}**: {MODELS[m].summary}." for m in study.models),
        "",
        "## Matrix: which contract clause breaks",
        "",
        *([intro, ""] if intro else []),
        matrix_table(study, rows=rows),
        "",
        *(f"![{Path(p).stem}]({p})\n" for p in pictures),
    ]


def per_workload_table(
    study: CrashStudy,
    cells: Iterable[CrashCell],
    *,
    rows: str,
    extra: Sequence[tuple[str, Callable[[CrashCell], str]]] = (),
) -> list[str]:
    """A Markdown table of ``cells``: row, workload, per model the clauses broken (or the verdict), then one
    column per ``extra`` (its heading, and what it shows of a cell)."""
    headings = [*study.models, *(heading for heading, _ in extra)]
    lines = [
        f"| {rows} | workload | " + " | ".join(headings) + " |",
        "|---|---|" + "---|" * len(headings),
    ]
    for cell in cells:
        texts = [", ".join(sorted(e.clauses)) or e.verdict for e in cell.explorations]
        texts += [show(cell) for _, show in extra]
        lines.append(f"| {cell.config} | {cell.workload} | " + " | ".join(texts) + " |")
    return lines


def write_crash_report(
    study: CrashStudy,
    directory: Path,
    *,
    timelines: Iterable[tuple[str, CrashViolation]],
    render: Callable[[tuple[str, ...]], str],
) -> Path:
    """Write ``matrix.svg``, one ``timeline-<label>.svg`` per ``(label, counterexample)`` of ``timelines``
    and ``report.md`` (``render`` of the pictures' names) into ``directory``.

    Returns:
        The path of ``report.md``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    pictures = ["matrix.svg"]
    (directory / "matrix.svg").write_text(matrix_svg(study), encoding="utf-8")
    for label, example in timelines:
        name = "timeline-" + re.sub(r"[^A-Za-z0-9_]+", "-", label) + ".svg"
        picture = timeline_svg(study.recording_of(example), example)
        (directory / name).write_text(picture, encoding="utf-8")
        pictures.append(name)
    report = directory / "report.md"
    report.write_text(render(tuple(pictures)), encoding="utf-8")
    return report


# --------------------------------------------------------------------------------- traced targets
def study_exit_code(study: TargetStudy) -> int:
    """1 when a clause breaks under the strongest model studied, else 0."""
    return study.exit_code()


def _broken(study: TargetStudy, target: str) -> list[tuple[str, str, CrashViolation]]:
    """``(model, clause, its shortest counterexample)`` for each clause ``target`` breaks, model by model."""
    found = []
    for model in study.models:
        for clause in sorted(study.clauses(target, model)):
            example = study.shortest(target, model, clause=clause)
            if example is not None:
                found.append((model, clause, example))
    return found


def study_summary(study: TargetStudy, target: str) -> dict[str, Any]:
    """The pinned JSON object of ``capture-ledger crash --target`` for one target."""
    broken = [
        {"clause": clause, "model": model, "workload": example.workload, "timeline": example.render()}
        for model, clause, example in _broken(study, target)
    ]
    verdict = worst(study.result(target, m) for m in study.models)
    images, distinct, seconds = study.totals()
    return {
        "target": target,
        "verdict": verdict.kind,
        "images": images,
        "broken": broken,
        "seconds": round(study.seconds, 3),
        "models": list(study.models),
        "operations": list(study.operations.get(target, ())),
        "workloads": [c.workload for c in study.cells if c.config == target],
        "skipped": [{"workload": w, "why": why} for t, w, why in study.skipped if t == target],
        "unsupported": [{"workload": w, "why": why} for t, w, why in study.unsupported() if t == target],
        "faults": study.faults(target),
        "not_exercised": [
            {"workload": w, "fault": fault, "why": "fault not injected: the operation made no such call"}
            for t, w, fault in study.not_exercised()
            if t == target
        ],
        "distinct_images": distinct,
        "images_per_second": round(images / seconds, 1) if seconds else 0.0,
    }


def _faults(cell: CrashCell) -> str:
    requested = len(cell.recording.workload.faults)
    if not requested:
        return "-"
    injected = len(cell.recording.injected)
    return f"{injected}/{requested} injected" + ("" if injected == requested else " (not exercised)")


def _schedule(cell: CrashCell) -> str:
    paused = cell.recording.paused
    return "-" if paused is None else ("held" if paused else "not held")


def render_markdown(study: TargetStudy, *, pictures: Iterable[str] = ()) -> str:
    """The study as a Markdown report (``pictures``: SVG file names to embed)."""
    images, distinct, seconds = study.totals()
    rate = images / seconds if seconds else 0.0
    read_rate = study.reads / study.read_seconds if study.read_seconds else 0.0
    summary = (
        f"{len(study.configs)} target(s) × {len(study.workloads)} workload(s) × {len(study.models)} "
        f"persistence model(s): {images} crash images judged ({distinct} distinct images read back by a "
        f"fresh handle in a child process) in {seconds:.1f} s of exploration, **{rate:.0f} images/s** "
        f"(reading back: {study.reads} reads, {read_rate:.0f} reads/s); {study.seconds:.1f} s in all, "
        f"tracing included. At most {study.budget} images per crash point (seed {study.seed})."
    )
    parts = [
        *report_head(
            study,
            title="Crash states of ledgers traced from outside",
            summary=summary,
            rows="target",
            pictures=pictures,
        ),
        "## Per workload",
        "",
        *per_workload_table(
            study,
            study.cells,
            rows="target",
            extra=(
                ("images", lambda cell: str(sum(e.images for e in cell.explorations))),
                ("schedule", _schedule),
                ("faults", _faults),
            ),
        ),
        "",
    ]
    if study.skipped:
        parts += ["## Workloads not run", "", *(f"- {t} / {w}: {why}" for t, w, why in study.skipped), ""]
    unsupported = study.unsupported()
    if unsupported:
        parts += [
            "## Effects no model follows (verdict unknown)",
            "",
            *(f"- {t} / {w}: {r}" for t, w, r in unsupported),
            "",
        ]
    missed = study.not_exercised()
    if missed:
        parts += [
            "## Faults not injected (not exercised; verdict unknown)",
            "",
            *(f"- {t} / {w}: {fault}: the operation made no such call" for t, w, fault in missed),
            "",
        ]
    parts += ["## Shortest counterexample per target, model and clause", ""]
    for target in study.configs:
        for model, clause, example in _broken(study, target):
            parts += [f"### {target} / {model} / {clause}", "", fence(example.render()), ""]
    parts += [
        "## Workload operations",
        "",
        *(
            f"- {cell.workload}: " + "; ".join(op_label(op) for op in cell.recording.workload.ops)
            for cell in {c.workload: c for c in study.cells}.values()
        ),
        "",
    ]
    return "\n".join(parts)


def write_study_report(study: TargetStudy, directory: Path) -> Path:
    """Write ``report.md``, ``matrix.svg`` and one ``timeline-*.svg`` per target and model's shortest
    counterexample (of the first clause it breaks).

    Returns:
        The path of ``report.md``.
    """
    timelines = []
    for target in study.configs:
        for model in study.models:
            clauses = sorted(study.clauses(target, model))
            example = study.shortest(target, model, clause=clauses[0]) if clauses else None
            if example is not None:
                timelines.append((f"{target}-{model}", example))
    return write_crash_report(
        study, directory, timelines=timelines, render=lambda names: render_markdown(study, pictures=names)
    )
