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

Not guaranteed: coverage of schedules other than the one recorded (``interleave`` explores those), of
effects outside the seam, or of images a model does not allow. A real kernel is exercised in
``tests/test_kill.py`` instead.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from capture_ledger.impl.store.consistency import Finding, check, read_snapshot
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem, lock_file_name
from capture_ledger.impl.study.recording import (
    FaultAt,
    Invoke,
    Pause,
    Recording,
    Return,
    StoreConfig,
    TraceEvent,
    Workload,
    record,
    run_operation,
)
from capture_ledger.spec.core.abstraction import abstract
from capture_ledger.spec.core.errors import RolloutRetiredError
from capture_ledger.spec.core.model import (
    RETIRED,
    FailureEntry,
    Live,
    ManifestValue,
    RecordEntry,
    RolloutState,
    manifest_value_of,
)
from capture_ledger.spec.crash.contract import Span, allowed_states, broken_clauses
from capture_ledger.spec.crash.durability import (
    MODELS,
    DiskImage,
    Effect,
    PersistenceModel,
    describe_effect,
)

__all__ = [
    "CrashViolation",
    "Exploration",
    "FaultAt",
    "Observation",
    "Pause",
    "Recording",
    "StoreConfig",
    "Workload",
    "explore",
    "observe_directory",
    "record",
    "run_operation",
]

_PROBE_CALL = "crash-probe"


# -------------------------------------------------------------------------------------- observation
@dataclass(frozen=True, slots=True)
class Observation:
    """What a fresh store read from one image: per-ID state from the files, API mismatches, check findings."""

    states: tuple[tuple[str, RolloutState], ...]
    mismatches: tuple[str, ...]
    findings: tuple[str, ...]

    def state(self, rollout_id: str) -> RolloutState:
        """The state read from the files for ``rollout_id``."""
        return dict(self.states)[rollout_id]


@contextmanager
def _scratch() -> Iterator[Path]:
    # Images need no durability: tmpfs when available makes materializing them cheap.
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix="capture-ledger-crash-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _api_mismatch(store: FileLineageStore, rollout_id: str, state: RolloutState) -> str | None:
    """Whether the public API reads ``rollout_id`` as the files say (R-STATE-3, R-READ-*, R-ADMIT-2)."""
    try:
        manifest = store.manifest(rollout_id)
        read: object = manifest_value_of(manifest)
    except RolloutRetiredError:
        read = RETIRED
    admitted = store.admit(rollout_id, _PROBE_CALL) is not None
    if state == RETIRED:
        ok = read == RETIRED and not admitted
    elif isinstance(state, Live):
        expected = ManifestValue(
            tuple(e.canonical for e in state.entries if isinstance(e, RecordEntry)),
            tuple((e.model_call_id, e.reason) for e in state.entries if isinstance(e, FailureEntry)),
        )
        ok = read == expected and admitted != state.fenced
    else:
        ok = read == ManifestValue() and admitted
    return None if ok else f"{rollout_id}: files say {state!r}, API read {read!r}, admitted={admitted}"


def _findings(directory: Path) -> tuple[str, ...]:
    return tuple(sorted(repr(f) for f in check(directory) if not _allowed_finding(f)))


def _allowed_finding(finding: Finding) -> bool:
    """What a crash may leave and the spec allows (R-STORE-6, R-STATE-2): torn tails, interrupted retires
    (a ledger beside its fence), empty ledgers left by an interrupted create."""
    return finding.kind in _CRASH_RESIDUE


_CRASH_RESIDUE = frozenset({"torn-tail", "interrupted-retire", "empty-ledger"})


class _Observer:
    """Materializes images into one scratch directory and reads them with a fresh store each time."""

    def __init__(self, directory: Path, config: StoreConfig, ids: Sequence[str]) -> None:
        self.directory = directory
        self.config = config
        self.ids = tuple(ids)
        self.cache: dict[DiskImage, Observation] = {}
        self.locks = {lock_file_name(s) for s in range(config.stripes)}
        OsFileSystem(directory, stripes=config.stripes).close_all()

    def observe(self, image: DiskImage) -> Observation:
        cached = self.cache.get(image)
        if cached is not None:
            return cached
        for name in os.listdir(self.directory):
            if name not in self.locks:
                os.unlink(self.directory / name)
        for name, data in image.files:
            if name not in self.locks:
                (self.directory / name).write_bytes(data)
        observation = observe_directory(self.directory, self.ids, config=self.config)
        self.cache[image] = observation
        return observation


