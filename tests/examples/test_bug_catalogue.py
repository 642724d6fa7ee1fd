"""The kill matrix of the seeded bugs: each is killed by its layer and by no earlier one (docs/bugs.md).

``examples.bugs.catalogue.CATALOGUE`` says, for every deliberately broken variant of an example ledger,
which layer must kill it. This file holds that, column by column:

- ``sequential`` bugs are killed by the conformance kit (R-KIT-1..6), which names the bug's requirement
  (or one it breaks as a consequence, ``Bug.also``). The search runs without shrinking: the time to the
  first failing example is enough to show the kill; ``benchmarks/bug_matrix.py`` shrinks and measures.
- ``concurrency`` and ``crash`` bugs pass the kit: a bug the kit kills is in the wrong row. A few examples
  each suffice, since these bugs change nothing a sequential run can observe.
- ``concurrency`` bugs are killed by ``capture-ledger stress`` (R-CONC-1..3), and ``crash`` bugs pass it and
  are killed by ``capture-ledger crash --target`` (R-CRASH-1..4). Until those layers exist these entries
  are skipped, naming the missing layer; they run through ``examples.bugs.matrix`` as soon as the command
  does.

Deterministic: the ``ci`` profile is derandomized and keeps no example database.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from capture_ledger.spec.kit import PROFILES
from capture_ledger.spec.kit.sequential import check_ledger
from hypothesis import Phase, settings

from examples.bugs import async_bugs, directory_bugs, sqlite_bugs
from examples.bugs.catalogue import BASES, CATALOGUE, LAYERS, Bug, Layer, load
from examples.bugs.matrix import LAYER_RUNNERS, budget_for, kit_requirements

ROOT = Path(__file__).resolve().parents[2]

#: The search for a sequential bug: up to 200 examples, stopping at the first failure (so a bug killed
#: early costs no more). The ci profile's 60 were not always enough: in one full fast-tier run
#: ``dir_unanchored_id_check`` (an invalid ID only ``record`` lets through) survived 60, although it dies
#: within them when run alone (docs/followups.md).
KILL = settings(PROFILES["ci"], max_examples=200, phases=[Phase.explicit, Phase.reuse, Phase.generate])
#: A bug of a later layer must pass this: it changes nothing a sequential run observes.
PASS = settings(PROFILES["ci"], max_examples=8)


def _bugs(layer: str) -> list[object]:
    return [pytest.param(b, id=b.name) for b in CATALOGUE if b.layer == layer]


def _crash_bugs() -> list[object]:
    """The crash layer's bugs: the first of each example ledger in the fast tier, the rest ``slow`` (each is
    a traced crash exploration of several seconds; .ci/run runs both tiers)."""
    seen: set[str] = set()
    params: list[object] = []
    for bug in (b for b in CATALOGUE if b.layer == "crash"):
        first = bug.base not in seen
        seen.add(bug.base)
        params.append(pytest.param(bug, id=bug.name, marks=() if first else (pytest.mark.slow,)))
    return params


def test_catalogue_has_at_least_eight_bugs_per_layer_on_every_example() -> None:
    counts = {layer: sum(b.layer == layer for b in CATALOGUE) for layer in LAYERS}
    assert all(count >= 8 for count in counts.values()), counts
    assert len(CATALOGUE) >= 24
    assert len({b.name for b in CATALOGUE}) == len(CATALOGUE)
    assert {b.base for b in CATALOGUE} == set(BASES)
    assert not any(b.base == "async" and b.layer == "crash" for b in CATALOGUE)  # memory has no crash states


def test_every_bug_is_documented_with_a_requirement_of_the_spec() -> None:
    """Each factory loads, and its docstring names the requirement the slip breaks."""
    spec = (ROOT / "spec" / "SPEC.md").read_text(encoding="utf-8")
    defined = set(re.findall(r"\*\*(R-[A-Z]+-\d+)\*\*", spec))
    for bug in CATALOGUE:
        assert {bug.requirement, *bug.also} <= defined, bug.name
        doc = load(bug.target).__doc__ or ""
        assert bug.requirement in doc, f"{bug.name}: the factory's docstring does not cite {bug.requirement}"
        assert bug.model is None or bug.layer == "crash", bug.name


def test_every_bug_module_factory_is_catalogued_once() -> None:
    """No stray bug: every ``open_*`` a bug module exports is in the catalogue, and the other way round."""
    exported = {
        f"{module.__name__}:{name}"
        for module in (sqlite_bugs, directory_bugs, async_bugs)
        for name in module.__all__
        if name.startswith("open_")
    }
    assert exported == {bug.target for bug in CATALOGUE}


@pytest.mark.parametrize("bug", _bugs("sequential"))
def test_sequential_bug_is_killed_by_the_kit(bug: Bug) -> None:
    with pytest.raises(AssertionError) as caught:
        check_ledger(bug.factory, handles=3, settings=KILL)
    named = kit_requirements(caught.value)
    if named:  # a kit that names requirements (SPEC.md §Conformance) names this bug's
        assert set(named) & {bug.requirement, *bug.also}, f"{bug.name}: the kit named {named}"
    assert "state = LedgerConformance()" in str(caught.value)  # a runnable counterexample (R-KIT-6)


@pytest.mark.parametrize("bug", _bugs("concurrency") + _bugs("crash"))
def test_later_layer_bug_passes_the_kit(bug: Bug) -> None:
    """Otherwise it is in the wrong row: the sequential kit is the cheapest layer and comes first."""
    check_ledger(bug.factory, handles=3, settings=PASS)


def _run_or_skip(bug: Bug, layer: Layer) -> str:
    verdict = LAYER_RUNNERS[layer](bug.target, budget_for(bug))
    if verdict.outcome == "not built":
        pytest.skip(f"the {layer} layer is missing: {verdict.detail}")
    assert verdict.outcome in ("killed", "passed"), f"{bug.name}: {verdict}"
    return verdict.outcome


@pytest.mark.parametrize("bug", _bugs("concurrency"))
def test_concurrency_bug_is_killed_by_stress(bug: Bug) -> None:
    assert _run_or_skip(bug, "concurrency") == "killed"


@pytest.mark.parametrize("bug", _crash_bugs())
def test_crash_bug_passes_stress(bug: Bug) -> None:
    assert _run_or_skip(bug, "concurrency") == "passed"


@pytest.mark.parametrize("bug", _crash_bugs())
def test_crash_bug_is_killed_by_the_crash_layer(bug: Bug) -> None:
    assert _run_or_skip(bug, "crash") == "killed"
