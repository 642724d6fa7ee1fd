"""The explorer held to its pinned manifest (spec/manifest.json; R-CONC-1..3).

What they prove: every configuration, with every guard on, is exhausted with the expected result and
exactly the pinned number of states and complete executions; switching each guard off yields exactly the
pinned counterexample (property and length) or none; with every guard on nothing is violated anywhere, and
every guard is needed somewhere (the deliberately broken variants are caught). The two larger
configurations are marked slow (``pytest -m slow tests/spec/concurrency/test_explore_manifest.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
from capture_ledger.spec.concurrency.explore import CONFIGURATIONS, SLOW, explore, load_manifest
from capture_ledger.spec.concurrency.steps import GUARD_NAMES, Guards

MANIFEST = load_manifest()


def _params(names: list[str]) -> list[Any]:
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


def test_the_manifest_lists_every_configuration_and_guard() -> None:
    assert list(MANIFEST["configurations"]) == list(CONFIGURATIONS)
    assert list(MANIFEST["ablation"]) == list(GUARD_NAMES)
    assert {n for n, c in MANIFEST["configurations"].items() if c["slow"]} == SLOW


def test_with_every_guard_on_nothing_is_violated_and_each_guard_is_needed() -> None:
    assert all(entry["expected"] == "ok" for entry in MANIFEST["configurations"].values())
    for guard, row in MANIFEST["ablation"].items():
        found = [name for name, cell in row.items() if cell != "no violation"]
        assert found, f"switching {guard} off is caught nowhere"
        # ... and in at least one configuration that CI explores.
        assert set(found) - SLOW, guard


@pytest.mark.parametrize("name", _params(list(CONFIGURATIONS)))
def test_configuration_is_exhausted_with_the_pinned_state_count(name: str) -> None:
    pinned = MANIFEST["configurations"][name]
    run = explore(CONFIGURATIONS[name])
    assert run.counterexample is None, str(run.counterexample)
    assert (run.states, run.complete) == (pinned["states"], pinned["complete_executions"])


@pytest.mark.parametrize("guard", GUARD_NAMES)
@pytest.mark.parametrize("name", _params(list(CONFIGURATIONS)))
def test_ablated_guard_gives_the_pinned_counterexample(guard: str, name: str) -> None:
    pinned = MANIFEST["ablation"][guard][name]
    run = explore(CONFIGURATIONS[name], Guards().without(guard))
    if pinned == "no violation":
        assert run.counterexample is None, str(run.counterexample)
    else:
        assert run.counterexample is not None, f"{guard} off: no counterexample in {name}"
        assert run.counterexample.property == pinned["property"], str(run.counterexample)
        assert len(run.counterexample.steps) == pinned["steps"], str(run.counterexample)
