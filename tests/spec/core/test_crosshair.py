"""CrossHair has teeth, and a property of the pure model holds under Hypothesis's CrossHair backend.

``tools/crosshair-check`` runs ``crosshair check capture_ledger.spec.core.contracts`` in CI
(docs/crosshair.md).
Here: (a) with the same per-condition budget, CrossHair finds a counterexample to each deliberately wrong
contract in ``tests/spec/core/crosshair_targets/wrong_contract.py`` and confirms the correct retire contract;
(b) the
batch rules of retire and delete (R-BATCH-2..4, R-RETIRE-1..3, R-DELETE-1..2) and the ID rule (R-ID-1..2)
hold under ``settings(backend="crosshair")``, and a wrong batch rule is rejected there — pure properties,
since the backend is about 100× slower on I/O (docs/architecture.md §Facts).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import CodeType

import pytest
from capture_ledger.spec.core import contracts
from capture_ledger.spec.core.contracts import first_seen, follows_id_rule
from capture_ledger.spec.core.errors import InvalidRolloutIdError
from capture_ledger.spec.core.ids import validate_rollout_id
from capture_ledger.spec.core.model import (
    ABSENT,
    RETIRED,
    Absent,
    Delete,
    Err,
    ErrorKind,
    LedgerState,
    Live,
    Ok,
    RecordEntry,
    Removal,
    Retire,
    Retired,
    RolloutState,
    step,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TARGETS = Path(__file__).resolve().parent / "crosshair_targets"
#: The per-condition CPU budget ``tools/crosshair-check`` gives every contract.
CONDITION_SECONDS = "2"


def _crosshair(target: str, *, seconds: str) -> subprocess.CompletedProcess[str]:
    environment = dict(os.environ, PYTHONPATH=str(TARGETS))
    return subprocess.run(
        [sys.executable, "-m", "crosshair", "check", target, "--per_condition_timeout", seconds],
        capture_output=True,
        text=True,
        env=environment,
        timeout=180,
        check=False,
    )


def test_crosshair_finds_a_counterexample_to_each_wrong_contract() -> None:
    # The CI budget: a broken contract must be caught by the very check CI runs.
    run = _crosshair("wrong_contract", seconds=CONDITION_SECONDS)
    assert run.returncode == 1, run.stdout + run.stderr
    errors = [line for line in run.stdout.splitlines() if ": error: " in line]
    assert any("retire_reports_every_id_removed(" in line for line in errors), run.stdout
    assert any("ids_may_start_with_any_allowed_character(" in line for line in errors), run.stdout
    assert len(errors) == 2, run.stdout


def test_the_correct_retire_contract_passes_with_the_ci_budget() -> None:
    run = _crosshair("capture_ledger.spec.core.contracts.retire_step", seconds=CONDITION_SECONDS)
    assert run.returncode == 0, run.stdout + run.stderr


def _conditions(function: Callable[..., object]) -> tuple[list[CodeType], list[CodeType]]:
    lines = [line.strip() for line in (function.__doc__ or "").splitlines()]
    pre = [compile(line[4:].strip(), "pre", "eval") for line in lines if line.startswith("pre:")]
    post = [compile(line[5:].strip(), "post", "eval") for line in lines if line.startswith("post:")]
    assert post, f"{function.__name__} has no post-condition"
    return pre, post


def _holds(function: Callable[..., object], arguments: dict[str, object]) -> int:
    """Evaluate one contract's PEP 316 conditions concretely; 1 if the input met the preconditions."""
    pre, post = _conditions(function)
    scope = {**vars(contracts), **arguments}
    if not all(eval(condition, scope) for condition in pre):
        return 0
    scope["__return__"] = function(**arguments)
    for condition in post:
        assert eval(condition, scope), f"{function.__name__}({arguments}) breaks its contract"
    return 1


def _pick_lists(size: int, longest: int) -> list[list[int]]:
    return [list(p) for n in range(longest + 1) for p in itertools.product(range(size), repeat=n)]


