"""``check_crashes``: the kit's crash layer as a library call, with the one result shape (SPEC.md §Crash,
R-CRASH-1..4, R-STATE-3, R-KIT-13; docs/kit.md, docs/crash-target.md).

Real strace, real child processes, the example ledgers (examples/): the directory ledger keeps the contract
under the journaled model (``Ok``, naming the clauses judged), a seeded bug that returns from ``record``
before its fsync breaks R-CRASH-1 (``Violation`` with the shortest counterexample), and a workload the
ledger cannot run is listed as not exercised (``Unknown``). Each can fail: the bug test if the tracer misses
the missing fsync, the example test if the models or the reader invent a state the ledger never had. A
factory a child process cannot import by name is refused before anything runs.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.spec import Ok, Unknown, Violation, check_crashes, exit_code
from capture_ledger.spec.kit import CrashVerdict, TargetError
from capture_ledger.spec.kit.crash import CrashViolation, study_summary

from examples.bugs.directory_bugs import open_dir_append_without_fsync
from examples.directory_ledger import DirectoryLedger, open_ledger

ROOT = Path(__file__).resolve().parents[3]

needs_strace = pytest.mark.skipif(
    shutil.which("strace") is None and os.environ.get("CI") != "true",
    reason="strace is not installed (.ci/run installs it)",
)


def _closure() -> Any:
    def opened(workspace: Path) -> DirectoryLedger:
        return open_ledger(workspace)

    return opened


@pytest.mark.parametrize(
    "factory",
    [
        lambda workspace: open_ledger(Path(workspace)),
        _closure(),
        functools.partial(open_ledger),
    ],
    ids=["lambda", "closure", "partial"],
)
def test_a_factory_a_child_process_cannot_import_is_a_type_error(factory: Any) -> None:
    with pytest.raises(TypeError, match="module-level function or class, or a 'module:callable' string"):
        check_crashes(factory)


def test_a_target_that_cannot_be_loaded_or_an_unknown_model_is_refused() -> None:
    with pytest.raises(TargetError, match=r"examples\.no_such_ledger"):
        check_crashes("examples.no_such_ledger:open_ledger")
    with pytest.raises(ValueError, match="unknown model or workload ext4-ordered"):
        check_crashes(open_ledger, models=["ext4-ordered"])


@needs_strace
def test_a_ledger_that_keeps_the_contract_is_ok_with_the_clauses_judged() -> None:
    workloads = ["record-new", "retire-live", "delete-reuse"]
    found = check_crashes(open_ledger, models=["journaled"], workloads=workloads, cwd=ROOT)
    assert isinstance(found, CrashVerdict)
    assert isinstance(found.result, Ok), str(found)
    assert found.result.checked == ("R-CRASH-1", "R-CRASH-2", "R-CRASH-3", "R-CRASH-4", "R-STATE-3")
    assert exit_code(found.result) == 0
    assert found.target == "examples.directory_ledger:open_ledger"
    assert found.models == ("journaled",) and found.workloads == tuple(workloads)
    assert found.skipped == () and found.sampled == () and found.unsupported == ()
    assert found.images > 20
    assert study_summary(found.study, found.target)["verdict"] == found.result.kind == "ok"


@needs_strace
def test_a_seeded_bug_is_a_violation_of_its_clause_with_the_shortest_counterexample() -> None:
    """examples/bugs: ``record`` returns after write() without an fsync; a crash loses the row."""
    found = check_crashes(
        open_dir_append_without_fsync, models=["journaled"], workloads=["record-new"], cwd=ROOT
    )
    assert found.target == "examples.bugs.directory_bugs:open_dir_append_without_fsync"
    assert isinstance(found.result, Violation), str(found)
    assert found.result.requirement == "R-CRASH-1"
    assert exit_code(found.result) == 1
    witness = found.result.witness
    assert isinstance(witness, CrashViolation)
    assert found.result.counterexample == witness.render()
    assert "write rollouts/r1/rows.jsonl" in found.result.counterexample
    assert witness == found.study.shortest(found.target, "journaled")
    assert str(found).startswith("violation of R-CRASH-1")


@needs_strace
def test_what_a_ledger_cannot_run_is_not_exercised_and_the_verdict_is_unknown() -> None:
    """``record-torn`` writes a torn line in our own store's format: it never runs on another ledger, so
    nothing was judged, and the verdict says so rather than ``Ok``."""
    found = check_crashes("examples.directory_ledger:open_ledger", workloads=["record-torn"], cwd=ROOT)
    assert isinstance(found.result, Unknown)
    assert "no workload ran" in found.result.reason
    assert exit_code(found.result) == 2
    assert found.skipped == (("record-torn", "it writes a torn line in the file store's own format"),)
    assert found.workloads == () and found.images == 0
