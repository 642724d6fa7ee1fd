"""Splitting a history into per-ID sub-operations for the linearizability checker (SPEC.md R-CONC-1,
R-BATCH-2..3, R-KIT-9): ``partition``, re-exported by ``linearizability``, which says what it is for.

One pass over the events: each is checked for being an event of a history at all (a ``ValueError`` naming
it otherwise), validated once per distinct call by the model's own ``rollout_transition`` (operations whose
arguments are equal *with their exact types* share the validation: ``1``, ``1.0`` and ``True`` never do, nor
do floats at all), and split into one sub-operation per rollout ID (two for a retire: its fence and its
completion). A result wrong in any state is a violation of its own, reported once the rest of the history
is known to be well formed (a malformed event is reported first, wherever it is).

Not guaranteed: anything about the order of calls; that is the search's (``_search``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from capture_ledger.spec.concurrency._search import SubOperation
from capture_ledger.spec.concurrency._witness import LinearizabilityWitness, counterexample
from capture_ledger.spec.concurrency.history import Event, results_match
from capture_ledger.spec.core.model import (
    Admit,
    Delete,
    Discarded,
    Err,
    ErrorKind,
    HasRows,
    Live,
    ManifestValue,
    Operation,
    ReadManifest,
    Record,
    RecordFailure,
    Removal,
    Result,
    Retire,
    RolloutState,
    Transition,
    retire_one,
    rollout_ids_of,
    rollout_transition,
)
from capture_ledger.spec.core.model import Ok as _ModelOk
from capture_ledger.spec.core.verdicts import Violation

__all__ = ["REQUIREMENT", "partition", "violation"]

#: The requirement a non-linearizable history breaks.
REQUIREMENT = "R-CONC-1"


# ------------------------------------------------------------------------------------ sub-operations
def _retire_fence(state: RolloutState) -> tuple[RolloutState, Result]:
    # Phase 1 of a retire on one ID: a Live rollout becomes fenced (reads and writes as Live, admission
    # refused, R-STATE-2); any other becomes Retired. ``removed`` is decided here.
    if isinstance(state, Live):
        return Live(state.entries, fenced=True), _ModelOk(True)
    return retire_one(state)[0], _ModelOk(False)


def _retire_complete(state: RolloutState) -> tuple[RolloutState, Result]:
    # Phase 2: only a rollout still fenced is completed; one deleted (and maybe re-used) meanwhile is left
    # alone (R-CONC-3). Composed with the fence, this is ``retire_one`` on every state.
    if isinstance(state, Live) and state.fenced:
        return retire_one(state)[0], _ModelOk(None)
    return state, _ModelOk(None)


def _removal_shape_error(batch: list[str], removal: object) -> str | None:
    if not isinstance(removal, Removal):
        return f"returned {removal!r}, not a removal"
    in_order = [i for i in batch if i in removal.removed] == list(removal.removed)
    in_order = in_order and [i for i in batch if i in removal.absent] == list(removal.absent)
    if not in_order or sorted((*removal.removed, *removal.absent)) != sorted(batch):
        return (
            f"reported removed={list(removal.removed)} absent={list(removal.absent)}, which is not the batch "
            f"{batch} split in first-seen order (R-BATCH-3)"
        )
    return None


def _prepare(op: Operation) -> Err | list[tuple[str, Transition]]:
    """Validate ``op`` once, as ``model.step`` does: the validation error (R-ID-1, R-BATCH-1..3, then
    R-WRITE-1, R-WRITE-7), or each of its IDs with the model's transition of that ID
    (``model.rollout_transition``; for a retire, its fence, R-STATE-2)."""
    ids = rollout_ids_of(op)
    if isinstance(ids, Err):
        return ids
    if isinstance(op, Retire):
        return [(rollout_id, _retire_fence) for rollout_id in ids]
    prepared: list[tuple[str, Transition]] = []
    for rollout_id in ids:
        transition = rollout_transition(rollout_id, op)
        if isinstance(transition, Err):
            return transition
        prepared.append((rollout_id, transition))
    return prepared


_OPERATIONS = (Record, RecordFailure, Admit, ReadManifest, HasRows, Retire, Delete)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _malformed(event: object) -> str | None:
    """Why ``event`` is not an observation of a call at all (R-KIT-9), or ``None``."""
    if not isinstance(event, Event):
        return f"{event!r} is not an Event"
    if not isinstance(event.op, _OPERATIONS):
        return f"{event.op!r} is not an operation"
    if not _finite(event.invoked) or not (event.returned is None or _finite(event.returned)):
        return f"its times must be finite numbers: invoked={event.invoked!r}, returned={event.returned!r}"
    if event.returned is not None and event.returned < event.invoked:
        return f"it returned before it was invoked: {event!r}"
    if event.returned is None and event.result is not None:
        return f"it has a result but no return time: {event!r}"
    result = event.result
    if result is not None and not isinstance(result, _ModelOk | Err):
        return f"its result {result!r} is neither Ok nor Err"
    if isinstance(result, Err) and not isinstance(result.kind, ErrorKind):
        return f"its result {result!r} names no ErrorKind"
    return None


def _value_shape_error(op: Operation, value: object) -> str | None:
    """Why a returned value cannot be ``op``'s whatever the state, or ``None`` (R-KIT-9)."""
    if isinstance(op, Record | RecordFailure):
        fits, what = value is None or isinstance(value, Discarded), "None (a write returns None)"
    elif isinstance(op, Admit):
        fits, what = value is None or isinstance(value, str), "a staging key or None"
    elif isinstance(op, HasRows):
        fits, what = isinstance(value, bool), "a bool"
    else:
        fits, what = isinstance(value, ManifestValue), "a manifest"
    return None if fits else f"{op!r} returned {value!r}, not {what}"


