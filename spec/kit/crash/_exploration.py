"""The one walk over a recording's crash points: every image a persistence model allows, read back and
judged against the contract (SPEC.md §Crash, R-CRASH-1..4, R-STATE-3).

``explore_points(recording, model, reader)`` serves every recorder: at each crash point (before each
recorded effect, and after the last; ``judgement.crash_prefixes``) it asks the model for the disk images a
crash there may leave (all of them, or beyond ``budget`` a seeded sample, the space's full size reported),
has the ``reader`` read the distinct ones (an ``ImageReader``: our store's observer, or the child process
that opens a traced target's fresh handles) and judges every rollout ID of the workload
(``judgement.violations_of``). A trace that holds an ``Unsupported`` effect has no image space: nothing is
judged and the exploration says why, with the verdict ``unknown``, never ``ok``.

``CrashExploration`` reports crash points, images judged, the space's size, distinct images read, the
violations (the shortest counterexamples per clause), seconds and images per second; its ``result`` is the
one result shape of every checker (``spec.core.verdicts``): a ``Violation`` of the clause its shortest
counterexample breaks, ``Unknown`` when the space was sampled or could not be built, else ``Ok`` listing the
clauses judged (``judgement.judged_clauses``). A workload whose requested fault was never injected (the
ledger made no call of that kind at that position: ``Recording.not_injected``) is judged all the same, but
without a violation its result is ``Unknown`` ("fault not injected"), never ``Ok``: the fault's path was not
exercised.

Not guaranteed: that a sampled space without a violation has none; anything about schedules other than
the recorded one, or images a model does not allow (the kernel study compares the models with a kernel).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from capture_ledger.spec.core.verdicts import Ok, Unknown, Verdict, Violation
from capture_ledger.spec.crash.durability import MODELS, Baseline, DiskImage, PersistenceModel, Unsupported
from capture_ledger.spec.kit.crash._judgement import (
    Counterexamples,
    CrashPoint,
    CrashViolation,
    crash_points,
    crash_prefixes,
    images_to_judge,
    judged_clauses,
    violations_of,
)
from capture_ledger.spec.kit.crash._observation import Observation
from capture_ledger.spec.kit.crash._positions import describe_fault
from capture_ledger.spec.kit.crash._trace import Recording

__all__ = ["CrashExploration", "ImageReader", "explore_points", "violation_of"]


class ImageReader(Protocol):
    """Reads crash images back with fresh handles of the ledger under study."""

    @property
    def reads(self) -> int:
        """Distinct images read so far."""
        ...

    def read_images(self, images: Sequence[DiskImage], point: CrashPoint) -> list[Observation]:
        """What a fresh handle read from each of ``images`` (a crash at ``point`` left them); whatever the
        ledger does (raise, hang, die) is part of the observation, never raised."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class CrashExploration:
    """One recording explored under one model (see the module docstring)."""

    workload: str
    model: str
    config: str
    crash_points: int
    images: int
    space: int
    distinct: int
    sampled: bool
    violations: int
    clauses: frozenset[str]
    examples: tuple[CrashViolation, ...]
    seconds: float
    paused: bool | None = None
    #: Why nothing could be judged (the trace holds an effect no model follows), else ``None``.
    unsupported: str | None = None
    #: The clauses every image was judged on (``judgement.judged_clauses`` of the workload).
    judged: tuple[str, ...] = ()
    #: The requested faults the run never injected (``positions.describe_fault``): not exercised.
    not_exercised: tuple[str, ...] = ()

    @property
    def result(self) -> Verdict:
        """The exploration as a checker's result: ``Violation`` of the first clause its shortest
        counterexample breaks (``violation_of``), ``Unknown`` (sampled without a violation, or
        unsupported: the budget spent and why), or ``Ok`` (every image judged, none broke ``judged``)."""
        if self.violations:
            shortest = min(self.examples, key=CrashViolation.size, default=None)
            if shortest is not None:
                return violation_of(shortest)
            return Violation(  # no counterexample kept (``keep=0``): the count is all there is
                requirement=min(self.clauses),
                counterexample=f"{self.violations} violation(s) of {', '.join(sorted(self.clauses))} "
                f"(workload {self.workload}, store {self.config}, model {self.model}); none kept",
            )
        spent = f"{self.images} of {self.space} images judged at {self.crash_points} crash points"
        if self.unsupported:
            return Unknown(spent=spent, reason=f"no persistence model follows the trace: {self.unsupported}")
        if self.not_exercised:
            return Unknown(
                spent=spent,
                reason=f"fault not injected (not exercised): {'; '.join(self.not_exercised)} "
                f"(the operation made no such call)",
            )
        if self.sampled:
            return Unknown(spent=spent, reason="sampled beyond the budget per crash point")
        return Ok(
            checked=self.judged,
            detail=f"{self.workload} on {self.config} under {self.model}: every one of {self.images} images "
            f"at {self.crash_points} crash points",
        )

    @property
    def verdict(self) -> Literal["ok", "violation", "unknown"]:
        """``ok`` (exhaustive, no violation), ``violation``, or ``unknown`` (sampled without a violation,
        or unsupported): the kind of ``result``."""
        return self.result.kind

    @property
    def rate(self) -> float:
        """Images judged per second."""
        return self.images / self.seconds if self.seconds > 0 else 0.0


