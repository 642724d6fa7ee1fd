"""``capture-ledger crash --target``: any ledger's crash states, traced from outside with strace (SPEC.md
§Crash, R-CRASH-1..4, R-STATE-3, R-KIT-13; docs/crash-target.md).

Real processes, real strace, real files: the command traces the example ledgers (examples/) and a seeded bug,
reads every image back through a fresh handle in a child process, and prints the pinned JSON. The exit codes:
0 no clause broken under the strongest model studied, 1 one is, 2 the target cannot be loaded or traced.
Each test can fail: the bug test fails if the tracer misses the missing fsync, the example test if the
models or the reader invent a state the ledger never had. The whole sweep of the examples and the catalogue
is in tests/examples/test_bug_catalogue.py and under ``slow`` below.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
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
def test_a_record_without_fsync_is_killed_under_journaled_with_the_pinned_json(tmp_path: Path) -> None:
    """examples/bugs: ``record`` returns after write() without an fsync: a crash loses the row (R-CRASH-1);
    the report holds the matrix and the counterexample's timeline picture."""
    target = "examples.bugs.directory_bugs:open_dir_append_without_fsync"
    code, data, _ = _crash("--target", target, "--first", "--json", "--report", str(tmp_path))
    assert code == 1 and data is not None
    assert set(data) >= PINNED and data["verdict"] == "violation" and data["images"] > 0
    first = data["broken"][0]
    assert set(first) == {"clause", "model", "workload", "timeline"}
    assert (first["clause"], first["model"]) == ("R-CRASH-1", "journaled")
    assert "write rollouts/r1/rows.jsonl" in first["timeline"]
    assert "| R-CRASH-1 |" in (tmp_path / "report.md").read_text(encoding="utf-8")
    assert (tmp_path / "matrix.svg").exists() and list(tmp_path.glob("timeline-*journaled.svg"))


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


@pytest.mark.slow  # a long crash cross-check (about 6 s alone)
@needs_strace
def test_the_directory_ledgers_retries_after_a_failed_sync_keep_the_contract() -> None:
    """A finding of this layer, fixed (docs/crash-target.md): the example's retire failed at its fence's
    fsync (EIO), and the retry saw the fence file and returned without syncing it, so a crash after the
    retry returned lost the fence (R-CRASH-2); a delete's retry, and a record's after its directory's
    sync failed, likewise. Now a retry syncs what it finds (``DirectoryLedger._resync``), as our store
    syncs even when nothing was written (R-STORE-4); without that this test fails with R-CRASH-2."""
    for workload in ("retire-retry-fsync-eio", "retire-retry-eio", "delete-retry-eio", "record-retry-eio"):
        code, data, _ = _crash(
            "--target",
            "examples.directory_ledger:open_ledger",
            "--model",
            "weakest-posix",
            "--workload",
            workload,
            "--json",
        )
        assert data is not None, workload
        assert data["broken"] == [], (workload, data["broken"])
        assert code == 0, workload


def _cross_check(configs: tuple[str, ...], workloads: tuple[str, ...], models: tuple[str, ...]) -> list[Any]:
    from capture_ledger.impl.study.crash import cross_check

    return cross_check(configs=configs, workloads=workloads, models=models)


@pytest.mark.slow  # a long crash cross-check (about 5 s alone)
@needs_strace
def test_our_store_traced_from_outside_gets_the_seam_studys_verdicts() -> None:
    """The cross-check (docs/crash-target.md): the same store, workload and model, recorded through the seam
    and traced with strace, breaks the same clauses, on the same schedule even where the workload runs on
    threads (the traced run follows the seam study's ``GatherSchedule``, R-STORE-9). Without the directory
    sync on create both find R-CRASH-1, also when a re-used ID's record returns among shared removals."""
    workloads = ("record-new", "retire-live", "removals-share-syncs")
    found = _cross_check(("default", "no sync_dir_on_create"), workloads, ("journaled",))
    assert len(found) == 6
    assert all(c.same_schedule for c in found), [c.line() for c in found]
    assert all(c.agree for c in found), [c.line() for c in found]
    by = {(c.config, c.workload): c.outside for c in found}
    assert by["default", "record-new"] == by["default", "removals-share-syncs"] == frozenset()
    assert by["no sync_dir_on_create", "record-new"] == frozenset({"R-CRASH-1"})
    assert by["no sync_dir_on_create", "removals-share-syncs"] == frozenset({"R-CRASH-1"})


@pytest.mark.slow
@needs_strace
def test_the_cross_check_agrees_on_every_configuration_of_the_small_study() -> None:
    """Every configuration of the small study (the default protocol, its options, each StoreVariant step
    left out), every workload, every model: the verdicts agree wherever the two runs took the same schedule,
    and every workload but `retire-overlap` (parked by time from outside) takes the same schedule both ways:
    the threaded ones run under the seam study's scheduler in the traced child too."""
    from capture_ledger.impl.study.crash import SMALL
    from capture_ledger.spec.crash.durability import MODELS
    from capture_ledger.spec.kit.crash import SMALL_WORKLOADS

    found = _cross_check(SMALL, SMALL_WORKLOADS, tuple(MODELS))
    assert all(c.explained for c in found), [c.line() for c in found if not c.explained]
    unparked = [c for c in found if c.workload != "retire-overlap"]
    assert all(c.same_schedule and c.agree for c in unparked), [c.line() for c in unparked if not c.agree]


