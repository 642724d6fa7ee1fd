"""``capture-ledger verify``: the protocol check first, then the verdict; ``--operations``, ``--all``,
``--json``; exit 0 conforms, 1 does not, 2 cannot load or cannot judge (R-KIT-10, R-KIT-11).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from capture_ledger.impl.cli.main import main

KEYS = {"target", "conforms", "operations", "checked", "not_checked", "broken", "examples", "seconds"}


def _verify(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "capture_ledger.impl.cli.main", "verify", *args, "--profile", "ci"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=cwd,
        env=env,
    )


def test_a_conforming_partial_ledger_prints_the_protocol_check_then_the_verdict() -> None:
    done = _verify(
        "capture_ledger.reference.mutants:open_reference",
        "--operations",
        "record,manifest",
        "--max-examples",
        "3",
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.index("protocol check of ReferenceLedger:") < out.index(
        "open_reference (handles=1, profile=ci)"
    )
    assert "  operations: record, manifest\n" in out and "R-RETIRE-1" in out.split("not checked:")[1]


def test_json_pins_the_object_and_all_reports_each_broken_requirement() -> None:
    done = _verify("capture_ledger.reference.mutants:open_retire_reports_retired_removed", "--all", "--json")
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("protocol check of RetireReportsRetiredRemoved:")
    summary = json.loads(done.stdout)
    assert set(summary) >= KEYS
    assert summary["target"] == "capture_ledger.reference.mutants:open_retire_reports_retired_removed"
    assert summary["conforms"] is False
    (broken,) = summary["broken"]
    assert set(broken) == {"requirement", "message", "counterexample", "steps"}
    assert broken["requirement"] == "R-RETIRE-2" and broken["steps"] >= 1
    assert "the ledger opened by run_verify" not in done.stdout  # the target is named as written


def test_the_text_verdict_names_the_requirement_and_its_sentence() -> None:
    done = _verify("capture_ledger.reference.mutants:open_duplicates_reported_twice")
    assert done.returncode == 1
    assert "DOES NOT CONFORM" in done.stdout and "broken: R-BATCH-3" in done.stdout
    assert "  SPEC.md R-BATCH-3: Duplicates are reported once" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_an_unknown_operation_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["verify", "capture_ledger.reference.mutants:open_reference", "--operations", "record,fence"])
        == 2
    )
    err = capsys.readouterr().err
    assert (
        err.startswith("capture-ledger verify: not methods of CaptureLedger: fence") and err.count("\n") == 1
    )


def test_a_run_the_kit_cannot_judge_is_exit_2_with_a_message_not_a_traceback() -> None:
    env = {**os.environ, "CAPTURE_LEDGER_CALL_BUDGET": "soon"}
    done = _verify("capture_ledger.reference.mutants:open_reference", env=env)
    assert done.returncode == 2 and done.stdout == ""
    assert (
        done.stderr == "capture-ledger verify: CAPTURE_LEDGER_CALL_BUDGET='soon' is not a number of seconds\n"
    )
