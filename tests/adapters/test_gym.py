"""NeMo Gym 0.7.0's ledgers, judged by the kit through ``capture_ledger.adapters.gym`` (docs/gym.md;
R-KIT-10, R-KIT-11).

The verdicts are pinned: the requirements Gym breaks (R-ID-1, R-ID-2, R-WRITE-3, R-WRITE-7, R-WRITE-8) are
reported by ``capture-ledger verify --all --json``, each with a counterexample that replays to the same
requirement in a fresh interpreter, and the ones it follows (among them R-WRITE-1, R-WRITE-2, R-READ-1,
R-READ-2, R-READ-4 and, with three handles, R-KIT-4) pass. The adapter's translations are checked too:
rows round-trip exactly, rows no commit can carry are refused, and the memory store's handles share one
store that only the last ``close`` wipes.

Gym's import replaces ``builtins.print``, reorders ``sys.path`` and gives the root logger a handler, so
everything that imports Gym runs in a child process. Without Gym these tests are skipped, naming the
install command; with ``CI=true`` a missing Gym fails them. The full ``ci``-profile runs of the file store
are ``slow`` (2.5 to 4 minutes each); CI runs the memory store in full and the file store with fewer
examples.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

GYM_FILE = "capture_ledger.adapters.gym:open_gym_file_store"
GYM_MEMORY = "capture_ledger.adapters.gym:open_gym_memory_store"
#: What NeMo Gym 0.7.0 breaks, with the adapter passing its behaviour through (docs/gym.md).
BROKEN = {"R-ID-1", "R-ID-2", "R-WRITE-3", "R-WRITE-7", "R-WRITE-8"}
#: What it follows, among the requirements its four methods reach.
FOLLOWED = {"R-WRITE-1", "R-WRITE-2", "R-READ-1", "R-READ-2", "R-READ-4", "R-KIT-7", "R-KIT-8"}
NOT_CHECKED = {"R-ADMIT-1", "R-ADMIT-2", "R-READ-3", "R-WRITE-4", "R-WRITE-5", "R-RETIRE-1", "R-DELETE-1"}


def _require_gym() -> None:
    if importlib.util.find_spec("nemo_gym") is not None:
        return
    message = "NeMo Gym 0.7.0 is not installed: run tools/install-gym (docs/gym.md)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}; CI must install it (.ci/run)")
    pytest.skip(message)


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _verify(target: str, cwd: Path, *options: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "capture_ledger.impl.cli.main", "verify", target, "--all", "--json"]
    done = subprocess.run(
        [*command, "--profile", "ci", *options],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "protocol check of GymLedger:" in done.stderr and "missing: admit, retire, delete" in done.stderr
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def _replays(counterexample: str, requirement: str, cwd: Path) -> None:
    done = _python(counterexample, cwd)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"NonConformance[{requirement}]: {requirement}: " in done.stderr, done.stderr


def _pin(summary: dict[str, Any], target: str, cwd: Path, *, handles: int) -> None:
    assert summary["target"] == target and summary["conforms"] is False
    assert summary["operations"] == ["record", "record_failure", "manifest", "has_rows"]
    broken = {b["requirement"]: b for b in summary["broken"]}
    assert set(broken) == BROKEN and len(summary["broken"]) == len(BROKEN)
    assert set(summary["checked"]) - BROKEN >= FOLLOWED
    assert set(summary["not_checked"]) >= NOT_CHECKED
    assert ("R-KIT-4" in summary["checked"]) == (handles > 1)
    for requirement, item in broken.items():
        assert (
            item["message"].startswith(f"{requirement}: ") and f"SPEC.md {requirement}: " in item["message"]
        )
        assert 1 <= item["steps"] <= 4
        assert (
            f"from capture_ledger.adapters.gym import {target.split(':')[1]} as open_ledger"
            in (item["counterexample"])
        )
        _replays(item["counterexample"], requirement, cwd)


@pytest.mark.slow
def test_the_memory_store_verdict(tmp_path: Path) -> None:
    """The ``ci`` profile's full run with one handle (about 35 s, so ``slow``, as the file store's are)."""
    _require_gym()
    _pin(_verify(GYM_MEMORY, tmp_path), GYM_MEMORY, tmp_path, handles=1)


@pytest.mark.slow
@pytest.mark.parametrize(("target", "handles"), [(GYM_FILE, 1), (GYM_FILE, 3), (GYM_MEMORY, 3)])
def test_the_full_ci_runs(tmp_path: Path, target: str, handles: int) -> None:
    """The runs quoted in docs/gym.md (2.5 to 4 minutes each)."""
    _require_gym()
    _pin(_verify(target, tmp_path, "--handles", str(handles)), target, tmp_path, handles=handles)


#: One program per broken requirement, the shape of the kit's shrunk counterexamples.
PROGRAMS: dict[str | None, str] = {
    "R-ID-1": "state.invalid_rollout_id(handle=0, operation='manifest', rollout_id='../a')",
    "R-ID-2": "state.invalid_rollout_id(handle=0, operation='has_rows', rollout_id=7)",
    "R-WRITE-3": (
        "state.record_lookalikes(handle=0, rollout_id=a, row={'model_call_id': 'm0'}, first=1, second=True)"
    ),
    "R-WRITE-7": "state.record_invalid_failure(handle=0, rollout_id=a, model_call_id='m0', reason=0)",
    "R-WRITE-8": (
        "state.record_failure(handle=0, rollout_id=a, model_call_id='m0', reason='timeout')\n"
        "state.every_known_rollout_reads_as_the_model_says()\n"
        "state.record(handle=0, rollout_id=a, row={'model_call_id': 'm0', 'value': 1})"
    ),
    None: (  # what Gym follows: writes, identical re-records, failures beside records, reads, other handles
        "state.record(handle=0, rollout_id=a, row={'model_call_id': 'm0', 'staging_key': None, 'v': 'ü'})\n"
        "state.every_known_rollout_reads_as_the_model_says()\n"
        "state.record(handle=1, rollout_id=a, row={'v': 'ü', 'staging_key': None, 'model_call_id': 'm0'})\n"
        "state.record_failure(handle=2, rollout_id=a, model_call_id='m0', reason='timeout')\n"
        "state.record_failure(handle=0, rollout_id=a, model_call_id='m0', reason='timeout')\n"
        "state.record_invalid_row(handle=1, rollout_id=a, row={'model_call_id': 'c0', 'value': (1, 2)})\n"
        "state.record_invalid_row(handle=1, rollout_id=a, row={'model_call_id': 'c0', 'staging_key': 1})\n"
        "state.every_known_rollout_reads_as_the_model_says()\n"
        "state.reopen(handle=1)\n"
        "state.every_known_rollout_reads_as_the_model_says()"
    ),
}


REPLAY = """
import json, sys
from capture_ledger.spec.kit.sequential import conformance_machine
from capture_ledger.adapters import gym

