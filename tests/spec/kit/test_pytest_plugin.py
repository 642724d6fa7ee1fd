"""The kit as a pytest plugin: ``pytest --capture-ledger module:factory`` (R-KIT-10, R-KIT-11; docs/kit.md).

Each test runs pytest in a child process in a scratch directory, as a project that has capture-ledger
installed would, with a ``conftest.py`` that loads a small Hypothesis profile (which the plugin must
honour). The plugin is registered through the ``pytest11`` entry point, so these runs also show the
installed package's entry point works. Importing it must not import Hypothesis or the kit. The examples
(``examples/``) are put on ``PYTHONPATH``, as a project's own modules would be importable.

The plugin runs the layers of ``capture-ledger check`` as items (docs/kit.md §pytest): the sequential kit's
groups, the stress layer's runs (threads, processes) and the crash layer's requirements; the tests of the
kit's groups ask for ``--capture-ledger-layers kit`` alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from capture_ledger.spec.kit import PROFILE_ENV

ROOT = Path(__file__).resolve().parents[3]
KIT = ("--capture-ledger-layers", "kit")
CRASH_ITEMS = ("R-CRASH-1", "R-CRASH-2", "R-CRASH-3", "R-CRASH-4", "R-STATE-3")

CONFTEST = """
from hypothesis import settings
settings.register_profile("tiny", max_examples={examples}, stateful_step_count=12, derandomize=True,
                          database=None, deadline=None)
settings.load_profile("tiny")
"""


def _pytest(
    tmp_path: Path, *options: str, examples: int = 5, path: str | None = None
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST.format(examples=examples))
    (tmp_path / "test_nothing.py").write_text("def test_own():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != PROFILE_ENV}  # the project's profile, not the kit's
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-rfsx", *options],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_conforming_ledger_passes_its_groups_with_the_projects_profile(tmp_path: Path) -> None:
    done = _pytest(
        tmp_path, "--capture-ledger", "capture_ledger.reference.mutants:open_reference", *KIT, "-v"
    )
    assert done.returncode == 0, done.stdout
    for group in ("ids", "batches", "writes", "admission", "reads", "retire", "delete", "calls"):
        assert f"capture-ledger::{group} PASSED" in done.stdout
    assert "capture-ledger::handles SKIPPED" in done.stdout and "not checked: R-KIT-4" in done.stdout
    assert "test_nothing.py::test_own PASSED" in done.stdout
    summary = done.stdout.split("capture-ledger ====")[1]
    assert "capture_ledger.reference.mutants:open_reference (handles=1): conforms" in summary
    assert "\n5 examples, " in summary  # the conftest's profile, not the kit's own


def test_a_broken_requirement_fails_its_group_with_the_counterexample(tmp_path: Path) -> None:
    target = "capture_ledger.reference.mutants:open_duplicates_reported_twice"
    done = _pytest(tmp_path, "--capture-ledger", target, *KIT, examples=60)
    assert done.returncode == 1, done.stdout
    assert "FAILED capture-ledger::batches" in done.stdout
    assert done.stdout.count("FAILED") == 1
    assert "R-BATCH-3: handle 0: " in done.stdout and "SPEC.md R-BATCH-3: Duplicates" in done.stdout
    assert "from capture_ledger.reference.mutants import open_duplicates_reported_twice as open_ledger" in (
        done.stdout
    )
    assert "broken: R-BATCH-3" in done.stdout


def test_operations_and_handles_options(tmp_path: Path) -> None:
    done = _pytest(
        tmp_path,
        "--capture-ledger",
        "capture_ledger.reference.mutants:open_shared_reference",
        "--capture-ledger-handles",
        "2",
        "--capture-ledger-operations",
        "record,has_rows",
        *KIT,
        "-v",
    )
    assert done.returncode == 0, done.stdout
    for group in ("batches", "admission", "retire", "delete"):
        assert f"capture-ledger::{group} SKIPPED" in done.stdout
    assert "capture-ledger::handles PASSED" in done.stdout and "capture-ledger::writes PASSED" in done.stdout
    assert "operations: record, has_rows" in done.stdout


def test_a_target_that_cannot_be_loaded_is_a_usage_error(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "--capture-ledger", "no_such_module_here:open")
    assert done.returncode != 0
    assert "--capture-ledger 'no_such_module_here:open': ModuleNotFoundError" in done.stderr + done.stdout


def test_without_the_option_the_plugin_adds_nothing_and_imports_light(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "-q")
    assert done.returncode == 0 and "1 passed" in done.stdout and "capture-ledger" not in done.stdout
    code = (
        "import sys; import capture_ledger.spec.kit.pytest_plugin; "
        "print(sorted(m for m in ('hypothesis', 'capture_ledger.spec.kit.sequential._conformance') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    helped = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert "--capture-ledger=MODULE:FACTORY" in helped.stdout


def test_the_items_of_every_layer_are_collected_by_name(tmp_path: Path) -> None:
    done = _pytest(
        tmp_path, "--capture-ledger", "capture_ledger.reference.mutants:open_reference", "--co", "-q"
    )
    assert done.returncode == 0, done.stdout
    names = [line for line in done.stdout.splitlines() if line.startswith("capture-ledger::")]
    groups = ["ids", "batches", "writes", "admission", "reads", "retire", "delete", "handles", "calls"]
    assert names == [
        *(f"capture-ledger::{g}" for g in groups),
        "capture-ledger::stress-threads",
        "capture-ledger::stress-processes",
        *(f"capture-ledger::crash-{r}" for r in CRASH_ITEMS),
    ]
    chosen = _pytest(
        tmp_path,
        "--capture-ledger",
        "capture_ledger.reference.mutants:open_reference",
        "--capture-ledger-layers",
        "stress",
        "--co",
        "-q",
    )
    assert [line for line in chosen.stdout.splitlines() if line.startswith("capture-ledger::")] == [
        "capture-ledger::stress-threads",
        "capture-ledger::stress-processes",
    ]
    wrong = _pytest(tmp_path, "--capture-ledger", "x:y", "--capture-ledger-layers", "kit,kernel", "--co")
    assert wrong.returncode != 0 and "the layers are kit, stress, crash" in wrong.stderr + wrong.stdout


@pytest.mark.slow  # the kit and a stress run in a child pytest (about 15 s)
def test_a_concurrency_bug_fails_the_stress_item_and_passes_the_kit_items(tmp_path: Path) -> None:
    """examples/bugs: a retire that does not re-check a rollout after taking its lock loses a record that
    began after a delete returned (R-CONC-3): no sequential history shows it, so every kit group passes."""
    target = "examples.bugs.directory_bugs:open_dir_retire_without_recheck"
    done = _pytest(tmp_path, "--capture-ledger", target, "--capture-ledger-layers", "kit,stress", "-v")
    assert done.returncode == 1, done.stdout
    for group in ("ids", "batches", "writes", "admission", "reads", "retire", "delete", "calls"):
        assert f"capture-ledger::{group} PASSED" in done.stdout
    assert "capture-ledger::stress-threads FAILED" in done.stdout
    assert "R-CONC-3 broken on threads" in done.stdout
    assert "capture-ledger::stress-processes SKIPPED" in done.stdout
    assert "stress processes: not run: the threads' run already broke" in done.stdout
    assert "stress: broken; threads violation" in done.stdout


def test_an_in_memory_ledgers_processes_item_is_skipped_with_why(tmp_path: Path) -> None:
    """A ledger that keeps its rows in memory shares nothing across processes: the processes run is not
    made, and its item says why (never a pass); the threads' run passes."""
    target = "capture_ledger.reference.mutants:open_reference"
    done = _pytest(tmp_path, "--capture-ledger", target, "--capture-ledger-layers", "stress", "-v")
    assert done.returncode == 0, done.stdout
    assert "capture-ledger::stress-threads PASSED" in done.stdout
    assert "capture-ledger::stress-processes SKIPPED" in done.stdout
    assert "does not see a row recorded in one (state held in memory)" in done.stdout


