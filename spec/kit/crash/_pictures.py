"""SVG pictures of the crash study: the clause matrix and one counterexample timeline.

Pictures for the reports ``report`` writes (SPEC.md §Crash, R-CRASH-1..4): ``matrix_svg`` draws
*configuration × model × clause* with the broken clauses in red; ``matrix_table`` is the same matrix as a
Markdown table; ``timeline_svg`` draws one counterexample as lanes of store operations, their effects in
trace order (a failed sync and an operation that raised drawn as failures), the crash line and what a
fresh handle read back from the image the crash left. Hand-written SVG, no plotting library; every text
is measured (``spec.kit._svg``) and each picture is sized to hold it. ``op_label`` is the short operation
label both the pictures and the Markdown report use.

The matrix takes any ``MatrixSource`` (every ``CrashStudy`` is one), so this module does not import the
studies and they import it without a cycle.

Not guaranteed: the layout, colours or wording of the pictures (they are for people, not for parsing).
"""

from __future__ import annotations

import html
from typing import Protocol

from capture_ledger.spec.core.model import Delete, Operation, Record, Retire
from capture_ledger.spec.crash.contract import CLAUSES
from capture_ledger.spec.crash.durability import FsyncFailed, describe_effect
from capture_ledger.spec.kit._svg import document, text, width_of, wrap
from capture_ledger.spec.kit.crash._judgement import CrashViolation
from capture_ledger.spec.kit.crash._trace import Invoke, Recording, Return, TargetConfig, TraceEvent

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
_FAILED = "#c9302c"
_LEGEND = ((_RED, "clause broken"), (_GREEN, "no violation (every image)"), (_GREY, "none found (sampled)"))


def matrix_svg(study: MatrixSource) -> str:
    """The matrix as a picture: configuration rows × (model × clause) columns; red where broken. The
    picture is as wide as its longest row label, heading and legend (each measured, ``spec.kit._svg``).

    Args:
        study: the study (or anything with its axes, clauses and verdicts).

    Returns:
        The SVG document.
    """
    title = "Crash contract clauses broken, per store configuration and model"
    footnote = "columns 1-4: R-CRASH-1 record, -2 retire, -3 delete, -4 in flight"
    cell, gap, top = 26.0, 14.0, 70.0
    left = 10 + max([width_of(c, 12) for c in study.configs] + [60.0]) + 10
    group = max([cell * len(CLAUSES)] + [width_of(m, 12) + 8 for m in study.models]) + gap
    width = max(
        left + group * len(study.models) + 10,
        20 + width_of(title, 14),
        20 + width_of(footnote, 12),
        20 + max(34 + width_of(label, 12) for _, label in _LEGEND),
    )
    body = [text(10, 22, title, size=14)]
    for column, model in enumerate(study.models):
        x0 = left + column * group
        body.append(text(x0 + cell * len(CLAUSES) / 2, 44, model, anchor="middle", font_weight="bold"))
        for k, clause in enumerate(CLAUSES):
            body.append(text(x0 + k * cell + cell / 2, 62, clause[-1], size=11, anchor="middle"))
    for row, config in enumerate(study.configs):
        y = top + row * cell
        body.append(text(left - 8, y + cell * 0.68, config, anchor="end"))
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
    y = top + cell * len(study.configs) + 24
    x = 10.0
    for fill, label in _LEGEND:  # flows left to right, onto a new line when the next would not fit
        step = 20 + width_of(label, 12) + 24
        if x > 10 and x + step - 24 > width - 10:
            x, y = 10.0, y + 22
        body.append(f'<rect x="{x:.1f}" y="{y - 12:.1f}" width="14" height="14" fill="{fill}"/>')
        body.append(text(x + 20, y, label))
        x += step
    body.append(text(10, y + 24, footnote))
    return document(width, y + 36, body)


def op_label(op: Operation) -> str:
    """A short label for ``op``, e.g. ``retire r1,r2`` or ``record r1 a`` (not valid Python; for people)."""
    if isinstance(op, Retire | Delete):
        return f"{type(op).__name__.lower()} {','.join(map(str, op.rollout_ids))}"  # type: ignore[call-overload]
    if isinstance(op, Record):
        return f"record {op.rollout_id} {op.row['model_call_id']}"  # type: ignore[index]
    return f"{type(op).__name__} {getattr(op, 'rollout_id', '')}"


def _content(shown: str) -> str:
    """A file's content (``show_bytes``) in the ledger's own terms: a file with no complete line is not
    a log, so its bytes are shown, not "0 line(s) + torn tail"."""
    prefix = "0 line(s) + torn tail "
    return "bytes " + shown.removeprefix(prefix) if shown.startswith(prefix) else shown


def _lanes(recording: Recording) -> list[int | None]:
    """The operation (lane) of each trace event: an effect belongs to the operation its thread runs."""
    current: dict[str, int] = {}
    lane_of: list[int | None] = []
    for event, thread in zip(recording.trace, recording.threads, strict=True):
        if isinstance(event, Invoke):
            current[thread] = event.op
            lane_of.append(event.op)
        elif isinstance(event, Return):
            lane_of.append(event.op)
            current.pop(thread, None)
        else:
            lane_of.append(current.get(thread))
    return lane_of


def _crash_row(recording: Recording, cut: int) -> int:
    """The trace position the crash line goes before: after ``cut`` effects."""
    effects_seen = 0
    for position, event in enumerate(recording.trace):
        if not isinstance(event, Invoke | Return):
            if effects_seen == cut:
                return position
            effects_seen += 1
    return len(recording.trace)


