"""Faults by position in a ledger's own calls, and an honest account of them (SPEC.md §Crash, R-CRASH-1,
R-STORE-13; docs/crash-target.md §Faults).

Real strace, real child processes, the example ledgers and the bug catalogue (examples/): a fault strace
injects is read off the trace (``(INJECTED)``) and a failed file sync becomes ``FsyncFailed``; a requested
fault that never struck is reported "not exercised" and the verdict is ``Unknown``, never ``Ok``; the
``*-fsync-eio`` workloads fail each sync the ledger makes, one run per position. Each test can fail: the
parser test if an injected failure is dropped, the account tests if a missing call passes as ``ok``, the
position tests if the positions are counted over another thread's calls or the model forgives a failed
fsync (the directory ledger's re-record trusts a second fsync: R-CRASH-1 under the failed-fsync effect).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from capture_ledger.spec import Ok, Unknown, Violation, check_crashes
from capture_ledger.spec.crash.durability import FsyncFailed
from capture_ledger.spec.kit.crash import WORKLOADS, FaultAt, each_position, study_summary
from capture_ledger.spec.kit.crash.strace import parse_trace, read_syscalls

ROOT = Path(__file__).resolve().parents[3]

needs_strace = pytest.mark.skipif(
    shutil.which("strace") is None and os.environ.get("CI") != "true",
    reason="strace is not installed (.ci/run installs it)",
)

INJECTED = """\
7 openat(AT_FDCWD</w>, "/w/log", O_WRONLY|O_CREAT|O_CLOEXEC, 0644) = 3</w/log>
7 write(3</w/log>, "a\\n", 2)      = 2
7 fsync(3</w/log>)                = -1 EIO (Input/output error) (INJECTED)
7 fsync(3</w/log>)                = -1 EBADF (Bad file descriptor)
7 openat(AT_FDCWD</w>, "/w", O_RDONLY|O_DIRECTORY) = 4</w>
7 fsync(4</w>)                    = -1 EIO (Input/output error) (INJECTED)
7 fdatasync(3</w/log>)            = -1 ENOSPC (No space left on device)
"""


def test_a_failed_file_sync_is_an_effect_and_an_injected_one_is_marked() -> None:
    calls = list(read_syscalls(INJECTED.splitlines(keepends=True)))
    assert [c.injected for c in calls] == [False, False, True, False, False, True, False]
    parsed = parse_trace(INJECTED.splitlines(keepends=True), "/w", {}, cwd="/w")
    failed = [e.item for e in parsed.events if isinstance(e.item, FsyncFailed)]
    assert failed == [FsyncFailed(2), FsyncFailed(2, data_only=True)]  # EBADF and the directory: nothing


def test_each_position_names_one_workload_per_call() -> None:
    workload = WORKLOADS["record-new-fsync-eio"]
    three = each_position(workload, 3)
    assert [w.name for w in three] == [f"record-new-fsync-eio@{n}" for n in (1, 2, 3)]
    assert [w.faults[0].occurrence for w in three] == [1, 2, 3]
    assert [w.name for w in each_position(workload, 0)] == ["record-new-fsync-eio@1"]
    assert each_position(WORKLOADS["record-retry-eio"], 5) == (WORKLOADS["record-retry-eio"],)
    assert workload.faults[0] == FaultAt(op=0, call="sync", occurrence=0, fault=workload.faults[0].fault)


@needs_strace
@pytest.mark.slow
def test_the_directory_ledger_takes_every_fault_it_is_asked_for_and_keeps_the_contract() -> None:
    workloads = ["record-retry-eio", "retire-retry-eio", "retire-retry-fsync-eio", "delete-retry-eio"]
    found = check_crashes(
        "examples.directory_ledger:open_ledger", models=["journaled"], workloads=workloads, cwd=ROOT
    )
    assert isinstance(found.result, Ok), str(found)
    assert found.not_exercised == ()
    summary = study_summary(found.study, found.target)
    assert summary["not_exercised"] == []
    assert [f["workload"] for f in summary["faults"]] == workloads
    assert all(f["requested"] == f["injected"] and len(f["injected"]) == 1 for f in summary["faults"])


@needs_strace
def test_a_ledger_that_makes_no_such_call_is_not_exercised_rather_than_ok() -> None:
    """Our own store with ``fence_sync=directory`` never fsyncs a fence file: the fault at the retire's
    first fsync never strikes. The images still keep the contract, and the verdict says the fault's path
    was not exercised instead of ``ok``."""
    found = check_crashes(
        "capture_ledger.impl.study.crash.factories:open_store",
        models=["journaled"],
        workloads=["retire-retry-fsync-eio"],
        cwd=ROOT,
    )
    assert isinstance(found.result, Unknown), str(found)
    assert "fault not injected" in found.result.reason
    assert found.not_exercised == (("retire-retry-fsync-eio", "EIO before at the 1st fsync of operation 0"),)
    assert "not exercised: retire-retry-fsync-eio" in str(found)
    summary = study_summary(found.study, found.target)
    assert summary["verdict"] == "unknown"
    assert summary["faults"] == [
        {"workload": "retire-retry-fsync-eio", "requested": [found.not_exercised[0][1]], "injected": []}
    ]


@needs_strace
def test_a_bug_that_skips_the_directory_sync_shows_its_fault_not_injected() -> None:
    """examples/bugs: delete unlinks without a directory sync, so the fault at that sync never strikes;
    the report says so, beside the R-CRASH-3 the missing sync causes."""
    found = check_crashes(
        "examples.bugs.directory_bugs:open_dir_delete_without_sync",
        models=["journaled"],
        workloads=["delete-retry-eio"],
        cwd=ROOT,
    )
    assert found.not_exercised == (("delete-retry-eio", "EIO before at the 1st sync_dir of operation 0"),)
    assert isinstance(found.result, Violation) and found.result.requirement == "R-CRASH-3"


@needs_strace
def test_each_sync_of_an_append_fails_in_turn_and_a_second_fsync_proves_nothing() -> None:
    """A directory ledger that leaves a line whose fsync failed in its log: the retry finds the row in the
    page cache and fsyncs again, which may succeed with the row lost ("fsyncgate"): R-CRASH-1. The
    example cuts the line away, so that the retry writes it anew, and keeps the contract."""
    found = check_crashes(
        "examples.bugs.directory_bugs:open_dir_retry_trusts_second_fsync",
        models=["journaled"],
        workloads=["record-append-fsync-eio"],
        cwd=ROOT,
    )
    assert found.workloads == ("record-append-fsync-eio@1",) and found.not_exercised == ()
    assert isinstance(found.result, Violation) and found.result.requirement == "R-CRASH-1"
    assert "FAILED (its pages may be lost)" in found.result.counterexample
    fixed = check_crashes(
        "examples.directory_ledger:open_ledger",
        models=["journaled"],
        workloads=["record-append-fsync-eio"],
        cwd=ROOT,
    )
    assert isinstance(fixed.result, Ok), str(fixed)
    assert fixed.workloads == ("record-append-fsync-eio@1",) and fixed.not_exercised == ()


@needs_strace
@pytest.mark.slow
def test_our_store_rewrites_a_row_whose_fsync_failed_and_keeps_the_contract() -> None:
    ours = check_crashes(
        "capture_ledger.impl.study.crash.factories:open_store",
        models=["journaled"],
        workloads=["record-append-fsync-eio"],
        cwd=ROOT,
    )
    assert isinstance(ours.result, Ok), str(ours)
    assert len(ours.workloads) >= 1 and ours.not_exercised == ()


@needs_strace
@pytest.mark.slow
def test_each_sync_of_a_creating_record_fails_in_turn() -> None:
    found = check_crashes(
        "examples.bugs.directory_bugs:open_dir_retry_trusts_second_fsync",
        workloads=["record-new-fsync-eio"],
        cwd=ROOT,
    )
    assert found.workloads == tuple(f"record-new-fsync-eio@{n}" for n in (1, 2, 3)), found.workloads
    assert found.not_exercised == ()
    assert isinstance(found.result, Violation) and found.result.requirement == "R-CRASH-1"
    fixed = check_crashes(
        "examples.directory_ledger:open_ledger", workloads=["record-new-fsync-eio"], cwd=ROOT
    )
    assert isinstance(fixed.result, Ok), str(fixed)
    ours = check_crashes(
        "capture_ledger.impl.study.crash.factories:open_store", workloads=["record-new-fsync-eio"], cwd=ROOT
    )
    assert isinstance(ours.result, Ok), str(ours)
    assert ours.not_exercised == () and len(ours.workloads) >= 2
