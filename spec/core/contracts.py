"""CrossHair contracts on the pure functions of the spec (SPEC.md §IDs, §Batches, §Operations, R-STATE-3).

Each function below calls one pure function of the spec — ``validate_rollout_id``, ``validate_rollout_ids``,
``step`` for retire, delete, writes and every operation, ``step_rollout`` for one rollout's validation,
``abstract`` — on inputs CrossHair makes symbolic, and states the requirement as PEP 316 ``pre:`` /
``post:`` lines in its docstring. The default ``crosshair check capture_ledger.spec.core.contracts`` reads
that syntax (``tools/crosshair-check`` bounds its time); an exception that a contract does not declare is a
counterexample too, so every contract also checks that the function it calls is total on its domain.

Inputs are kept small so that the analysis finishes in seconds. States, batches and rows are chosen by
symbolic integers taken modulo the size of a small pool (three valid IDs and one invalid one; Absent, Live,
Live fenced, Retired; a new, identical, conflicting and invalid row): the modulo, unlike a range
precondition, wastes no path on inputs the precondition would refuse, and CrossHair then finds a broken
contract within its first few paths (``tests/spec/core/crosshair_targets/wrong_contract.py``). Only the
ID-rule
contracts take symbolic strings (of at most four characters; the length rule separately, with a symbolic
length).

Not guaranteed: CrossHair's search is bounded by time, so "no counterexample" means none was found in the
budget, not a proof. The same properties also run under Hypothesis (``tests/spec/core/test_crosshair.py``).
"""

from __future__ import annotations

from capture_ledger.spec.core.abstraction import ConcreteRollout, abstract
from capture_ledger.spec.core.errors import InvalidRolloutIdError
from capture_ledger.spec.core.ids import MAX_ROLLOUT_ID_LENGTH, validate_rollout_id, validate_rollout_ids
from capture_ledger.spec.core.model import (
    ABSENT,
    RETIRED,
    VALIDATION_ERRORS,
    Absent,
    Admit,
    Delete,
    Discarded,
    Err,
    ErrorKind,
    FailureEntry,
    HasRows,
    LedgerState,
    Live,
    Ok,
    Operation,
    ReadManifest,
    Record,
    RecordEntry,
    RecordFailure,
    Removal,
    Result,
    Retire,
    Retired,
    RolloutState,
    step,
    step_rollout,
)
from capture_ledger.spec.core.rows import canonical_json

__all__ = [
    "POOL",
    "ROWS",
    "STATES",
    "abstraction_is_total",
    "bare_string_batch",
    "batch_of",
    "delete_step",
    "failed_step_changes_nothing",
    "first_seen",
    "follows_id_rule",
    "id_length_rule",
    "id_validation",
    "retire_step",
    "rollout_validation_is_stateless",
    "state_of",
    "validate_batch",
    "validate_batch_of_strings",
    "write_to_retired",
]

# Names that only the PEP 316 conditions in docstrings use: CrossHair evaluates them in this module.
_CONDITION_NAMES = (Absent, Discarded, Err, ErrorKind, Retired)

_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_ALLOWED = _ALNUM + "._-"

#: The IDs a symbolic batch is drawn from: three valid ones and (last) one invalid one.
POOL: tuple[str, ...] = ("a", "b", "c.1", "../x")
_VALID = POOL[:3]
_ROW: dict[str, object] = {"model_call_id": "c1", "staging_key": "a/c1"}
_ENTRIES = (RecordEntry("c1", canonical_json(_ROW)), FailureEntry("c0", "timeout"))
#: Per-ID states by number: Absent, Live, Live (fenced), Retired.
STATES: tuple[RolloutState, ...] = (ABSENT, Live(_ENTRIES), Live(_ENTRIES, fenced=True), RETIRED)
#: Rows by number: new, identical to a recorded one, conflicting with it, invalid (a tuple value).
ROWS: tuple[dict[str, object], ...] = (
    {"model_call_id": "c2", "staging_key": "a/c2"},
    _ROW,
    {"model_call_id": "c1", "staging_key": "a/other"},
    {"model_call_id": "c3", "value": (1, 2)},
)
#: Single-ID arguments by number: a valid ID, an invalid one, a non-string (R-ID-2).
_SINGLE: tuple[object, ...] = ("a", "../x", 7)


def follows_id_rule(candidate: str) -> bool:
    """R-ID-1 written without the regular expression: length 1..200, alphanumeric first, then ``._-`` too."""
    return (
        1 <= len(candidate) <= MAX_ROLLOUT_ID_LENGTH
        and candidate[0] in _ALNUM
        and all(character in _ALLOWED for character in candidate)
    )


def state_of(k0: int, k1: int, k2: int) -> LedgerState:
    """The state in which the valid IDs of ``POOL`` are in ``STATES[k0 % 4]``, ``STATES[k1 % 4]``, ..."""
    kinds = (k0, k1, k2)
    return LedgerState.of({rid: STATES[kinds[i] % len(STATES)] for i, rid in enumerate(_VALID)})