def _row_label(event: TraceEvent, recording: Recording) -> str:
    if isinstance(event, Invoke):
        return f"invoke op {event.op}"
    if isinstance(event, Return):
        return f"op {event.op} raised" if event.raised else f"return op {event.op}"
    return describe_effect(event, recording.inode_names)


def _info(recording: Recording, violation: CrashViolation, kind: str) -> list[str]:
    raised = [e for e in recording.trace if isinstance(e, Return) and e.raised]
    return [
        f"crash after {violation.cut} effect(s); model {violation.model}; {kind} {violation.config}",
        *(f"op {e.op} raised {e.outcome} (not acknowledged)" for e in raised),
        "image left by the crash:",
        *(f"  {n}: {_content(c)}" for n, c in violation.image),
        *([f"  (no files of the {kind})"] if not violation.image else []),
        f"read back {violation.rollout_id}: {violation.observed}",
        "allowed:",
        *(f"  {a}" for a in violation.allowed),
        f"broken: {', '.join(violation.clauses)}",
    ]


def timeline_svg(recording: Recording, violation: CrashViolation) -> str:
    """A counterexample as a picture: one lane per operation, its effects in trace order (a failed sync
    in red), each return (an operation that raised: a red bar), the crash line, and what a fresh handle
    read from the image the crash left. Every text is measured: the picture is as wide as its widest
    lane and label, and the account below it wraps to the picture's width.

    Args:
        recording: the recording the counterexample was explored from.
        violation: the counterexample (its cut, image, observed and allowed states, clauses).

    Returns:
        The SVG document.
    """
    trace = recording.trace
    kind = "target" if isinstance(recording.config, TargetConfig) else "store"
    lane_of, crash_row = _lanes(recording), _crash_row(recording, violation.cut)
    ops = recording.workload.ops
    labels = [_row_label(event, recording) for event in trace]
    heads = [f"op {lane}: {op_label(op)}" for lane, op in enumerate(ops)]
    top, row_h = 80.0, 20.0
    left = 10 + max([width_of(label, 12) for label in labels] + [200.0]) + 20
    lane_w = max([150.0] + [width_of(head, 11) + 16 for head in heads])
    width = max(720.0, left + lane_w * len(ops) + 20)
    title = f"Counterexample: workload {violation.workload}"
    legend = (
        f"lanes are the {kind}'s operations; dots are their effects (a red cross: a failed sync); "
        "a red bar: an operation that raised; the red line is the crash"
    )
    heading = [*wrap(title, 14, width - 20)]
    explained = wrap(legend, 12, width - 20)
    top += 18 * (len(heading) - 1) + 16 * (len(explained) - 1)
    info = [line for entry in _info(recording, violation, kind) for line in wrap(entry, 11, width - 20)]
    height = top + row_h * (len(trace) + 1) + 20 + 16 * len(info)
    body = [text(10, 22 + 18 * i, line, size=14, font_weight="bold") for i, line in enumerate(heading)]
    y0 = 22 + 18 * len(heading) + 2
    body += [text(10, y0 + 16 * i, line) for i, line in enumerate(explained)]
    lines_at = len(body)
    for lane, head in enumerate(heads):
        body.append(text(left + lane * lane_w + lane_w / 2, top - 14, head, size=11, anchor="middle"))
    spans: dict[int, list[int]] = {}
    for position, (event, label) in enumerate(zip(trace, labels, strict=True)):
        y = top + position * row_h
        column = lane_of[position]
        failed = isinstance(event, FsyncFailed) or (isinstance(event, Return) and event.raised)
        colour = "#999999" if position >= crash_row else (_FAILED if failed else "black")
        body.append(text(10, y + 14, label, fill=colour))
        if column is None:
            continue
        spans.setdefault(column, []).append(position)
        x = left + column * lane_w + lane_w / 2
        if isinstance(event, Invoke | Return):
            fill = _FAILED if failed else "#337ab7"
            body.append(f'<rect x="{x - 30:.1f}" y="{y + 4:.1f}" width="60" height="12" fill="{fill}"/>')
        elif failed:
            body.append(
                f'<path d="M{x - 6:.1f},{y + 4:.1f} l12,12 m0,-12 l-12,12" stroke="{_FAILED}" '
                'stroke-width="3"/>'
            )
        else:
            body.append(f'<circle cx="{x:.1f}" cy="{y + 10:.1f}" r="5" fill="#333333"/>')
    for lane, positions in spans.items():
        x = left + lane * lane_w + lane_w / 2
        y1, y2 = top + min(positions) * row_h + 10, top + max(positions) * row_h + 10
        body.insert(
            lines_at,
            f'<line x1="{x:.1f}" y1="{y1:.1f}" x2="{x:.1f}" y2="{y2:.1f}" stroke="#9ecae1" '
            'stroke-width="6"/>',
        )
    crash_y = top + crash_row * row_h + 1
    body.append(
        f'<line x1="5" y1="{crash_y:.1f}" x2="{width - 5:.1f}" y2="{crash_y:.1f}" stroke="{_RED}" '
        'stroke-width="2" stroke-dasharray="6,3"/>'
    )
    body.append(text(width - 8, crash_y - 3, "crash", anchor="end", fill=_RED))
    y = top + row_h * (len(trace) + 1) + 10
    for line in info:
        body.append(text(10, y, line, size=11))
        y += 16
    return document(width, height, body)
