"""The crash explorer: every disk image a crash may leave, judged against the contract (R-CRASH-1..4).

For a ``Workload`` (setup operations, then a few store operations, optionally one of them concurrent with
the others under a fixed ``Pause`` schedule) ``recording.record`` runs it once on a real temporary
directory through ``RecordingFileSystem`` (both re-exported here). ``explore`` then takes every crash point
(before each recorded effect, and after the last), asks a persistence model (``spec.durability``) for the
disk images a crash there may leave, and for each image (all of them, or a seeded sample of ``budget``
with the space's full size reported): materializes it into a fresh real directory, opens a fresh
``FileLineageStore`` on it, reads every ID through the public API (``manifest``, ``admit``), reads the
files directly (``consistency.read_snapshot``) and runs ``consistency.check``; then judges each ID against
``allowed_states`` of the operations invoked and returned before the crash.

An image is read once per recording whatever the model and crash point (observations are cached by image
content), so the three models share the cost. ``Exploration`` reports crash points, images judged, the
space's size, distinct images read, violations (the shortest counterexample per clause), seconds and
images per second. Verdict: ``ok`` (exhaustive, none), ``violation``, or ``unknown`` (sampled, none found).

How an image is read back is ``observation`` (``ImageObserver``, ``Observation``); how what was read is
judged is ``judgement`` (``spans_at``, ``judge``, ``CrashViolation``); both are shared with the kernel
study (``kernel``), which checks the persistence models themselves against real ext4.

Not guaranteed: coverage of schedules other than the one recorded (``interleave`` explores those), of
effects outside the seam, or of images a model does not allow (the kernel study measures how the models
compare with a real kernel).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from capture_ledger.impl.study.freed import freed_by_setup
from capture_ledger.impl.study.judgement import (
    Counterexamples,
    CrashViolation,
    crash_points,
    crash_prefixes,
    images_to_judge,
    violations_of,
)
from capture_ledger.impl.study.observation import (
    READ_BUDGET,
    ImageObserver,
    Observation,
    OpenStore,
    default_opener,
    observe_directory,
    scratch_directory,
)
from capture_ledger.impl.study.recording import (
    FaultAt,
    Pause,
    Recording,
    StoreConfig,
    Workload,
    record,
    run_operation,
)
from capture_ledger.spec.crash.durability import (
    MODELS,
    DiskImage,
    PersistenceModel,
)

__all__ = [
    "READ_BUDGET",
    "CrashViolation",
    "Exploration",
    "FaultAt",
    "Observation",
    "OpenStore",
    "Pause",
    "Recording",
    "StoreConfig",
    "Workload",
    "explore",
    "observe_directory",
    "record",
    "run_operation",
]


@dataclass(frozen=True, slots=True)
class Exploration:
    """The result of exploring one recording under one model (see the module docstring)."""

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

    @property
    def verdict(self) -> str:
        """``ok`` (exhaustive, no violation), ``violation``, or ``unknown`` (sampled, none found)."""
        if self.violations:
            return "violation"
        return "unknown" if self.sampled else "ok"

    @property
    def rate(self) -> float:
        """Images judged per second."""
        return self.images / self.seconds if self.seconds > 0 else 0.0


def explore(
    recording: Recording,
    model: PersistenceModel | str,
    *,
    budget: int = 256,
    seed: int = 0,
    scratch: Path | None = None,
    observer_cache: dict[DiskImage, Observation] | None = None,
    keep: int = 1,
    open_store: OpenStore | None = None,
    read_budget: float = READ_BUDGET,
) -> Exploration:
    """Judge every image ``model`` allows at every crash point of ``recording`` (R-CRASH-1..4).

    Args:
        recording: from ``record``.
        model: a persistence model or its name in ``spec.durability.MODELS``.
        budget: most images judged per crash point; beyond it a seeded sample is drawn.
        seed: the sampling seed (each crash point uses ``seed`` plus its position).
        scratch: the directory images are materialized in (default: a fresh one, removed after).
        observer_cache: observations by image, shared between calls on the same recording and config.
        keep: how many shortest counterexamples to keep per clause.
        open_store: opens the store that reads each image back (default: ``FileLineageStore`` with the
            recording's ordering); whatever it raises, or a hang past ``read_budget``, is judged, not raised.
        read_budget: seconds one image may take to be read back before it counts as a hang.

    Returns:
        The exploration's figures and counterexamples; an image that cannot be read back is a violation
        of R-STATE-3 whose ``observed`` says why (docs/verdicts.md).
    """
    chosen = MODELS[model] if isinstance(model, str) else model
    started = time.perf_counter()
    baseline = recording.baseline
    if not baseline.freed:  # what the setup removed may still be on the disk (ext4-nojournal's stale blocks)
        freed = freed_by_setup(recording.workload, stripes=recording.config.stripes)
        baseline = replace(baseline, freed=freed)
    ids = recording.workload.ids()
    with scratch_directory() if scratch is None else _nullcontext(scratch) as directory:
        opener = open_store or default_opener(recording.config)
        observer = ImageObserver(directory, recording.config, ids, opener, read_budget)
        if observer_cache is not None:
            observer.cache = observer_cache
        distinct_before = len(observer.cache)
        images = space_total = 0
        sampled = False
        found = Counterexamples(keep)
        points = crash_points(recording.trace)
        for point in crash_prefixes(recording):
            space = chosen.space(baseline, point.effects)
            space_total += space.size
            distinct, was_sampled = images_to_judge(space, budget, seed=seed + point.cut)
            sampled |= was_sampled
            for image in distinct:
                images += 1
                observation = observer.observe(image)
                shown = [(n, d) for n, d in image.files if not n.startswith(".")]
                for violation in violations_of(
                    point, observation, shown, recording=recording, model=chosen.name
                ):
                    found.add(violation)
        observer.close()
        seconds = time.perf_counter() - started
        return Exploration(
            workload=recording.workload.name,
            model=chosen.name,
            config=recording.config.label,
            crash_points=len(points),
            images=images,
            space=space_total,
            distinct=len(observer.cache) - distinct_before,
            sampled=sampled,
            violations=found.count,
            clauses=found.clauses,
            examples=found.examples,
            seconds=seconds,
            paused=recording.paused,
        )


@contextmanager
def _nullcontext(path: Path) -> Iterator[Path]:
    yield path
