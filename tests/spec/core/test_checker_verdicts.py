"""The one result shape and the one exit-code rule (spec.core.verdicts; SPEC.md §Verdicts)."""

from __future__ import annotations

import pytest
from capture_ledger.spec import Ok, Unknown, Violation, exit_code, worst


def test_each_verdict_has_its_exit_code() -> None:
    assert exit_code(Ok()) == 0
    assert exit_code(Violation(requirement="R-CONC-1", counterexample="...")) == 1
    assert exit_code(Unknown(spent="10000 steps")) == 2


def test_worst_prefers_a_violation_then_an_unknown() -> None:
    broken = Violation(requirement="R-DELETE-2", counterexample="delete kept the fence")
    unknown = Unknown(spent="256 images")
    assert worst([Ok(checked=("R-READ-1",)), unknown, broken]) is broken
    assert worst([Ok(), unknown]) is unknown
    assert worst([Ok(checked=("R-READ-1",)), Ok(checked=("R-READ-1", "R-WRITE-1"))]) == Ok(
        checked=("R-READ-1", "R-WRITE-1")
    )
    assert worst([]) == Ok()


def test_records_are_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        Violation("R-CONC-1", "...")  # type: ignore[call-arg]
    verdict = Unknown(reason="no strace")
    with pytest.raises(AttributeError):
        verdict.reason = "other"  # type: ignore[misc]
    assert [v.kind for v in (Ok(), verdict, Violation(requirement="R", counterexample=""))] == [
        "ok",
        "unknown",
        "violation",
    ]
