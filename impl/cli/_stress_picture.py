"""The SVG timeline of a stress violation's witness (SPEC.md R-CONC-1, R-KIT-12; docs/stress.md).

``witness_svg(violation)`` draws one lane per call, in invocation order and headed by its client, each
call a bar from its invocation to its return (red for the culprit, the last call; grey and open-ended for a
call that never returned), labelled with the call and its outcome, under a heading with the requirement
and the explanation; hand-written SVG in the style of the crash study's timelines (``spec.kit.crash``).

Not guaranteed: the layout or colours (for people, not for parsing); that long labels fit (they are cut).
"""

from __future__ import annotations

import html

from capture_ledger.spec.core.verdicts import Violation
from capture_ledger.spec.kit.stress import StressWitness, op_text, outcome_text

__all__ = ["witness_svg"]

_RED, _BLUE, _GREY = "#d9534f", "#5b8dd9", "#bbbbbb"
_LANE, _LEFT, _WIDTH = 46, 70, 900


def _text(x: float, y: float, text: str, *, size: int = 12) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" font-family="monospace">{html.escape(text)}</text>'
    )


def witness_svg(violation: Violation) -> str:
    """A stress violation's witness (a ``StressWitness``) as an SVG document (see the module docstring)."""
    witness: StressWitness = violation.witness
    calls = sorted(witness.calls, key=lambda c: (c.event.invoked, c.event.client))
    ends = [c.event.returned if c.event.returned is not None else c.ended for c in calls]
    origin = calls[0].event.invoked if calls else 0.0
    finish = max([c.event.invoked for c in calls] + [e for e in ends if e is not None] + [origin + 1.0])
    scale = (_WIDTH - _LEFT - 20) / (finish - origin)
    height = 60 + _LANE * max(1, len(calls)) + 30
    body = [_text(10, 20, (violation.counterexample.splitlines() or [""])[0][:140], size=12)]
    for i, (call, end) in enumerate(zip(calls, ends, strict=True)):
        y = 50 + i * _LANE
        x0 = _LEFT + (call.event.invoked - origin) * scale
        x1 = _WIDTH - 20 if end is None else _LEFT + (end - origin) * scale
        colour = _RED if i == len(calls) - 1 else (_GREY if call.event.returned is None else _BLUE)
        body.append(_text(10, y + 14, f"c{call.event.client}"))
        body.append(
            f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(2.0, x1 - x0):.1f}" height="18" fill="{colour}"/>'
        )
        label = f"{op_text(call.event.op)} -> {outcome_text(call)}"[:110]
        body.append(_text(_LEFT, y + 32, label, size=11))
    axis_y = height - 20
    body.append(f'<line x1="{_LEFT}" y1="{axis_y}" x2="{_WIDTH - 20}" y2="{axis_y}" stroke="black"/>')
    body.append(_text(_LEFT, axis_y + 14, "0 ms", size=10))
    body.append(_text(_WIDTH - 90, axis_y + 14, f"{(finish - origin) / 1e6:.3f} ms", size=10))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{height}" '
        f'viewBox="0 0 {_WIDTH} {height}"><rect width="100%" height="100%" fill="white"/>'
        + "".join(body)
        + "</svg>\n"
    )
