"""``capture-ledger crash --target``: any ledger's crash states, traced from outside with strace (SPEC.md
§Crash, R-CRASH-1..4, R-STATE-3; docs/crash-target.md).

Real processes, real strace, real files: the command traces the example ledgers (examples/) and a seeded bug,
reads every image back through a fresh handle in a child process, and prints the pinned JSON. The exit codes:
0 no clause broken under the strongest model studied, 1 one is, 2 the target cannot be loaded or traced.
Each test can fail: the bug test fails if the tracer misses the missing fsync, the example test if the
models or the reader invent a state the ledger never had. The whole sweep of the examples and the catalogue
is in tests/test_bug_catalogue.py and under ``slow`` below.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PINNED = {"target", "verdict", "images", "broken", "seconds"}

needs_strace = pytest.mark.skipif(
    shutil.which("strace") is None and os.environ.get("CI") != "true",
    reason="strace is not installed (.ci/run installs it)",
)


def _crash(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any] | None, str]:
    done = subprocess.run(
        [sys.executable, "-m", "capture_ledger.impl.cli.main", "crash", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
        check=False,
    )
    data = json.loads(done.stdout) if done.stdout.strip().startswith("{") else None
    return done.returncode, data, done.stderr


def test_a_target_that_cannot_be_loaded_exits_2_naming_it() -> None:
    code, data, err = _crash("--target", "examples.no_such_ledger:open_ledger", "--json")
    assert code == 2 and data is None
    assert "examples.no_such_ledger" in err


def test_without_strace_the_command_exits_2_and_says_why(tmp_path: Path) -> None:
    """A PATH with the interpreter and no strace: the command cannot trace, and says so (exit 2)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(bin_dir)}
    code, data, err = _crash("--target", "examples.directory_ledger:open_ledger", "--json", env=env)
    assert code == 2 and data is None
    assert "strace is not installed" in err


@needs_strace
def test_a_record_without_fsync_is_killed_under_journaled_with_the_pinned_json() -> None:
    """examples/bugs: ``record`` returns after write() without an fsync: a crash loses the row (R-CRASH-1)."""
    code, data, _ = _crash(
        "--target", "examples.bugs.directory_bugs:open_dir_append_without_fsync", "--first", "--json"
    )
    assert code == 1 and data is not None
    assert set(data) >= PINNED and data["verdict"] == "violation" and data["images"] > 0
    first = data["broken"][0]
    assert set(first) == {"clause", "model", "workload", "timeline"}
    assert (first["clause"], first["model"]) == ("R-CRASH-1", "journaled")
    assert "write rollouts/r1/rows.jsonl" in first["timeline"]


@needs_strace
def test_the_directory_ledger_keeps_the_contract_under_journaled_without_faults() -> None:
    """The example's safe discipline holds on the workloads without injected faults (R-CRASH-1..4)."""
    workloads = ["record-new", "retire-live", "delete-reuse"]
    args = [arg for w in workloads for arg in ("--workload", w)]
    code, data, _ = _crash(
        "--target", "examples.directory_ledger:open_ledger", "--model", "journaled", *args, "--json"
    )
    assert data is not None
    assert data["broken"] == [], data["broken"]
    assert code == 0 and data["verdict"] == "ok" and data["workloads"] == workloads
    assert data["images"] > 20


@needs_strace
def test_the_directory_ledgers_retry_after_a_failed_fsync_loses_its_fence() -> None:
    """A finding (docs/crash-target.md): the example's retire fails at its fence's fsync (EIO); the retry
    sees the fence file and returns without syncing it, so a crash after the retry returned loses the fence
    (R-CRASH-2). Our store syncs even when nothing was written (``sync_when_nothing_written``)."""
    code, data, _ = _crash(
        "--target",
        "examples.directory_ledger:open_ledger",
        "--model",
        "journaled",
        "--workload",
        "retire-retry-fsync-eio",
        "--json",
    )
    assert code == 1 and data is not None
    assert [b["clause"] for b in data["broken"]] == ["R-CRASH-2"]
