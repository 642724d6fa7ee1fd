"""Any ledger's crash states on the real kernel: ``crash --target TARGET --kernel`` (SPEC.md §Crash,
R-CRASH-1..4, R-STATE-3; docs/crash-target.md §On the real kernel).

``kernel_target(target, fs, root)`` runs the target's crash workloads — the catalogue's, those its
operations support (``strace.supported``), the ones ``crash --target`` runs — each on a real image of ``fs``
of its own, under strace (``target_recorder``), then for every recording:

1. cuts its block log into crash states the CrashMonkey way (``states``: every prefix of each epoch, a
   seeded sample of other subsets; at most ``max_states`` per recording, a seeded sample beyond);
2. lets the kernel recover each (``recovery.Recoverer``: ``e2fsck -p`` without a journal, journal or log
   replay by the mount) and copies the workspace out of the mount;
3. reads it back with a fresh handle of the target in a child process (``spec.kit.crash.ReadBack`` over a
   ``TargetReader``, as ``crash --target`` does) and judges it at every trace cut of its crash window with
   the same ``violations_of`` (R-CRASH-1..4, R-STATE-3);
4. compares it, as a line reader tells images apart (``compare.reader_class``), with what the target's
   strace-recorded persistence model for ``fs`` allows in that window (``compare.ModelView``): a state
   outside it is a finding about the model, with its block-level timeline, never a verdict on the ledger.

The verdict (``TargetKernelResult.verdict``): ``violation`` when some state breaks a clause; else
``unknown`` when a recording's states were cut to ``max_states``, a requested fault was never injected (the
ledger made no such call: ``not_exercised``, as ``crash --target`` names it) or no workload ran; else ``ok``.

Not guaranteed: states the kernel could leave that the log does not show (writes nobody waited for are
taken in log order; a block is never torn; subsets of a large epoch are sampled, as the kernel study's);
that a second run logs the same writes.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capture_ledger.impl.study.kernel._compare import ModelView, reader_class
from capture_ledger.impl.study.kernel._filesystems import FsConfig
from capture_ledger.impl.study.kernel._recovery import Recoverer
from capture_ledger.impl.study.kernel._states import crash_states, epochs, materialize
from capture_ledger.impl.study.kernel._study import CrashPoints, KernelBroken, OutsideModel
from capture_ledger.impl.study.kernel._target_recorder import (
    TargetKernelRecording,
    record_target_on_kernel,
    target_window,
    window_text,
)
from capture_ledger.impl.study.kernel._timeline import block_timeline
from capture_ledger.spec.crash.durability import MODELS, DiskImage, PersistenceModel
from capture_ledger.spec.kit.crash import (
    WORKLOADS,
    ReadBack,
    Recording,
    TargetReader,
    describe_fault,
    show_bytes,
    violations_of,
)
from capture_ledger.spec.kit.crash.strace import Target, TraceError, supported

__all__ = ["MAX_STATES", "TARGET_WORKLOADS", "TargetKernelCell", "TargetKernelResult", "kernel_target"]

#: The most crash states judged per recording by default (a seeded sample beyond: verdict ``unknown``).
MAX_STATES = 64
#: The workloads run when none is named, chosen so that one file system takes well under a minute: a new and
#: an appended record (the two a ledger with records only, NeMo Gym's, runs), a retire, a delete and a
#: re-record after both, and concurrent removals sharing their syncs. ``--workload`` names any others of
#: the catalogue.
TARGET_WORKLOADS = (
    "record-new",
    "record-append",
    "retire-live",
    "delete-reuse",
    "retire-delete-reuse",
    "removals-share-syncs",
)
#: The most images a model's space is enumerated to at one crash point (beyond: unknown).
_MODEL_LIMIT = 4096
#: SQLite's shared-memory index: rebuilt when the database opens; the models drop its bytes.
_VOLATILE = ("-shm",)


@dataclass(kw_only=True, frozen=True, slots=True)
class TargetKernelCell:
    """One recording on the kernel: states judged (``sampled``: cut to the budget), how many lay inside,
    outside or beyond (``unknown``) the model, those the kernel would not mount, the broken clauses, and the
    workload's requested faults the run never injected (``not_exercised``, described)."""

    workload: str
    states: int
    candidates: int
    sampled: bool
    inside: int
    outside: int
    unknown: int
    unrecoverable: int
    broken: tuple[KernelBroken, ...]
    findings: tuple[OutsideModel, ...]
    record_seconds: float
    seconds: float
    not_exercised: tuple[str, ...] = ()


