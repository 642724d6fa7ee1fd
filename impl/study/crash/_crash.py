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
content), so the three models share the cost. The kit's ``CrashExploration`` reports crash points, images
judged, the space's size, distinct images read, violations (the shortest counterexample per clause),
seconds and images per second; its ``result`` is ``Ok`` (exhaustive, none), ``Violation`` (the clause and
the shortest counterexample) or ``Unknown`` (sampled, none found), and ``verdict`` that result's kind.

How an image is read back is ``observation`` (``ImageObserver``, ``Observation``); how what was read is
judged is ``judgement`` (``spans_at``, ``judge``, ``CrashViolation``); both are shared with the kernel
study (``kernel``), which checks the persistence models themselves against real ext4.

Not guaranteed: coverage of schedules other than the one recorded (``interleave`` explores those), of
effects outside the seam, or of images a model does not allow (the kernel study measures how the models
compare with a real kernel).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from capture_ledger.impl.study.crash._freed import freed_by_setup
from capture_ledger.impl.study.crash._observation import (
    READ_BUDGET,
    ImageObserver,
    OpenStore,
    default_opener,
    scratch_directory,
)
from capture_ledger.impl.study.crash._recording import StoreConfig
from capture_ledger.spec.crash.durability import DiskImage, PersistenceModel
from capture_ledger.spec.kit.crash import CrashExploration, Observation, Recording, explore_points

__all__ = ["explore", "store_config"]


def explore(  # noqa: PLR0913 - the crash explorer's options, all keyword-only
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
) -> CrashExploration:
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
    baseline = recording.baseline
    config = store_config(recording)
    if not baseline.freed:  # what the setup removed may still be on the disk (ext4-nojournal's stale blocks)
        baseline = replace(baseline, freed=freed_by_setup(recording.workload, stripes=config.stripes))
    ids = recording.workload.ids()
    with scratch_directory() if scratch is None else _nullcontext(scratch) as directory:
        observer = ImageObserver(directory, config, ids, open_store or default_opener(config), read_budget)
        if observer_cache is not None:
            observer.cache = observer_cache
        try:
            return explore_points(
                recording,
                model,
                observer,
                budget=budget,
                seed=seed,
                keep=keep,
                baseline=baseline,
                shown=_without_locks,
            )
        finally:
            observer.close()


def store_config(recording: Recording) -> StoreConfig:
    """The store configuration ``recording`` ran (recordings of our store's seam carry one).

    Raises:
        TypeError: the recording is of another ledger (traced from outside).
    """
    if not isinstance(recording.config, StoreConfig):
        raise TypeError(f"{recording.config.label!r} is not a configuration of our store")
    return recording.config


def _without_locks(image: DiskImage) -> list[tuple[str, bytes]]:
    return [(n, d) for n, d in image.files if not n.startswith(".")]


@contextmanager
def _nullcontext(path: Path) -> Iterator[Path]:
    yield path