def batch_of(picks: list[int], *, valid_only: bool = True) -> list[str]:
    """The batch ``[POOL[p % n] for p in picks]``, with ``n`` 3 (valid IDs only) or 4."""
    size = len(_VALID) if valid_only else len(POOL)
    return [POOL[p % size] for p in picks]


def first_seen(batch: list[str]) -> list[str]:
    """R-BATCH-3 written without a dict: each ID where it first appears, later repeats dropped."""
    return [rid for index, rid in enumerate(batch) if rid not in batch[:index]]


def _removal(result: Result) -> Removal:
    assert isinstance(result, Ok) and isinstance(result.value, Removal), result
    return result.value


def _staging_key(row: int) -> str | None:
    value = ROWS[row % len(ROWS)].get("staging_key")
    return value if isinstance(value, str) else None


# --------------------------------------------------------------------------------------------- IDs
def id_validation(candidate: str) -> bool:
    """``validate_rollout_id`` accepts exactly the strings that follow the ID rule (R-ID-1).

    pre: len(candidate) <= 4
    post: __return__ == follows_id_rule(candidate)
    """
    try:
        return validate_rollout_id(candidate) == candidate
    except InvalidRolloutIdError:
        return False


def id_length_rule(length: int) -> bool:
    """The length clause of R-ID-1: a run of valid characters is an ID exactly when 1 to 200 long.

    pre: 0 <= length <= 2 * MAX_ROLLOUT_ID_LENGTH
    post: __return__ == (1 <= length <= MAX_ROLLOUT_ID_LENGTH)
    """
    try:
        validate_rollout_id("a" * length)
    except InvalidRolloutIdError:
        return False
    return True


def validate_batch(picks: list[int], as_tuple: bool) -> list[str] | None:
    """``validate_rollout_ids`` (list or tuple) de-duplicates in first-seen order, and fails the whole
    batch exactly when it holds an invalid ID (R-BATCH-2, R-BATCH-3); ``None`` stands for the failure.

    pre: len(picks) <= 5
    post: __return__ == (None if POOL[-1] in batch_of(picks, valid_only=False) else first_seen(batch_of(picks, valid_only=False)))
    """  # noqa: E501 - one PEP 316 condition per line
    batch = batch_of(picks, valid_only=False)
    try:
        return validate_rollout_ids(tuple(batch) if as_tuple else batch)
    except InvalidRolloutIdError:
        return None


def validate_batch_of_strings(batch: list[str]) -> bool:
    """On symbolic strings: the result is the batch de-duplicated, or the batch held an invalid ID.

    pre: len(batch) <= 3 and all(len(rid) <= 2 for rid in batch)
    post: __return__
    """
    try:
        checked = validate_rollout_ids(batch)
    except InvalidRolloutIdError:
        return not all(follows_id_rule(rid) for rid in batch)
    return all(follows_id_rule(rid) for rid in batch) and checked == first_seen(batch)


def bare_string_batch(batch: str) -> bool:
    """A bare string is never a batch: exactly ``TypeError``, not one-character IDs (R-BATCH-1).

    pre: len(batch) <= 3
    post: __return__
    """
    try:
        validate_rollout_ids(batch)
    except TypeError as error:
        return not isinstance(error, ValueError)
    return False


# ---------------------------------------------------------------------------------------- operations
def _moved(before: LedgerState, batch: list[str], after: LedgerState, target: type[RolloutState]) -> bool:
    # Every ID of the batch is in ``target``; every other ID is as it was.
    return all(isinstance(after.get(r), target) for r in batch) and all(
        after.get(r) == before.get(r) for r in _VALID if r not in batch
    )


def _reported(before: LedgerState, batch: list[str], removal: Removal) -> bool:
    # Live IDs (fenced or not) are ``removed``, the others ``absent``, each in first-seen order; so
    # ``removed + absent`` is the de-duplicated batch as a set, in order, without repeats.
    distinct = first_seen(batch)
    removed = [r for r in distinct if isinstance(before.get(r), Live)]
    absent = [r for r in distinct if not isinstance(before.get(r), Live)]
    return list(removal.removed) == removed and list(removal.absent) == absent


def retire_step(k0: int, k1: int, k2: int, picks: list[int]) -> tuple[LedgerState, Removal]:
    """After retire every ID of the batch is Retired and no other ID changed; Live IDs are reported
    ``removed`` and the others ``absent``, in first-seen order (R-RETIRE-1..4, R-BATCH-3).

    pre: len(picks) <= 4
    post: _moved(state_of(k0, k1, k2), batch_of(picks), __return__[0], Retired)
    post: _reported(state_of(k0, k1, k2), batch_of(picks), __return__[1])
    """
    after, result = step(state_of(k0, k1, k2), Retire(batch_of(picks)))
    return after, _removal(result)


