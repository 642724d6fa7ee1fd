"""A stress violation's witness as a text timeline (SPEC.md R-CONC-1, R-KIT-12).

``timeline(calls, heading)`` writes the heading line and then one line per call of the witness, in order of
invocation: the client, a bar showing when the call ran within the witness's span (``=`` while it ran,
``>`` to the end when it never returned), its times in milliseconds from the first invocation, the call and
what it returned. ``op_text`` and ``result_text`` are the short forms the SVG timeline uses too.

Not guaranteed: the layout (it is for people; the ``--json`` output carries the same text).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from capture_ledger.spec.core.model import (
    Admit,
    Delete,
    Err,
    HasRows,
    ManifestValue,
    Operation,
    ReadManifest,
    Record,
    RecordFailure,
    Removal,
    Result,
    Retire,
)
from capture_ledger.spec.kit.stress._running import Call, in_invocation_order

__all__ = ["BAR", "op_text", "outcome_text", "result_text", "timeline"]

#: The width of a call's bar, in characters.
BAR = 24


def op_text(op: Operation) -> str:
    """The call, short: ``record('r0', {'model_call_id': 'm3', 'n': 3})``, ``retire(['r0', 'r1'])``."""
    if isinstance(op, Record):
        return f"record({op.rollout_id!r}, {op.row!r})"
    if isinstance(op, RecordFailure):
        return f"record_failure({op.rollout_id!r}, {op.model_call_id!r}, {op.reason!r})"
    if isinstance(op, Admit):
        return f"admit({op.rollout_id!r}, {op.model_call_id!r})"
    if isinstance(op, ReadManifest):
        return f"manifest({op.rollout_id!r})"
    if isinstance(op, HasRows):
        return f"has_rows({op.rollout_id!r})"
    assert isinstance(op, Retire | Delete)
    name = "retire" if isinstance(op, Retire) else "delete"
    return f"{name}({list(op.rollout_ids)!r})"  # type: ignore[call-overload]


def _call_id(canonical: str) -> str:
    try:
        value = json.loads(canonical)
    except ValueError:
        return canonical
    return str(value.get("model_call_id", canonical)) if isinstance(value, dict) else canonical


def result_text(result: Result) -> str:
    """What a call returned, short: ``None``, ``True``, ``records [m1, m3] failures [f2]``, ``removed
    ['r0'] absent []``, ``raises RolloutRetiredError``."""
    if isinstance(result, Err):
        return f"raises {result.kind.value}"
    value = result.value
    if isinstance(value, ManifestValue):
        records = ", ".join(_call_id(r) for r in value.records)
        failures = ", ".join(m for m, _ in value.failures)
        return f"records [{records}] failures [{failures}]"
    if isinstance(value, Removal):
        return f"removed {list(value.removed)!r} absent {list(value.absent)!r}"
    return repr(value)


def outcome_text(call: Call) -> str:
    """A recorded call's outcome: its result, the unexpected exception, or that it hung or never returned."""
    if call.hung:
        return "did not return within the budget"
    if call.raised:
        return f"raised {call.raised}"
    if call.event.result is None:
        return "never returned"
    return result_text(call.event.result)


def _bar(start: float, end: float | None, origin: float, span: float) -> str:
    def column(t: float) -> int:
        return min(BAR - 1, int((t - origin) / span * BAR)) if span > 0 else 0

    first = column(start)
    last = BAR - 1 if end is None else max(first, column(end))
    fill = ">" if end is None else "="
    return "|" + " " * first + fill * (last - first + 1) + " " * (BAR - 1 - last) + "|"


def timeline(calls: Sequence[Call], heading: str) -> str:
    """The witness as text: ``heading``, then one line per call (see the module docstring).

    Args:
        calls: the witness's calls.
        heading: the first line (the requirement and the explanation).

    Returns:
        The lines joined by newlines, without a final newline.
    """
    ordered = in_invocation_order(calls)
    if not ordered:
        return heading
    origin = ordered[0].event.invoked
    ends = [c.finished for c in ordered]
    finish = max([c.event.invoked for c in ordered] + [e for e in ends if e is not None])
    span = finish - origin
    lines = [heading]
    for call, end in zip(ordered, ends, strict=True):
        start_ms = (call.event.invoked - origin) / 1e6
        end_ms = "  ...  " if end is None else f"{(end - origin) / 1e6:7.3f}"
        bar = _bar(
            call.event.invoked, end if call.event.returned is not None or call.raised else None, origin, span
        )
        lines.append(
            f"  c{call.event.client:<2} {bar} {start_ms:7.3f}..{end_ms} ms  {op_text(call.event.op)} -> "
            f"{outcome_text(call)}"
        )
    return "\n".join(lines)