@pytest.mark.slow  # Gym traced from outside (about 4 s alone)
@needs_strace
def test_gyms_file_store_survives_crashes_but_not_its_own_torn_line() -> None:
    """docs/gym.md: NeMo Gym's store (record, record_failure, manifest, has_rows) fsyncs what it writes, so
    no returned row is lost; a crash mid-append leaves a torn line its reader cannot parse (R-STATE-3)."""
    import importlib.util

    if importlib.util.find_spec("nemo_gym") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("NeMo Gym is missing: tools/install-gym")
        pytest.skip("NeMo Gym is not installed (tools/install-gym)")
    code, data, _ = _crash(
        "--target", "capture_ledger.adapters.gym:open_gym_file_store", "--model", "journaled", "--json"
    )
    assert code == 1 and data is not None
    fsync_eio = ["record-new-fsync-eio@1", "record-append-fsync-eio@1"]
    assert data["workloads"] == ["record-new", "record-append", "record-retry-eio", *fsync_eio]
    assert [b["clause"] for b in data["broken"]] == ["R-STATE-3"]
    assert "JSONDecodeError" in data["broken"][0]["timeline"]
    # Gym syncs on a worker thread of its own (asyncio.to_thread), and faults are counted over the
    # operation's own thread: its retry and fsync-EIO workloads get no fault, and say so, never "ok".
    missed = sorted(entry["workload"] for entry in data["not_exercised"])
    assert missed == sorted(["record-retry-eio", *fsync_eio]), data["not_exercised"]


@pytest.mark.slow
@needs_strace
def test_the_example_ledgers_full_catalogue_under_journaled() -> None:
    """Every workload of the catalogue, journaled (docs/examples.md, docs/crash-target.md): the SQLite
    ledger's default setting keeps R-CRASH-1..4 except where a sync of an append fails with EIO: at the
    2nd sync of the append it breaks R-STATE-3, at the 5th R-CRASH-1 (a row that returned after the
    retry is gone: SQLite trusts a later sync of pages whose sync failed). The directory ledger keeps
    them all, its retries included (it cuts a line whose fsync failed and writes it anew)."""
    code, data, _ = _crash("--target", "examples.sqlite_ledger:open_ledger", "--model", "journaled", "--json")
    assert code == 1 and data is not None
    assert {(b["clause"], b["workload"]) for b in data["broken"]} == {
        ("R-STATE-3", "record-append-fsync-eio@2"),
        ("R-CRASH-1", "record-append-fsync-eio@5"),
    }
    code, data, _ = _crash(
        "--target", "examples.directory_ledger:open_ledger", "--model", "journaled", "--json"
    )
    assert code == 0 and data is not None and data["broken"] == []


@needs_strace
def test_only_a_weaker_model_broken_reads_ok_with_each_models_verdict() -> None:
    """The top-level ``verdict`` follows the deciding model, as the exit code does: a fence file that is
    never fsynced breaks R-CRASH-2 under ext4-nojournal only, so ``verdict`` is ``ok`` (it said
    ``violation`` while the command exited 0) and ``models`` says which model broke."""
    target = "examples.bugs.directory_bugs:open_dir_fence_file_not_fsynced"
    code, data, _ = _crash("--target", target, "--workload", "retire-live", "--json")
    assert data is not None and set(data) >= PINNED
    assert data["models"] == {"journaled": "ok", "weakest-posix": "ok", "ext4-nojournal": "broken"}
    assert (code, data["verdict"], data["deciding_model"], data["deciding_why"]) == (
        0,
        "ok",
        "journaled",
        None,
    )
    assert {b["model"] for b in data["broken"]} == {"ext4-nojournal"}
    assert "R-CRASH-2" in {b["clause"] for b in data["broken"]}


@needs_strace
def test_a_sampled_clean_deciding_model_is_unknown_none_found_sampled() -> None:
    """One image per crash point (``--budget 1``): no violation in a sample proves nothing, so the deciding
    model reads ``none found (sampled)`` and the top-level ``verdict`` is ``unknown``, exit 0 (reported,
    not failed), as check's crash layer says ``unknown``."""
    code, data, _ = _crash(
        "--target",
        "examples.directory_ledger:open_ledger",
        "--workload",
        "record-new",
        "--budget",
        "1",
        "--json",
    )
    assert data is not None and code == 0
    assert data["models"]["journaled"] == "none found (sampled)"
    assert data["verdict"] == "unknown" and data["deciding_model"] == "journaled"
    assert "sampled beyond the budget per crash point" in data["deciding_why"]


@needs_strace
def test_a_weaker_model_alone_says_only_journaled_decides_a_default_run() -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "capture_ledger.impl.cli.main", "crash", "--target"),
            *(
                "examples.directory_ledger:open_ledger",
                "--workload",
                "record-new",
                "--model",
                "ext4-nojournal",
            ),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "models: ext4-nojournal ok; the exit code follows ext4-nojournal (ok)" in done.stdout
    assert "note: only the journaled model decides the exit code of a run that studies it" in done.stdout


@needs_strace
def test_a_traced_run_that_times_out_takes_its_children_with_it(tmp_path: Path) -> None:
    """A hung tracee is killed with strace (its own process group), not left holding its workspace."""
    from capture_ledger.spec.kit.crash.strace import run_traced

    pid_file = tmp_path / "child.pid"
    program = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(600)\n"
    )
    done = run_traced([sys.executable, "-c", program], tmp_path / "trace", timeout=3.0)
    assert done.returncode == -9 and "killed after 3 s" in done.stderr
    child = int(pid_file.read_text())
    for _ in range(50):  # dead: gone, or a zombie nobody has reaped yet (PID 1 of a container may not)
        if not _running(child):
            break
        time.sleep(0.1)
    assert not _running(child), f"the traced program's child {child} outlived the timeout"


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")
