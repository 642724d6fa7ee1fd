"""The kernel crash study: real ext4, XFS and btrfs crash states, recovered by the kernel and judged like the
model study's (SPEC.md §Crash, R-CRASH-1..4; docs/crash.md §The kernel study).

For each workload, store configuration and file-system configuration, ``kernel_cell``:

1. records the workload on a fresh image through the block-log daemon (``recorder``);
2. builds the crash states of the log (``states``: every prefix of each epoch and a seeded sample of
   subsets);
3. recovers each with the kernel (``recovery``) and reads every rollout ID back with a fresh store, in
   place on the mounted image (``observation.ImageObserver``: what the store raises, leaves unreadable or
   hangs on becomes the verdict);
4. judges it at every point of its crash window exactly as the model study does (``judgement``:
   ``CrashPoint``, ``violations_of``);
5. compares its reader class with the classes each persistence model allows in that window (``compare``):
   a state outside the matching model (``FsConfig.model``) is a finding against the model, reported with
   its block-level timeline (``timeline``); ``model_only`` counts the model's classes no state produced.

Not guaranteed: that sampled subsets cover every state of a large epoch (``subsets`` bounds them), or that a
second run of the same workload logs the same writes (background writeback is timing-dependent; the counts
are stable on a quiet machine, the verdicts are what the tests pin).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from capture_ledger.impl.store.fs import lock_file_name
from capture_ledger.impl.study.crash import READ_BUDGET, ImageObserver, OpenStore, StoreConfig, default_opener
from capture_ledger.impl.study.kernel._compare import ModelView, ReaderClass, TraceWindow, reader_class
from capture_ledger.impl.study.kernel._filesystems import FsConfig
from capture_ledger.impl.study.kernel._recorder import KernelRecording, record_on_kernel
from capture_ledger.impl.study.kernel._recovery import Recoverer
from capture_ledger.impl.study.kernel._states import CrashState, Epoch, crash_states, epochs, materialize
from capture_ledger.impl.study.kernel._timeline import block_timeline
from capture_ledger.spec.crash.contract import allowed_states
from capture_ledger.spec.crash.durability import MODELS, PersistenceModel, describe_effect
from capture_ledger.spec.kit.crash import (
    CrashPoint,
    CrashViolation,
    Invoke,
    Recording,
    Return,
    Workload,
    describe_fault,
    show_bytes,
    spans_at,
    violations_of,
)

__all__ = ["CrashPoints", "KernelBroken", "KernelCell", "OutsideModel", "kernel_cell", "trace_window"]


@dataclass(kw_only=True, frozen=True, slots=True)
class OutsideModel:
    """A kernel state the model does not allow: the model is unsound there."""

    workload: str
    fs: str
    config: str
    model: str
    state: str
    image: tuple[tuple[str, str], ...]
    timeline: str


@dataclass(kw_only=True, frozen=True, slots=True)
class KernelBroken:
    """A kernel state that breaks the crash contract, with its block-level timeline."""

    clause: str
    state: str
    violation: CrashViolation
    timeline: str


@dataclass(kw_only=True, frozen=True, slots=True)
class KernelCell:
    """One workload × store configuration × file system: what the kernel produced and how it was judged.

    ``inside``/``outside``/``unknown`` count states per model; ``model_only`` counts, per model, the
    classes it allows that no state produced; ``garbage`` the states holding bytes the store never wrote;
    ``unrecoverable`` the states the kernel would not mount; ``manual_fsck`` those where ``e2fsck -p``
    gave up (a boot would stop for an administrator; ``e2fsck -y`` repaired them); ``in_flight`` the writes
    of each epoch; ``costs`` (writes in the epoch, states, seconds) per epoch size; ``recovery`` what the
    recoverer did (``Recoverer.counts``: states, loop devices attached, processes spawned, mounts) and
    ``phases`` the seconds of each of its phases (``Recoverer.phases``; in its worker thread when pipelined);
    ``not_exercised`` the workload's requested faults the store never made the call for (described).
    """

    workload: str
    fs: str
    config: str
    model: str
    states: int
    duplicates: int
    classes: int
    inside: dict[str, int]
    outside: dict[str, int]
    unknown: dict[str, int]
    model_only: dict[str, int]
    garbage: int
    unrecoverable: int
    clauses: frozenset[str]
    broken: tuple[KernelBroken, ...]
    findings: tuple[OutsideModel, ...]
    in_flight: tuple[int, ...]
    costs: tuple[tuple[int, int, float], ...]
    manual_fsck: int
    record_seconds: float
    seconds: float
    notes: tuple[str, ...] = field(default=())
    recovery: tuple[tuple[str, int], ...] = field(default=())
    phases: tuple[tuple[str, float], ...] = field(default=())
    not_exercised: tuple[str, ...] = field(default=())

    @property
    def rate(self) -> float:
        """Crash states recovered and judged per second (recording excluded)."""
        return self.states / self.seconds if self.seconds > 0 else 0.0


def trace_window(marks: Sequence[tuple[int, int]], low: int, high: int, length: int) -> TraceWindow:
    """Where in the trace a crash between log records ``low`` and ``high`` happened (``compare``)."""
    completed = 0
    for position, count in marks:
        if position > low:
            break
        completed = count
    cuts = {completed} | {count for position, count in marks if low < position < high}
    reached = next((count for position, count in marks if position >= high), length)
    return TraceWindow(completed=completed, reached=max(reached, completed), cuts=tuple(sorted(cuts)))


class CrashPoints:
    """The crash point at each trace cut (``judgement.CrashPoint``: effects, history, allowed states),
    computed once per recording (the kernel study's and ``crash --target --kernel``'s)."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.ids = self.recording.workload.ids()
        self._cache: dict[int, CrashPoint] = {}

    def at(self, cut: int) -> CrashPoint:
        if cut not in self._cache:
            effects = [e for e in self.recording.trace[:cut] if not isinstance(e, Invoke | Return)]
            labels = [describe_effect(e, self.recording.inode_names) for e in effects]
            spans = spans_at(self.recording, cut)
            allowed = {rid: allowed_states(spans, rid) for rid in self.ids}
            self._cache[cut] = CrashPoint(
                cut=cut, effects=effects, labels=labels, spans=spans, allowed=allowed
            )
        return self._cache[cut]