@dataclass(kw_only=True, frozen=True, slots=True)
class TargetKernelResult:
    """A target on one file system: the cells, the workloads not run and why."""

    target: str
    fs: str
    model: str
    cells: tuple[TargetKernelCell, ...]
    not_run: tuple[tuple[str, str], ...]
    seconds: float
    notes: tuple[str, ...] = field(default=())

    @property
    def verdict(self) -> str:
        """``violation``, ``unknown`` (states sampled beyond the budget, a fault never injected, or nothing
        ran) or ``ok``."""
        if any(c.broken for c in self.cells):
            return "violation"
        if not self.cells or any(c.sampled or c.not_exercised for c in self.cells):
            return "unknown"
        return "ok"

    def why_unknown(self) -> str | None:
        """Why the verdict is ``unknown`` (``None`` when it is not): the workloads sampled beyond the
        budget, the faults requested and never injected, or that no workload ran."""
        if self.verdict != "unknown":
            return None
        reasons = []
        sampled = [c.workload for c in self.cells if c.sampled]
        if sampled:
            reasons.append(f"states sampled beyond the budget in {', '.join(sampled)}")
        missed = [f"{c.workload}: {f}" for c in self.cells for f in c.not_exercised]
        if missed:
            reasons.append(f"faults requested and never injected ({'; '.join(missed)})")
        return "; ".join(reasons) or "no workload ran"

    def broken(self) -> list[tuple[str, KernelBroken]]:
        """Each clause broken once: ``(workload, counterexample)``, the shortest, first workload by name
        when equally short."""
        best: dict[str, tuple[str, KernelBroken]] = {}
        for cell in sorted(self.cells, key=lambda c: c.workload):
            for entry in cell.broken:
                kept = best.get(entry.clause)
                if kept is None or entry.violation.size() < kept[1].violation.size():
                    best[entry.clause] = (cell.workload, entry)
        return [best[clause] for clause in sorted(best)]

    def summary(self) -> dict[str, Any]:
        """The ``--json`` object (docs/crash-target.md §On the real kernel)."""
        return {
            "target": self.target,
            "verdict": self.verdict,
            "broken": [
                {
                    "clause": entry.clause,
                    "workload": workload,
                    "state": entry.state,
                    "timeline": entry.violation.render(),
                    "blocks": entry.timeline,
                }
                for workload, entry in self.broken()
            ],
            "fs": self.fs,
            "model": self.model,
            "states": sum(c.states for c in self.cells),
            "outside_model": sum(c.outside for c in self.cells),
            "not_run": [{"workload": w, "why": why} for w, why in self.not_run],
            "inside_model": sum(c.inside for c in self.cells),
            "model_unknown": sum(c.unknown for c in self.cells),
            "unrecoverable": sum(c.unrecoverable for c in self.cells),
            "sampled": sorted({c.workload for c in self.cells if c.sampled}),
            "not_exercised": [
                {"workload": c.workload, "fault": f} for c in self.cells for f in c.not_exercised
            ],
            "workloads": [c.workload for c in self.cells],
            "findings": [
                {
                    "workload": f.workload,
                    "state": f.state,
                    "model": f.model,
                    "image": dict(f.image),
                    "timeline": f.timeline,
                }
                for c in self.cells
                for f in c.findings
            ],
            "seconds": round(self.seconds, 3),
        }


