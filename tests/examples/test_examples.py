"""The example ledgers conform to the spec (SPEC.md §Protocol, R-KIT-1..5; docs/examples.md).

Each of ``examples/``'s three ledgers runs through the conformance kit with three handles on one workspace
(workers of one model server, R-KIT-4), under the ``ci`` profile; the SQLite ledger's other settings run a
few examples each (the settings change durability, which the kit does not see). The directory and SQLite
ledgers also share a workspace with a real second process. These tests can fail: the seeded bugs of
``examples.bugs`` vary these same ledgers, and tests/examples/test_bug_catalogue.py shows the kit killing each
sequential one.

``examples`` is a folder of the checkout, not part of the installed package: it imports because the tests
run from the repository root (``python -m pytest`` puts the current directory on ``sys.path``, as
``capture-ledger verify`` does).
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.spec import CaptureLedger, RolloutRetiredError, check_ledger
from capture_ledger.spec.kit import PROFILES
from hypothesis import settings

from examples import async_ledger, directory_ledger, sqlite_ledger
from examples.bugs.catalogue import EXAMPLES, Example, load

ROOT = Path(__file__).resolve().parents[2]

#: A few examples per SQLite setting: the kit sees the same SQL whatever the pragmas.
FEW = settings(PROFILES["ci"], max_examples=5)

SQLITE_SETTINGS = (
    "open_ledger",
    "open_delete_full",
    "open_wal_full",
    "open_wal_extra",
    "open_truncate_full",
    "open_persist_full",
    "open_delete_normal",
    "open_wal_normal",
    "open_sync_off",
    "open_journal_memory",
    "open_journal_off",
)


@pytest.mark.parametrize("example", [pytest.param(e, id=e.name) for e in EXAMPLES])
def test_example_conforms_with_three_handles(example: Example) -> None:
    """R-KIT-1..5: every operation of every example agrees with the model, through three handles."""
    check_ledger(example.factory, handles=3, settings=PROFILES["ci"])


@pytest.mark.parametrize("name", SQLITE_SETTINGS)
def test_every_sqlite_setting_conforms_sequentially(name: str) -> None:
    """The settings are durability choices (R-CRASH-1..4): none changes what the kit sees."""
    check_ledger(getattr(sqlite_ledger, name), handles=3, settings=FEW)


def test_every_example_satisfies_the_protocol(tmp_path: Path) -> None:
    """SPEC.md §Protocol: all seven methods, coroutines for the asynchronous ledger."""
    for example in EXAMPLES:
        opened = example.factory(tmp_path / example.name)
        ledger = asyncio.run(opened) if asyncio.iscoroutine(opened) else opened
        assert isinstance(ledger, CaptureLedger)
        close = getattr(ledger, "close", None)
        if callable(close):
            close()
    assert asyncio.iscoroutinefunction(async_ledger.AsyncMemoryLedger.retire)


def test_sqlite_settings_are_applied_and_checked(tmp_path: Path) -> None:
    """The factory's pragmas reach the database; an unknown one is refused before anything is opened."""
    ledger = sqlite_ledger.open_wal_full(tmp_path)
    ledger.record("r1", {"model_call_id": "c1"})
    with sqlite3.connect(tmp_path / sqlite_ledger.DATABASE) as other:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent in the file
    ledger.close()
    with pytest.raises(ValueError, match="synchronous"):
        sqlite_ledger.open_ledger(tmp_path / "x", synchronous="SOMETIMES")
    with pytest.raises(ValueError, match="journal_mode"):
        sqlite_ledger.open_ledger(tmp_path / "x", journal_mode="SHADOW")


def test_directory_ledger_skips_a_torn_tail_and_refuses_a_corrupt_line(tmp_path: Path) -> None:
    """A last line without its newline is a torn tail, not a row (as R-STORE-6 says of the file store),
    and the next append cuts it off; a complete line that is not a row was never written by this ledger."""
    ledger = directory_ledger.open_ledger(tmp_path)
    ledger.record("r1", {"model_call_id": "c1"})
    log = tmp_path / "rollouts" / "r1" / directory_ledger.LOG
    with log.open("ab") as tail:
        tail.write(b'{"kind": "record", "row": {"model_call_id": "c2"}}')  # no newline: torn
    assert ledger.manifest("r1")["records"] == [{"model_call_id": "c1"}]
    ledger.record("r1", {"model_call_id": "c3"})
    assert ledger.manifest("r1")["records"] == [{"model_call_id": "c1"}, {"model_call_id": "c3"}]
    with log.open("ab") as tail:
        tail.write(b"not json\n")
    with pytest.raises(directory_ledger.CorruptRowError, match="not a row"):
        ledger.manifest("r1")


def test_async_handles_share_one_state_per_workspace(tmp_path: Path) -> None:
    """Handles on one workspace are one ledger; another workspace is another ledger."""

    async def scenario() -> tuple[bool, bool]:
        first = await async_ledger.open_ledger(tmp_path / "w")
        second = await async_ledger.open_ledger(tmp_path / "w")
        other = await async_ledger.open_ledger(tmp_path / "v")
        await first.record("r1", {"model_call_id": "c1"})
        return await second.has_rows("r1"), await other.has_rows("r1")

    assert asyncio.run(scenario()) == (True, False)


_CHILD = """
import sys
from pathlib import Path
from examples.bugs.catalogue import load
ledger = load(sys.argv[1])(Path(sys.argv[2]))
ledger.record("r1", {"model_call_id": "c1", "staging_key": "r1/c1"})
ledger.retire(["r2"])
"""


@pytest.mark.parametrize(
    "target", ["examples.sqlite_ledger:open_ledger", "examples.directory_ledger:open_ledger"]
)
def test_file_backed_examples_share_a_workspace_across_processes(target: str, tmp_path: Path) -> None:
    """Handles in two processes are workers of one server: each sees the other's rows and fences."""
    factory: Callable[[Path], Any] = load(target)
    ledger = factory(tmp_path)
    ledger.record("r2", {"model_call_id": "c9"})
    subprocess.run([sys.executable, "-c", _CHILD, target, str(tmp_path)], cwd=ROOT, check=True)
    assert ledger.manifest("r1")["records"] == [{"model_call_id": "c1", "staging_key": "r1/c1"}]
    with pytest.raises(RolloutRetiredError):
        ledger.manifest("r2")
    ledger.record("r2", {"model_call_id": "c10"})  # discarded: the other process's fence holds
    with pytest.raises(RolloutRetiredError):
        ledger.has_rows("r2")
    close = getattr(ledger, "close", None)
    if callable(close):
        close()


def test_verify_judges_an_example_by_name_from_the_root() -> None:
    """``capture-ledger verify examples.X:open_ledger`` works from a checkout's root (R-KIT-1); the kit's
    rejection of the seeded bugs, by the same factories, is tests/examples/test_bug_catalogue.py's."""
    command = [sys.executable, "-m", "capture_ledger.impl.cli.main", "verify"]
    options = ["--handles", "3", "--profile", "ci", "--max-examples", "10"]
    passed = subprocess.run(
        [*command, "examples.directory_ledger:open_ledger", *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert passed.returncode == 0, passed.stdout + passed.stderr
    missing = subprocess.run(
        [*command, "examples.no_such_ledger:open_ledger"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 2 and "examples.no_such_ledger" in missing.stderr
