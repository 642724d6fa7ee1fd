"""``check --layers kernel``: the kernel layer of ``check`` (docs/check.md; ``impl/cli/_check_kernel.py``).

The layer runs ``crash --target TARGET --kernel`` on each ``--fs`` with real components (strace, the
block-log daemon, a real image, the kernel's recovery) and folds the results into one layer. Skipped,
naming what is missing, where the machine lacks the kernel study's pieces; in CI (``CI=true``) a failure.
The usage mistakes are checked before anything runs (exit 2).
"""

from __future__ import annotations

import json

import pytest
from capture_ledger.impl.cli.main import main
from capture_ledger.impl.study.kernel import FILESYSTEMS, lacking, missing, strict

NO_FSYNC = "examples.bugs.directory_bugs:open_dir_append_without_fsync"


def _needs_kernel(fs: str) -> None:
    reasons = missing() + lacking(FILESYSTEMS[fs])
    if reasons:
        if strict():
            pytest.fail(f"the kernel layer cannot run in CI: it needs {'; '.join(reasons)}", pytrace=False)
        pytest.skip(f"the kernel layer needs {'; '.join(reasons)}")


def test_fs_without_the_kernel_layer_is_a_usage_mistake(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", NO_FSYNC, "--layers", "kit", "--fs", "xfs"]) == 2
    assert "--fs goes with --layers" in capsys.readouterr().err


def test_an_unknown_file_system_is_a_usage_mistake(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", NO_FSYNC, "--layers", "kernel", "--fs", "zfs"]) == 2
    assert "unknown file system zfs" in capsys.readouterr().err


@pytest.mark.slow
def test_the_kernel_layer_breaks_a_ledger_that_skips_an_fsync(capsys: pytest.CaptureFixture[str]) -> None:
    """The seeded bug returns from ``record`` before its fsync: the kernel loses an acknowledged row
    (R-CRASH-1), and the verdict is ``broken`` with the layer's coverage per file system."""
    _needs_kernel("ext4-ordered")
    code = main(["check", NO_FSYNC, "--layers", "kernel", "--fs", "ext4-ordered", "--json"])
    verdict = json.loads(capsys.readouterr().out)
    assert code == 1 and verdict["verdict"] == "broken", verdict
    (kernel,) = [layer for layer in verdict["layers"] if layer["layer"] == "kernel"]
    assert kernel["verdict"] == "broken"
    assert "R-CRASH-1" in {b["requirement"] for b in kernel["broken"]}
    assert all(b["counterexample"].startswith("ext4-ordered / ") for b in kernel["broken"])
    ran = kernel["coverage"]["file_systems"]["ext4-ordered"]
    assert ran["states"] > 0 and ran["workloads"]
    assert kernel["coverage"]["not_run_file_systems"] == {}
    assert kernel["coverage"]["checked"] == ["R-CRASH-1", "R-CRASH-2", "R-CRASH-3", "R-CRASH-4", "R-STATE-3"]