def violation(witness: LinearizabilityWitness) -> Violation:
    """The violation of R-CONC-1 that ``witness`` shows, its counterexample the witness as text."""
    return Violation(requirement=REQUIREMENT, counterexample=counterexample(witness), witness=witness)


def _alone(event: Event, problem: str) -> Violation:
    """A result no state explains: a violation whose witness is the one event."""
    return violation(LinearizabilityWitness(rollout_id=None, events=(event,), explanation=problem))


def _cache_key(op: Operation, kind: type) -> object:
    """A key under which ``_prepare(op)`` is shared with every operation of the same key, or ``None``.

    Type-exact: the operation's exact type and its arguments with their exact types, so ``1``, ``1.0`` and
    ``True`` (equal, and equal in hash) never share a key; a float anywhere (``-0.0 == 0.0``), a nested
    value, a mapping that is not a plain ``dict``, a ``str`` subclass or a subclass of an operation takes
    no key, and is prepared on its own."""
    if kind not in _SINGLE:
        return None
    rollout_id = op.rollout_id  # type: ignore[union-attr]
    if type(rollout_id) is not str:
        return None
    if kind is Record:
        row = op.row  # type: ignore[union-attr]
        if type(row) is not dict:
            return None
        values = tuple(row.values())
        types = tuple(map(type, values))
        if _FLAT.issuperset(types) and _STR.issuperset(map(type, row)):
            return kind, rollout_id, tuple(row), values, types
        return None
    if kind is RecordFailure:
        call, reason = op.model_call_id, op.reason  # type: ignore[union-attr]
        return (kind, rollout_id, call, reason) if type(call) is str and type(reason) is str else None
    if kind is Admit:
        call = op.model_call_id  # type: ignore[union-attr]
        return (kind, rollout_id, call) if type(call) is str else None
    return kind, rollout_id  # ReadManifest, HasRows


def _prepare_batch(
    op: Retire | Delete, valid: set[str], known: dict[object, Err | list[tuple[str, Transition]]]
) -> Err | list[tuple[str, Transition]]:
    """``_prepare(op)`` for a batch, without validating again an ID already found valid (``valid``: exact
    ``str`` values only); a delete's transition of one ID is the model's, asked once per ID (``known``)."""
    ids = op.rollout_ids
    if (
        (type(ids) is list or type(ids) is tuple)
        and _STR.issuperset(map(type, ids))
        and valid.issuperset(ids)
    ):
        if type(op) is Retire:
            return [(rollout_id, _retire_fence) for rollout_id in dict.fromkeys(ids)]
        prepared: list[tuple[str, Transition]] = []
        for rollout_id in dict.fromkeys(ids):
            one = known.get((Delete, rollout_id))
            if one is None:
                one = known[(Delete, rollout_id)] = _prepare(Delete([rollout_id]))
            if isinstance(one, Err):
                return one
            prepared.extend(one)
        return prepared
    made = _prepare(op)
    if not isinstance(made, Err):
        valid.update(rollout_id for rollout_id, _ in made if type(rollout_id) is str)
    return made


def _split_fits(ids: list[tuple[str, Transition]], removal: object) -> bool:
    """A quick yes to ``_removal_shape_error`` finding nothing: ``removal`` is the batch ``ids`` split in
    first-seen order. ``False`` means: ask ``_removal_shape_error``."""
    if type(removal) is not Removal:
        return False
    removed, absent = removal.removed, removal.absent
    if type(removed) is not tuple or type(absent) is not tuple or len(removed) + len(absent) != len(ids):
        return False
    r = a = 0
    for rollout_id, _ in ids:
        if r < len(removed) and removed[r] == rollout_id:
            r += 1
        elif a < len(absent) and absent[a] == rollout_id:
            a += 1
        else:
            return False
    return True


_STR = frozenset({str})
_FLAT = frozenset({str, int, bool, type(None)})
_OPERATION_TYPES = frozenset(_OPERATIONS)
_SINGLE = frozenset({Record, RecordFailure, Admit, ReadManifest, HasRows})
_WRITES = frozenset({Record, RecordFailure})
_INF = math.inf
_REMOVED, _ABSENT = _ModelOk(True), _ModelOk(False)


