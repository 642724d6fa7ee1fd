"""What the kernel recorders keep of a run: a workload's recording does not depend on what ran before it,
and our store's recording names the faults it injected (SPEC.md §Crash, R-CRASH-1..4; docs/crash-target.md
§On the real kernel, docs/crash.md §The kernel study).

Real components: real ext4 images behind the block-log daemon (skipped naming what is missing where the
machine lacks the kernel pieces, failed instead under ``CI=true``).

- ``crash --target --kernel`` gives each workload a fresh image: on ext4 without a journal a crash may
  show what an image's blocks and inode tables held before, so on one image shared by the workloads the
  directory ledger's ``retire-delete-reuse`` gave 19 states after ``record-new`` and ``retire-live`` and
  17 alone, and an R-CRASH-3 in some runs only (zeroing the shared image's free blocks between workloads
  did not stop it: the R-CRASH-3 came back in 2 runs of 3). The test runs it both ways and compares the
  cells.
- ``record_on_kernel`` keeps ``Recording.injected``, as the model study's ``record`` does: a fault the store
  never made the call for is named by ``not_injected`` (the judgement's "not exercised"), one that fired is
  not (before, every requested fault read as never injected).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from capture_ledger.impl.study.crash import StoreConfig
from capture_ledger.impl.study.kernel import (
    FILESYSTEMS,
    KernelStudy,
    TargetKernelCell,
    kernel_cell,
    kernel_target,
    lacking,
    missing,
    record_on_kernel,
    strict,
    workspace,
)
from capture_ledger.spec.kit.crash import WORKLOADS, describe_fault
from capture_ledger.spec.kit.crash.strace import Target, tracing_problem

ROOT = Path(__file__).resolve().parents[3]
DIRECTORY = "examples.directory_ledger:open_ledger"


def _needs(name: str, *, trace: bool = False) -> None:
    reasons = missing() + lacking(FILESYSTEMS[name])
    if trace and (problem := tracing_problem()) is not None:
        reasons.append(problem)
    if not reasons:
        return
    if strict():
        pytest.fail(f"the kernel recorders cannot run in CI: they need {'; '.join(reasons)}", pytrace=False)
    pytest.skip(f"the kernel recorders need {'; '.join(reasons)}")


def _figures(cell: TargetKernelCell) -> tuple[object, ...]:
    clauses = sorted({b.clause for b in cell.broken})
    return (cell.workload, cell.states, cell.candidates, cell.inside, cell.outside, cell.unknown, clauses)


@pytest.mark.slow  # two kernel runs of the directory ledger on ext4 without a journal: about 10 s
def test_a_workload_gives_the_same_states_and_verdict_after_other_workloads_as_alone() -> None:
    _needs("ext4-nojournal", trace=True)
    fs = FILESYSTEMS["ext4-nojournal"]
    target = Target(target=DIRECTORY, cwd=ROOT)
    with workspace() as root:
        after = kernel_target(
            target, fs, root / "after", workloads=["record-new", "retire-live", "retire-delete-reuse"]
        )
    with workspace() as root:
        alone = kernel_target(target, fs, root / "alone", workloads=["retire-delete-reuse"])
    assert not after.not_run and not alone.not_run, (after.not_run, alone.not_run)
    assert _figures(after.cells[-1]) == _figures(alone.cells[0])
    assert alone.cells[0].states > 0 and alone.verdict == "ok"


def test_our_stores_kernel_recording_names_the_faults_never_injected() -> None:
    _needs("ext4-ordered")
    fs = FILESYSTEMS["ext4-ordered"]
    fired, never = WORKLOADS["record-retry-eio"], WORKLOADS["retire-retry-fsync-eio"]
    with workspace() as root:
        struck = record_on_kernel(fired, StoreConfig(), fs, root / "fired").recording
        missed = record_on_kernel(never, StoreConfig(), fs, root / "never").recording
    assert struck.injected == fired.faults and struck.not_injected() == ()  # the create's sync_dir failed
    # fence_sync="directory": retire makes no fsync, so the fsync fault is not exercised
    assert missed.injected == () and missed.not_injected() == never.faults


def test_our_stores_kernel_cell_and_summary_name_a_fault_never_injected() -> None:
    """``crash --kernel``'s cell and JSON carry the fault the store never made the call for, described as
    ``crash --target`` describes it; a cell whose fault fired names none."""
    _needs("ext4-ordered")
    fs = FILESYSTEMS["ext4-ordered"]
    never, fired = WORKLOADS["retire-retry-fsync-eio"], WORKLOADS["record-retry-eio"]
    with workspace() as root:
        missed = kernel_cell(never, StoreConfig(), fs, root / "never")
        struck = kernel_cell(fired, StoreConfig(), fs, root / "fired")
    assert missed.not_exercised == tuple(describe_fault(f) for f in never.faults) != ()
    assert struck.not_exercised == ()
    study = KernelStudy(cells=(missed, struck), seconds=0.0)
    assert study.summary("ext4-ordered")["not_exercised"] == [
        {"workload": never.name, "config": "default", "fault": describe_fault(f)} for f in never.faults
    ]