machine = conformance_machine(
    getattr(gym, sys.argv[1]), handles=3, operations=("record", "record_failure", "manifest", "has_rows")
)
found = {}
for requirement, steps in json.loads(sys.argv[2]).items():
    state = machine()
    a = state.first_rollout(rollout_id="a")
    try:
        exec(steps, {"state": state, "a": a})
        found[requirement] = None
    except AssertionError as error:
        found[requirement] = type(error).requirement
    finally:
        state.teardown()
print(json.dumps(found))
"""


@pytest.mark.parametrize("factory", ["open_gym_file_store", "open_gym_memory_store"])
def test_each_finding_replays_as_a_fixed_program(tmp_path: Path, factory: str) -> None:
    """docs/gym.md's counterexamples, as written there, on both stores with three handles (and a program
    that passes: what Gym follows)."""
    _require_gym()
    programs = {requirement or "passes": steps for requirement, steps in PROGRAMS.items()}
    done = subprocess.run(
        [sys.executable, "-c", REPLAY, factory, json.dumps(programs)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {
        requirement: (None if requirement == "passes" else requirement) for requirement in programs
    }


ADAPTER = """
import asyncio, json, math, sys, tempfile
from pathlib import Path
from capture_ledger.adapters.gym import open_gym_file_store, open_gym_memory_store, to_commit
from capture_ledger.spec.kit import check_protocol

