"""The SVG timeline of a stress violation's witness (SPEC.md R-CONC-1, R-KIT-12; docs/stress.md).

``witness_svg(violation)`` draws one lane per call, in invocation order and headed by its client, each
call a bar from its invocation to its return (red for the culprit, the last call; grey and open-ended for a
call that never returned), labelled with the call and its outcome, under a heading with the requirement
and the explanation; hand-written SVG in the style of the crash study's timelines (``spec.kit.crash``).
Every text is measured (``spec.kit._svg``): the heading and the labels wrap to the picture's width, and
the picture grows to hold them.

Not guaranteed: the layout or colours (for people, not for parsing).
"""

from __future__ import annotations

from capture_ledger.spec.core.verdicts import Violation
from capture_ledger.spec.kit._svg import document, text, wrap
from capture_ledger.spec.kit.stress._judge import StressWitness
from capture_ledger.spec.kit.stress._witness import op_text, outcome_text

__all__ = ["witness_svg"]

_RED, _BLUE, _GREY = "#d9534f", "#5b8dd9", "#bbbbbb"
_LEFT, _WIDTH, _LINE = 70, 900, 14


def witness_svg(violation: Violation) -> str:
    """A stress violation's witness (a ``StressWitness``) as an SVG document (see the module docstring)."""
    witness: StressWitness = violation.witness
    calls = sorted(witness.calls, key=lambda c: (c.event.invoked, c.event.client))
    ends = [c.event.returned if c.event.returned is not None else c.ended for c in calls]
    origin = calls[0].event.invoked if calls else 0.0
    finish = max([c.event.invoked for c in calls] + [e for e in ends if e is not None] + [origin + 1.0])
    scale = (_WIDTH - _LEFT - 20) / (finish - origin)
    heading = wrap((violation.counterexample.splitlines() or [""])[0], 12, _WIDTH - 20)
    body = [text(10, 20 + _LINE * i, line) for i, line in enumerate(heading)]
    y = 20 + _LINE * len(heading) + 16
    for i, (call, end) in enumerate(zip(calls, ends, strict=True)):
        x0 = _LEFT + (call.event.invoked - origin) * scale
        x1 = _WIDTH - 20 if end is None else _LEFT + (end - origin) * scale
        colour = _RED if i == len(calls) - 1 else (_GREY if call.event.returned is None else _BLUE)
        body.append(text(10, y + 14, f"c{call.event.client}"))
        body.append(
            f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(2.0, x1 - x0):.1f}" height="18" fill="{colour}"/>'
        )
        label = wrap(f"{op_text(call.event.op)} -> {outcome_text(call)}", 11, _WIDTH - _LEFT - 10)
        for k, line in enumerate(label):
            body.append(text(_LEFT, y + 32 + k * _LINE, line, size=11))
        y += 28 + _LINE * len(label)
    axis_y = y + 10
    body.append(f'<line x1="{_LEFT}" y1="{axis_y}" x2="{_WIDTH - 20}" y2="{axis_y}" stroke="black"/>')
    body.append(text(_LEFT, axis_y + 14, "0 ms", size=10))
    body.append(text(_WIDTH - 20, axis_y + 14, f"{(finish - origin) / 1e6:.3f} ms", size=10, anchor="end"))
    return document(_WIDTH, axis_y + 24, body)
