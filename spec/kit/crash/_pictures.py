"""SVG pictures of the crash study: the clause matrix and one counterexample timeline.

Pictures for the reports ``report`` writes (SPEC.md §Crash, R-CRASH-1..4): ``matrix_svg`` draws
*configuration × model × clause* with the broken clauses in red; ``matrix_table`` is the same matrix as a
Markdown table; ``timeline_svg`` draws one counterexample as lanes of store operations, their effects in trace
order, the crash line and what a fresh store read back from the image the crash left. Hand-written SVG, no
plotting library. ``op_label`` is the short operation label both the pictures and the Markdown report use.

The matrix takes any ``MatrixSource`` (every ``CrashStudy`` is one), so this module does not import the
studies and they import it without a cycle.

Not guaranteed: the layout, colours or wording of the pictures (they are for people, not for parsing), or
that long labels fit their lanes (they are cut).
"""

from __future__ import annotations

import html
from typing import Protocol

from capture_ledger.spec.core.model import Delete, Operation, Record, Retire
from capture_ledger.spec.crash.contract import CLAUSES
from capture_ledger.spec.crash.durability import describe_effect
from capture_ledger.spec.kit.crash._judgement import CrashViolation
from capture_ledger.spec.kit.crash._trace import Invoke, Recording, Return

__all__ = ["MatrixSource", "matrix_svg", "matrix_table", "op_label", "timeline_svg"]


class MatrixSource(Protocol):
    """What ``matrix_svg`` reads from a study: its axes, and the clauses and verdict of each cell."""

    @property
    def models(self) -> tuple[str, ...]:
        """The persistence models, one column group each."""
        ...

    @property
    def configs(self) -> tuple[str, ...]:
        """The store configurations, one row each."""
        ...

    def clauses(self, config: str, model: str) -> frozenset[str]:
        """The clauses ``config`` breaks under ``model``."""
        ...

    def verdict(self, config: str, model: str) -> str:
        """``violation``, ``ok`` or ``unknown`` (see ``CrashStudy.verdict``)."""
        ...


# ------------------------------------------------------------------------------------------- markdown
def _cell_text(study: MatrixSource, config: str, model: str) -> str:
    clauses = sorted(study.clauses(config, model))
    if clauses:
        return ", ".join(clauses)
    return "no violation" if study.verdict(config, model) == "ok" else "none found (sampled)"


def matrix_table(study: MatrixSource, *, rows: str = "store configuration") -> str:
    """The matrix as a Markdown table: configuration × model → clauses broken (``rows`` names the rows'
    column: the traced-target study's are targets)."""
    lines = [
        f"| {rows} | " + " | ".join(study.models) + " |",
        "|---|" + "---|" * len(study.models),
    ]
    for config in study.configs:
        cells = " | ".join(_cell_text(study, config, m) for m in study.models)
        lines.append(f"| {config} | {cells} |")
    return "\n".join(lines)


_RED, _GREEN, _GREY = "#d9534f", "#dff0d8", "#e6e6e6"


def _text(x: float, y: float, text: str, *, size: int = 12, anchor: str = "start", **extra: str) -> str:
    attributes = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in extra.items())
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'font-family="monospace"{attributes}>{html.escape(text)}</text>'
    )


def _svg(width: float, height: float, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}">\n<rect width="100%" height="100%" fill="white"/>\n'
        + "\n".join(body)
        + "\n</svg>\n"
    )


def matrix_svg(study: MatrixSource) -> str:
    """The matrix as a picture: configuration rows × (model × clause) columns; red where broken.

    Args:
        study: the study (or anything with its axes, clauses and verdicts).

    Returns:
        The SVG document.
    """
    left, top, cell, gap = 230.0, 70.0, 26.0, 14.0
    group = cell * len(CLAUSES) + gap
    width = left + group * len(study.models) + 20
    height = top + cell * len(study.configs) + 60
    body = [_text(10, 22, "Crash contract clauses broken, per store configuration and model", size=14)]
    for column, model in enumerate(study.models):
        x0 = left + column * group
        body.append(_text(x0 + cell * len(CLAUSES) / 2, 44, model, anchor="middle", font_weight="bold"))
        for k, clause in enumerate(CLAUSES):
            body.append(_text(x0 + k * cell + cell / 2, 62, clause[-1], size=11, anchor="middle"))
    for row, config in enumerate(study.configs):
        y = top + row * cell
        body.append(_text(left - 8, y + cell * 0.68, config, anchor="end"))
        for column, model in enumerate(study.models):
            broken = study.clauses(config, model)
            verdict = study.verdict(config, model)
            for k, clause in enumerate(CLAUSES):
                x = left + column * group + k * cell
                fill = _RED if clause in broken else (_GREEN if verdict == "ok" else _GREY)
                body.append(
                    f'<rect x="{x:.1f}" y="{y:.1f}" width="{cell - 2:.1f}" height="{cell - 2:.1f}" '
                    f'fill="{fill}"><title>{html.escape(f"{config} / {model} / {clause}")}</title></rect>'
                )
    legend_y = top + cell * len(study.configs) + 24
    for k, (fill, label) in enumerate(
        ((_RED, "clause broken"), (_GREEN, "no violation (every image)"), (_GREY, "none found (sampled)"))
    ):
        x = 10 + k * 230
        body.append(f'<rect x="{x}" y="{legend_y - 12}" width="14" height="14" fill="{fill}"/>')
        body.append(_text(x + 20, legend_y, label))
    body.append(_text(10, legend_y + 24, "columns 1-4: R-CRASH-1 record, -2 retire, -3 delete, -4 in flight"))
    return _svg(width, height, body)


