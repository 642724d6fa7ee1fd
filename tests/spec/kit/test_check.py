"""``capture-ledger check`` / ``spec.kit.check_target``: every layer on one ledger, one verdict, and an
account of what each layer exercised (SPEC.md §Conformance; docs/check.md).

What it proves: a sequential slip is broken at the kit and names its requirement; a concurrency slip
passes the kit and is broken by stress; an in-memory ledger's stress runs on threads only and says why; a
requested layer that cannot run makes the verdict ``incomplete`` (exit 3), never ``conforms``; a layer
not requested is listed as such; the ``--json`` object has the pinned keys; a target that cannot load, an
unknown layer and a mistyped flag are exit 2 with one line on standard error. The full run of every layer
on the example ledgers is in the slow tier.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from capture_ledger.spec.kit import LAYERS, check_target, shares_across_processes, shares_between_handles

ROOT = Path(__file__).resolve().parents[3]


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "capture_ledger.impl.cli.main", "check", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_a_sequential_slip_is_broken_at_the_kit_with_its_requirement() -> None:
    verdict = check_target(
        "capture_ledger.reference.mutants:open_delete_leaves_fence", layers=["kit"], profile="ci"
    )
    assert verdict.verdict == "broken" and verdict.exit_code == 1
    kit, stress, crash, kernel = verdict.layers
    assert kit.verdict == "broken"
    assert [b["requirement"] for b in kit.broken] == ["R-DELETE-2"]
    assert "state = LedgerConformance()" in kit.broken[0]["counterexample"]  # a runnable program
    assert "R-DELETE-2" in kit.coverage["checked"]
    # Its handles keep their own state, so the kit runs one and says why (R-KIT-4 is then not checked).
    assert kit.coverage["handles"] == 1 and "does not see a row" in kit.coverage["one_handle_because"]
    assert [layer.verdict for layer in (stress, crash, kernel)] == ["skipped"] * 3
    assert stress.why_skipped == crash.why_skipped == "not requested"


def test_a_concurrency_slip_passes_the_kit_and_is_broken_by_stress() -> None:
    verdict = check_target(
        "examples.bugs.directory_bugs:open_dir_retire_without_recheck", layers=["kit", "stress"], profile="ci"
    )
    kit, stress = verdict.layers[:2]
    assert kit.verdict == "ok" and stress.verdict == "broken"
    assert verdict.verdict == "broken"
    assert stress.broken and stress.broken[0]["requirement"].startswith("R-")
    assert stress.coverage["runs"]["processes"] == "not run: the threads' run already broke"


def test_an_in_memory_ledger_is_stressed_on_threads_only_and_says_why() -> None:
    assert shares_across_processes("examples.directory_ledger:open_ledger") == (True, "")
    assert shares_between_handles("examples.async_ledger:open_ledger") == (True, "")
    shared, why = shares_across_processes("examples.async_ledger:open_ledger")
    assert not shared and "held in memory" in why
    verdict = check_target("examples.async_ledger:open_ledger", layers=["stress"])
    stress = verdict.layers[1]
    assert stress.verdict == "ok", stress.text
    assert stress.coverage["runs"]["threads"]["verdict"] == "ok"
    assert (
        stress.coverage["runs"]["processes"].startswith("not run: ")
        and "memory" in stress.coverage["runs"]["processes"]
    )
    assert verdict.verdict == "conforms"


def test_a_requested_layer_that_cannot_run_makes_the_verdict_incomplete() -> None:
    verdict = check_target("capture_ledger.reference.mutants:open_reference", layers=["kernel"])
    kernel = verdict.layers[-1]
    assert kernel.layer == "kernel" and kernel.verdict == "skipped" and kernel.requested
    assert kernel.why_skipped and "check --layers kernel runs it" in kernel.why_skipped
    assert verdict.verdict == "incomplete" and verdict.exit_code == 3


def test_every_layer_is_listed_in_order_whatever_was_requested() -> None:
    verdict = check_target("capture_ledger.reference.mutants:open_reference", layers=["kernel"])
    assert [layer.layer for layer in verdict.layers] == list(LAYERS)
    assert not any(layer.requested for layer in verdict.layers[:3])


def test_the_json_object_has_the_pinned_keys_and_the_exit_code_follows_the_verdict() -> None:
    done = _cli(
        "capture_ledger.reference.mutants:open_delete_leaves_fence",
        "--layers",
        "kit",
        "--json",
        "--profile",
        "ci",
    )
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert set(data) == {"target", "verdict", "layers", "seconds"}
    assert data["verdict"] == "broken"
    for layer in data["layers"]:
        assert set(layer) == {"layer", "verdict", "why_skipped", "seconds", "broken", "coverage"}
        assert layer["verdict"] in ("ok", "broken", "unknown", "skipped")
    assert data["layers"][0]["broken"][0]["requirement"] == "R-DELETE-2"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["no_such_module_here:open"], "cannot load target"),
        (["capture_ledger.reference.mutants:open_reference", "--layers", "kit,chaos"], "unknown layer chaos"),
        (["capture_ledger.reference.mutants:open_reference", "--layrs", "kit"], "did you mean --layers?"),
    ],
)
def test_what_cannot_run_at_all_is_exit_2_with_one_line(argv: list[str], says: str) -> None:
    done = _cli(*argv)
    assert done.returncode == 2
    assert done.stdout == ""
    assert says in done.stderr.splitlines()[-1]
    assert "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "target", ["examples.directory_ledger:open_ledger", "examples.sqlite_ledger:open_wal_full"]
)
def test_every_layer_on_an_example_ledger(target: str) -> None:
    """The examples keep every requirement on every layer that runs here; the kernel layer is listed
    as not requested."""
    done = _cli(target, "--json", "--profile", "ci")
    data = json.loads(done.stdout)
    layers = {layer["layer"]: layer for layer in data["layers"]}
    assert layers["kit"]["verdict"] == "ok"
    assert layers["stress"]["verdict"] == "ok"
    assert layers["stress"]["coverage"]["runs"]["processes"]["verdict"] == "ok"
    assert layers["crash"]["verdict"] in ("ok", "unknown"), layers["crash"]
    assert layers["kernel"]["verdict"] == "skipped"
    assert data["verdict"] in ("conforms", "incomplete")
    assert done.returncode == {"conforms": 0, "incomplete": 3}[data["verdict"]]
