"""The conformance kit rejects every deliberately broken ledger (SPEC.md §Conformance, R-KIT-1..6).

Tests the tests: each mutant of ``capture_ledger.reference.mutants`` breaks one requirement, and the kit
must raise ``AssertionError`` with a runnable counterexample. The correct ``ReferenceLedger``, its async
wrapper (R-KIT-5) and a shared multi-handle reference (R-KIT-4) must pass under the same settings.

Two tiers, because Hypothesis spends most of its time *shrinking* (hundreds of examples per mutant):
- CI: every mutant is *caught* (search without the shrink phase), and a few representative mutants are
  shrunk to a counterexample of at most ``MAX_STEPS`` steps which is then replayed.
- ``slow``: every mutant is shrunk and its counterexample length checked and replayed
  (``CAPTURE_LEDGER_PROFILE=ci python -m pytest tests/reference/test_mutants.py -m slow``; the figures are in
  docs/mutants.md, printed by ``benchmarks/mutant_report.py``).
Settings are fixed (derandomized, no database, no deadline), so a run is the same run everywhere.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.reference.mutants import (
    MUTANTS,
    Mutant,
    open_async_reference,
    open_reference,
    open_shared_reference,
)
from capture_ledger.spec.kit import PROFILES, breaks
from capture_ledger.spec.kit.sequential import check_ledger, conformance_machine, count_steps, judge_ledger
from hypothesis import Phase, settings

#: The search: deterministic, deep enough (25 steps) to reach a retire followed by a late write.
SEARCH = settings(
    PROFILES["ci"],
    max_examples=200,
    stateful_step_count=25,
    derandomize=True,
    database=None,
    deadline=None,
    # One bug at a time: with several, Hypothesis raises an ExceptionGroup whose steps the kit's report
    # does not collect, and shrinks each bug separately (several times the cost).
    report_multiple_bugs=False,
)
#: The same search without shrinking: enough to show a mutant is caught.
SEARCH_NO_SHRINK = settings(SEARCH, phases=[Phase.explicit, Phase.reuse, Phase.generate])
#: The correct ledgers run the CI profile's example count: they pass, so every example runs in full.
CONTROL = settings(SEARCH, max_examples=60)

#: The longest shrunk counterexample we accept: every mutant is one idea, a few steps from the start.
MAX_STEPS = 8

#: Shrunk in CI (shrinking costs ~300 examples for most mutants): a batch bug, and the headline write bug.
#: Shrunk in the fast tier: one cheap mutant (late_write_recreates takes 11 s; the slow tier shrinks all).
SHRUNK_IN_CI = ("duplicates_reported_twice",)


def _params(names: list[str]) -> list[Any]:
    return [pytest.param(name, id=name) for name in names]


def _rejection(mutant: Mutant, search: settings) -> str:
    """The kit's message for ``mutant``; fails the test when the kit passes it."""
    with pytest.raises(AssertionError) as caught:
        check_ledger(mutant.factory, handles=mutant.handles, settings=search)
    return str(caught.value)


def _replay(requirement: str, counterexample: str) -> None:
    """Run a counterexample as the program it is; it must fail again, with the same requirement (R-KIT-6,
    R-KIT-11)."""
    namespace: dict[str, Any] = {}
    try:
        with pytest.raises(breaks(requirement)):
            exec(counterexample, namespace)
    finally:
        namespace["state"].teardown()  # the program's own teardown comes after the failing step


def _check_shrunk(name: str, record_property: Callable[[str, object], None]) -> None:
    mutant = MUTANTS[name]
    verdict = judge_ledger(mutant.factory, handles=mutant.handles, settings=SEARCH, target=mutant.target)
    assert [b.requirement for b in verdict.broken] == [mutant.requirement], verdict.report()
    (broken,) = verdict.broken
    record_property("counterexample_steps", broken.steps)
    assert 1 <= broken.steps <= MAX_STEPS, broken.counterexample
    assert mutant.requirement in broken.message and "SPEC.md" in broken.message
    _replay(mutant.requirement, broken.counterexample)


def test_late_write_counterexample_runs_when_printed_whole() -> None:
    """R-KIT-6 on a fixed failing program: ``retire(['a'])`` then a late ``record`` of a row."""
    machine = conformance_machine(MUTANTS["late_write_recreates"].factory)
    state: Any = machine()
    try:
        rollout = state.first_rollout(rollout_id="a")
        state.retire(handle=0, rollout_ids=[rollout])
        state.record(handle=0, rollout_id=rollout, row={"model_call_id": "m0"})  # no warning: held
        with pytest.raises(breaks("R-WRITE-4"), match="reading back 'a'"):
            state.every_known_rollout_reads_as_the_model_says()  # the write was not discarded at all
    finally:
        state.teardown()


# ---------------------------------------------------------------------------------- the registry
def test_registry_has_a_dozen_one_idea_mutants() -> None:
    assert len(MUTANTS) >= 12
    for name, mutant in MUTANTS.items():
        assert mutant.name == name
        assert mutant.requirement.startswith("R-")
        assert mutant.description and "\n" not in mutant.description


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_each_mutant_is_a_verify_target(name: str) -> None:
    """``capture-ledger verify <target>`` resolves ``module:callable`` to the mutant's factory."""
    mutant = MUTANTS[name]
    module, _, attribute = mutant.target.partition(":")
    assert getattr(importlib.import_module(module), attribute) is mutant.factory
    assert attribute == f"open_{name}"


def test_each_mutant_names_its_requirement_in_a_docstring() -> None:
    for mutant in MUTANTS.values():
        ledger = mutant.factory(Path("unused"))  # the reference and its mutants ignore the workspace
        doc = f"{mutant.factory.__doc__} {type(ledger).__doc__}"
        assert mutant.requirement in doc, (mutant.name, doc)


# ---------------------------------------------------------------------------------- the controls
def test_reference_ledger_passes() -> None:
    check_ledger(open_reference, settings=CONTROL)


def test_async_reference_passes() -> None:
    """Coroutine methods are awaited (R-KIT-5): the correct async wrapper passes."""
    check_ledger(open_async_reference, settings=CONTROL)


def test_shared_reference_passes_with_two_handles() -> None:
    """The control of ``handles_not_shared``: handles on one workspace sharing one ledger pass."""
    check_ledger(open_shared_reference, handles=2, settings=CONTROL)


# ---------------------------------------------------------------------------------- the mutants
@pytest.mark.parametrize("name", _params(sorted(MUTANTS)))
def test_kit_catches_mutant_naming_its_requirement(name: str) -> None:
    """Every mutant fails the kit with a counterexample that names the factory and the requirement the
    mutant breaks (R-KIT-11), and only that one."""
    mutant = MUTANTS[name]
    message = _rejection(mutant, SEARCH_NO_SHRINK)
    assert f"open_{name}" in message
    assert count_steps(message) >= 1, message
    assert f"broken: {mutant.requirement}\n" in message, message
    assert f"SPEC.md {mutant.requirement}: " in message


@pytest.mark.parametrize("name", _params(list(SHRUNK_IN_CI)))
def test_representative_counterexamples_shrink_and_replay(
    name: str, record_property: Callable[[str, object], None]
) -> None:
    _check_shrunk(name, record_property)


@pytest.mark.slow
@pytest.mark.parametrize("name", _params(sorted(MUTANTS)))
def test_every_counterexample_shrinks_and_replays(
    name: str, record_property: Callable[[str, object], None]
) -> None:
    """The figures of docs/mutants.md: each shrunk counterexample has 1..MAX_STEPS steps and replays."""
    _check_shrunk(name, record_property)
