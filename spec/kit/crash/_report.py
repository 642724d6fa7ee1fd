"""The report of a traced-target crash study: the matrix, what ran and what did not, each counterexample as
text and as a timeline picture, the figures; and the pinned JSON object (SPEC.md §Crash, R-CRASH-1..4;
docs/crash-target.md).

``spec.kit.crash.matrix_table`` (rows: targets) is the Markdown matrix *target × model → clauses broken*;
``render_markdown`` the whole report; ``write_report`` writes ``report.md`` with the model study's pictures
(``impl.study.pictures``: ``matrix.svg``, and one ``timeline-*.svg`` per headline counterexample). ``summary``
is the object ``capture-ledger crash --target --json`` prints: ``{"target", "verdict", "images", "broken":
[{"clause", "model", "workload", "timeline"}], "seconds"}``, each broken clause once per model (its shortest
counterexample over the workloads, rendered as text), plus ``operations``, ``workloads``, ``skipped``,
``unsupported`` and ``images_per_second``. ``exit_code`` is the command's: 1 when a clause breaks under the
strongest model studied (journaled when it runs), else 0.

Not guaranteed: the wording and layout of the Markdown and the pictures.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from capture_ledger.spec.crash.durability import MODELS
from capture_ledger.spec.kit.crash._judgement import CrashViolation
from capture_ledger.spec.kit.crash._pictures import matrix_svg, matrix_table, op_label, timeline_svg
from capture_ledger.spec.kit.crash._study import TargetStudy
from capture_ledger.spec.kit.crash._trace import Recording

__all__ = [
    "render_markdown",
    "shortest",
    "study_exit_code",
    "study_summary",
    "write_study_report",
]


def shortest(
    study: TargetStudy, target: str, model: str, clause: str
) -> tuple[CrashViolation, Recording] | None:
    """The shortest counterexample of ``clause`` for ``target`` under ``model``, with its recording."""
    found = [(v, r) for v, r in study.examples(model) if v.config == target and clause in v.clauses]
    return min(found, key=lambda pair: (*pair[0].size(), pair[0].workload), default=None)


def study_exit_code(study: TargetStudy) -> int:
    """1 when a clause breaks under the strongest model studied, else 0."""
    strongest = study.models[0]
    return 1 if any(study.clauses(t, strongest) for t in study.configs) else 0


def study_summary(study: TargetStudy, target: str) -> dict[str, Any]:
    """The pinned JSON object of ``capture-ledger crash --target`` for one target."""
    broken = []
    for model in study.models:
        for clause in sorted(study.clauses(target, model)):
            found = shortest(study, target, model, clause)
            if found is not None:
                violation, _ = found
                broken.append(
                    {
                        "clause": clause,
                        "model": model,
                        "workload": violation.workload,
                        "timeline": violation.render(),
                    }
                )
    verdicts = [study.verdict(target, m) for m in study.models]
    verdict = "violation" if "violation" in verdicts else "unknown" if "unknown" in verdicts else "ok"
    images, distinct, seconds = study.totals()
    return {
        "target": target,
        "verdict": verdict,
        "images": images,
        "broken": broken,
        "seconds": round(study.seconds, 3),
        "models": list(study.models),
        "operations": list(study.operations.get(target, ())),
        "workloads": [c.workload for c in study.cells if c.target == target],
        "skipped": [{"workload": w, "why": why} for t, w, why in study.skipped if t == target],
        "unsupported": [{"workload": w, "why": why} for t, w, why in study.unsupported() if t == target],
        "distinct_images": distinct,
        "images_per_second": round(images / seconds, 1) if seconds else 0.0,
    }


def _fence(text: str) -> str:
    return "```\n" + text + "\n```"


def _per_workload(study: TargetStudy) -> list[str]:
    lines = [
        "| target | workload | " + " | ".join(study.models) + " | images | schedule |",
        "|---|---|" + "---|" * len(study.models) + "---|---|",
    ]
    for cell in study.cells:
        texts = [", ".join(sorted(e.clauses)) or e.verdict for e in cell.explorations]
        images = sum(e.images for e in cell.explorations)
        paused = cell.recording.paused
        schedule = "-" if paused is None else ("held" if paused else "not held")
        lines.append(
            f"| {cell.target} | {cell.workload} | " + " | ".join(texts) + f" | {images} | {schedule} |"
        )
    return lines


def render_markdown(study: TargetStudy, *, pictures: tuple[str, ...] = ()) -> str:
    """The study as a Markdown report (``pictures``: SVG file names to embed)."""
    images, distinct, seconds = study.totals()
    rate = images / seconds if seconds else 0.0
    read_rate = study.reads / study.read_seconds if study.read_seconds else 0.0
    parts = [
        "# Crash states of ledgers traced from outside",
        "",
        f"{len(study.configs)} target(s) × {len(study.workloads)} workload(s) × {len(study.models)} "
        f"persistence model(s): {images} crash images judged ({distinct} distinct images read back by a "
        f"fresh handle in a child process) in {seconds:.1f} s of exploration, **{rate:.0f} images/s** "
        f"(reading back: {study.reads} reads, {read_rate:.0f} reads/s); {study.seconds:.1f} s in all, "
        f"tracing included. At most {study.budget} images per crash point (seed {study.seed}).",
        "",
        "## Persistence models",
        "",
        *(f"- **{m}**: {MODELS[m].summary}." for m in study.models),
        "",
        "## Matrix: which contract clause breaks",
        "",
        matrix_table(study, rows="target"),
        "",
        *(f"![{Path(p).stem}]({p})\n" for p in pictures),
        "## Per workload",
        "",
        *_per_workload(study),
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
    parts += ["## Shortest counterexample per target, model and clause", ""]
    for target in study.configs:
        for model in study.models:
            for clause in sorted(study.clauses(target, model)):
                found = shortest(study, target, model, clause)
                if found is not None:
                    parts += [f"### {target} / {model} / {clause}", "", _fence(found[0].render()), ""]
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
    counterexample.

    Returns:
        The path of ``report.md``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    pictures = ["matrix.svg"]
    (directory / "matrix.svg").write_text(matrix_svg(study), encoding="utf-8")
    for target in study.configs:
        for model in study.models:
            clauses = sorted(study.clauses(target, model))
            found = shortest(study, target, model, clauses[0]) if clauses else None
            if found is None:
                continue
            name = "timeline-" + re.sub(r"[^A-Za-z0-9_]+", "-", f"{target}-{model}") + ".svg"
            (directory / name).write_text(timeline_svg(found[1], found[0]), encoding="utf-8")
            pictures.append(name)
    report = directory / "report.md"
    report.write_text(render_markdown(study, pictures=tuple(pictures)), encoding="utf-8")
    return report
