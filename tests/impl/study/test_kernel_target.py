"""``crash --target TARGET --kernel``: any ledger's crash states on the real kernel (docs/crash-target.md
§On the real kernel).

Real components: the target's workloads run under strace on a real ext4, XFS or btrfs image served through the
block-log daemon, each crash state is recovered by the kernel and read back by a fresh handle of the target in
a child process. Where the machine lacks what the kernel study needs (root, ``/dev/fuse``, loop devices,
e2fsprogs, the ``kernel`` extra) the kernel tests are skipped, naming what is missing — and in CI
(``CI=true``) they fail instead. Fast tier (about 10 s): the JSON shape on one workload, the directory ledger
that skips the fsync of an append broken (R-CRASH-1), the async example's threaded workload run on one event
loop and its fault never injected named, the exit 2 cases. Slow tier: the directory example over the default
workloads on ext4-ordered (ok) and on btrfs (ok, with the model findings pinned).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.impl.cli.main import main
from capture_ledger.impl.study.kernel import (
    FILESYSTEMS,
    TARGET_WORKLOADS,
    MarkControl,
    MarkedLedger,
    TargetKernelCell,
    TargetKernelResult,
    TraceMark,
    lacking,
    missing,
    strict,
    target_window,
)
from capture_ledger.spec.kit.crash.strace import coroutine_ledger

DIRECTORY = "examples.directory_ledger:open_ledger"
#: An in-memory ledger with coroutine methods (examples/async_ledger.py): it makes no file calls at all.
ASYNC = "examples.async_ledger:open_ledger"
#: A seeded bug the model study catches (examples/bugs): ``record`` returns without an fsync of the log.
NO_FSYNC = "examples.bugs.directory_bugs:open_dir_append_without_fsync"
#: The pinned top-level keys (those of ``crash --target --json`` plus the kernel's).
KEYS = {"target", "verdict", "broken", "fs", "states", "outside_model", "not_run"}

MISSING = missing()


def _needs_kernel(*file_systems: str) -> None:
    reasons = MISSING + [r for fs in file_systems for r in lacking(FILESYSTEMS[fs])]
    if reasons:
        if strict():
            pytest.fail(
                f"the kernel crash study cannot run in CI: it needs {'; '.join(reasons)}", pytrace=False
            )
        pytest.skip(f"the kernel crash study needs {'; '.join(reasons)}")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[dict[str, Any]], str]:
    code = main(["crash", *argv])
    out = capsys.readouterr()
    objects = [json.loads(line) for line in out.out.splitlines() if line.startswith("{")]
    return code, objects, out.err


def test_the_json_shape(capsys: pytest.CaptureFixture[str]) -> None:
    _needs_kernel("ext4-ordered")
    code, objects, _ = _run(
        capsys,
        "--target",
        DIRECTORY,
        "--kernel",
        "--fs",
        "ext4-ordered",
        "--workload",
        "record-new",
        "--json",
    )
    assert code == 0 and len(objects) == 1, objects
    summary = objects[0]
    assert set(summary) >= KEYS
    assert summary["target"] == DIRECTORY and summary["fs"] == "ext4-ordered"
    assert summary["verdict"] == "ok" and summary["broken"] == [] and summary["not_run"] == []
    assert summary["workloads"] == ["record-new"] and summary["sampled"] == []
    # every kernel state was recovered and judged, and each lies inside the journaled model
    assert summary["states"] > 0 and summary["outside_model"] == 0 and summary["unrecoverable"] == 0
    assert summary["inside_model"] + summary["model_unknown"] == summary["states"]


def test_a_skipped_fsync_is_broken_on_the_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    """The check can fail: the append the ledger returns without an fsync is lost by a real ext4 crash."""
    _needs_kernel("ext4-ordered")
    code, objects, _ = _run(
        capsys,
        "--target",
        NO_FSYNC,
        "--kernel",
        "--fs",
        "ext4-ordered",
        "--workload",
        "record-append",
        "--json",
    )
    assert code == 1 and len(objects) == 1
    summary = objects[0]
    assert summary["verdict"] == "violation"
    assert [(b["clause"], b["workload"]) for b in summary["broken"]] == [("R-CRASH-1", "record-append")]
    assert "returned: Record" in summary["broken"][0]["timeline"]  # the acknowledged record, then lost
    assert "crash" in summary["broken"][0]["blocks"]  # the block-level timeline
    assert summary["outside_model"] == 0  # the kernel did what the journaled model allows


def test_the_async_example_runs_its_threaded_workload_and_names_a_fault_never_injected(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A coroutine ledger's threaded workload runs its groups on one loop (before: the traced run hung until
    strace's 300 s timeout and the workload was ``not_run``); a requested fault the ledger never makes the
    call for is ``not_exercised`` and keeps the verdict from ``ok``. The in-memory ledger loses every
    returned record, so the verdict is a violation all the same."""
    _needs_kernel("ext4-ordered")
    code, objects, _ = _run(
        capsys,
        "--target",
        ASYNC,
        "--kernel",
        "--fs",
        "ext4-ordered",
        "--workload",
        "removals-share-syncs",
        "--workload",
        "record-retry-eio",
        "--json",
    )
    assert code == 1 and len(objects) == 1, objects
    summary = objects[0]
    assert summary["not_run"] == [] and summary["workloads"] == ["removals-share-syncs", "record-retry-eio"]
    assert summary["states"] > 0 and summary["verdict"] == "violation"
    assert summary["not_exercised"] == [
        {"workload": "record-retry-eio", "fault": "EIO before at the 1st sync_dir of operation 0"}
    ]


