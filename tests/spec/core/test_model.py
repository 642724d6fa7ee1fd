"""The sequential model and the ID rules, one example per requirement (SPEC.md R-ID, R-WRITE, ...)."""

from __future__ import annotations

import json
import pickle

import pytest
from capture_ledger.spec import (
    MAX_ROLLOUT_ID_LENGTH,
    CaptureLedgerError,
    ConflictingRecordError,
    InvalidRolloutIdError,
    RolloutRetiredError,
    staging_key,
    validate_rollout_id,
    validate_rollout_ids,
)
from capture_ledger.spec.core.abstraction import ConcreteRollout, abstract
from capture_ledger.spec.core.model import (
    ABSENT,
    RETIRED,
    Admit,
    Delete,
    Discarded,
    Err,
    ErrorKind,
    HasRows,
    LedgerState,
    Live,
    ManifestValue,
    Ok,
    Operation,
    ReadManifest,
    Record,
    RecordEntry,
    RecordFailure,
    Removal,
    Result,
    Retire,
    step,
)
from capture_ledger.spec.kit.sequential import INVALID_ROLLOUT_IDS, INVALID_ROWS, json_values, rollout_ids
from hypothesis import given
from hypothesis import strategies as st


def run(*ops: Operation, state: LedgerState | None = None) -> tuple[LedgerState, list[Result]]:
    current = state or LedgerState()
    results = []
    for op in ops:
        current, result = step(current, op)
        results.append(result)
    return current, results


ROW = {"model_call_id": "m0", "staging_key": "s0"}


@given(json_values())
def test_generated_json_values_are_json_documents(value: object) -> None:
    assert json.loads(json.dumps(value, allow_nan=False)) == value


@given(rollout_ids())
def test_r_id_1_generated_ids_are_valid(rollout_id: str) -> None:
    assert validate_rollout_id(rollout_id) == rollout_id
    assert 1 <= len(rollout_id) <= MAX_ROLLOUT_ID_LENGTH


@pytest.mark.parametrize("bad", INVALID_ROLLOUT_IDS)
def test_r_id_1_2_invalid_ids_raise(bad: object) -> None:
    with pytest.raises(InvalidRolloutIdError) as caught:
        validate_rollout_id(bad)
    assert isinstance(caught.value, ValueError) and caught.value.rollout_id == bad


def test_r_id_3_staging_key() -> None:
    assert staging_key("r-1", "m0") == "r-1/m0"


def test_r_batch_1_bare_string_and_non_sequences_are_type_errors() -> None:
    for batch in ("abc", b"abc", {"a"}, 3, None):
        with pytest.raises(TypeError) as caught:
            validate_rollout_ids(batch)
        assert not isinstance(caught.value, ValueError)


def test_r_batch_2_3_validation_and_first_seen_order() -> None:
    assert validate_rollout_ids(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]
    assert validate_rollout_ids(("a",)) == ["a"]
    with pytest.raises(InvalidRolloutIdError):
        validate_rollout_ids(["a", "../b"])


def test_r_write_2_and_r_read_2_rows_in_append_order() -> None:
    state, results = run(
        Record("a", ROW), RecordFailure("a", "m1", "timeout"), Record("a", {"model_call_id": "m2"})
    )
    assert all(r == Ok(None) for r in results)
    _, (manifest,) = run(ReadManifest("a"), state=state)
    assert manifest == Ok(
        ManifestValue(
            ('{"model_call_id":"m0","staging_key":"s0"}', '{"model_call_id":"m2"}'), (("m1", "timeout"),)
        )
    )


def test_r_write_3_identical_is_a_no_op_and_different_conflicts_canonically() -> None:
    state, results = run(
        Record("a", {"model_call_id": "m", "v": 1}), Record("a", {"v": 1, "model_call_id": "m"})
    )
    assert results == [Ok(None), Ok(None)]
    assert state.get("a") == Live((RecordEntry("m", '{"model_call_id":"m","v":1}'),))
    for other in (1.0, True):
        after, (result,) = run(Record("a", {"model_call_id": "m", "v": other}), state=state)
        assert result == Err(ErrorKind.CONFLICTING_RECORD) and after == state


def test_r_write_4_5_write_to_retired_is_discarded_naming_the_staging_key() -> None:
    state, results = run(Retire(["a"]), Record("a", ROW), RecordFailure("a", "m", "x"))
    assert results[1:] == [Ok(Discarded("a", "s0")), Ok(Discarded("a", None))]
    assert state.get("a") == RETIRED


