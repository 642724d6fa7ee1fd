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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capture_ledger.impl.store.consistency import Finding, check, read_snapshot
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import FileSystem, OsFileSystem, lock_file_name
from capture_ledger.impl.store.lines import LEDGER_SUFFIX
from capture_ledger.impl.study.bounded import BoundedCaller, Hung, Returned
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

_PROBE_CALL = "crash-probe"


# -------------------------------------------------------------------------------------- observation
#: Opens the store under study on a directory over a given seam (default: ``FileLineageStore`` with the
#: recording's ``StoreConfig.ordering()``). Any object with ``manifest``, ``admit`` and ``close`` will do.
OpenStore = Callable[[Path, FileSystem], Any]

#: Seconds one image may take to be read back (files, ``check`` and the store's API) before it counts as
#: a hang: generous, a healthy read takes about a millisecond.
READ_BUDGET = 10.0


@dataclass(frozen=True, slots=True)
class Observation:
    """What a fresh store read from one image: per-ID state from the files, API mismatches, check findings.

    ``unreadable`` says why the image could not be read at all (the files do not map to states, the store
    under study raised when opened, or did not answer within the budget); ``states`` is then empty and
    ``culprit`` names the rollout whose files could not be read, when known.
    """

    states: tuple[tuple[str, RolloutState], ...]
    mismatches: tuple[str, ...]
    findings: tuple[str, ...]
    unreadable: str | None = None
    culprit: str | None = None

    def state(self, rollout_id: str) -> RolloutState:
        """The state read from the files for ``rollout_id``.

        Raises:
            KeyError: the image was ``unreadable``.
        """
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


def _api_mismatch(store: Any, rollout_id: str, state: RolloutState) -> str | None:
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
    try:
        found = check(directory)
    except Exception as error:  # the files are beyond what check can read: report it, do not crash
        return (f"check raised {type(error).__name__}: {error}",)
    return tuple(sorted(repr(f) for f in found if not _allowed_finding(f)))


def _allowed_finding(finding: Finding) -> bool:
    """What a crash may leave and the spec allows (R-STORE-6, R-STATE-2): torn tails, interrupted retires
    (a ledger beside its fence), empty ledgers left by an interrupted create."""
    return finding.kind in _CRASH_RESIDUE


_CRASH_RESIDUE = frozenset({"torn-tail", "interrupted-retire", "empty-ledger"})


def _default_opener(config: StoreConfig) -> OpenStore:
    def open_store(directory: Path, fs: FileSystem) -> FileLineageStore:
        return FileLineageStore(directory, fs=fs, ordering=config.ordering())

    return open_store


def _culprit(error: Exception, ids: Sequence[str]) -> str | None:
    """The rollout ID whose ledger ``error`` names, if it is one of ``ids``."""
    name = getattr(error, "name", None)
    if isinstance(name, str) and name.endswith(LEDGER_SUFFIX) and name[: -len(LEDGER_SUFFIX)] in ids:
        return name[: -len(LEDGER_SUFFIX)]
    return None


def _read_image(directory: Path, ids: Sequence[str], stripes: int, open_store: OpenStore) -> Observation:
    """Read ``ids`` from ``directory``; whatever the store under study raises becomes part of the answer."""
    fs = OsFileSystem(directory, stripes=stripes)
    try:
        try:
            states = abstract(read_snapshot(fs))
        except Exception as error:
            reason = f"the files do not map to states: {type(error).__name__}: {error}"
            return Observation((), (), _findings(directory), reason, _culprit(error, ids))
        findings = _findings(directory)
        try:
            store = open_store(directory, fs)
        except Exception as error:
            reason = f"opening the store raised {type(error).__name__}: {error}"
            return Observation((), (), findings, reason)
        mismatches = []
        for rid in ids:
            try:
                mismatches.append(_api_mismatch(store, rid, states.get(rid)))
            except Exception as error:
                mismatches.append(f"{rid}: reading it back raised {type(error).__name__}: {error}")
        try:
            store.close()
        except Exception as error:
            mismatches.append(f"{ids[0]}: closing the store raised {type(error).__name__}: {error}")
        return Observation(
            tuple((rid, states.get(rid)) for rid in ids),
            tuple(m for m in mismatches if m is not None),
            findings,
        )
    finally:
        fs.close_all()


