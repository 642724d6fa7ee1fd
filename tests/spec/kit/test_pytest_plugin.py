"""The kit as a pytest plugin: ``pytest --capture-ledger module:factory`` (R-KIT-10, R-KIT-11; docs/kit.md).

Each test runs pytest in a child process in a scratch directory, as a project that has capture-ledger
installed would, with a ``conftest.py`` that loads a small Hypothesis profile (which the plugin must
honour). The plugin is registered through the ``pytest11`` entry point, so these runs also show the
installed package's entry point works. Importing it must not import Hypothesis or the kit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from capture_ledger.spec.kit import PROFILE_ENV

CONFTEST = """
from hypothesis import settings
settings.register_profile("tiny", max_examples={examples}, stateful_step_count=12, derandomize=True,
                          database=None, deadline=None)
settings.load_profile("tiny")
"""


def _pytest(tmp_path: Path, *options: str, examples: int = 5) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST.format(examples=examples))
    (tmp_path / "test_nothing.py").write_text("def test_own():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != PROFILE_ENV}  # the project's profile, not the kit's
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-rfs", *options],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_a_conforming_ledger_passes_its_groups_with_the_projects_profile(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "--capture-ledger", "capture_ledger.reference.mutants:open_reference", "-v")
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
    done = _pytest(tmp_path, "--capture-ledger", target, examples=60)
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
