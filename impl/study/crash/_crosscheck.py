"""The cross-check of the two crash recorders: our own store recorded through its seam (the model study) and
traced from outside with strace must give the same verdicts (SPEC.md §Crash, R-CRASH-1..4;
docs/crash-target.md §The cross-check).

For each store configuration of the study (``impl.study.crash.CONFIGS``: the default protocol, its
options, and each ``StoreVariant`` step left out) and each workload, ``cross_check`` records the workload
both ways — ``impl.study.crash.record`` through ``RecordingFileSystem``, and ``recorder.record_target`` on
``factories.open_store(config=...)`` under strace; a workload on several threads (``Workload.threads``) is
traced on handles whose threads the seam study's own scheduler runs (``GatherSchedule``, ``factories``), so
both recordings hold the same schedule — explores each recording under every persistence model
(the seam's images read by a fresh store, the trace's by a fresh handle in a child process) and compares,
per configuration, workload and model, the crash clauses broken (R-CRASH-1..4) and whether any was.
``Comparison.agree`` is the verdict: the same clauses. A sampled exploration without a violation
("unknown") agrees with an exhaustive one without a violation ("ok") when the clauses match: the two
recorders see different numbers of effects (the trace also shows the lock files' removal counters, which
the seam leaves out as not durable), so one may sample where the other does not.

Not guaranteed: agreement on clauses that are not crash clauses (R-STATE-3, R-STORE-8: the seam study reads
the files themselves, the outside one only the protocol), or on schedules the OS does not reproduce (a
parked operation the trace could not hold is reported, ``Comparison.paused``; ``Comparison.same_schedule``
says whether the two effect sequences match).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from capture_ledger.impl.study.crash._configs import CONFIGS, SMALL
from capture_ledger.impl.study.crash._crash import explore
from capture_ledger.impl.study.crash._recording import record
from capture_ledger.spec.crash.contract import CLAUSES
from capture_ledger.spec.crash.durability import MODELS, DiskImage, Truncate, Write
from capture_ledger.spec.kit.crash import (
    SMALL_WORKLOADS,
    WORKLOADS,
    Invoke,
    Observation,
    ReadBack,
    Recording,
    Return,
    TargetReader,
    explore_points,
)
from capture_ledger.spec.kit.crash.strace import Target, record_target

#: What the store's lock files are named (their removal counters are not ledger state).
LOCK_PREFIX = ".capture-ledger.lock"

__all__ = ["LOCK_PREFIX", "Comparison", "cross_check", "same_schedule", "store_target"]


@dataclass(kw_only=True, frozen=True, slots=True)
class Comparison:
    """One configuration, workload and model, judged from both recordings."""

    config: str
    workload: str
    model: str
    seam: frozenset[str]
    seam_verdict: str
    outside: frozenset[str]
    outside_verdict: str
    paused: tuple[bool | None, bool | None] = (None, None)
    seam_images: int = 0
    outside_images: int = 0
    same_schedule: bool = True

    @property
    def agree(self) -> bool:
        """The same crash clauses broken (see the module docstring)."""
        return self.seam == self.outside

    @property
    def explained(self) -> bool:
        """The verdicts agree, or the two runs took different schedules (threads the OS interleaved
        otherwise than the seam study's scheduler), so they judged different histories."""
        return self.agree or not self.same_schedule

    def line(self) -> str:
        """One line for a report."""
        shown = ", ".join(sorted(self.seam)) or self.seam_verdict
        other = ", ".join(sorted(self.outside)) or self.outside_verdict
        mark = "agree" if self.agree else "differ (another schedule)" if not self.same_schedule else "DIFFER"
        return f"{mark}: {self.config} / {self.workload} / {self.model}: seam {shown}; outside {other}"


def _schedule(recording: Recording) -> list[tuple[object, ...]]:
    """The recording's effects on the ledger files and its returns, in order, in terms both recorders share
    (invocations left out: the OS starts threads in any order; the lock files' removal counters left out:
    the seam records only durable effects of the ledger and fence files)."""
    found: list[tuple[object, ...]] = []
    names = recording.inode_names
    for event in recording.trace:
        if isinstance(event, Invoke):
            continue
        if isinstance(event, Return):
            found.append(("return", event.op, event.raised))
            continue
        name = getattr(event, "name", None) or names.get(getattr(event, "inode", -1), "")
        # A ledger written under its temporary and renamed into place (R-STORE-3) is named by the path in
        # one recorder and by the inode's final name in the other: both are the ledger's.
        if name.startswith(".") and name.endswith(".new"):
            name = name[1:-4]
        if LOCK_PREFIX in name:
            continue
        if isinstance(event, Write):
            found.append(("write", name, len(event.data)))
        elif isinstance(event, Truncate):
            found.append(("truncate", name, event.size))
        else:
            found.append((type(event).__name__, name))
    return found


def same_schedule(seam: Recording, outside: Recording) -> bool:
    """Whether the two recordings ran the same schedule (see ``_schedule``)."""
    return _schedule(seam) == _schedule(outside)


def store_target(config: str, *, threads: int = 0) -> Target:
    """Our store in study configuration ``config`` as a target of the outside tracer; with ``threads``,
    the handles of a run of that many threads scheduled as the seam study's (``factories.open_store``)."""
    options: tuple[tuple[str, object], ...] = (("config", config),)
    if threads:
        options += (("threads", threads),)
    return Target(
        target="capture_ledger.impl.study.crash.factories:open_store", options=options, label=config
    )


def _crash(clauses: frozenset[str]) -> frozenset[str]:
    return frozenset(c for c in clauses if c in CLAUSES)


def cross_check(
    *,
    configs: Sequence[str] = SMALL,
    workloads: Sequence[str] = SMALL_WORKLOADS,
    models: Sequence[str] = tuple(MODELS),
    budget: int = 256,
    seed: int = 0,
    progress: Callable[[Comparison], None] | None = None,
) -> list[Comparison]:
    """Compare the two recorders on every configuration, workload and model given.

    Args:
        configs: store configuration labels.
        workloads: workload names.
        models: persistence model names.
        budget: most images judged per crash point (both ways).
        seed: the sampling seed.
        progress: called with each comparison as it is made.

    Returns:
        One comparison per configuration, workload and model.

    Raises:
        TraceError: the store could not be traced.
        KeyError: an unknown configuration, workload or model.
    """
    found: list[Comparison] = []
    for config in configs:
        target = store_target(config)
        reader = TargetReader(target.target, dict(target.options))
        try:
            for name in workloads:
                workload = WORKLOADS[name]
                with tempfile.TemporaryDirectory(prefix="capture-ledger-seam-") as directory:
                    seam = record(workload, CONFIGS[config], Path(directory))
                traced = store_target(config, threads=len(workload.threads)) if workload.threads else target
                with tempfile.TemporaryDirectory(prefix="capture-ledger-outside-") as directory:
                    outside = record_target(traced, workload, Path(directory))
                cache: dict[DiskImage, Observation] = {}
                for model in models:
                    mine = explore(seam, MODELS[model], budget=budget, seed=seed, observer_cache=cache)
                    theirs = explore_points(outside, model, ReadBack(reader), budget=budget, seed=seed)
                    comparison = Comparison(
                        config=config,
                        workload=name,
                        model=model,
                        seam=_crash(mine.clauses),
                        seam_verdict=mine.verdict,
                        outside=_crash(theirs.clauses),
                        outside_verdict=theirs.verdict,
                        paused=(seam.paused, outside.paused),
                        seam_images=mine.images,
                        outside_images=theirs.images,
                        same_schedule=same_schedule(seam, outside),
                    )
                    found.append(comparison)
                    if progress is not None:
                        progress(comparison)
        finally:
            reader.close()
    return found