def kernel_cell(  # noqa: PLR0913 - one kernel study cell's options, all keyword-only
    workload: Workload,
    config: StoreConfig,
    fs: FsConfig,
    root: Path,
    *,
    subsets: int = 16,
    seed: int = 0,
    keep: int = 1,
    open_store: OpenStore | None = None,
    read_budget: float = READ_BUDGET,
    models: Sequence[PersistenceModel] | None = None,
    progress: Callable[[int, int], None] | None = None,
    recorded: KernelRecording | None = None,
    ahead: int = 0,
) -> KernelCell:
    """Record ``workload`` on ``fs``, recover and judge every crash state, compare with the models.

    Args:
        workload: a crash-study workload.
        config: the store under study.
        fs: the file-system configuration.
        root: an empty scratch directory (``host.workspace``).
        subsets: the most non-prefix subsets per epoch.
        seed: the subsets' seed.
        keep: shortest counterexamples kept per clause, and findings per model.
        open_store: opens the store that reads each state back (default: ``config``'s ordering).
        read_budget: seconds one read may take before it counts as a hang.
        models: the persistence models to compare with (default: all, each at the image's block size; their
            views, with the classes they allow along the trace, are shared by every cell judging the same
            recording object, and enumerated in a worker thread while the kernel recovers the states).
        progress: called with (states done, states in all) as the states are judged.
        recorded: a recording of this workload, configuration and file system made before (then nothing is
            recorded: the benchmark judges one recording several times).
        ahead: states the kernel recovers in a worker thread while one is judged (``Recoverer.each``;
            0, the default: one at a time; measured no faster, docs/crash.md §Speed). The verdicts do not
            depend on it.

    Returns:
        The cell's figures, verdicts, counterexamples and findings.

    Raises:
        KernelSetupError: the machine could not record or recover (never for what the store does).
    """
    if recorded is None:
        recorded = record_on_kernel(workload, config, fs, root / "record")
    started = time.perf_counter()
    found = epochs(recorded.records, block=fs.block)
    states, duplicates = crash_states(found, end=len(recorded.records), subsets=subsets, seed=seed)
    locks = frozenset(lock_file_name(s) for s in range(config.stripes))
    views, judging = _judging(recorded.recording, fs.block, locks, models)
    enumerated = _enumerate_ahead(views) if _ENUMERATE_AHEAD else _enumerated
    ids = judging.ids
    kernel = f"{fs.name} (kernel)"
    inside = dict.fromkeys(views, 0)
    outside = _Outside(recorded, found, workload, views, keep)
    unknown = dict.fromkeys(views, 0)
    best: dict[str, list[KernelBroken]] = {}
    produced: set[ReaderClass] = set()
    garbage = unrecoverable = 0
    costs: dict[int, tuple[int, float]] = {}
    notes: list[str] = []
    scratch = root / "observe"
    scratch.mkdir(parents=True, exist_ok=True)
    opener = open_store or default_opener(config)
    observer = ImageObserver(scratch, config, ids, opener, read_budget)
    try:
        with (
            Recoverer(root / "recover", fs, stripes=config.stripes) as recoverer,
            contextlib.closing(
                recoverer.each(recorded.base, (materialize(found, s) for s in states), ahead=ahead)
            ) as recovering,
        ):
            state_started = time.perf_counter()  # a state's cost: from the end of the one before (pipelined)
            for done, (state, back) in enumerate(zip(states, recovering, strict=True)):
                if progress is not None:
                    progress(done, len(states))
                size = len(found[state.epoch].writes)
                window = trace_window(recorded.marks, state.low, state.high, len(recorded.recording.trace))
                if back.note:
                    notes.append(f"{state.label}: {back.note}")
                if back.image is None or back.directory is None:
                    unrecoverable += 1
                    state_started = _charge(costs, size, state_started)
                    for name in views:
                        outside.note(name, state, ())
                    continue
                image = back.image
                hangs = observer.hangs
                observation = observer.observe_in(back.directory, image)
                if observer.hangs != hangs:
                    recoverer.abandon()
                files = tuple((n, show_bytes(d)) for n, d in image.files)
                if any(b"\0" in data for _, data in image.files):
                    garbage += 1
                found_class = reader_class(image, locks)
                produced.add(found_class)
                for name, view in views.items():
                    verdict = view.allows(found_class, window)
                    if verdict is None:
                        unknown[name] += 1
                    elif verdict:
                        inside[name] += 1
                    else:
                        outside.note(name, state, files)
                for cut in window.cuts:
                    for violation in violations_of(
                        judging.at(cut), observation, image.files, recording=judging.recording, model=kernel
                    ):
                        for clause in violation.clauses:
                            kept = best.setdefault(clause, [])
                            if len(kept) < keep or violation.size() < kept[-1].violation.size():
                                timeline = block_timeline(recorded, found, state)
                                kept.append(
                                    KernelBroken(
                                        clause=clause,
                                        state=state.label,
                                        violation=violation,
                                        timeline=timeline,
                                    )
                                )
                                kept.sort(key=lambda b: b.violation.size())
                                del kept[keep:]
                state_started = _charge(costs, size, state_started)
    finally:
        observer.close()
    enumerated()
    everything = {name: view.everything() for name, view in views.items()}
    return KernelCell(
        workload=workload.name,
        fs=fs.name,
        config=config.label,
        model=fs.model,
        states=len(states),
        duplicates=duplicates,
        classes=len(produced),
        inside=inside,
        outside=outside.counts,
        unknown=unknown,
        model_only={name: len(classes - produced) for name, classes in everything.items()},
        garbage=garbage,
        unrecoverable=unrecoverable,
        clauses=frozenset(best),
        broken=tuple(b for clause in sorted(best) for b in best[clause]),
        findings=tuple(f for name in views for f in outside.kept[name]),
        in_flight=tuple(len(e.writes) for e in found),
        costs=tuple((size, count, spent) for size, (count, spent) in sorted(costs.items())),
        manual_fsck=sum("gave up" in note for note in notes),
        not_exercised=tuple(describe_fault(f) for f in recorded.recording.not_injected()),
        record_seconds=recorded.seconds,
        seconds=time.perf_counter() - started,
        notes=tuple(notes),
        recovery=tuple(recoverer.counts.items()),
        phases=tuple(recoverer.phases.items()),
    )