def test_a_fault_never_injected_keeps_the_verdict_from_ok() -> None:
    """The kernel verdict follows ``crash --target``'s: a requested fault the run never injected makes it
    ``unknown``, never ``ok`` (and a violation stays one)."""
    from dataclasses import replace

    cell = TargetKernelCell(
        workload="record-retry-eio",
        states=3,
        candidates=3,
        sampled=False,
        inside=3,
        outside=0,
        unknown=0,
        unrecoverable=0,
        broken=(),
        findings=(),
        record_seconds=0.0,
        seconds=0.0,
    )
    result = TargetKernelResult(
        target=DIRECTORY, fs="ext4-ordered", model="journaled", cells=(cell,), not_run=(), seconds=0.0
    )
    assert result.verdict == "ok" and result.summary()["not_exercised"] == []
    assert result.why_unknown() is None
    missed = replace(cell, not_exercised=("EIO before at the 1st sync_dir of operation 0",))
    result = replace(result, cells=(missed,))
    assert result.verdict == "unknown"
    why = result.why_unknown() or ""  # what ``check --layers kernel`` says of the file system
    assert "never injected" in why and "record-retry-eio" in why and "no workload ran" not in why
    assert result.summary()["not_exercised"] == [
        {"workload": "record-retry-eio", "fault": "EIO before at the 1st sync_dir of operation 0"}
    ]


def test_a_target_that_cannot_load_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, objects, err = _run(
        capsys, "--target", "examples.no_such_ledger:open", "--kernel", "--fs", "ext4-ordered"
    )
    assert code == 2 and objects == []
    assert len(err.strip().splitlines()) == 1, err  # one clear line


def test_options_of_other_studies_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--target", DIRECTORY, "--kernel", "--model", "journaled")
    assert code == 2 and "--model" in err


def test_the_crash_window_of_a_state() -> None:
    """Marks bound the trace events complete before a crash (``lower``) and under way by it (``upper``)."""
    marks = [TraceMark(position=2, lower=3, upper=3), TraceMark(position=6, lower=5, upper=7)]
    assert target_window(marks, 0, 1, 10).completed == 0  # before every mark
    window = target_window(marks, 3, 5, 10)  # between the two marks
    assert (window.completed, window.reached, window.cuts) == (3, 7, (3,))
    window = target_window(marks, 1, 9, 10)  # both marks fell inside the window: three histories
    assert (window.completed, window.reached, window.cuts) == (0, 10, (0, 3, 5))


@pytest.mark.slow  # the default workloads on one file system, every state judged: about 30 s
def test_the_directory_example_is_ok_on_ext4_ordered(capsys: pytest.CaptureFixture[str]) -> None:
    _needs_kernel("ext4-ordered")
    code, objects, _ = _run(
        capsys, "--target", DIRECTORY, "--kernel", "--fs", "ext4-ordered", "--max-states", "100000", "--json"
    )
    assert code == 0 and len(objects) == 1
    summary = objects[0]
    assert summary["verdict"] == "ok" and summary["broken"] == [] and summary["sampled"] == []
    assert summary["workloads"] == list(TARGET_WORKLOADS) and summary["not_run"] == []
    # a state outside the journaled model is a finding about the model, shown with its image and blocks
    assert (summary["outside_model"] == 0) == (summary["findings"] == [])
    for finding in summary["findings"]:
        assert finding["model"] == "journaled" and "crash" in finding["timeline"]


@pytest.mark.slow  # one workload on btrfs
def test_a_broken_ledger_is_broken_on_btrfs_too(capsys: pytest.CaptureFixture[str]) -> None:
    _needs_kernel("btrfs")
    code, objects, _ = _run(
        capsys, "--target", NO_FSYNC, "--kernel", "--fs", "btrfs", "--workload", "record-append", "--json"
    )
    assert code == 1 and [b["clause"] for b in objects[0]["broken"]] == ["R-CRASH-1"]


def test_a_ledger_without_removals_skips_their_workloads() -> None:
    """What a target cannot run is named, never judged (``strace.supported``), before any kernel is needed."""
    from capture_ledger.spec.kit.crash import WORKLOADS
    from capture_ledger.spec.kit.crash.strace import supported

    runs = [
        w
        for w in TARGET_WORKLOADS
        if supported(WORKLOADS[w], ("record", "record_failure", "manifest", "has_rows")) is None
    ]
    assert runs == ["record-new", "record-append"]


def test_the_marking_proxy_keeps_a_coroutine_method_a_coroutine_function(tmp_path: Path) -> None:
    """The driver tells a coroutine ledger by its methods' shape (``coroutine_ledger``): the proxy that
    marks the block log must not hide it behind a plain function, or a ledger with a plain factory and
    coroutine methods is driven as a synchronous one under ``--kernel``. Each call is marked on entry and
    when its awaited call has finished."""

    class Coroutines:
        async def manifest(self, rollout_id: str) -> list[object]:
            return [rollout_id]

        def has_rows(self, rollout_id: str) -> bool:
            return False

    control_file = tmp_path / "control"
    control_file.write_bytes(b"")
    proxy = MarkedLedger(Coroutines(), MarkControl(str(control_file)))
    assert inspect.iscoroutinefunction(proxy.manifest)
    assert not inspect.iscoroutinefunction(proxy.has_rows)
    assert coroutine_ledger([proxy])
    assert asyncio.run(proxy.manifest("r1")) == ["r1"]
    assert proxy.has_rows("r1") is False
    marks = control_file.read_bytes().decode()
    assert marks.count("MARK I ") == 2 and marks.count("MARK R ") == 2, marks
