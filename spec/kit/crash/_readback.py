"""What a protocol reading says about each rollout ID: its state, and whether the calls agree (SPEC.md
§Crash, R-CRASH-1..4, R-STATE-3, R-READ-1..4, R-ADMIT-2; docs/crash-target.md §Judging).

A ledger traced from outside is read back only through the protocol (``reader``), so the state of an ID is
what its calls say: ``manifest`` raising ``RolloutRetiredError`` is Retired; rows are Live (fenced when
``admit`` refuses the ID); no rows and an admission is Absent. The calls must agree with each other, as they
must on any ledger: ``has_rows`` true exactly for Live, raising ``RolloutRetiredError`` exactly for Retired;
``admit`` refusing exactly for Retired and fenced Live; an ID whose manifest is empty but which ``admit``
refuses reads as no state at all. A disagreement, or a call that raised anything else, is R-STATE-3 (the
abstraction is total: every image a crash may leave maps to one state). A manifest does not say how records
and failures interleave, so an observed Live state is matched against the allowed states by manifest
(``observation_of`` takes the allowed state with the same manifest, if any).

``observation_of`` builds the study's ``Observation`` from a ``Reading``, so ``spec.kit.crash.judge``
judges it exactly as it judges our own store's images.

Not guaranteed: that a partial ledger's states are complete (without ``admit`` a fence is invisible; the
workloads a partial ledger runs never fence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from capture_ledger.spec.core.model import (
    ABSENT,
    RETIRED,
    FailureEntry,
    Live,
    ManifestValue,
    Ok,
    ReadManifest,
    RecordEntry,
    RolloutState,
    step_rollout,
)
from capture_ledger.spec.crash.durability import DiskImage
from capture_ledger.spec.kit.crash._judgement import CrashPoint
from capture_ledger.spec.kit.crash._observation import Observation
from capture_ledger.spec.kit.crash._reader import IdReading, Reading, TargetReader

__all__ = ["ReadBack", "observation_of", "state_of"]


def _reads_as(state: RolloutState, value: ManifestValue) -> bool:
    """Whether ``manifest`` reads ``value`` from ``state``, as the model says (R-READ-1..3)."""
    return step_rollout(state, "", ReadManifest(""))[1] == Ok(value)


def _model_call_id(canonical: str) -> str:
    import json

    try:
        value = json.loads(canonical)
    except ValueError:
        return ""
    return str(value.get("model_call_id", "")) if isinstance(value, dict) else ""


def state_of(
    reading: IdReading, allowed: Sequence[RolloutState] = ()
) -> tuple[RolloutState | None, tuple[str, ...]]:
    """The state ``reading`` says the ID is in (``None`` when it says none), and what disagrees.

    Args:
        reading: the calls' outcomes for one ID.
        allowed: states to prefer when the manifest matches one (records and failures interleaved as
            they are there).

    Returns:
        The state and the disagreements (each a sentence; empty when the calls agree).
    """
    problems: list[str] = []
    for name, outcome in (
        ("manifest", reading.manifest),
        ("has_rows", reading.has_rows),
        ("admit", reading.admit),
    ):
        if outcome is not None and outcome[0] == "raised":
            problems.append(f"{name} raised {outcome[1]}")
    if problems:
        return None, tuple(problems)
    fenced = reading.admit is not None and reading.admit == ("ok", False)
    state: RolloutState | None
    if reading.manifest[0] == "retired":
        state = RETIRED
    else:
        records, failures = reading.manifest[1]
        value = ManifestValue(tuple(records), tuple(failures))
        if not records and not failures:
            state = None if fenced else ABSENT
            if fenced:
                problems.append("admit refused an ID whose manifest is empty and not retired")
        else:
            match = [s for s in allowed if isinstance(s, Live) and s.fenced == fenced and _reads_as(s, value)]
            entries = tuple(RecordEntry(_model_call_id(r), r) for r in records) + tuple(
                FailureEntry(m, r) for m, r in failures
            )
            state = match[0] if match else Live(entries, fenced)
    if state is not None:
        live = isinstance(state, Live)
        if reading.has_rows is not None:
            expected = ("retired",) if state == RETIRED else ("ok", live)
            if tuple(reading.has_rows) != expected:
                problems.append(f"has_rows gave {reading.has_rows!r} for {state!r}")
        if reading.admit is not None and state == RETIRED and reading.admit != ("ok", False):
            problems.append("admit admitted a Retired ID")
    return state, tuple(problems)


def observation_of(
    reading: Reading, ids: Sequence[str], allowed: Mapping[str, Sequence[RolloutState]]
) -> Observation:
    """The study's ``Observation`` of a reading: the states, disagreements as API mismatches (R-STATE-3),
    or why the image could not be read at all."""
    if reading.unreadable is not None:
        return Observation(states=(), mismatches=(), findings=(), unreadable=reading.unreadable, culprit=None)
    states: list[tuple[str, RolloutState]] = []
    mismatches: list[str] = []
    by_id = dict(reading.ids)
    for rid in ids:
        state, problems = state_of(by_id[rid], allowed.get(rid, ()))
        if state is None:
            return Observation(
                states=(),
                mismatches=(),
                findings=(),
                unreadable=f"{rid} reads as no state: {'; '.join(problems)}",
                culprit=rid,
            )
        states.append((rid, state))
        mismatches += [f"{rid}: {problem}" for problem in problems]
    if reading.closed is not None:
        mismatches.append(f"{ids[0]}: closing the handle raised {reading.closed}")
    return Observation(states=tuple(states), mismatches=tuple(mismatches), findings=())


class ReadBack:
    """A ``TargetReader`` as the crash layer's image reader (``spec.kit.crash.ImageReader``): each image's
    reading turned into an ``Observation`` for the IDs and allowed states of its crash point."""

    def __init__(self, reader: TargetReader) -> None:
        self.reader = reader

    @property
    def reads(self) -> int:
        """Distinct images the child has read so far."""
        return self.reader.reads

    def read_images(self, images: Sequence[DiskImage], point: CrashPoint) -> list[Observation]:
        """What fresh handles of the target read from each of ``images``, as observations."""
        ids = tuple(point.allowed)
        allowed = {rid: tuple(states) for rid, states in point.allowed.items()}
        return [observation_of(r, ids, allowed) for r in self.reader.read_many(images, ids)]
