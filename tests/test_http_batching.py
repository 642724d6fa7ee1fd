"""The client's batching (impl/http/batching.py) and retry policy, without a server (R-HTTP-4, R-BATCH-1..4).

What it proves: a list is validated and de-duplicated as a whole before any batch exists; batches keep
first-seen order and never exceed the limit; merging per-batch results equals one call on the reference
ledger; the limit is read at call time; a server answer that does not partition its batch is refused.
"""

from __future__ import annotations

import pytest
from capture_ledger.impl.http.batching import batch_limit, check_removal, merge_removals, plan_removal
from capture_ledger.impl.http.client import (
    ControlPlaneTimeoutError,
    RequestRejectedError,
    RetryPolicy,
    ServerError,
)
from capture_ledger.reference import ReferenceLedger
from capture_ledger.spec import MAX_LEDGER_BATCH, InvalidRolloutIdError
from capture_ledger.spec.kit.strategies import rollout_ids
from hypothesis import given
from hypothesis import strategies as st


def test_bare_string_and_non_sequences_are_type_errors() -> None:
    for bad in ("abc", b"abc", {"a": 1}, 5, None):
        with pytest.raises(TypeError):
            plan_removal(bad)


def test_an_invalid_id_anywhere_fails_before_any_batch() -> None:
    ids = [f"r{i}" for i in range(10)] + [".bad"]
    with pytest.raises(InvalidRolloutIdError):
        plan_removal(ids, batch_size=2)


def test_empty_list_plans_no_request() -> None:
    assert plan_removal([]).batches == ()
    assert merge_removals([]) == {"removed": [], "absent": []}


def test_limit_defaults_to_max_ledger_batch_and_rejects_out_of_range_sizes() -> None:
    assert batch_limit() == MAX_LEDGER_BATCH
    assert batch_limit(7) == 7
    for bad in (0, -1, MAX_LEDGER_BATCH + 1):
        with pytest.raises(ValueError):
            batch_limit(bad)


def test_more_than_max_ledger_batch_ids_split_into_full_batches() -> None:
    plan = plan_removal([f"r{i}" for i in range(MAX_LEDGER_BATCH * 2 + 1)])
    assert [len(b) for b in plan.batches] == [MAX_LEDGER_BATCH, MAX_LEDGER_BATCH, 1]


@given(
    ids=st.lists(rollout_ids(), max_size=30),
    live=st.sets(st.sampled_from(["a", "b", "c"])),
    size=st.integers(1, 5),
)
def test_merged_batches_equal_one_call_on_the_reference(ids: list[str], live: set[str], size: int) -> None:
    plan = plan_removal(ids, batch_size=size)
    flat = [rollout_id for batch in plan.batches for rollout_id in batch]
    assert flat == list(dict.fromkeys(ids))  # de-duplicated, first-seen order
    assert all(1 <= len(batch) <= size for batch in plan.batches)
    whole, split = ReferenceLedger(), ReferenceLedger()
    for ledger in (whole, split):
        for rollout_id in sorted(live):
            ledger.record(rollout_id, {"model_call_id": "m0"})
    results = []
    for batch in plan.batches:
        checked = check_removal(batch, split.retire(list(batch)))
        assert not isinstance(checked, str), checked
        results.append(checked)
    assert merge_removals(results) == whole.retire(ids)


@pytest.mark.parametrize(
    "payload",
    [
        None,
        [],
        {"removed": ["a"]},
        {"removed": ["a"], "absent": ["b"], "extra": []},
        {"removed": "a", "absent": []},
        {"removed": ["a", "zzz"], "absent": ["b"]},  # an ID that was not sent
        {"removed": ["a"], "absent": []},  # b missing
        {"removed": ["a", "b"], "absent": ["b"]},  # b in both
        {"removed": ["b", "a"], "absent": []},  # out of order
        {"removed": [1], "absent": ["a", "b"]},
    ],
)
def test_answers_that_do_not_partition_the_batch_are_refused(payload: object) -> None:
    assert isinstance(check_removal(("a", "b"), payload), str)


def test_retry_policy_resends_only_what_may_succeed_later() -> None:
    policy = RetryPolicy(retries=3, backoff=0.1, max_backoff=0.25)
    timeout = ControlPlaneTimeoutError("t")
    assert [policy.delay(i, timeout) for i in range(4)] == [0.1, 0.2, 0.25, None]
    assert policy.delay(0, ServerError("s", 503)) == 0.1
    assert policy.delay(0, RequestRejectedError("r", 422)) is None
    assert RetryPolicy().delay(0, timeout) is None
    with pytest.raises(ValueError):
        RetryPolicy(retries=-1)
