"""Judging what a fresh store read after a crash against the crash contract (R-CRASH-1..4, R-STATE-3,
R-STORE-8; SPEC.md §Crash; docs/crash.md).

Shared by the crash explorer (``crash``, images a persistence model allows) and the kernel study
(``kernel``, images a real kernel recovered). ``spans_at(recording, cut)`` is the history as a crash at
trace position ``cut`` saw it: every operation invoked before the cut, acknowledged when it returned (without
raising) before the cut, with real-time order. ``judge`` says what was read for one rollout ID and which
clauses that breaks; ``CrashViolation`` is the counterexample a report prints. For the explorers that walk a
model's image spaces (``exploration.explore_points``, for every recorder): ``crash_prefixes`` walks the
crash points (``CrashPoint``: the effects issued before each, the history and the allowed states),
``images_to_judge`` draws a space's images within a budget, ``violations_of`` turns one image's reading into
counterexamples, and ``Counterexamples`` keeps the shortest.

Not guaranteed: that the clause named is the only explanation (``contract.broken_clauses`` says how it is
chosen).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from capture_ledger.spec.core.model import Delete, Record, RecordFailure, Retire, RolloutState
from capture_ledger.spec.crash.contract import Span, allowed_states, broken_clauses
from capture_ledger.spec.crash.durability import DiskImage, Effect, ImageSpace, describe_effect
from capture_ledger.spec.kit.crash._observation import Observation
from capture_ledger.spec.kit.crash._trace import Invoke, Recording, Return, TraceEvent, Workload

__all__ = [
    "Counterexamples",
    "CrashPoint",
    "CrashViolation",
    "crash_points",
    "crash_prefixes",
    "images_to_judge",
    "judge",
    "judged_clauses",
    "show_bytes",
    "spans_at",
    "violations_of",
]


@dataclass(kw_only=True, frozen=True, slots=True)
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
    setup = [
        Span(op=op, returned=True, follows=frozenset(range(i)))
        for i, op in enumerate(recording.workload.setup)
    ]
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
        spans.append(
            Span(op=recording.workload.ops[op], returned=op in acknowledged, follows=frozenset(follows))
        )
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


def judged_clauses(workload: Workload) -> tuple[str, ...]:
    """The clauses a crash during ``workload`` is judged on: R-CRASH-1 when it writes, R-CRASH-2 when it
    retires, R-CRASH-3 when it deletes (setup included: its operations are returned ones), R-CRASH-4 for
    the operations in flight at some crash point, and R-STATE-3 (every image must read as one state)."""
    ops = (*workload.setup, *workload.ops)
    own = {
        "R-CRASH-1": any(isinstance(op, Record | RecordFailure) for op in ops),
        "R-CRASH-2": any(isinstance(op, Retire) for op in ops),
        "R-CRASH-3": any(isinstance(op, Delete) for op in ops),
        "R-CRASH-4": bool(workload.ops),
    }
    return (*(clause for clause, judged in own.items() if judged), "R-STATE-3")


def crash_points(trace: Sequence[TraceEvent]) -> list[int]:
    """Trace positions just before each effect, and the end."""
    points = [i for i, e in enumerate(trace) if not isinstance(e, Invoke | Return)]
    return [*points, len(trace)]


@dataclass(kw_only=True, frozen=True, slots=True)
class CrashPoint:
    """A crash at trace position ``cut``: the effects issued before it and their labels, the history as it
    saw it (``spans_at``) and the states ``allowed_states`` permits each rollout ID of the workload.

    ``effects`` and ``labels`` grow as ``crash_prefixes`` walks on: copy them to keep them past its next step.
    """

    cut: int
    effects: Sequence[Effect]
    labels: Sequence[str]
    spans: tuple[Span, ...]
    allowed: Mapping[str, frozenset[RolloutState]]


def crash_prefixes(recording: Recording) -> Iterator[CrashPoint]:
    """Each crash point of ``recording`` (``crash_points``), in trace order."""
    effects: list[Effect] = []
    labels: list[str] = []
    ids = recording.workload.ids()
    position = 0
    for cut in crash_points(recording.trace):
        for event in recording.trace[position:cut]:
            if not isinstance(event, Invoke | Return):
                effects.append(event)
                labels.append(describe_effect(event, recording.inode_names))
        position = cut
        spans = spans_at(recording, cut)
        yield CrashPoint(
            cut=cut,
            effects=effects,
            labels=labels,
            spans=spans,
            allowed={rid: allowed_states(spans, rid) for rid in ids},
        )


def images_to_judge(space: ImageSpace, budget: int, *, seed: int) -> tuple[list[DiskImage], bool]:
    """The distinct images of ``space`` to judge: all of them, or beyond ``budget`` a sample drawn with
    ``seed``; and whether it was a sample."""
    sampled = space.size > budget
    candidates = space.sample(budget, seed=seed) if sampled else list(space)
    return list(dict.fromkeys(candidates)), sampled


def violations_of(
    point: CrashPoint,
    observation: Observation,
    files: Sequence[tuple[str, bytes]],
    *,
    recording: Recording,
    model: str,
) -> Iterator[CrashViolation]:
    """A counterexample for each rollout ID of the workload that ``observation`` shows breaking the contract.

    Args:
        point: where the crash happened.
        observation: what a fresh store read from the image.
        files: the image's files as the counterexample shows them.
        recording: the recording explored.
        model: the persistence model's name.

    Returns:
        The violations, in the order of the workload's IDs.
    """
    ids = recording.workload.ids()
    for rid in ids:
        observed, problems = judge(observation, rid, ids, point.spans, point.allowed[rid])
        if problems:
            yield CrashViolation(
                workload=recording.workload.name,
                model=model,
                config=recording.config.label,
                cut=len(point.labels),
                effects=tuple(point.labels),
                returned=tuple(repr(s.op) for s in point.spans if s.returned),
                pending=tuple(repr(s.op) for s in point.spans if not s.returned),
                image=tuple((n, show_bytes(d)) for n, d in files),
                rollout_id=rid,
                observed=observed,
                allowed=tuple(sorted(repr(a) for a in point.allowed[rid])),
                clauses=problems,
            )


@dataclass(kw_only=True, slots=True)
class Counterexamples:
    """The violations found so far: how many, and the ``keep`` shortest (``CrashViolation.size``) of each
    clause."""

    keep: int = 1
    count: int = 0
    best: dict[str, list[CrashViolation]] = field(default_factory=dict)

    def add(self, violation: CrashViolation) -> None:
        """Count ``violation`` and keep it under each clause it breaks if it is among the shortest."""
        self.count += 1
        for clause in violation.clauses:
            kept = self.best.setdefault(clause, [])
            kept.append(violation)
            kept.sort(key=CrashViolation.size)
            del kept[self.keep :]

    @property
    def clauses(self) -> frozenset[str]:
        """Every clause broken."""
        return frozenset(self.best)

    @property
    def examples(self) -> tuple[CrashViolation, ...]:
        """The kept counterexamples, by clause."""
        return tuple(v for clause in sorted(self.best) for v in self.best[clause])