def test_the_contracts_hold_on_every_input_of_their_pools() -> None:
    # CrossHair's search is bounded by time; over the finite pools the step contracts can also be checked
    # exhaustively and concretely, which also shows that their conditions are not vacuous.
    kinds = list(itertools.product(range(4), repeat=3))
    checked = 0
    for k0, k1, k2 in kinds:
        for picks in _pick_lists(3, 3):
            for function in (contracts.retire_step, contracts.delete_step):
                checked += _holds(function, {"k0": k0, "k1": k1, "k2": k2, "picks": picks})
        for choice in range(7 * 12):
            for picks in _pick_lists(4, 1) if choice % 7 >= 5 else [[]]:
                arguments = {"k0": k0, "k1": k1, "k2": k2, "choice": choice, "picks": picks}
                checked += _holds(contracts.failed_step_changes_nothing, arguments)
    for picks in _pick_lists(4, 4):
        for as_tuple in (False, True):
            checked += _holds(contracts.validate_batch, {"picks": picks, "as_tuple": as_tuple})
    for row, failure in itertools.product(range(4), (False, True)):
        checked += _holds(contracts.write_to_retired, {"row": row, "failure": failure})
    for k, choice in itertools.product(range(4), range(5 * 12)):
        checked += _holds(contracts.rollout_validation_is_stateless, {"k": k, "choice": choice})
    for size in range(4):
        for rows in itertools.product(range(3), repeat=size):
            for fences in itertools.product((False, True), repeat=size):
                arguments = {"rows": list(rows), "fences": list(fences)}
                checked += _holds(contracts.abstraction_is_total, arguments)
    for length in (0, 1, 2, 199, 200, 201, 400):
        checked += _holds(contracts.id_length_rule, {"length": length})
    for candidate in ("", "a", "Z9", "a.b-", "_a", ".a", "-a", "a/b", "é", "a b"):
        checked += _holds(contracts.id_validation, {"candidate": candidate})
        checked += _holds(contracts.bare_string_batch, {"batch": candidate[:3]})
    assert checked > 15_000, checked


# Under the CrossHair backend, strategies become symbolic choices. IDs come from a small pool (valid and
# invalid ones) because the solver finds equal IDs among pooled choices at once, but rarely two equal
# symbolic strings that also pass the regular expression; the ID rule gets symbolic strings of its own.
_POOL = ("a", "b", "c.1", "-x", "", 7)
_ids = st.sampled_from(_POOL)
_CROSSHAIR = settings(
    backend="crosshair",
    max_examples=30,
    deadline=None,
    database=None,
    derandomize=False,
    suppress_health_check=list(HealthCheck),
)
_LIVE = Live((RecordEntry("c1", '{"model_call_id":"c1"}'),))
_STATES = st.sampled_from([ABSENT, _LIVE, Live(_LIVE.entries, fenced=True), RETIRED])


def _batch_rules(batch: list[object], retire: bool, a: RolloutState, b: RolloutState) -> None:
    before = LedgerState.of({"a": a, "b": b})
    after, result = step(before, Retire(batch) if retire else Delete(batch))
    if not all(isinstance(rid, str) and follows_id_rule(rid) for rid in batch):
        assert result == Err(ErrorKind.INVALID_ROLLOUT_ID)  # R-ID-2, R-BATCH-2: nothing changed
        assert after == before
        return
    ids = [rid for rid in batch if isinstance(rid, str)]
    assert isinstance(result, Ok) and isinstance(result.value, Removal)
    distinct = first_seen(ids)
    assert list(result.value.removed) == [r for r in distinct if isinstance(before.get(r), Live)]
    assert list(result.value.absent) == [r for r in distinct if not isinstance(before.get(r), Live)]
    target = Retired if retire else Absent
    assert all(isinstance(after.get(r), target) for r in ids)
    assert all(after.get(r) == before.get(r) for r in ("a", "b") if r not in ids)


@_CROSSHAIR
@given(batch=st.lists(_ids, max_size=4), retire=st.booleans(), a=_STATES, b=_STATES)
def test_batch_rules_hold_under_the_crosshair_backend(
    batch: list[object], retire: bool, a: RolloutState, b: RolloutState
) -> None:
    _batch_rules(batch, retire, a, b)


@_CROSSHAIR
@given(candidate=st.text(alphabet="aZ9._-/é", max_size=4))
def test_the_id_rule_holds_for_symbolic_strings(candidate: str) -> None:
    try:
        accepted = validate_rollout_id(candidate) == candidate
    except InvalidRolloutIdError:
        accepted = False
    assert accepted == follows_id_rule(candidate)  # R-ID-1


def test_the_crosshair_backend_rejects_a_wrong_batch_rule() -> None:
    # The same harness, claiming duplicates are reported twice: the backend must find a counterexample.
    @_CROSSHAIR
    @given(batch=st.lists(_ids, max_size=4))
    def duplicates_reported_twice(batch: list[object]) -> None:
        _, result = step(LedgerState(), Retire(batch))
        if isinstance(result, Ok) and isinstance(result.value, Removal):
            assert len(result.value.absent) == len(batch)

    with pytest.raises(AssertionError):
        duplicates_reported_twice()


@pytest.mark.parametrize("batch", ["a", b"a", {"a"}])
def test_a_bare_string_or_non_sequence_is_a_type_error(batch: object) -> None:
    # The concrete companion of the bare_string_batch contract (R-BATCH-1), for bytes and sets too.
    assert step(LedgerState(), Retire(batch)) == (LedgerState(), Err(ErrorKind.TYPE_ERROR))