class _Outside:
    """The states outside each model: counted, and the first ``keep`` per model kept with their timelines."""

    def __init__(
        self,
        recorded: KernelRecording,
        found: Sequence[Epoch],
        workload: Workload,
        models: Iterable[str],
        keep: int,
    ) -> None:
        self._recorded = recorded
        self._found = found
        self._workload = workload
        self._keep = keep
        self.counts = dict.fromkeys(models, 0)
        self.kept: dict[str, list[OutsideModel]] = {name: [] for name in self.counts}

    def note(self, model: str, state: CrashState, files: tuple[tuple[str, str], ...]) -> None:
        """Count ``state`` outside ``model``; keep it as a finding while fewer than ``keep`` are."""
        self.counts[model] += 1
        kept = self.kept[model]
        if len(kept) >= self._keep:
            return
        recorded = self._recorded
        timeline = block_timeline(recorded, self._found, state)
        config = recorded.recording.config.label
        fs = recorded.fs.name
        kept.append(
            OutsideModel(
                workload=self._workload.name,
                fs=fs,
                config=config,
                model=model,
                state=state.label,
                image=files,
                timeline=timeline,
            )
        )


def _charge(costs: dict[int, tuple[int, float]], size: int, started: float) -> float:
    """Add one state of an epoch of ``size`` writes, judged since ``started``, to ``costs``; the time now."""
    count, spent = costs.get(size, (0, 0.0))
    now = time.perf_counter()
    costs[size] = (count + 1, spent + now - started)
    return now