def _at_block_size(model: PersistenceModel, block: int) -> PersistenceModel:
    resize = getattr(model, "with_block_size", None)
    return resize(block) if callable(resize) else model


def _volatile(recording: Recording) -> frozenset[str]:
    """The names of volatile files anywhere in the recording (left out of the model comparison)."""
    names = {name for name, _, _ in recording.baseline.files} | set(recording.inode_names.values())
    for event in recording.trace:
        for attribute in ("name", "new", "old"):
            value = getattr(event, attribute, None)
            if isinstance(value, str):
                names.add(value)
    return frozenset(n for n in names if n.endswith(_VOLATILE))


def _read_tree(directory: Path) -> DiskImage | None:
    """The workspace below ``directory`` as an image, or ``None`` when it is gone."""
    if not directory.is_dir():
        return None
    files: dict[str, bytes] = {}
    directories: list[str] = []
    for here, subdirectories, names in os.walk(directory):
        relative = Path(here).relative_to(directory)
        for name in subdirectories:
            directories.append(str(relative / name))
        for name in names:
            path = Path(here) / name
            if path.is_file():
                files[str(relative / name)] = path.read_bytes()
    return DiskImage.of(files, directories)


def _finding(
    recorded: TargetKernelRecording,
    model: PersistenceModel,
    state: str,
    files: tuple[tuple[str, str], ...],
    timeline: str,
) -> OutsideModel:
    recording = recorded.recording
    return OutsideModel(
        workload=recording.workload.name,
        fs=recorded.fs.name,
        config=recording.config.label,
        model=model.name,
        state=state,
        image=files,
        timeline=timeline,
    )


def _judge_recording(
    recorded: TargetKernelRecording,
    *,
    recoverer: Recoverer,
    readback: ReadBack,
    model: PersistenceModel,
    subsets: int,
    max_states: int,
    seed: int,
    keep: int,
) -> TargetKernelCell:
    started = time.perf_counter()
    recording = recorded.recording
    found = epochs(recorded.records, block=recorded.fs.block)
    candidates, _ = crash_states(found, end=len(recorded.records), subsets=subsets, seed=seed)
    states = candidates
    if len(candidates) > max_states:
        chosen = sorted(random.Random(seed).sample(range(len(candidates)), max_states))
        states = [candidates[i] for i in chosen]
    view = ModelView(recording, model, _volatile(recording), limit=_MODEL_LIMIT)
    points = CrashPoints(recording)
    kernel = f"{recorded.fs.name} (kernel)"
    timelines = recorded.kernel_recording()
    inside = outside = unknown = unrecoverable = 0
    best: dict[str, list[KernelBroken]] = {}
    findings: list[OutsideModel] = []
    for state in states:
        window = target_window(recorded.marks, state.low, state.high, len(recording.trace))
        with recoverer.recovered(recorded.base, materialize(found, state)) as back:
            image = None
            if back.directory is not None:
                image = _read_tree(back.directory.parent / recorded.workspace)
        if image is None:  # the kernel would not give the workspace back: outside every model
            unrecoverable += 1
            outside += 1
            if len(findings) < keep:
                timeline = (
                    f"{block_timeline(timelines, found, state)}\n{window_text(recording, window, None)}"
                )
                findings.append(_finding(recorded, model, state.label, (), timeline))
            continue
        allowed = view.allows(reader_class(image, view.skip), window)
        if allowed is None:
            unknown += 1
        elif allowed:
            inside += 1
        else:
            outside += 1
            if len(findings) < keep:
                files = tuple((n, show_bytes(d)) for n, d in image.files)
                timeline = (
                    f"{block_timeline(timelines, found, state)}\n{window_text(recording, window, files)}"
                )
                findings.append(_finding(recorded, model, state.label, files, timeline))
        for cut in window.cuts:
            point = points.at(cut)
            observation = readback.read_images([image], point)[0]
            for violation in violations_of(
                point, observation, image.files, recording=recording, model=kernel
            ):
                for clause in violation.clauses:
                    kept = best.setdefault(clause, [])
                    if len(kept) < keep or violation.size() < kept[-1].violation.size():
                        files = tuple((n, show_bytes(d)) for n, d in image.files)
                        blocks = block_timeline(timelines, found, state)
                        timeline = f"{blocks}\n{window_text(recording, window, files)}"
                        kept.append(
                            KernelBroken(
                                clause=clause, state=state.label, violation=violation, timeline=timeline
                            )
                        )
                        kept.sort(key=lambda b: b.violation.size())
                        del kept[keep:]
    return TargetKernelCell(
        workload=recording.workload.name,
        states=len(states),
        candidates=len(candidates),
        sampled=len(states) < len(candidates),
        inside=inside,
        outside=outside,
        unknown=unknown,
        unrecoverable=unrecoverable,
        broken=tuple(b for clause in sorted(best) for b in best[clause]),
        findings=tuple(findings),
        record_seconds=recorded.seconds,
        seconds=time.perf_counter() - started,
        not_exercised=tuple(describe_fault(f) for f in recording.not_injected()),
    )


