"""The sequential model of the capture ledger (SPEC.md §States and §Operations).

A pure, total function ``step(state, operation) -> (state, result)`` over frozen values. Errors are
values (``Err(ErrorKind...)``); implementations raise the matching exceptions (``ErrorKind.matches``).
Every operation of the ``CaptureLedger`` protocol has an operation class here, whose ``repr`` is valid
Python, so a counterexample prints as a program.

This module is the model's public face and holds its transitions; the values they act on are defined in
three private modules and re-exported here, so ``from capture_ledger.spec.core.model import X`` is the way
to import any of them: the states (``_states``: entries, ``Absent``, ``Live``, ``Retired``,
``LedgerState``), the operations (``_operations``) and the results (``_results``: ``Ok``, ``Err``,
``ErrorKind`` and the values a result carries).

Per rollout ID the state is ``Absent``, ``Live(entries, fenced)`` or ``Retired``. ``Live(..., fenced=True)``
(rows and a fence both present) cannot be reached by sequential operations; only an interrupted or
in-flight retire reaches it, so the concurrency and crash layers need it represented (R-STATE-2).

Not modelled here: timing, durability, several handles (they are the concern of ``steps``,
``durability`` and the conformance kit), or the wording of warnings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from capture_ledger.spec.core._operations import (
    Admit,
    Delete,
    HasRows,
    Operation,
    ReadManifest,
    Record,
    RecordFailure,
    Retire,
)
from capture_ledger.spec.core._results import (
    VALIDATION_ERRORS,
    Discarded,
    Err,
    ErrorKind,
    ManifestValue,
    Ok,
    Removal,
    Result,
    manifest_value_of,
)
from capture_ledger.spec.core._states import (
    ABSENT,
    RETIRED,
    Absent,
    Entry,
    FailureEntry,
    LedgerState,
    Live,
    RecordEntry,
    Retired,
    RolloutState,
)
from capture_ledger.spec.core.errors import InvalidRolloutIdError
from capture_ledger.spec.core.ids import staging_key, validate_rollout_id, validate_rollout_ids
from capture_ledger.spec.core.rows import (
    canonical_json,
    row_staging_key,
    validate_failure,
    validate_model_call_id,
    validate_row,
)

__all__ = [
    "ABSENT",
    "RETIRED",
    "VALIDATION_ERRORS",
    "Absent",
    "Admit",
    "Delete",
    "Discarded",
    "Entry",
    "Err",
    "ErrorKind",
    "FailureEntry",
    "HasRows",
    "LedgerState",
    "Live",
    "ManifestValue",
    "Ok",
    "Operation",
    "ReadManifest",
    "Record",
    "RecordEntry",
    "RecordFailure",
    "Removal",
    "Result",
    "Retire",
    "Retired",
    "RolloutState",
    "Transition",
    "delete_one",
    "manifest_value_of",
    "retire_one",
    "rollout_ids_of",
    "rollout_transition",
    "step",
    "step_rollout",
    "step_write",
]


def _manifest_of(entries: Iterable[Entry]) -> ManifestValue:
    records: list[str] = []
    failures: list[tuple[str, str]] = []
    for entry in entries:
        if isinstance(entry, RecordEntry):
            records.append(entry.canonical)
        else:
            failures.append((entry.model_call_id, entry.reason))
    return ManifestValue(tuple(records), tuple(failures))


# ----------------------------------------------------------------------------------------- transitions
def step_write(
    state: RolloutState, rollout_id: str, entry: Entry, key: str | None = None
) -> tuple[RolloutState, Result]:
    """Apply one valid write to one rollout's state (R-WRITE-2..7).

    Args:
        state: the rollout's state before.
        rollout_id: its ID, named by ``Discarded``.
        entry: the validated row.
        key: the row's staging key, named by ``Discarded``.
    """
    if isinstance(state, Retired):
        return state, Ok(Discarded(rollout_id, key))  # R-WRITE-4, R-WRITE-5
    entries = state.entries if isinstance(state, Live) else ()
    fenced = state.fenced if isinstance(state, Live) else False
    for old in entries:
        if isinstance(entry, RecordEntry) and isinstance(old, RecordEntry):
            if old.model_call_id == entry.model_call_id:
                if old.canonical == entry.canonical:
                    return state, Ok(None)  # R-WRITE-3: identical re-record is a no-op
                return state, Err(ErrorKind.CONFLICTING_RECORD)
        elif old == entry:
            return state, Ok(None)  # R-WRITE-7: identical failure not appended twice
    return Live((*entries, entry), fenced), Ok(None)  # R-WRITE-2, R-WRITE-6


def retire_one(state: RolloutState) -> tuple[RolloutState, bool]:
    """Retire one ID (R-RETIRE-1..3): the new state and whether it had rows (``removed``)."""
    return RETIRED, isinstance(state, Live)


def delete_one(state: RolloutState) -> tuple[RolloutState, bool]:
    """Delete one ID (R-DELETE-1..2): the new state and whether it had rows (``removed``)."""
    return ABSENT, isinstance(state, Live)


def rollout_ids_of(op: Operation) -> list[str] | Err:
    """The rollout IDs an operation touches, validated: its one ID, or its batch de-duplicated in first-seen
    order (R-ID-1..2, R-BATCH-1..3); or the validation error, which depends on nothing else.

    Args:
        op: any operation value.

    Returns:
        The IDs, or ``Err`` (``INVALID_ROLLOUT_ID``, or ``TYPE_ERROR`` for a batch that is not a sequence).
    """
    try:
        if isinstance(op, Retire | Delete):
            return validate_rollout_ids(op.rollout_ids)
        return [validate_rollout_id(op.rollout_id)]
    except InvalidRolloutIdError:
        return Err(ErrorKind.INVALID_ROLLOUT_ID)
    except TypeError:
        return Err(ErrorKind.TYPE_ERROR)


def _entry_of(op: Record | RecordFailure) -> tuple[Entry, str | None] | Err:
    try:
        if isinstance(op, Record):
            row = validate_row(op.row)
            return RecordEntry(row["model_call_id"], canonical_json(row)), row_staging_key(row)
        model_call_id, reason = validate_failure(op.model_call_id, op.reason)
        return FailureEntry(model_call_id, reason), None
    except (TypeError, ValueError):
        return Err(ErrorKind.INVALID_INPUT)


#: One rollout's transition: its state before to its state after and the operation's result.
Transition = Callable[[RolloutState], tuple[RolloutState, Result]]


def _removal(one: Callable[[RolloutState], tuple[RolloutState, bool]]) -> Transition:
    def remove(state: RolloutState) -> tuple[RolloutState, Result]:
        after, removed = one(state)
        return after, Ok(removed)

    return remove


_RETIRE_ONE, _DELETE_ONE = _removal(retire_one), _removal(delete_one)


def _read(op: ReadManifest | HasRows) -> Transition:
    def read(state: RolloutState) -> tuple[RolloutState, Result]:
        if isinstance(state, Retired):
            return state, Err(ErrorKind.ROLLOUT_RETIRED)  # R-READ-3, R-READ-4
        if isinstance(op, HasRows):
            return state, Ok(isinstance(state, Live))  # R-READ-4
        return state, Ok(_manifest_of(state.entries if isinstance(state, Live) else ()))  # R-READ-1..2

    return read


def rollout_transition(rollout_id: str, op: Operation) -> Transition | Err:
    """``op``'s transition of one rollout ID, its arguments validated once; or the validation error.

    The arguments other than the IDs are validated here, before any state is known, so a validation error
    never depends on the state (R-WRITE-1, R-WRITE-7, R-ADMIT-1). ``step_rollout`` applies the transition
    to one state; the linearizability checker validates each call of a history once and applies its
    transition to every state its search tries.

    Args:
        rollout_id: the operation's ID, already validated (``rollout_ids_of``); for ``Retire`` and
            ``Delete``, one ID of the batch.
        op: the operation.

    Returns:
        The transition, whose result for ``Retire`` and ``Delete`` is ``Ok(removed)``, a ``bool`` saying
        whether the ID had rows (R-RETIRE-1..3, R-DELETE-1..2); or ``Err`` (``INVALID_INPUT``).
    """
    if isinstance(op, Retire | Delete):
        return _RETIRE_ONE if isinstance(op, Retire) else _DELETE_ONE
    if isinstance(op, Record | RecordFailure):
        made = _entry_of(op)
        if isinstance(made, Err):
            return made  # R-WRITE-1, R-WRITE-7: refused whatever the state, even Retired
        entry, key = made
        return lambda state: step_write(state, rollout_id, entry, key)
    if isinstance(op, Admit):
        try:
            admitted = staging_key(rollout_id, validate_model_call_id(op.model_call_id))
        except (TypeError, ValueError):
            return Err(ErrorKind.INVALID_INPUT)

        def admit(state: RolloutState) -> tuple[RolloutState, Result]:
            fenced = isinstance(state, Retired) or (isinstance(state, Live) and state.fenced)
            return state, Ok(None if fenced else admitted)  # R-ADMIT-1..2

        return admit
    return _read(op)


def step_rollout(state: RolloutState, rollout_id: str, op: Operation) -> tuple[RolloutState, Result]:
    """Apply one operation to one rollout ID: that ID's next state and the result. Pure and total.

    The per-ID half of ``step`` (IDs never interact, R-CONC-1): ``rollout_transition`` applied to
    ``state``, or its validation error with ``state`` unchanged.

    Args:
        state: the rollout's state before.
        rollout_id: the operation's ID, already validated (``rollout_ids_of``); for ``Retire`` and
            ``Delete``, one ID of the batch.
        op: the operation.

    Returns:
        The state after and the result (for ``Retire`` and ``Delete``, ``Ok(removed)``).
    """
    transition = rollout_transition(rollout_id, op)
    return (state, transition) if isinstance(transition, Err) else transition(state)


def step(state: LedgerState, op: Operation) -> tuple[LedgerState, Result]:
    """Apply one operation: the next state and the operation's result. Pure and total.

    Validation comes first and an error changes nothing: the rollout ID or batch (R-ID-1, R-BATCH-1..2),
    then the row or arguments (R-WRITE-1), then the state (R-WRITE-3, R-READ-3). Each ID then takes
    ``step_rollout``; a batch's IDs in first-seen order (R-BATCH-3), each reported ``removed`` or ``absent``.
    """
    ids = rollout_ids_of(op)
    if isinstance(ids, Err):
        return state, ids  # R-BATCH-1, R-BATCH-2, R-ID-1
    if not isinstance(op, Retire | Delete):
        current = state.get(ids[0])
        after, result = step_rollout(current, ids[0], op)
        return (state if after is current else state.set(ids[0], after)), result
    removed: list[str] = []
    absent: list[str] = []
    for rollout_id in ids:
        after, result = step_rollout(state.get(rollout_id), rollout_id, op)
        state = state.set(rollout_id, after)
        (removed if result == Ok(True) else absent).append(rollout_id)
    return state, Ok(Removal(tuple(removed), tuple(absent)))