rows = [
    {"model_call_id": "c1", "staging_key": None, "i": 2**100, "f": -0.0, "t": 5e-324, "b": True, "n": None,
     "nest": [1, [2.5, {"x": False}]], "s": "é\\u0000\\n\\ud800😀"},
    {"z": 1, "model_call_id": "c2", "a": 1.0, "staging_key": "s0"},
]
refused = [("not a row", "TypeError"), ({"model_call_id": "c", "v": (1, 2)}, "TypeError"),
           ({"model_call_id": "c", "v": b"x"}, "TypeError"),
           ({"model_call_id": "c", "v": math.nan}, "ValueError"),
           ({"model_call_id": "c", 1: "k"}, "TypeError"), ({"model_call_id": 1}, "ValidationError"),
           ({"model_call_id": "c", "staging_key": 1}, "ValidationError"), ({}, "ValidationError")]

async def main():
    out = {}
    workspace = Path(tempfile.mkdtemp())
    for name, opener in (("file", open_gym_file_store), ("memory", open_gym_memory_store)):
        first, second = opener(workspace / name), opener(workspace / name)
        for row in rows:
            await first.record("r1", row)
        await first.record_failure("r1", "c1", "timeout")
        manifest = await second.manifest("r1")
        out[name + "_exact"] = [json.dumps(r, sort_keys=True) for r in manifest["records"]] == [
            json.dumps(r, sort_keys=True) for r in rows] and all(
            type(a[k]) is type(b[k]) for a, b in zip(rows, manifest["records"]) for k in a)
        out[name + "_failures"] = manifest["failures"]
        await first.close()
        out[name + "_after_one_close"] = await second.has_rows("r1")
        await second.close()
        await second.close()
        third = opener(workspace / name)
        out[name + "_after_last_close"] = await third.has_rows("r1")
        await third.close()
    out["refused"] = []
    for row, expected in refused:
        try:
            to_commit("r1", row)
            out["refused"].append(None)
        except (TypeError, ValueError) as error:
            out["refused"].append(type(error).__name__ == expected)
    check = check_protocol(open_gym_memory_store(workspace / "probe"))
    out["protocol"] = [check.present, check.missing, check.coroutines, check.differences]
    print(json.dumps(out))

asyncio.run(main())
"""


def test_the_adapter_translates_rows_and_manifests_exactly(tmp_path: Path) -> None:
    _require_gym()
    done = _python(ADAPTER, tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["file_exact"] and out["memory_exact"]
    assert out["file_failures"] == out["memory_failures"] == [{"model_call_id": "c1", "reason": "timeout"}]
    assert out["refused"] == [True] * 8
    # Handles on one memory workspace share one store; only the last close wipes it (Gym's close()).
    assert out["memory_after_one_close"] is True and out["memory_after_last_close"] is False
    assert out["file_after_one_close"] is True and out["file_after_last_close"] is True  # on disk
    present = ["record", "record_failure", "manifest", "has_rows"]
    assert out["protocol"] == [present, ["admit", "retire", "delete"], present, []]


def test_nothing_of_ours_imports_gym_at_import_time() -> None:
    code = (
        "import sys, builtins; p = builtins.print; import capture_ledger.adapters.gym; "
        "import capture_ledger.spec.kit.pytest_plugin; "
        "assert 'nemo_gym' not in sys.modules and builtins.print is p; print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "ok"


def test_nothing_of_ours_imports_benchmarks_as_a_package() -> None:
    """Gym's wheel installs a top-level ``benchmarks`` namespace package; ours is a folder of scripts run by
    path, so no module of ours may import ``benchmarks`` (the two namespace portions would merge)."""
    root = Path(__file__).resolve().parents[2]
    offenders = []
    for folder in ("pkg", "spec", "reference", "impl", "adapters", "tests", "benchmarks", "tools"):
        for path in (root / folder).rglob("*.py"):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.lstrip().startswith(("import benchmarks", "from benchmarks")):
                    offenders.append(f"{path.relative_to(root)}: {line.strip()}")
    assert not offenders, offenders
