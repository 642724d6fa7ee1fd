"""Partial ledgers: the kit judges the protocol methods a ledger has (R-KIT-10, R-KIT-1, R-KIT-5).

The reference ledger restricted to any subset of the protocol's operations must conform, and the verdict's
lists of requirements checked and not checked must follow the subset; a mutant restricted to operations
that cannot show its bug passes, and fails again as soon as they can. The start-up protocol check names
missing methods, coroutines and signatures that differ.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import pytest
from capture_ledger.reference import ReferenceLedger, open_reference_ledger
from capture_ledger.reference.mutants import MUTANTS, AsyncLedger
from capture_ledger.spec.core.protocol import OPERATIONS
from capture_ledger.spec.kit import PROFILES, SCOPE, ProtocolCheck, check_protocol, checked, select_operations
from capture_ledger.spec.kit.sequential import check_ledger, conformance_machine, judge_ledger, rule_names
from hypothesis import Phase, settings

#: Small and deterministic: 127 subsets each run, so each run is short; failures need no shrinking here.
SMALL = settings(PROFILES["ci"], max_examples=3, stateful_step_count=8)
NO_SHRINK = settings(PROFILES["ci"], max_examples=200, phases=[Phase.explicit, Phase.generate])

SUBSETS = [
    subset for size in range(1, len(OPERATIONS) + 1) for subset in itertools.combinations(OPERATIONS, size)
]


@pytest.mark.slow  # every subset of the operations (about 10 s alone)
def test_the_reference_restricted_to_every_subset_of_operations_conforms() -> None:
    assert len(SUBSETS) == 2 ** len(OPERATIONS) - 1
    for subset in SUBSETS:
        verdict = check_ledger(open_reference_ledger, settings=SMALL, operations=subset)
        assert verdict.operations == subset
        assert (verdict.checked, verdict.not_checked) == checked(subset, 1)
        assert verdict.examples >= 1 and verdict.steps >= 1


def test_only_the_chosen_operations_have_rules() -> None:
    machine = conformance_machine(open_reference_ledger, operations=("record", "manifest"))
    assert set(rule_names(machine)) == {
        "another_rollout",
        "record",
        "record_lookalikes",
        "record_invalid_row",
        "manifest",
        "invalid_rollout_id",
    }
    removals = rule_names(conformance_machine(open_reference_ledger, operations=("delete",)))
    assert {"delete", "remove_with_invalid_id", "remove_bare_string_or_tuple"} <= set(removals)
    assert "invalid_rollout_id" not in removals


def test_checked_follows_the_operations_and_handles() -> None:
    everything, nothing = checked(OPERATIONS, 2)
    assert nothing == ("R-WRITE-6", "R-RETIRE-3")  # the fenced Live state: no sequence of calls reaches it
    assert "R-KIT-4" in everything and "R-KIT-4" in checked(OPERATIONS, 1)[1]
    gym = checked(("record", "record_failure", "manifest", "has_rows"), 1)
    assert {"R-WRITE-3", "R-WRITE-7", "R-WRITE-8", "R-READ-4"} <= set(gym[0])
    assert {"R-WRITE-4", "R-READ-3", "R-ADMIT-1", "R-BATCH-1", "R-RETIRE-1", "R-DELETE-1"} <= set(gym[1])
    assert len(gym[0]) + len(gym[1]) == len(SCOPE)


@pytest.mark.parametrize(
    ("name", "hides", "shows"),
    [
        # Without a retire there is no Retired rollout to write to late.
        (
            "late_write_recreates",
            ("record", "manifest", "has_rows", "delete"),
            ("record", "retire", "has_rows"),
        ),
        # Without admit there is nothing to admit.
        ("admit_ignores_fence", ("record", "retire", "manifest"), ("admit", "retire")),
        # Without a second write of a failure, nothing is appended twice.
        ("failure_appended_twice", ("record", "manifest", "retire"), ("record_failure", "manifest")),
    ],
)
def test_a_mutant_passes_where_its_bug_cannot_show_and_fails_where_it_can(
    name: str, hides: tuple[str, ...], shows: tuple[str, ...]
) -> None:
    mutant = MUTANTS[name]
    assert mutant.requirement in checked(hides, 1)[1]
    check_ledger(mutant.factory, settings=SMALL, operations=hides)
    verdict = judge_ledger(mutant.factory, settings=NO_SHRINK, operations=shows)
    assert [b.requirement for b in verdict.broken] == [mutant.requirement]


class FourMethods:
    """NeMo Gym's shape: four coroutine methods, no admit, retire or delete; one parameter renamed."""

    def __init__(self) -> None:
        self._ledger = ReferenceLedger()

    async def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        self._ledger.record(rollout_id, row)

    async def record_failure(self, rollout_id: str, call: str, reason: str) -> None:
        self._ledger.record_failure(rollout_id, call, reason)

    async def manifest(self, rollout_id: str) -> Any:
        return self._ledger.manifest(rollout_id)

    async def has_rows(self, rollout_id: str) -> bool:
        return self._ledger.has_rows(rollout_id)


def test_the_protocol_check_names_missing_methods_coroutines_and_signatures() -> None:
    found = check_protocol(FourMethods())
    assert found.present == ("record", "record_failure", "manifest", "has_rows")
    assert found.missing == ("admit", "retire", "delete")
    assert found.coroutines == found.present
    assert found.differences == (
        "record_failure(rollout_id, call, reason) (the protocol: record_failure(rollout_id, model_call_id, "
        "reason))",
    )
    text = "\n".join(found.lines())
    assert "missing: admit, retire, delete" in text and "coroutines (awaited)" in text
    assert check_protocol(AsyncLedger(ReferenceLedger())).differences == ()
    assert check_protocol(object()).present == ()


def test_a_ledger_with_four_methods_is_judged_on_them() -> None:
    seen: list[ProtocolCheck] = []
    verdict = check_ledger(lambda workspace: FourMethods(), settings=SMALL, on_protocol=seen.append)
    assert verdict.operations == ("record", "record_failure", "manifest", "has_rows")
    assert verdict.protocol is not None and seen == [verdict.protocol]
    assert "R-DELETE-1" in verdict.not_checked


def test_selecting_operations() -> None:
    assert select_operations(None, ("manifest", "record")) == ("record", "manifest")
    assert select_operations(None, ()) == OPERATIONS  # nothing there: check all, to name what is missing
    assert select_operations(["delete", "record"], ()) == ("record", "delete")
    with pytest.raises(ValueError, match="not methods of CaptureLedger: fence"):
        select_operations(["record", "fence"], OPERATIONS)
    with pytest.raises(ValueError, match="at least one"):
        select_operations([], OPERATIONS)
    with pytest.raises(ValueError, match="fence"):
        check_ledger(open_reference_ledger, operations=["fence"])
