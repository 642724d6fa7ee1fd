"""One way to fail (docs/verdicts.md §One way to fail): a target that cannot be loaded, a factory that
raises at the very first open, and a bad flag are each exit 2 with one line on standard error and nothing
on standard output, for ``verify``, ``stress``, ``crash --target`` and ``check`` alike.

Each command runs in a child process whose current directory (put on ``sys.path`` by the target loader)
holds the small factory modules. A factory that opens once and raises later stays a verdict (R-KIT-7):
the last test shows ``verify`` judging it, exit 1. Each test can fail: before this rule, ``verify`` gave a
factory that raises exit 1 (a verdict) and ``stress`` exit 2 with its message on standard output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

COMMANDS = {
    "verify": ["verify"],
    "stress": ["stress"],
    "crash --target": ["crash", "--target"],
    "check": ["check"],
}

RAISES = "def open_ledger(directory):\n    raise RuntimeError('the disk\\nis gone')\n"
LATER = (
    "from capture_ledger.reference.mutants import open_reference\n"
    "OPENED = []\n"
    "def open_ledger(directory):\n"
    "    OPENED.append(directory)\n"
    "    if len(OPENED) > 1:\n"
    "        raise RuntimeError('only one handle, ever')\n"
    "    return open_reference(directory)\n"
)


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "capture_ledger.impl.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def factories(tmp_path: Path) -> Path:
    (tmp_path / "owtf_raises.py").write_text(RAISES)
    (tmp_path / "owtf_later.py").write_text(LATER)
    return tmp_path


def _one_line_exit_2(done: subprocess.CompletedProcess[str], command: str) -> str:
    assert (done.returncode, done.stdout) == (2, ""), (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1, done.stderr
    prefix = command.split(maxsplit=1)[0]
    assert done.stderr.startswith(f"capture-ledger {prefix}: "), done.stderr
    return done.stderr


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_factory_that_raises_at_the_first_open_is_exit_2_one_line(factories: Path, command: str) -> None:
    done = _run(factories, *COMMANDS[command], "owtf_raises:open_ledger")
    err = _one_line_exit_2(done, command)
    assert (
        "cannot open target 'owtf_raises:open_ledger': its factory raised RuntimeError: the disk is gone"
        in (err)
    )


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_target_that_cannot_be_loaded_is_exit_2_one_line(factories: Path, command: str) -> None:
    done = _run(factories, *COMMANDS[command], "owtf_nowhere:open_ledger")
    err = _one_line_exit_2(done, command)
    assert "cannot load target 'owtf_nowhere:open_ledger'" in err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bad_flag_is_exit_2_one_line_of_usage(factories: Path, command: str) -> None:
    done = _run(factories, *COMMANDS[command], "owtf_raises:open_ledger", "--no-such-flag")
    assert (done.returncode, done.stdout) == (2, "")
    last = done.stderr.strip().splitlines()[-1]
    assert "unrecognized arguments: --no-such-flag" in last, done.stderr


def test_a_factory_that_raises_after_opening_stays_a_verdict(factories: Path) -> None:
    done = _run(
        factories,
        "verify",
        "owtf_later:open_ledger",
        "--handles",
        "2",
        "--profile",
        "ci",
        "--max-examples",
        "2",
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "raised RuntimeError: only one handle, ever" in done.stdout