def kernel_target(  # noqa: PLR0913 - the kernel target study's options, all keyword-only
    target: Target,
    fs: FsConfig,
    root: Path,
    *,
    workloads: Sequence[str] | None = None,
    subsets: int = 16,
    max_states: int = MAX_STATES,
    seed: int = 0,
    keep: int = 1,
    progress: Callable[[TargetKernelCell], None] | None = None,
) -> TargetKernelResult:
    """Study ``target`` on a real ``fs`` image (see the module docstring).

    Args:
        target: the ledger factory (its options and the directory it imports from).
        fs: the file-system configuration.
        root: an empty scratch directory (``host.workspace``).
        workloads: catalogue workload names (default ``TARGET_WORKLOADS``; those the target cannot run are
            ``not_run``).
        subsets: the most non-prefix subsets per epoch (``states.crash_states``).
        max_states: the most states judged per recording (a seeded sample beyond: verdict ``unknown``).
        seed: the seed of both samples.
        keep: counterexamples kept per clause, findings per recording.
        progress: called with each cell as it is judged.

    Returns:
        The result.

    Raises:
        TraceError: the target cannot be opened (the reader child could not import or open it).
        KernelSetupError: the machine could not record or recover.
        KeyError: an unknown workload.
    """
    started = time.perf_counter()
    chosen = [WORKLOADS[name] for name in (workloads or TARGET_WORKLOADS)]
    reader = TargetReader(target.target, dict(target.options), cwd=target.cwd)
    cells: list[TargetKernelCell] = []
    try:
        try:
            operations = tuple(reader.operations())
        except RuntimeError as error:
            raise TraceError(str(error)) from error
        not_run = [(w.name, why) for w in chosen if (why := supported(w, operations)) is not None]
        runnable = [w for w in chosen if supported(w, operations) is None]
        recordings, failed = record_target_on_kernel(target, runnable, fs, root / "record")
        not_run += failed
        model = _at_block_size(MODELS[fs.model], fs.block)
        readback = ReadBack(reader)
        with Recoverer(root / "recover", fs, stripes=1) as recoverer:
            for recorded in recordings:
                cell = _judge_recording(
                    recorded,
                    recoverer=recoverer,
                    readback=readback,
                    model=model,
                    subsets=subsets,
                    max_states=max_states,
                    seed=seed,
                    keep=keep,
                )
                cells.append(cell)
                if progress is not None:
                    progress(cell)
    finally:
        reader.close()
    return TargetKernelResult(
        target=target.name,
        fs=fs.name,
        model=fs.model,
        cells=tuple(cells),
        not_run=tuple(not_run),
        seconds=time.perf_counter() - started,
    )
