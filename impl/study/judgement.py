"""Judging what a fresh store read after a crash against the crash contract (R-CRASH-1..4, R-STATE-3,
R-STORE-8; SPEC.md §Crash; docs/crash.md).

Shared by the crash explorer (``crash``, images a persistence model allows) and the kernel study
(``kernel``, images a real kernel recovered). ``spans_at(recording, cut)`` is the history as a crash at
trace position ``cut`` saw it: every operation invoked before the cut, acknowledged when it returned (without
raising) before the cut, with real-time order. ``judge`` says what was read for one rollout ID and which
clauses that breaks; ``CrashViolation`` is the counterexample a report prints.

Not guaranteed: that the clause named is the only explanation (``contract.broken_clauses`` says how it is
chosen).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from capture_ledger.impl.study.observation import Observation
from capture_ledger.impl.study.recording import Invoke, Recording, Return, TraceEvent
from capture_ledger.spec.core.model import RolloutState
from capture_ledger.spec.crash.contract import Span, broken_clauses

__all__ = ["CrashViolation", "crash_points", "judge", "show_bytes", "spans_at"]


@dataclass(frozen=True, slots=True)
class CrashViolation:
    """One image that breaks the contract: where the crash happened, what it left, and what was read.

    ``effects`` are the effects issued before the crash (labels); ``returned`` and ``pending`` the
    operations acknowledged and in flight; ``clauses`` the requirement IDs broken.
    """

    workload: str
    model: str
    config: str
    cut: int
    effects: tuple[str, ...]
    returned: tuple[str, ...]
    pending: tuple[str, ...]
    image: tuple[tuple[str, str], ...]
    rollout_id: str
    observed: str
    allowed: tuple[str, ...]
    clauses: tuple[str, ...]

    def size(self) -> tuple[int, int]:
        """Shorter is better: effects before the crash, then files in the image."""
        return (self.cut, len(self.image))

    def render(self) -> str:
        """A readable, paste-able account of the counterexample."""
        lines = [
            f"{', '.join(self.clauses)} broken for {self.rollout_id!r} "
            f"(workload {self.workload}, store {self.config}, model {self.model})",
            "effects before the crash:",
            *(f"  {i + 1}. {e}" for i, e in enumerate(self.effects)),
            f"returned: {', '.join(self.returned) or '-'}",
            f"not acknowledged (in flight, or raised): {', '.join(self.pending) or '-'}",
            "disk image after the crash:",
            *(f"  {name}: {content}" for name, content in self.image),
            *(["  (no ledger or fence files)"] if not self.image else []),
            f"read back: {self.observed}",
            f"allowed: {' | '.join(self.allowed)}",
        ]
        return "\n".join(lines)


def spans_at(recording: Recording, cut: int) -> tuple[Span, ...]:
    """The setup and workload operations as a crash at trace position ``cut`` saw them.

    Setup operations returned before everything; a workload operation is in the history once its
    ``Invoke`` is before ``cut``, acknowledged once its ``Return`` (without raising) is; it follows every
    operation that ended before it was invoked.
    """
    setup = [Span(op, True, frozenset(range(i))) for i, op in enumerate(recording.workload.setup)]
    offset = len(setup)
    invoked: dict[int, int] = {}
    returned: dict[int, int] = {}  # ended, acknowledged or not
    acknowledged: set[int] = set()
    for position, event in enumerate(recording.trace[:cut]):
        if isinstance(event, Invoke):
            invoked[event.op] = position
        elif isinstance(event, Return):
            returned[event.op] = position
            if not event.raised:
                acknowledged.add(event.op)
    spans = list(setup)
    order = sorted(invoked, key=invoked.__getitem__)
    index_of = {op: offset + i for i, op in enumerate(order)}
    for op in order:
        follows = set(range(offset)) | {
            index_of[other] for other, at in returned.items() if at < invoked[op] and other in index_of
        }
        spans.append(Span(recording.workload.ops[op], op in acknowledged, frozenset(follows)))
    return tuple(spans)


def show_bytes(data: bytes) -> str:
    """A file's content as a report shows it: complete lines, and a torn tail (NUL bytes called out)."""
    if not data:
        return "(empty)"
    lines = data.count(b"\n")
    torn = not data.endswith(b"\n")
    tail = data[data.rfind(b"\n") + 1 :][:24]
    zeros = data.count(b"\0")
    return (
        f"{lines} line(s)"
        + (f" + torn tail {tail!r}" if torn else "")
        + (f" ({zeros} NUL bytes never written)" if zeros else "")
    )


def judge(
    observation: Observation,
    rid: str,
    ids: Sequence[str],
    spans: Sequence[Span],
    allowed: frozenset[RolloutState],
) -> tuple[str, tuple[str, ...]]:
    """What was read for ``rid`` and the clauses it breaks (none: the image keeps the contract for it).

    An unreadable image breaks R-STATE-3 (the abstraction is total: every image a crash may leave maps to
    a state) once, for the rollout whose files could not be read (the first ID when unknown); findings
    ``check`` reports beyond crash residue break R-STORE-8, also once per image.
    """
    first = rid == ids[0]
    if observation.unreadable is not None:
        if rid != (observation.culprit or ids[0]):
            return "", ()
        stray = ("R-STORE-8",) if observation.findings else ()
        return f"unreadable: {observation.unreadable}", ("R-STATE-3", *stray)
    state = observation.state(rid)
    observed = repr(state)
    problems: tuple[str, ...] = ()
    if state not in allowed:
        problems = broken_clauses(spans, rid, state)
    api = [m.removeprefix(f"{rid}: ") for m in observation.mismatches if m.startswith(f"{rid}:")]
    if api:
        problems = (*problems, "R-STATE-3")
        observed = f"{observed}; through the API: {'; '.join(api)}"
    if observation.findings and first:
        problems = (*problems, "R-STORE-8")
    return observed, problems


def crash_points(trace: Sequence[TraceEvent]) -> list[int]:
    """Trace positions just before each effect, and the end."""
    points = [i for i, e in enumerate(trace) if not isinstance(e, Invoke | Return)]
    return [*points, len(trace)]