def _hung(budget: float) -> Observation:
    return Observation((), (), (), f"the store did not answer within {budget:g} s (a hang when reopened)")


class _Observer:
    """Materializes images into a scratch directory and reads each with a fresh store, within a budget.

    After a hang the hung thread keeps its directory: the next image goes to a fresh one.
    """

    def __init__(
        self, base: Path, config: StoreConfig, ids: Sequence[str], open_store: OpenStore, budget: float
    ) -> None:
        self.base = base
        self.config = config
        self.ids = tuple(ids)
        self.open_store = open_store
        self.cache: dict[DiskImage, Observation] = {}
        self.locks = {lock_file_name(s) for s in range(config.stripes)}
        self.caller = BoundedCaller(budget, name="crash-image-reader")
        self.directory = self._fresh()

    def _fresh(self) -> Path:
        directory = self.base / f"image-{self.caller.hangs}"
        directory.mkdir(exist_ok=True)
        OsFileSystem(directory, stripes=self.config.stripes).close_all()
        return directory

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
        directory = self.directory
        outcome = self.caller.call(
            lambda: _read_image(directory, self.ids, self.config.stripes, self.open_store)
        )
        if isinstance(outcome, Returned):
            observation = outcome.value
        elif isinstance(outcome, Hung):
            observation = _hung(outcome.budget)
            self.directory = self._fresh()
        else:  # _read_image catches what the store raises; this is an error of the explorer's own
            raise outcome.error
        self.cache[image] = observation
        return observation

    def close(self) -> None:
        self.caller.close()


def observe_directory(
    directory: Path,
    ids: Sequence[str],
    *,
    config: StoreConfig | None = None,
    open_store: OpenStore | None = None,
    budget: float = READ_BUDGET,
) -> Observation:
    """Read ``ids`` from ``directory`` with a fresh store: from the files, through the API, and ``check``.

    Args:
        directory: a lineage directory (its lock files made with ``config.stripes`` stripes).
        ids: the rollout IDs to read.
        config: the store configuration to read with (default: the production store, 4 stripes).
        open_store: opens the store under study (default: ``FileLineageStore`` with ``config.ordering()``).
        budget: seconds the whole read may take before it counts as a hang.

    Returns:
        The state of each ID read from the files, API reads that disagree with them or raised (R-STATE-3),
        and the ``check`` findings that a crash may not leave (R-STORE-8); or, when the directory cannot
        be read at all or the store hangs, an ``Observation`` whose ``unreadable`` says why. Nothing the
        store under study does is raised from here.
    """
    config = config or StoreConfig()
    opener = open_store or _default_opener(config)
    caller = BoundedCaller(budget, name="crash-directory-reader")
    try:
        outcome = caller.call(lambda: _read_image(directory, ids, config.stripes, opener))
    finally:
        caller.close()
    if isinstance(outcome, Returned):
        return outcome.value
    if isinstance(outcome, Hung):
        return _hung(outcome.budget)
    raise outcome.error


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


def _judge(
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
    ids = recording.workload.ids()
    with _scratch() if scratch is None else _nullcontext(scratch) as directory:
        opener = open_store or _default_opener(recording.config)
        observer = _Observer(directory, recording.config, ids, opener, read_budget)
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
                    observed, problems = _judge(observation, rid, ids, spans, allowed[rid])
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
                        observed=observed,
                        allowed=tuple(sorted(repr(a) for a in allowed[rid])),
                        clauses=problems,
                    )
                    for clause in problems:
                        kept = best.setdefault(clause, [])
                        kept.append(violation)
                        kept.sort(key=CrashViolation.size)
                        del kept[keep:]
        observer.close()
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