def violation_of(example: CrashViolation) -> Violation:
    """``example`` as a checker's ``Violation``: its first clause, its ``render()`` as the counterexample,
    and itself as the witness (for its timeline)."""
    return Violation(requirement=example.clauses[0], counterexample=example.render(), witness=example)


def _unsupported(recording: Recording) -> str | None:
    for event in recording.trace:
        if isinstance(event, Unsupported):
            return event.reason
    return None


def _all_files(image: DiskImage) -> Sequence[tuple[str, bytes]]:
    return image.files


def explore_points(  # noqa: PLR0913 - the one crash-point loop's options, all keyword-only
    recording: Recording,
    model: PersistenceModel | str,
    reader: ImageReader,
    *,
    budget: int = 256,
    seed: int = 0,
    keep: int = 1,
    first: bool = False,
    baseline: Baseline | None = None,
    shown: Callable[[DiskImage], Sequence[tuple[str, bytes]]] = _all_files,
) -> CrashExploration:
    """Judge every image ``model`` allows at every crash point of ``recording`` (R-CRASH-1..4).

    Args:
        recording: from any recorder.
        model: a persistence model or its name in ``spec.crash.durability.MODELS``.
        reader: reads images back with fresh handles.
        budget: most images judged per crash point; beyond it a seeded sample is drawn.
        seed: the sampling seed (each crash point uses ``seed`` plus its position).
        keep: how many shortest counterexamples to keep per clause.
        first: stop at the first crash point with a violation (the time to kill; the figures then cover
            the crash points up to it).
        baseline: the baseline the images grow from (default: the recording's).
        shown: the files of an image a counterexample shows (default: all of them).

    Returns:
        The figures and counterexamples; nothing the ledger does is raised from here.
    """
    chosen = MODELS[model] if isinstance(model, str) else model
    started = time.perf_counter()
    start = baseline if baseline is not None else recording.baseline
    reads_before = reader.reads
    reason = _unsupported(recording)
    images = space_total = 0
    sampled = False
    found = Counterexamples(keep=keep)
    if reason is None:
        for point in crash_prefixes(recording):
            if first and found.best:
                break
            space = chosen.space(start, point.effects)
            space_total += space.size
            distinct, was_sampled = images_to_judge(space, budget, seed=seed + point.cut)
            sampled |= was_sampled
            for image, observation in zip(distinct, reader.read_images(distinct, point), strict=True):
                images += 1
                for violation in violations_of(
                    point, observation, shown(image), recording=recording, model=chosen.name
                ):
                    found.add(violation)
    return CrashExploration(
        workload=recording.workload.name,
        model=chosen.name,
        config=recording.config.label,
        crash_points=len(crash_points(recording.trace)),
        images=images,
        space=space_total,
        distinct=reader.reads - reads_before,
        sampled=sampled,
        violations=found.count,
        clauses=found.clauses,
        examples=found.examples,
        seconds=time.perf_counter() - started,
        paused=recording.paused,
        unsupported=reason,
        judged=judged_clauses(recording.workload),
        not_exercised=tuple(describe_fault(f) for f in recording.not_injected()),
    )