def test_r_write_6_fenced_live_accepts_writes() -> None:
    fenced = LedgerState.of({"a": Live((RecordEntry("m0", '{"model_call_id":"m0"}'),), fenced=True)})
    state, (result,) = run(Record("a", {"model_call_id": "m1"}), state=fenced)
    assert result == Ok(None)
    live = state.get("a")
    assert isinstance(live, Live) and live.fenced and len(live.entries) == 2


def test_r_write_7_identical_failure_once() -> None:
    state, _ = run(RecordFailure("a", "m", "x"), RecordFailure("a", "m", "x"), RecordFailure("a", "m", "y"))
    _, (manifest,) = run(ReadManifest("a"), state=state)
    assert manifest == Ok(ManifestValue((), (("m", "x"), ("m", "y"))))


@pytest.mark.parametrize("row", INVALID_ROWS, ids=repr)
def test_r_write_1_invalid_rows_change_nothing(row: object) -> None:
    state, (result,) = run(Record("a", row))
    assert result == Err(ErrorKind.INVALID_INPUT) and state == LedgerState()


def test_r_admit_1_2() -> None:
    fenced = LedgerState.of({"a": Live((RecordEntry("m0", "{}"),), fenced=True), "b": RETIRED})
    _, results = run(Admit("a", "m"), Admit("b", "m"), Admit("c", "m"), state=fenced)
    assert results == [Ok(None), Ok(None), Ok("c/m")]


def test_r_read_1_3_4() -> None:
    _, results = run(HasRows("a"), ReadManifest("a"), Retire(["a"]), ReadManifest("a"), HasRows("a"))
    assert results[:2] == [Ok(False), Ok(ManifestValue())]
    assert results[3:] == [Err(ErrorKind.ROLLOUT_RETIRED)] * 2


def test_r_retire_and_r_delete_transitions() -> None:
    state, results = run(
        Record("a", ROW),
        Retire(["a", "b", "a"]),
        Retire(["a", "b"]),
        Record("c", ROW),
        Delete(["a", "c", "d"]),
    )
    assert results[1] == Ok(Removal(("a",), ("b",)))
    assert results[2] == Ok(Removal((), ("a", "b")))
    assert results[4] == Ok(Removal(("c",), ("a", "d")))
    assert state.get("a") == ABSENT and state.get("b") == RETIRED and state.get("c") == ABSENT


def test_r_retire_3_fenced_live_is_completed_and_reported_removed() -> None:
    fenced = LedgerState.of({"a": Live((RecordEntry("m0", "{}"),), fenced=True)})
    state, (result,) = run(Retire(["a"]), state=fenced)
    assert result == Ok(Removal(("a",), ())) and state.get("a") == RETIRED


def test_r_delete_3_reuse_after_delete() -> None:
    _, results = run(Retire(["a"]), Delete(["a"]), Record("a", ROW), HasRows("a"))
    assert results[-1] == Ok(True)


def test_r_batch_2_invalid_id_changes_nothing_and_r_batch_4_empty_batch() -> None:
    state, results = run(Record("a", ROW), Retire(["a", "no/slash"]), Retire("a"), Retire([]), Delete([]))
    assert results[1:] == [
        Err(ErrorKind.INVALID_ROLLOUT_ID),
        Err(ErrorKind.TYPE_ERROR),
        Ok(Removal()),
        Ok(Removal()),
    ]
    assert isinstance(state.get("a"), Live)


@given(st.lists(st.booleans()), st.booleans())
def test_r_state_3_abstraction_is_total(rows: list[bool], fenced: bool) -> None:
    entries = tuple(RecordEntry(f"m{i}", "{}") for i, _ in enumerate(rows))
    state = abstract({"a": ConcreteRollout(entries, fenced)})
    expected = Live(entries, fenced) if entries else (RETIRED if fenced else ABSENT)
    assert state.get("a") == expected


def test_r_err_errors_pickle_keep_fields_and_inherit_builtins() -> None:
    errors: list[CaptureLedgerError] = [
        RolloutRetiredError("a"),
        InvalidRolloutIdError("../a", "slash"),
        ConflictingRecordError("a", "m"),
    ]
    for error in errors:
        clone = pickle.loads(pickle.dumps(error))
        assert type(clone) is type(error) and str(clone) == str(error)
        assert vars(clone) == vars(error)
    assert not isinstance(RolloutRetiredError("a"), ValueError)
    assert isinstance(ConflictingRecordError("a", "m"), ValueError)


def test_operation_reprs_are_python() -> None:
    op = Retire(["a", "b"])
    assert eval(repr(op)) == op  # the counterexample format is evaluable Python