def observe_directory(
    directory: Path, ids: Sequence[str], *, config: StoreConfig | None = None
) -> Observation:
    """Read ``ids`` from ``directory`` with a fresh store: from the files, through the API, and ``check``.

    Args:
        directory: a lineage directory (its lock files made with ``config.stripes`` stripes).
        ids: the rollout IDs to read.
        config: the store configuration to read with (default: the production store, 4 stripes).

    Returns:
        The state of each ID read from the files, API reads that disagree with them (R-STATE-3), and
        the ``check`` findings that a crash may not leave (R-STORE-8).
    """
    config = config or StoreConfig()
    fs = OsFileSystem(directory, stripes=config.stripes)
    try:
        states = abstract(read_snapshot(fs))
        store = FileLineageStore(directory, fs=fs, variant=config.variant)
        mismatches = [_api_mismatch(store, rid, states.get(rid)) for rid in ids]
        store.close()
    finally:
        fs.close_all()
    return Observation(
        tuple((rid, states.get(rid)) for rid in ids),
        tuple(m for m in mismatches if m is not None),
        _findings(directory),
    )


# ---------------------------------------------------------------------------------------- judgement
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


def _spans(recording: Recording, cut: int) -> tuple[Span, ...]:
    """The setup and workload operations as the crash at trace position ``cut`` saw them."""
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


def _show(data: bytes) -> str:
    if not data:
        return "(empty)"
    lines = data.count(b"\n")
    torn = not data.endswith(b"\n")
    tail = data[data.rfind(b"\n") + 1 :][:24]
    return f"{lines} line(s)" + (f" + torn tail {tail!r}" if torn else "")


def _crash_points(trace: Sequence[TraceEvent]) -> list[int]:
    """Trace positions just before each effect, and the end."""
    points = [i for i, e in enumerate(trace) if not isinstance(e, Invoke | Return)]
    return [*points, len(trace)]


def explore(
    recording: Recording,
    model: PersistenceModel | str,
    *,
    budget: int = 256,
    seed: int = 0,
    scratch: Path | None = None,
    observer_cache: dict[DiskImage, Observation] | None = None,
    keep: int = 1,
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

    Returns:
        The exploration's figures and counterexamples.
    """
    chosen = MODELS[model] if isinstance(model, str) else model
    started = time.perf_counter()
    ids = recording.workload.ids()
    with _scratch() if scratch is None else _nullcontext(scratch) as directory:
        observer = _Observer(directory, recording.config, ids)
        if observer_cache is not None:
            observer.cache = observer_cache
        distinct_before = len(observer.cache)
        images = space_total = violations = 0
        sampled = False
        best: dict[str, list[CrashViolation]] = {}
        effects: list[Effect] = []
        labels: list[str] = []
        position = 0
        points = _crash_points(recording.trace)
        for cut in points:
            for event in recording.trace[position:cut]:
                if not isinstance(event, Invoke | Return):
                    effects.append(event)
                    labels.append(describe_effect(event, recording.inode_names))
            position = cut
            spans = _spans(recording, cut)
            allowed = {rid: allowed_states(spans, rid) for rid in ids}
            space = chosen.space(recording.baseline, effects)
            space_total += space.size
            if space.size > budget:
                sampled = True
                candidates = space.sample(budget, seed=seed + cut)
            else:
                candidates = list(space)
            for image in dict.fromkeys(candidates):
                images += 1
                observation = observer.observe(image)
                for rid in ids:
                    state = observation.state(rid)
                    problems: tuple[str, ...] = ()
                    if state not in allowed[rid]:
                        problems = broken_clauses(spans, rid, state)
                    if any(m.startswith(f"{rid}:") for m in observation.mismatches):
                        problems = (*problems, "R-STATE-3")
                    if observation.findings and rid == ids[0]:
                        problems = (*problems, "R-STORE-8")
                    if not problems:
                        continue
                    violations += 1
                    violation = CrashViolation(
                        workload=recording.workload.name,
                        model=chosen.name,
                        config=recording.config.label,
                        cut=len(effects),
                        effects=tuple(labels),
                        returned=tuple(repr(s.op) for s in spans if s.returned),
                        pending=tuple(repr(s.op) for s in spans if not s.returned),
                        image=tuple((n, _show(d)) for n, d in image.files if not n.startswith(".")),
                        rollout_id=rid,
                        observed=repr(state),
                        allowed=tuple(sorted(repr(a) for a in allowed[rid])),
                        clauses=problems,
                    )
                    for clause in problems:
                        kept = best.setdefault(clause, [])
                        kept.append(violation)
                        kept.sort(key=CrashViolation.size)
                        del kept[keep:]
        seconds = time.perf_counter() - started
        examples = tuple(v for clause in sorted(best) for v in best[clause])
        return Exploration(
            workload=recording.workload.name,
            model=chosen.name,
            config=recording.config.label,
            crash_points=len(points),
            images=images,
            space=space_total,
            distinct=len(observer.cache) - distinct_before,
            sampled=sampled,
            violations=violations,
            clauses=frozenset(best),
            examples=examples,
            seconds=seconds,
            paused=recording.paused,
        )


@contextmanager
def _nullcontext(path: Path) -> Iterator[Path]:
    yield path