#: The model views and crash points of the last few recordings judged with the default models, by recording
#: (``_judging``): judging one recording again (the benchmark's rounds, ``ahead`` 0 and 1) reuses the
#: classes each model allows along its trace instead of enumerating them again.
_JUDGING: dict[tuple[int, int, frozenset[str]], tuple[Recording, dict[str, ModelView], CrashPoints]] = {}
_JUDGING_KEPT = 4


def _judging(
    recording: Recording, block: int, locks: frozenset[str], models: Sequence[PersistenceModel] | None
) -> tuple[dict[str, ModelView], CrashPoints]:
    """The model views (by model name) and the crash points of ``recording``: ``models``' own, made anew,
    when given; else the default models' at ``block``, shared by every cell judging this same recording
    object (a view only caches what its model allows at each effect count, which the recording fixes)."""
    if models is not None:
        return {m.name: ModelView(recording, m, locks) for m in models}, CrashPoints(recording)
    key = (id(recording), block, locks)
    kept = _JUDGING.get(key)
    if kept is not None and kept[0] is recording:
        return kept[1], kept[2]
    chosen = [_at_block_size(m, block) for m in MODELS.values()]
    views = {m.name: ModelView(recording, m, locks) for m in chosen}
    judging = CrashPoints(recording)
    _JUDGING[key] = (recording, views, judging)
    while len(_JUDGING) > _JUDGING_KEPT:
        del _JUDGING[next(iter(_JUDGING))]
    return views, judging


#: Whether ``kernel_cell`` enumerates the models' classes in a worker thread (``_enumerate_ahead``).
_ENUMERATE_AHEAD = True


def _enumerated() -> None:
    """Nothing to wait for (the classes are enumerated as they are asked for)."""


def _enumerate_ahead(views: dict[str, ModelView]) -> Callable[[], None]:
    """Start enumerating every class each of ``views`` allows along its recording (``ModelView.everything``,
    which fills the view's cache) in a worker thread, while the kernel recovers the states (its mounts wait
    on I/O, with the GIL released); a function that waits for it and raises what it raised.

    The verdicts do not depend on it: a view's classes at an effect count are a function of the recording
    and the model, and a count asked for by both threads at once is computed twice, to the same set.
    """
    failed: list[BaseException] = []

    def enumerate_all() -> None:
        try:
            for view in views.values():
                view.everything()
        except BaseException as error:  # handed to the caller, which raises it
            failed.append(error)

    worker = threading.Thread(target=enumerate_all, name="kernel-model-classes", daemon=True)
    worker.start()

    def wait() -> None:
        worker.join()
        if failed:
            raise failed[0]

    return wait


def _at_block_size(model: PersistenceModel, block: int) -> PersistenceModel:
    """The model as it applies to an image of ``block``-byte blocks (``with_block_size`` when it has one)."""
    resize = getattr(model, "with_block_size", None)
    return resize(block) if callable(resize) else model
