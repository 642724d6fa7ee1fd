"""``capture-ledger simulate`` on its small scenario: the invariants of the source's stress run hold
through real servers (R-RETIRE-1..4, R-DELETE-1..3, R-WRITE-4..6, R-STORE-7, R-HTTP-1).

One run of ``simulate --ci --json`` (real ``capture-ledger serve`` servers, two workers each, every arm:
retire, the baseline without removal, and the duplicate experiment under delete and under retire), then
counts only, never times:

- nothing left: 0 ledger bytes, 0 fence files and 0 cached rows after the end-of-run delete, in the JSON
  and in the servers' directories themselves;
- retire re-creates no ledger, while deleting lets abandoned agents re-create every one of theirs (the
  held late write is admitted before the removal and written after it: deterministic);
- each abandoned attempt's late write is discarded under retire, and its next call refused at admission;
- every ID sent to a server with another directory comes back ``absent``;
- every duplicate is sent, runs all its calls, and each call is either captured or refused;
- every worker of every server answered the metrics scrape; the report and its pictures exist.

A second, smaller run serves a deliberately broken store (writes do not look for the fence, admission
ignores it: ``StoreVariant``) and must fail with re-created ledgers under retire, so the test can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.impl.simulate import Scenario, measure

#: The slow tier (``pytest -m slow``, run by .ci/run): the simulation runs real servers (about 25 s).
pytestmark = pytest.mark.slow

PINNED = {
    "rollouts",
    "calls",
    "in_flight",
    "ledger_bytes_left",
    "fence_files_left",
    "cached_rows_left",
    "duplicates_sent",
    "ledgers_recreated",
    "discarded_writes",
    "wrong_server_absent",
    "record_ms",
    "retire_us_per_rollout",
    "delete_us_per_rollout",
    "seconds",
}


def _simulate(tmp: Path, *extra: str, cwd: Path | None = None) -> tuple[int, dict[str, Any], str]:
    command = [sys.executable, "-m", "capture_ledger.impl.cli.main", "simulate", "--ci", "--json"]
    command += ["--report", str(tmp / "report"), "--work", str(tmp / "work"), *extra]
    environment = dict(os.environ)
    if cwd is not None:
        environment["PYTHONPATH"] = os.pathsep.join([str(cwd), environment.get("PYTHONPATH", "")])
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=900, check=False, cwd=cwd, env=environment
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str, Path]:
    tmp = tmp_path_factory.mktemp("simulate")
    code, figures, stderr = _simulate(tmp)
    return code, figures, stderr, tmp


def test_the_small_scenario_leaves_nothing_behind(run: tuple[int, dict[str, Any], str, Path]) -> None:
    code, figures, stderr, tmp = run
    broken = [name for name, holds in figures["invariants"].items() if not holds]
    assert code == 0 and figures["ok"], (broken, stderr[-2000:])
    assert set(figures) >= PINNED
    left = (figures["ledger_bytes_left"], figures["fence_files_left"], figures["cached_rows_left"])
    assert left == (0, 0, 0)
    # The directories themselves, read again: every server of every arm.
    directories = sorted((tmp / "work").glob("*/server-*"))
    assert len(directories) == 4 * 2
    for directory in directories:
        state = measure(directory)
        assert (state.ledgers, state.ledger_bytes, state.fences) == (0, 0, 0), directory
    for name, arm in figures["arms"].items():
        assert arm["workers_scraped"] == 2 * 2, name
        assert arm["cached_rows_left"] == 0, name


def test_retire_recreates_nothing_and_delete_lets_late_writes_recreate(
    run: tuple[int, dict[str, Any], str, Path],
) -> None:
    _, figures, _, _ = run
    assert figures["ledgers_recreated"] == 0
    arms = figures["arms"]
    for name in ("retire", "duplicates-retire"):
        arm = arms[name]
        assert arm["abandoned"] > 0
        assert sum(arm["ledgers_recreated"].values()) == 0, name
        # Each abandoned agent's held write was admitted before the retire and discarded after it, and
        # its next call was refused at admission.
        assert arm["late_writes"] == arm["abandoned"]
        assert arm["discarded_writes"] >= arm["abandoned"]
        assert arm["calls_after_removal"] == {"admitted": 0, "refused": arm["abandoned"]}
    deleting = arms["duplicates-delete"]
    assert deleting["ledgers_recreated"]["by_abandoned_agents"] == deleting["abandoned"] > 0
    assert deleting["calls_after_removal"] == {"admitted": deleting["abandoned"], "refused": 0}
    assert deleting["discarded_writes"] == 0
    assert figures["ledgers_recreated_under_delete"] == deleting["ledgers_recreated"]["by_duplicates"]


def test_the_wrong_server_reports_absent_and_every_duplicate_counts(
    run: tuple[int, dict[str, Any], str, Path],
) -> None:
    _, figures, _, _ = run
    assert figures["wrong_server_sent"] > 0
    assert figures["wrong_server_absent"] == figures["wrong_server_sent"]
    scenario = Scenario.ci()
    expected = 0
    for name, arm in figures["arms"].items():
        wanted = round(scenario.duplicates * arm["rollouts"])
        assert arm["duplicates_sent"] == wanted, name
        answered = arm["duplicate_calls_admitted"] + arm["duplicate_calls_refused"]
        assert answered == wanted * scenario.calls, name
        assert arm["attempts_finished"] + arm["abandoned"] == arm["rollouts"], name
        expected += wanted
    assert figures["duplicates_sent"] == expected
    assert figures["arms"]["baseline"]["duplicate_calls_refused"] == 0  # nothing removes, nothing refuses


def test_the_report_has_the_source_side_by_side_and_pictures(
    run: tuple[int, dict[str, Any], str, Path],
) -> None:
    _, figures, stderr, _ = run
    report = Path(figures["report"])
    text = report.read_text(encoding="utf-8")
    for needle in (
        "| figure | the source | this run |",
        "7.2 / 7.0 ms",
        "345",
        "about 65 µs",
        "load average",
    ):
        assert needle in text, needle
    for picture in ("record-latency.png", "directory-size.png", "recreated-ledgers.png"):
        assert (report.parent / picture).stat().st_size > 1000, picture
        assert f"({picture})" in text
    assert "phase 1" in stderr and "phase 2" in stderr  # progress on standard error


BROKEN_STORE = '''
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.study import StoreVariant



def open_store(directory):
    """Writes do not look for the fence, admission ignores it: late writes re-create retired ledgers."""
    variant = StoreVariant(fence_lookup_on_write=False, admit_checks_fence=False)
    return FileLineageStore(directory, ordering=variant.ordering())
'''


def test_a_store_that_ignores_fences_breaks_the_invariants(tmp_path: Path) -> None:
    (tmp_path / "broken_ledger.py").write_text(BROKEN_STORE, encoding="utf-8")
    small = ["--no-baseline", "--duplicate-rollouts", "0", "--rollouts", "60", "--abandon", "0.1"]
    code, figures, stderr = _simulate(tmp_path, *small, "--ledger", "broken_ledger:open_store", cwd=tmp_path)
    assert code == 1 and not figures["ok"], stderr[-2000:]
    assert figures["ledgers_recreated"] >= figures["arms"]["retire"]["abandoned"] > 0
    assert figures["invariants"]["retire: no ledger re-created under retire"] is False


def test_the_combining_phase_retires_one_rollout_per_request_with_combining_on_and_off(
    tmp_path: Path,
) -> None:
    """The third phase: one retire request per finished rollout (the source's first step), on servers
    whose file store combines removals and on servers whose store does not; both arms keep every
    invariant and the report puts their cost per rollout side by side."""
    only = ["--rollouts", "0", "--duplicate-rollouts", "0", "--combining-rollouts", "60"]
    code, figures, stderr = _simulate(tmp_path, *only)
    assert code == 0 and figures["ok"], stderr[-2000:]
    assert set(figures["arms"]) == {"one-per-request-combined", "one-per-request-alone"}
    combining = figures["combining"]
    assert combining["rollouts"] == 60
    # what each arm's servers report of their store (the info metric's labels): combining on, then off
    assert (combining["store_combined"], combining["store_alone"]) == ("true", "false"), combining
    assert combining["retire_us_per_rollout_combined"] > 0 and combining["retire_us_per_rollout_alone"] > 0
    for arm in figures["arms"].values():
        assert arm["removal"] == "retire" and arm["rollouts"] == 60 and arm["attempts_finished"] > 0
    report = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "one request per rollout, per rollout (server side), combining on / off" in report
