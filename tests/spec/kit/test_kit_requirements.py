"""Every broken requirement, each named: classification, quoting SPEC.md, ``every`` (R-KIT-6, R-KIT-11).

A ledger with two independent bugs is reported with both requirements, each with its own counterexample
that replays to the same requirement; a bug whose consequences spoil later read-backs is reported once,
under its own requirement (the cascade rule); the target is named as the caller wrote it; the verdict's
JSON object has the pinned keys.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from capture_ledger.reference.mutants import (
    MUTANTS,
    DuplicatesReportedTwice,
    RetiredManifestEmpty,
    open_reference,
)
from capture_ledger.spec.core.model import (
    RETIRED,
    Delete,
    FailureEntry,
    HasRows,
    LedgerState,
    Live,
    ReadManifest,
    Record,
    RecordEntry,
    RecordFailure,
    Retire,
)
from capture_ledger.spec.core.verdicts import Ok, Violation, exit_code
from capture_ledger.spec.kit import PROFILES, SCOPE, breaks, fail, sentence
from capture_ledger.spec.kit.sequential import (
    call_requirement,
    change_requirement,
    factory_name,
    judge_ledger,
    misordered,
    named_ids,
)
from hypothesis import Phase, settings

ROOT = Path(__file__).resolve().parents[3]
SEARCH = settings(PROFILES["ci"], max_examples=200)
NO_SHRINK = settings(SEARCH, phases=[Phase.explicit, Phase.generate])


def test_every_requirement_of_the_scope_is_quoted_from_the_packaged_spec() -> None:
    text = (ROOT / "spec" / "SPEC.md").read_text(encoding="utf-8")
    for scope in SCOPE:
        quoted = sentence(scope.requirement)
        assert quoted, scope.requirement
        assert f"- **{scope.requirement}** {quoted.split()[0]}" in text
    assert sentence("R-WRITE-3").startswith("Re-recording an identical row for a `model_call_id`")
    assert sentence("R-NOPE-" + "1") == ""


def test_one_class_per_requirement_raised_from_one_site_without_context() -> None:
    assert breaks("R-WRITE-3") is breaks("R-WRITE-3") and breaks("R-WRITE-3") is not breaks("R-WRITE-4")
    assert issubclass(breaks("R-ID-1"), AssertionError)
    sites = set()
    for requirement in ("R-ID-1", "R-WRITE-3"):
        with pytest.raises(breaks(requirement)) as caught:
            fail(requirement, "what happened")
        assert caught.value.__context__ is None and str(caught.value) == f"{requirement}: what happened"
        sites.add(caught.traceback[-1].lineno)
    assert len(sites) == 1


STATE = LedgerState.of(
    {
        "a": Live((RecordEntry("m0", '{"model_call_id":"m0"}'), FailureEntry("m1", "timeout"))),
        "r": RETIRED,
    }
)


@pytest.mark.parametrize(
    ("op", "requirement"),
    [
        (Record("", {"model_call_id": "m0"}), "R-ID-1"),
        (Record(None, {"model_call_id": "m0"}), "R-ID-2"),
        (Retire("a"), "R-BATCH-1"),
        (Retire(["a", "../x"]), "R-BATCH-2"),
        (Delete(["a", 7]), "R-ID-2"),
        (Retire([]), "R-BATCH-4"),
        (Record("a", {"model_call_id": ""}), "R-WRITE-1"),
        (Record("b", {"model_call_id": "m0"}), "R-WRITE-2"),
        (Record("a", {"model_call_id": "m0", "value": 1}), "R-WRITE-3"),
        (Record("r", {"model_call_id": "m0"}), "R-WRITE-4"),
        (RecordFailure("a", "", "timeout"), "R-WRITE-7"),
        (RecordFailure("a", "m1", "timeout"), "R-WRITE-7"),  # the identical failure: not appended twice
        (RecordFailure("a", "m0", "timeout"), "R-WRITE-8"),  # beside the call's record
        (RecordFailure("a", "m1", "aborted"), "R-WRITE-8"),  # another reason for the same call
        (Record("a", {"model_call_id": "m1"}), "R-WRITE-8"),  # a record of a call that only failed
        (ReadManifest("b"), "R-READ-1"),
        (ReadManifest("a"), "R-READ-2"),
        (ReadManifest("r"), "R-READ-3"),
        (HasRows("r"), "R-READ-4"),
        (Retire(["a"]), "R-RETIRE-1"),
        (Retire(["r"]), "R-RETIRE-2"),
        (Delete(["a"]), "R-DELETE-1"),
        (Delete(["r"]), "R-DELETE-2"),
    ],
)
def test_a_wrong_result_breaks_the_requirement_of_the_models_case(op: object, requirement: str) -> None:
    assert call_requirement(op, STATE) == requirement  # type: ignore[arg-type]


def test_a_removal_report_is_classified_by_the_id_it_gets_wrong() -> None:
    batch = Retire(["b", "a", "b"])
    assert call_requirement(batch, STATE, {"removed": ["a"], "absent": ["b", "b"]}) == "R-BATCH-3"
    assert call_requirement(batch, STATE, {"removed": ["b", "a"], "absent": []}) == "R-RETIRE-2"
    assert call_requirement(batch, STATE, {"removed": [], "absent": ["b", "a"]}) == "R-RETIRE-1"


def test_a_wrong_state_is_blamed_on_the_last_operation_naming_the_id() -> None:
    assert change_requirement(Retire(["a", "../x"]), STATE, "a") == "R-BATCH-2"
    assert change_requirement(Retire(["b"]), STATE, "b") == "R-RETIRE-2"
    assert change_requirement(Delete(["r"]), STATE, "r") == "R-DELETE-2"
    assert change_requirement(Record("r", {"model_call_id": "m0"}), STATE, "r") == "R-WRITE-4"
    assert named_ids(Retire(["a", "../x", "a"])) == ["a"]
    assert named_ids(Delete("a")) == ["a"]
    # A failure missing beside a record of its call: the record_failure's slip, R-WRITE-8.
    assert change_requirement(RecordFailure("a", "m0", "timeout"), STATE, "a") == "R-WRITE-8"


def test_a_manifest_with_the_models_rows_in_another_order_is_misordered() -> None:
    """R-READ-2 whatever the last operation: the rows are all there, their order is not append order."""
    rows = (RecordEntry("m1", '{"model_call_id":"m1"}'), RecordEntry("m0", '{"model_call_id":"m0"}'))
    live = Live((*rows, FailureEntry("m1", "timeout"), FailureEntry("m0", "aborted")))
    failures = [{"model_call_id": "m1", "reason": "timeout"}, {"model_call_id": "m0", "reason": "aborted"}]
    right = {
        "rollout_id": "a",
        "records": [{"model_call_id": "m1"}, {"model_call_id": "m0"}],
        "failures": failures,
    }
    sorted_records = {**right, "records": [{"model_call_id": "m0"}, {"model_call_id": "m1"}]}
    reversed_failures = {**right, "failures": failures[::-1]}
    assert misordered(live, sorted_records) and misordered(live, reversed_failures)
    assert not misordered(live, right)  # nothing wrong
    assert not misordered(live, {**right, "records": [{"model_call_id": "m0"}]})  # a row missing
    assert not misordered(live, {**right, "records": [{"model_call_id": "m0"}] * 2})  # a row twice
    assert not misordered(RETIRED, sorted_records) and not misordered(live, "garbage")


class TwoBugs(DuplicatesReportedTwice, RetiredManifestEmpty):
    """Two independent bugs: batches are not de-duplicated (R-BATCH-3), a Retired manifest reads empty
    (R-READ-3)."""


@pytest.mark.slow  # every requirement's round (about 12 s alone)
def test_every_broken_requirement_is_reported_once_with_a_counterexample_that_replays() -> None:
    verdict = judge_ledger(
        lambda workspace: TwoBugs(), settings=PROFILES["ci"], every=True, target="tests.two_bugs:open_two"
    )
    assert sorted(b.requirement for b in verdict.broken) == ["R-BATCH-3", "R-READ-3"]
    assert verdict.target == "tests.two_bugs:open_two"
    for broken in verdict.broken:
        assert broken.message.startswith(f"{broken.requirement}: ")
        assert f"SPEC.md {broken.requirement}: {sentence(broken.requirement)}" in broken.message
        assert 1 <= broken.steps <= 4
        program = broken.counterexample.replace(
            "from tests.two_bugs import open_two as open_ledger", "open_ledger = lambda workspace: TwoBugs()"
        )
        namespace: dict[str, object] = {"TwoBugs": TwoBugs}
        try:
            with pytest.raises(breaks(broken.requirement)):
                exec(program, namespace)
        finally:
            namespace["state"].teardown()  # type: ignore[attr-defined]  # after the failing step
    # The second round tolerates the first requirement found; its program says so, so that it replays.
    assert "tolerate=(" in verdict.broken[1].counterexample
    # As the shared verdict: a violation of the first broken requirement, with its program.
    first = verdict.broken[0]
    assert verdict.result == Violation(
        requirement=first.requirement, counterexample=first.counterexample, witness=first
    )
    assert exit_code(verdict.result) == 1


def test_a_bug_that_spoils_later_read_backs_is_reported_once_under_its_own_requirement() -> None:
    mutant = MUTANTS["late_write_recreates"]
    verdict = judge_ledger(mutant.factory, settings=NO_SHRINK, every=True)
    assert [b.requirement for b in verdict.broken] == ["R-WRITE-4"]


def test_a_passing_ledger_has_one_round_and_the_json_object_is_pinned() -> None:
    verdict = judge_ledger(open_reference, settings=settings(SEARCH, max_examples=5), every=True)
    assert verdict.conforms and verdict.examples == 5
    assert isinstance(verdict.result, Ok) and verdict.result.checked == verdict.checked
    assert exit_code(verdict.result) == 0
    assert set(verdict.to_json()) == {
        "target",
        "conforms",
        "operations",
        "checked",
        "not_checked",
        "broken",
        "examples",
        "seconds",
        "handles",
        "steps",
    }


def test_the_target_is_named_as_written_or_by_module_and_name() -> None:
    assert factory_name(open_reference) == "capture_ledger.reference.mutants:open_reference"
    assert (
        factory_name(lambda workspace: None)
        == "test_the_target_is_named_as_written_or_by_module_and_name.<locals>.<lambda>"
    )
    mutant = MUTANTS["silent_discard"]
    verdict = judge_ledger(mutant.factory, settings=NO_SHRINK, target="mypkg:opener")
    assert verdict.report().startswith("the ledger opened by mypkg:opener does not conform")
    assert "from mypkg import opener as open_ledger" in verdict.broken[0].counterexample
    assert not re.search(r"<locals>", verdict.report())