def delete_step(k0: int, k1: int, k2: int, picks: list[int]) -> tuple[LedgerState, Removal]:
    """After delete every ID of the batch is Absent and no other ID changed; Live IDs (fenced or not) are
    reported ``removed`` and the others ``absent``, in first-seen order (R-DELETE-1..3, R-BATCH-3).

    pre: len(picks) <= 4
    post: _moved(state_of(k0, k1, k2), batch_of(picks), __return__[0], Absent)
    post: _reported(state_of(k0, k1, k2), batch_of(picks), __return__[1])
    """
    after, result = step(state_of(k0, k1, k2), Delete(batch_of(picks)))
    return after, _removal(result)


def _operation(choice: int, picks: list[int]) -> Operation:
    # ``choice`` picks the operation (modulo 7) and its argument (the quotient, modulo 12).
    code, argument = choice % 7, choice // 7 % 12
    rollout_id = _SINGLE[argument % len(_SINGLE)]
    if code == 0:
        return Record(rollout_id, ROWS[argument % len(ROWS)])
    if code == 1:
        return RecordFailure(rollout_id, ("c0", "c3", "")[argument % 3], "timeout")
    if code == 2:
        return Admit(rollout_id, "c9")
    if code == 3:
        return ReadManifest(rollout_id)
    if code == 4:
        return HasRows(rollout_id)
    batch: object = batch_of(picks, valid_only=False)
    if argument % 4 == 1:
        batch = "a"  # R-BATCH-1: a bare string
    elif argument % 4 == 3:
        batch = tuple(batch_of(picks, valid_only=False))
    return Retire(batch) if code == 5 else Delete(batch)


def failed_step_changes_nothing(
    k0: int, k1: int, k2: int, choice: int, picks: list[int]
) -> tuple[LedgerState, Result]:
    """Any operation, valid or not: ``step`` is total, a failed step leaves the state unchanged, and reads
    and admission never change it (R-BATCH-2, R-WRITE-1, R-WRITE-3, R-READ-3, R-ADMIT-1).

    pre: len(picks) <= 3
    post: __return__[0] == state_of(k0, k1, k2) or (isinstance(__return__[1], Ok) and choice % 7 not in (2, 3, 4))
    """  # noqa: E501 - one PEP 316 condition per line
    return step(state_of(k0, k1, k2), _operation(choice, picks))


def write_to_retired(row: int, failure: bool) -> tuple[RolloutState, Result]:
    """A write to a Retired rollout leaves it Retired: discarded with one warning naming its staging key,
    or refused as invalid input (R-WRITE-4, R-WRITE-5, R-WRITE-1).

    post: isinstance(__return__[0], Retired) and __return__[1] in (Ok(Discarded("a", None if failure else _staging_key(row))), Err(ErrorKind.INVALID_INPUT))
    """  # noqa: E501 - one PEP 316 condition per line
    operation: Operation = (
        RecordFailure("a", "c0", "timeout") if failure else Record("a", ROWS[row % len(ROWS)])
    )
    after, result = step(LedgerState.of({"a": RETIRED}), operation)
    return after.get("a"), result


def _validation(result: Result) -> ErrorKind | None:
    # The validation error ``result`` is, or ``None`` (a success, or an error that depends on the state).
    return result.kind if isinstance(result, Err) and result.kind in VALIDATION_ERRORS else None


def rollout_validation_is_stateless(k: int, choice: int) -> tuple[Result, Result]:
    """One rollout's step fails validation from any state exactly when it does from Absent, with the same
    error, and from Absent it fails only validation: the linearizability checker validates each call once,
    before it knows any state (``rollout_transition``; R-WRITE-1, R-WRITE-7, R-ADMIT-1, R-CONC-1).

    post: _validation(__return__[0]) == _validation(__return__[1])
    post: isinstance(__return__[0], Ok) or _validation(__return__[0]) is not None
    """
    operation = _operation(choice % 5 + 7 * (choice // 5), [])  # single-ID operations on "a"
    _, from_absent = step_rollout(ABSENT, "a", operation)
    _, from_state = step_rollout(STATES[k % len(STATES)], "a", operation)
    return from_absent, from_state


# ---------------------------------------------------------------------------------------- abstraction
def _rule(rows: int, fenced: bool) -> RolloutState:
    # R-STATE-3 written out, independently of ``abstract_rollout``.
    if rows:
        return Live(_ENTRIES[:rows], fenced)
    return RETIRED if fenced else ABSENT


def abstraction_is_total(rows: list[int], fences: list[bool]) -> LedgerState:
    """Every snapshot maps to one state: rows → Live (fenced as stored), a fence alone → Retired,
    neither → Absent and unlisted (R-STATE-3).

    pre: len(rows) == len(fences) <= 3
    post: all(__return__.get(r) == _rule(rows[i] % 3, fences[i]) for i, r in enumerate(_VALID[: len(rows)])) and all(not isinstance(s, Absent) for _, s in __return__.rollouts)
    """  # noqa: E501 - one PEP 316 condition per line
    snapshot = {
        rid: ConcreteRollout(_ENTRIES[: rows[i] % 3], fences[i]) for i, rid in enumerate(_VALID[: len(rows)])
    }
    return abstract(snapshot)