def partition(events: Sequence[Event]) -> tuple[dict[str, list[SubOperation]], Violation | None]:
    """Split a history into per-ID sub-operations (R-CONC-1) and judge the results no state can explain.

    One pass: each event is checked for being a history's event at all, then validated (once per distinct
    call: operations with the same type-exact arguments share their validation, ``_cache_key``) and split.
    After a result wrong in any state, the rest is still checked for malformed events, which come first.

    Args:
        events: the history.

    Returns:
        The sub-operations of each rollout ID, in event order, and a ``Violation`` if some event's result
        is wrong whatever the state (a validation result, a value of the wrong type, or a removal that is
        not its batch split); its witness is that one event (``rollout_id=None``).

    Raises:
        ValueError: a malformed event (R-KIT-9): not an ``Event`` of an operation value, a time that is
            not a finite number, a return before the invocation, a result without a return time, or a
            result that is neither ``Ok`` nor ``Err``. The message names the event's index.
    """
    parts: dict[str, list[SubOperation]] = {}
    invalid: Violation | None = None
    known: dict[object, Err | list[tuple[str, Transition]]] = {}
    valid: set[str] = set()
    new = tuple.__new__
    for index, event in enumerate(events):
        # The common well-formed event, checked inline; anything else goes to ``_malformed`` (which checks
        # in its own order, so the message is the same).
        if type(event) is Event:
            op, invoked, returned, result = event.op, event.invoked, event.returned, event.result
            kind = type(op)
            fine = kind in _OPERATION_TYPES and type(invoked) is float and -_INF < invoked < _INF
            if fine:
                if returned is None:
                    fine = result is None
                else:
                    fine = type(returned) is float and invoked <= returned < _INF
                    fine = fine and (
                        result is None
                        or type(result) is _ModelOk
                        or (type(result) is Err and type(result.kind) is ErrorKind)
                    )
        else:
            fine = False
        if not fine:
            problem = _malformed(event)
            if problem is not None:
                raise ValueError(f"event {index} is malformed: {problem}")
            op, invoked, returned, result = event.op, event.invoked, event.returned, event.result
            kind = type(op)
        if invalid is not None:
            continue  # a result wrong in any state was found: only malformed events are looked for now
        if returned is None:
            returned = _INF
        batch = kind is Retire or kind is Delete
        if batch:
            prepared = _prepare_batch(op, valid, known)  # type: ignore[arg-type]
        else:
            key = _cache_key(op, kind)
            if key is None:
                prepared = _prepare(op)
                batch = isinstance(op, Retire | Delete)
            else:
                prepared = known.get(key)  # type: ignore[assignment]
                if prepared is None:
                    prepared = known[key] = _prepare(op)
                    if not isinstance(prepared, Err):
                        valid.add(op.rollout_id)
        if isinstance(prepared, Err):
            if result is not None and not results_match(prepared, result):
                problem = f"{op!r} must fail validation with {prepared!r} but returned {result!r}"
                invalid = _alone(event, problem)
            continue  # rejected by validation: changed nothing anywhere (R-BATCH-2)
        if batch:
            if isinstance(result, Err):
                problem = f"{op!r} can only fail validation, but returned {result!r}"
                invalid = _alone(event, problem)
                continue
            removed: tuple[str, ...] = ()
            if result is not None:
                if not _split_fits(prepared, result.value):
                    shape = _removal_shape_error([rollout_id for rollout_id, _ in prepared], result.value)
                    if shape is not None:
                        invalid = _alone(event, f"{op!r} {shape}")
                        continue
                assert isinstance(result.value, Removal)  # checked by _removal_shape_error
                removed = result.value.removed
            retire = isinstance(op, Retire)
            stage = "fence" if retire else ""
            for rollout_id, apply in prepared:
                observed = None if result is None else _REMOVED if rollout_id in removed else _ABSENT
                part = parts.get(rollout_id)
                if part is None:
                    part = parts[rollout_id] = []
                part.append(
                    new(SubOperation, (index, rollout_id, invoked, returned, apply, observed, op, stage))
                )
                if retire:
                    # The second point, right after the fence in the list (``_search.search`` relies on it).
                    part.append(
                        new(
                            SubOperation,
                            (index, rollout_id, invoked, returned, _retire_complete, None, op, "complete"),
                        )
                    )
            continue
        if type(result) is _ModelOk or isinstance(result, _ModelOk):
            value = result.value
            if not (
                (value is None and (kind in _WRITES or kind is Admit))
                or (kind is ReadManifest and type(value) is ManifestValue)
                or (kind is HasRows and type(value) is bool)
                or (kind is Admit and type(value) is str)
            ):
                shape = _value_shape_error(op, value)
                if shape is not None:
                    invalid = _alone(event, shape)
                    continue
                if isinstance(value, Discarded):
                    result = _ModelOk(None)  # a recorder that kept the model's value: a discard returns None
        [(rollout_id, apply)] = prepared
        part = parts.get(rollout_id)
        if part is None:
            part = parts[rollout_id] = []
        part.append(new(SubOperation, (index, rollout_id, invoked, returned, apply, result, op, "")))
    return parts, invalid
