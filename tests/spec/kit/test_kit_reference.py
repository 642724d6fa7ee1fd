"""The conformance kit against the reference ledger, synchronous and asynchronous (R-KIT-1..6)."""

from __future__ import annotations

import unittest
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.reference import ReferenceLedger, open_reference_ledger
from capture_ledger.spec import (
    CaptureLedger,
    Manifest,
    RolloutRemoval,
    check_ledger,
    conformance_test_case,
)
from capture_ledger.spec.kit.sequential import conformance_machine, count_steps, rule_names


def test_reference_ledger_conforms() -> None:
    check_ledger(open_reference_ledger)


class AsyncReference:
    """The reference ledger behind coroutine methods, as NeMo Gym's ledgers are (R-KIT-5)."""

    def __init__(self) -> None:
        self._ledger = ReferenceLedger()

    async def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        self._ledger.record(rollout_id, row)

    async def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        self._ledger.record_failure(rollout_id, model_call_id, reason)

    async def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        return self._ledger.admit(rollout_id, model_call_id)

    async def manifest(self, rollout_id: str) -> Manifest:
        return self._ledger.manifest(rollout_id)

    async def has_rows(self, rollout_id: str) -> bool:
        return self._ledger.has_rows(rollout_id)

    async def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        return self._ledger.retire(rollout_ids)

    async def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        return self._ledger.delete(rollout_ids)


async def open_async_reference(workspace: Path) -> AsyncReference:
    return AsyncReference()


def test_async_ledger_and_async_factory_are_awaited() -> None:
    assert isinstance(AsyncReference(), CaptureLedger)
    check_ledger(open_async_reference)


class ForgetfulAsync(AsyncReference):
    """Async, and wrong: a retired rollout's manifest reads empty (R-READ-3)."""

    async def manifest(self, rollout_id: str) -> Manifest:
        if not self._ledger.admit(rollout_id, "probe"):
            return {"rollout_id": rollout_id, "records": [], "failures": []}
        return self._ledger.manifest(rollout_id)


def test_async_mutant_is_rejected_with_a_runnable_counterexample() -> None:
    with pytest.raises(AssertionError) as caught:
        check_ledger(lambda workspace: ForgetfulAsync())
    message = str(caught.value)
    assert "RolloutRetiredError" in message
    assert "state = LedgerConformance()" in message
    assert 1 <= count_steps(message) <= 4


def test_a_non_ledger_is_rejected_with_the_missing_methods() -> None:
    with pytest.raises(AssertionError, match="lacks methods"):
        check_ledger(lambda workspace: object())


def test_every_operation_has_a_rule_and_handles_add_reopen() -> None:
    single = set(rule_names(conformance_machine(open_reference_ledger)))
    assert {"record", "record_failure", "admit", "manifest", "has_rows", "retire", "delete"} <= single
    assert {"remove_with_invalid_id", "remove_bare_string_or_tuple", "record_invalid_row"} <= single
    assert "reopen" not in single
    assert "reopen" in rule_names(conformance_machine(open_reference_ledger, handles=2))


TestReferenceAsUnittest = conformance_test_case(open_reference_ledger)


def test_conformance_test_case_is_a_collectable_unittest() -> None:
    # pytest collects TestReferenceAsUnittest above and runs its test_conformance.
    assert issubclass(TestReferenceAsUnittest, unittest.TestCase)
    assert "test_conformance" in vars(TestReferenceAsUnittest)