@pytest.mark.slow  # a crash study in a child pytest (strace; about 10 s)
@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (.ci/run installs it)")
def test_a_crash_bug_fails_its_crash_requirement_item(tmp_path: Path) -> None:
    """examples/bugs: ``record`` returns after ``write()`` without an fsync: a crash loses the row, R-CRASH-1
    under journaled; the other crash items are not broken on that workload."""
    target = "examples.bugs.directory_bugs:open_dir_append_without_fsync"
    done = _pytest(
        tmp_path,
        "--capture-ledger",
        target,
        "--capture-ledger-layers",
        "crash",
        "--capture-ledger-crash-workloads",
        "record-new",
        "-v",
    )
    assert done.returncode == 1, done.stdout
    assert "capture-ledger::crash-R-CRASH-1 FAILED" in done.stdout
    assert "R-CRASH-1 broken under journaled:" in done.stdout
    assert done.stdout.count("FAILED") == 2  # the item's line and the short summary's
    assert "crash: journaled (decides): broken: R-CRASH-1" in done.stdout


def test_a_crash_layer_that_cannot_run_is_skipped_with_why(tmp_path: Path) -> None:
    """No strace on ``PATH``: every crash item is skipped, saying so; none passes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    done = _pytest(
        tmp_path,
        "--capture-ledger",
        "examples.directory_ledger:open_ledger",
        "--capture-ledger-layers",
        "crash",
        "-v",
        path=str(bin_dir),
    )
    assert done.returncode == 0, done.stdout
    for requirement in CRASH_ITEMS:
        assert f"capture-ledger::crash-{requirement} SKIPPED" in done.stdout
    assert "PASSED" not in done.stdout.replace("test_own PASSED", "")
    assert "the crash layer cannot run here: " in done.stdout and "strace is not installed" in done.stdout