def op_label(op: Operation) -> str:
    """A short label for ``op``, e.g. ``retire r1,r2`` or ``record r1 a`` (not valid Python; for people)."""
    if isinstance(op, Retire | Delete):
        return f"{type(op).__name__.lower()} {','.join(map(str, op.rollout_ids))}"  # type: ignore[call-overload]
    if isinstance(op, Record):
        return f"record {op.rollout_id} {op.row['model_call_id']}"  # type: ignore[index]
    return f"{type(op).__name__} {getattr(op, 'rollout_id', '')}"


def timeline_svg(recording: Recording, violation: CrashViolation) -> str:
    """A counterexample as a picture: one lane per operation, its effects in trace order, the crash line,
    and what a fresh store read from the image the crash left.

    Args:
        recording: the recording the counterexample was explored from.
        violation: the counterexample (its cut, image, observed and allowed states, clauses).

    Returns:
        The SVG document.
    """
    trace = recording.trace
    current: dict[str, int] = {}
    lane_of: list[int | None] = []
    for event, thread in zip(trace, recording.threads, strict=True):
        if isinstance(event, Invoke):
            current[thread] = event.op
            lane_of.append(event.op)
        elif isinstance(event, Return):
            lane_of.append(event.op)
            current.pop(thread, None)
        else:
            lane_of.append(current.get(thread))
    effects_seen = 0
    crash_row = len(trace)
    for position, event in enumerate(trace):
        if not isinstance(event, Invoke | Return):
            if effects_seen == violation.cut:
                crash_row = position
                break
            effects_seen += 1
    ops = recording.workload.ops
    left, top, row_h, lane_w = 330.0, 80.0, 20.0, 150.0
    width = left + lane_w * len(ops) + 20
    info = [
        f"crash after {violation.cut} effect(s); model {violation.model}; store {violation.config}",
        "image left by the crash:",
        *(f"  {n}: {c}" for n, c in violation.image),
        *(["  (no ledger or fence files)"] if not violation.image else []),
        f"read back {violation.rollout_id}: {violation.observed}",
        "allowed:",
        *(f"  {a}" for a in violation.allowed),
        f"broken: {', '.join(violation.clauses)}",
    ]
    height = top + row_h * (len(trace) + 1) + 20 + 16 * len(info)
    body = [
        _text(10, 22, f"Counterexample: workload {violation.workload}", size=14, font_weight="bold"),
        _text(10, 42, "lanes are store operations; dots are their effects; the red line is the crash"),
    ]
    for lane, op in enumerate(ops):
        label = f"op {lane}: {op_label(op)}"
        body.append(_text(left + lane * lane_w + lane_w / 2, 66, label[:24], size=11, anchor="middle"))
    spans: dict[int, list[int]] = {}
    for position, event in enumerate(trace):
        y = top + position * row_h
        column = lane_of[position]
        if isinstance(event, Invoke):
            label = f"invoke op {event.op}"
        elif isinstance(event, Return):
            label = f"return op {event.op}"
        else:
            label = describe_effect(event, recording.inode_names)
        after = position >= crash_row
        body.append(_text(10, y + 14, label, fill="#999999" if after else "black"))
        if column is not None:
            spans.setdefault(column, []).append(position)
            x = left + column * lane_w + lane_w / 2
            if isinstance(event, Invoke | Return):
                body.append(f'<rect x="{x - 30:.1f}" y="{y + 4:.1f}" width="60" height="12" fill="#337ab7"/>')
            else:
                body.append(f'<circle cx="{x:.1f}" cy="{y + 10:.1f}" r="5" fill="#333333"/>')
    for lane, positions in spans.items():
        x = left + lane * lane_w + lane_w / 2
        y1, y2 = top + min(positions) * row_h + 10, top + max(positions) * row_h + 10
        body.insert(
            2,
            f'<line x1="{x:.1f}" y1="{y1:.1f}" x2="{x:.1f}" y2="{y2:.1f}" stroke="#9ecae1" '
            'stroke-width="6"/>',
        )
    crash_y = top + crash_row * row_h + 1
    body.append(
        f'<line x1="5" y1="{crash_y:.1f}" x2="{width - 5:.1f}" y2="{crash_y:.1f}" stroke="{_RED}" '
        'stroke-width="2" stroke-dasharray="6,3"/>'
    )
    body.append(_text(width - 8, crash_y - 3, "crash", anchor="end", fill=_RED))
    y = top + row_h * (len(trace) + 1) + 10
    for line in info:
        body.append(_text(10, y, line, size=11))
        y += 16
    return _svg(width, height, body)
