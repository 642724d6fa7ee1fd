"""Every crash image of a traced recording, read back by a fresh handle of the target and judged against the
contract (SPEC.md §Crash, R-CRASH-1..4, R-STATE-3; docs/crash-target.md §Judging).

``explore_target(recording, model, reader)`` is the model study's ``impl.study.crash.explore`` for a ledger
traced from outside: at every crash point of the recording (before each effect, and after the last) it asks
the persistence model for the images a crash there may leave (all of them, or beyond ``budget`` a seeded
sample, the space's full size reported and the verdict "unknown" rather than "ok"), has the ``reader`` read
each distinct image with a fresh handle in its child process, turns the reading into an ``Observation``
(``readback``) and judges every rollout ID of the workload with ``impl.study.judgement.judge``: the state
must be one ``allowed_states`` permits at that point, the calls must agree (else R-STATE-3), and an image
that could not be read at all (the factory raised, the child hung or died) is R-STATE-3 with the reason.
Readings are cached by image, so the three models share them.

A trace holding an ``Unsupported`` effect (a store through a writable shared mapping, say) has no image
space: its exploration judges nothing and says why (``TargetExploration.unsupported``, verdict
"unknown"), never "ok".

Not guaranteed: that a sampled space without a violation has none; the reader's speed (it dominates:
docs/crash-target.md §Speed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from capture_ledger.impl.outside.readback import observation_of
from capture_ledger.impl.outside.reader import ImageReader
from capture_ledger.impl.study.crash import Exploration
from capture_ledger.impl.study.judgement import (
    Counterexamples,
    crash_points,
    crash_prefixes,
    images_to_judge,
    violations_of,
)
from capture_ledger.impl.study.recording import Recording
from capture_ledger.spec.crash.durability import MODELS, PersistenceModel, Unsupported

__all__ = ["TargetExploration", "explore_target"]


@dataclass(frozen=True, slots=True)
class TargetExploration:
    """One recording explored under one model: the study's ``Exploration`` figures, and why nothing was
    judged when the trace holds an effect no model follows (``unsupported``)."""

    exploration: Exploration
    unsupported: str | None = None

    @property
    def verdict(self) -> str:
        """``ok``, ``violation`` or ``unknown`` (sampled without a violation, or unsupported)."""
        return "unknown" if self.unsupported else self.exploration.verdict


def _unsupported(recording: Recording) -> str | None:
    for event in recording.trace:
        if isinstance(event, Unsupported):
            return event.reason
    return None


def explore_target(
    recording: Recording,
    model: PersistenceModel | str,
    reader: ImageReader,
    *,
    budget: int = 256,
    seed: int = 0,
    keep: int = 1,
    first: bool = False,
) -> TargetExploration:
    """Judge every image ``model`` allows at every crash point of ``recording`` (R-CRASH-1..4).

    Args:
        recording: from ``recorder.record_target``.
        model: a persistence model or its name in ``MODELS``.
        reader: reads images with fresh handles of the target.
        budget: most images judged per crash point; beyond it a seeded sample is drawn.
        seed: the sampling seed (each crash point uses ``seed`` plus its position).
        keep: how many shortest counterexamples to keep per clause.
        first: stop at the first crash point with a violation (the time to kill; the figures then cover
            the crash points up to it).

    Returns:
        The figures and counterexamples; nothing the target does is raised from here.
    """
    chosen = MODELS[model] if isinstance(model, str) else model
    started = time.perf_counter()
    ids = recording.workload.ids()
    reads_before = reader.reads
    reason = _unsupported(recording)
    points = crash_points(recording.trace)
    images = space_total = 0
    sampled = False
    found = Counterexamples(keep)
    if reason is None:
        for point in crash_prefixes(recording):
            if first and found.best:
                break
            space = chosen.space(recording.baseline, point.effects)
            space_total += space.size
            distinct, was_sampled = images_to_judge(space, budget, seed=seed + point.cut)
            sampled |= was_sampled
            readings = reader.read_many(distinct, ids)  # one round trip per batch of images
            allowed = {r: tuple(a) for r, a in point.allowed.items()}
            for image, reading in zip(distinct, readings, strict=True):
                images += 1
                observation = observation_of(reading, ids, allowed)
                for violation in violations_of(
                    point, observation, image.files, recording=recording, model=chosen.name
                ):
                    found.add(violation)
    exploration = Exploration(
        workload=recording.workload.name,
        model=chosen.name,
        config=recording.config.label,
        crash_points=len(points),
        images=images,
        space=space_total,
        distinct=reader.reads - reads_before,
        sampled=sampled or reason is not None,
        violations=found.count,
        clauses=found.clauses,
        examples=found.examples,
        seconds=time.perf_counter() - started,
        paused=recording.paused,
    )
    return TargetExploration(exploration, reason)
