"""The client's batching (impl/http/batching.py) and retry policy, without a server (R-HTTP-4, R-BATCH-1..4).

What it proves: a list is validated and de-duplicated as a whole before any batch exists; batches keep
first-seen order and never exceed the limit; merging per-batch results equals one call on the reference
ledger; the limit is read at call time; a server answer that does not partition its batch (each sent ID
exactly once, in order) is refused; and importing the clients loads no server stack.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from capture_ledger.impl.http import batch_limit, check_removal, merge_removals, plan_removal
from capture_ledger.impl.http.client import RetryPolicy
from capture_ledger.reference import ReferenceLedger
from capture_ledger.spec import MAX_LEDGER_BATCH, InvalidRolloutIdError
from capture_ledger.spec.kit.sequential import rollout_ids
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
        {"removed": ["a", "zzz"], "absent": []},  # an extra ID in place of a missing one: the count matches
        {"removed": ["a"], "absent": []},  # b missing
        {"removed": [], "absent": []},  # both missing
        {"removed": ["a", "a"], "absent": []},  # a repeated, b missing: the count matches
        {"removed": ["a"], "absent": ["a"]},  # a in both, b missing: the count matches
        {"removed": ["a", "b"], "absent": ["b"]},  # b in both
        {"removed": ["a"], "absent": ["b", "b"]},  # b repeated
        {"removed": ["b", "a"], "absent": []},  # out of order
        {"removed": [1], "absent": ["a", "b"]},
        {"removed": [None, "a"], "absent": []},
    ],
)
def test_answers_that_do_not_partition_the_batch_are_refused(payload: object) -> None:
    assert isinstance(check_removal(("a", "b"), payload), str)


def _partitions_in_order(batch: list[str], removed: list[str], absent: list[str]) -> bool:
    """The specification of a good answer, written as plainly as possible: each sent ID once, in order."""
    return sorted(removed + absent) == sorted(batch) and all(
        part == [rollout_id for rollout_id in batch if rollout_id in part] for part in (removed, absent)
    )


@given(batch=st.lists(st.sampled_from("abcd"), unique=True, max_size=4), data=st.data())
def test_an_answer_is_accepted_exactly_when_it_names_each_sent_id_once_in_order(
    batch: list[str], data: st.DataObject
) -> None:
    # Half the answers are a partition of the batch, perhaps spoiled in one place; half are any lists.
    if data.draw(st.booleans()):
        flags = data.draw(st.lists(st.booleans(), min_size=len(batch), max_size=len(batch)))
        removed = [rollout_id for rollout_id, flag in zip(batch, flags, strict=True) if flag]
        absent = [rollout_id for rollout_id, flag in zip(batch, flags, strict=True) if not flag]
        parts = [part for part in (removed, absent) if part]
        if parts:
            part = data.draw(st.sampled_from(parts))
            index = data.draw(st.integers(0, len(part) - 1))
            spoil = data.draw(st.sampled_from(["keep", "drop", "replace", "append"]))
            if spoil == "drop":
                del part[index]
            elif spoil == "replace":  # by another sent ID (a repeat and a gap), an unsent one, or itself
                part[index] = data.draw(st.sampled_from("abcde"))
            elif spoil == "append":
                part.append(data.draw(st.sampled_from("abcde")))
    else:
        removed = data.draw(st.lists(st.sampled_from("abcde"), max_size=5))
        absent = data.draw(st.lists(st.sampled_from("abcde"), max_size=5))
    checked = check_removal(batch, {"removed": removed, "absent": absent})
    if _partitions_in_order(batch, removed, absent):
        assert checked == {"removed": removed, "absent": absent}
    else:
        assert isinstance(checked, str)


def test_retry_policy_pauses_double_up_to_the_cap() -> None:
    assert list(RetryPolicy(retries=3, backoff=0.1, max_backoff=0.25).pauses()) == [0.1, 0.2, 0.25]
    assert list(RetryPolicy().pauses()) == []  # no resend by default
    with pytest.raises(ValueError):
        RetryPolicy(retries=-1)


def test_the_clients_import_without_the_server_stack() -> None:
    """A client-only user loads httpx, not FastAPI, Starlette or uvicorn (checked in a fresh interpreter)."""
    code = (
        "import sys\n"
        "from capture_ledger.impl.http.client import AsyncRolloutControlClient, RolloutControlClient\n"
        "from capture_ledger.impl import RolloutControlClient as Lazy\n"
        "assert Lazy is RolloutControlClient and 'httpx' in sys.modules\n"
        "print(sorted(m for m in ('fastapi', 'starlette', 'uvicorn') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
