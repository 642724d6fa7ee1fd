"""Scheduled interleavings of the real ``FileLineageStore`` (R-CONC-1..3, R-STORE-4..7).

Every seam call of every handle is a scheduling point (``impl.study.interleave``; runs and explorations are
``impl.study.interleave``'s, the scenarios ``impl.study.interleave``', one per configuration of the
step-level explorer plus two it lacks). These tests show that the scheduler controls the store (one thread
at a time, locks never contended, replays identical), that the production store passes every schedule
explored (bounded-exhaustive and Hypothesis-generated), and that each guard-removed ``StoreVariant`` is
caught by a short schedule, in a scenario whose configuration the explorer also finds broken without that
guard. Runs go to ``/dev/shm`` when it is a writable directory (real files and real fsync calls, without
the disk's fsync latency, which does not change interleavings), else to the test's temporary directory.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.impl.store import stripe_of
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import FileSystem
from capture_ledger.impl.study import HookedFileSystem, StoreVariant
from capture_ledger.impl.study.interleave import (
    EXTRA,
    GUARDS,
    SCENARIOS,
    SLOW,
    STRIPES,
    ChoiceSchedule,
    Run,
    Scenario,
    ThreadSchedule,
    explore,
    find_counterexample,
    run_schedule,
    store_opener,
)
from capture_ledger.spec.concurrency.explore import CONFIGURATIONS, load_manifest
from capture_ledger.spec.concurrency.linearizability import Ok, Violation
from capture_ledger.spec.core.model import Delete, ManifestValue, ReadManifest, Removal, Retire
from capture_ledger.spec.core.model import Ok as ModelOk
from capture_ledger.spec.kit import profile_settings
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

#: Scenarios exhausted to 1 preemption in CI (three threads, or a batch of two IDs), to 2 in the slow study.
LARGE = tuple(
    name
    for name, s in SCENARIOS.items()
    if name not in SLOW and (len(s.threads) > 2 or len(s.rollout_ids) > 1)
)

#: Each guard, and the scenario whose schedules show it is needed.
VARIANTS = {
    "recheck_fence": "retire-vs-delete-reuse",
    "fence_before_unlink": "retire-vs-late-write",
    "fence_lookup_on_write": "retire-vs-late-write",
    "admit_checks_fence": "admit-vs-retire",
    "cache_coherence": "delete-vs-write",
    "await_shared_sync": "shared-sync-two-retires",
    # Combining: enqueue and combine are one step in the store, so a waiter's request is taken by another
    # caller's batch only with three callers (two preemptions; ``SLOW`` in the step model).
    "await_combined_batch": "combine-three-overlapping-retires",
    "results_after_syncs": "combine-three-overlapping-retires",
    "same_retire_result": "combine-retires-vs-delete",
}
#: The guards of combined removals the scheduler catches, with two preemptions (see ``VARIANTS``). Not
#: ``same_retire_result``: two retire requests of one ID in one batch need a third caller's batch to take
#: both, and a delete between its phases; no bounded schedule of these scenarios has all of it (the step
#: model, whose enqueue is a step of its own, finds it: ``combine-retires-vs-delete``).
COMBINING = {"await_combined_batch", "results_after_syncs"}


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        place = Path(tempfile.mkdtemp(prefix="capture-ledger-interleave-", dir=shm))
        yield place
        shutil.rmtree(place, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("interleave")


def _held_locks_exclusive(run: Run) -> bool:
    holder: dict[object, int] = {}
    for step in run.trace:
        if step.call.name == "lock":
            if step.call.args[0] in holder:
                return False
            holder[step.call.args[0]] = step.thread
        elif step.call.name == "unlock" and holder.pop(step.call.args[0], None) != step.thread:
            return False
    return not holder


def _shape(run: Run) -> list[tuple[int, str, tuple[object, ...]]]:
    """Each step's thread, seam call and arguments; bytes written by their length, since each new ledger
    opens with a random incarnation line and seals its rows with it (R-STORE-14)."""
    return [
        (step.thread, step.call.name, tuple(len(a) if isinstance(a, bytes) else a for a in step.call.args))
        for step in run.trace
    ]


def test_the_empty_schedule_runs_threads_one_after_another(base_dir: Path) -> None:
    run = run_schedule(
        SCENARIOS["retire-vs-late-write"], ChoiceSchedule(), open_handle=store_opener(), base_dir=base_dir
    )
    threads = [step.thread for step in run.trace]
    assert threads == sorted(threads) and set(threads) == {0, 1}
    assert run.decisions and run.preemptions == 0 and run.schedule == ()
    assert run.ok, run.describe()


def test_every_seam_call_is_a_scheduling_point(base_dir: Path) -> None:
    counted: list[list[tuple[int, str]]] = []

    def open_counted(directory: Path, fs: FileSystem) -> Any:
        # A wrapper between the store and the scheduler: names every call, and the thread that made it.
        calls: list[tuple[int, str]] = []
        counted.append(calls)
        return FileLineageStore(
            directory,
            fs=HookedFileSystem(fs, before=lambda call: calls.append((threading.get_ident(), call.method))),
        )

    run = run_schedule(
        SCENARIOS["retire-vs-delete-reuse"],
        ChoiceSchedule((1, 0, 1)),
        open_handle=open_counted,
        base_dir=base_dir,
    )
    # The last handle is the fresh one of the read-backs: its calls come from the thread that runs the setup
    # and the read-backs, which the scheduler does not schedule.
    unscheduled = {ident for ident, _ in counted[-1]}
    for thread, calls in enumerate(counted[:2]):
        parked = [
            s.call.name for s in run.trace if s.thread == thread and s.call.name not in ("invoke", "return")
        ]
        assert parked == [method for ident, method in calls if ident not in unscheduled] and parked
    assert run.ok, run.describe()


def test_scenarios_are_the_explorers_configurations_and_the_extras() -> None:
    assert set(SCENARIOS) == set(CONFIGURATIONS) | set(EXTRA) and not set(CONFIGURATIONS) & set(EXTRA)
    shared = SCENARIOS["retire-batch-shared-stripe"].rollout_ids
    assert len({stripe_of(rid, STRIPES) for rid in shared}) == 1  # as the configuration's stripes say
    batch = SCENARIOS["retire-batch-vs-writes"].rollout_ids
    assert len({stripe_of(rid, STRIPES) for rid in batch}) == 2


def test_switching_at_every_decision_keeps_locks_exclusive(base_dir: Path) -> None:
    # Index 1, then 0, ...: the threads alternate wherever both are enabled.
    run = run_schedule(
        SCENARIOS["retire-vs-late-write"],
        ChoiceSchedule((1, 0) * 20),
        open_handle=store_opener(),
        base_dir=base_dir,
    )
    names = {step.call.name for step in run.trace}
    assert {"invoke", "lock", "unlock", "create_file", "sync_dir"} <= names
    threads = [step.thread for step in run.trace]
    assert sum(a != b for a, b in itertools.pairwise(threads)) >= 3
    assert run.preemptions >= 2
    assert _held_locks_exclusive(run)
    assert run.ok, run.describe()


def test_a_schedule_replays_identically(base_dir: Path) -> None:
    scenario = SCENARIOS["retire-vs-delete-reuse"]
    first = run_schedule(
        scenario, ChoiceSchedule((1, 0, 0, 1, 1, 0)), open_handle=store_opener(), base_dir=base_dir
    )
    again = run_schedule(
        scenario, ThreadSchedule(first.schedule), open_handle=store_opener(), base_dir=base_dir
    )
    assert _shape(again) == _shape(first)
    assert again.history == first.history


@pytest.mark.parametrize("name", sorted(set(SCENARIOS) - SLOW))
def test_production_store_passes_every_bounded_schedule(name: str, base_dir: Path) -> None:
    bound = 1 if name in LARGE else 2
    found = explore(SCENARIOS[name], open_handle=store_opener(), preemption_bound=bound, base_dir=base_dir)
    print(
        f"{name}: {found.runs} schedules (<= {bound} preemptions), exhausted={found.exhausted}, "
        f"up to {found.max_decisions} decisions"
    )
    assert found.exhausted
    assert not found.failures, found.failures[0].describe()
    assert found.runs >= 10
    assert isinstance(found.result, Ok) and "R-CONC-1" in found.result.checked


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SLOW))
def test_slow_scenarios_to_one_preemption(name: str, base_dir: Path) -> None:
    found = explore(SCENARIOS[name], open_handle=store_opener(), preemption_bound=1, base_dir=base_dir)
    print(f"{name}: {found.runs} schedules (<= 1 preemption), exhausted={found.exhausted}")
    assert found.exhausted and not found.failures, found.failures[0].describe() if found.failures else ""


@pytest.mark.slow
@pytest.mark.parametrize("name", LARGE)
def test_large_scenarios_to_two_preemptions(name: str, base_dir: Path) -> None:
    found = explore(SCENARIOS[name], open_handle=store_opener(), preemption_bound=2, base_dir=base_dir)
    print(f"{name}: {found.runs} schedules (<= 2 preemptions), exhausted={found.exhausted}")
    assert found.exhausted and not found.failures, found.failures[0].describe() if found.failures else ""


def _examples() -> int:
    return min(25, profile_settings().max_examples)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_production_store_passes_hypothesis_schedules(name: str, base_dir: Path) -> None:
    scenario: Scenario = SCENARIOS[name]
    threads = len(scenario.threads)

    @settings(
        profile_settings(),
        max_examples=_examples(),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(st.lists(st.integers(0, threads - 1), max_size=40))
    def check(choices: list[int]) -> None:
        run = run_schedule(
            scenario, ChoiceSchedule(tuple(choices)), open_handle=store_opener(), base_dir=base_dir
        )
        assert _held_locks_exclusive(run)
        assert run.ok, run.describe()

    check()


def test_each_guard_is_caught_where_the_explorer_catches_it() -> None:
    """Every scheduling guard has a scenario, whose configuration the step model also finds broken without
    the guard (the pinned ablation of ``spec/concurrency/manifest.json``)."""
    assert set(VARIANTS) == set(GUARDS)
    ablation = load_manifest()["ablation"]
    for guard, scenario in VARIANTS.items():
        assert ablation[guard][scenario] != "no violation", (guard, scenario)


@pytest.mark.parametrize("guard", sorted(set(VARIANTS) - COMBINING - {"same_retire_result"}))
def test_each_guard_removed_is_caught_by_a_short_schedule(guard: str, base_dir: Path) -> None:
    variant = StoreVariant(**{guard: False})
    run, runs = find_counterexample(
        SCENARIOS[VARIANTS[guard]], open_handle=store_opener(variant), max_preemptions=2, base_dir=base_dir
    )
    assert run is not None, f"{guard}=False not caught in {runs} schedules"
    print(f"{guard}=False caught after {runs} schedules:\n{run.describe()}")
    assert run.preemptions <= 1
    assert len(run.switches) <= 1
    replayed = run_schedule(
        SCENARIOS[VARIANTS[guard]],
        ThreadSchedule(run.schedule),
        open_handle=store_opener(variant),
        base_dir=base_dir,
    )
    assert not replayed.ok  # the printed schedule is a runnable counterexample (R-KIT-6)


@pytest.mark.slow
@pytest.mark.parametrize("guard", sorted(COMBINING & set(VARIANTS)))
def test_each_combining_guard_removed_is_caught(guard: str, base_dir: Path) -> None:
    """A broken combiner (a waiter that returns once its request was taken, results handed out when phase 1
    ends, a later retire given ``absent``) is caught in the scenario the step model catches it in; the
    production store passes those scenarios (``test_production_store_passes_every_bounded_schedule``)."""
    variant = StoreVariant(**{guard: False})
    run, runs = find_counterexample(
        SCENARIOS[VARIANTS[guard]], open_handle=store_opener(variant), max_preemptions=2, base_dir=base_dir
    )
    assert run is not None, f"{guard}=False not caught in {runs} schedules"
    print(f"{guard}=False caught after {runs} schedules:\n{run.describe()}")
    assert run.preemptions <= 2
    replayed = run_schedule(
        SCENARIOS[VARIANTS[guard]],
        ThreadSchedule(run.schedule),
        open_handle=store_opener(variant),
        base_dir=base_dir,
    )
    assert not replayed.ok


def test_combining_scenarios_open_combining_handles(base_dir: Path) -> None:
    """The step model's configurations with ``combine`` become scenarios whose handles combine: a waiter's
    ``await_sync`` on a removal queue is in the trace of a schedule that overlaps two retires."""
    scenario = SCENARIOS["combine-overlapping-retires"]
    assert scenario.combine
    run = run_schedule(
        scenario, ChoiceSchedule((0, 0, 0, 1, 1, 1)), open_handle=store_opener(), base_dir=base_dir
    )
    assert run.ok, run.describe()
    waits = [s for s in run.trace if s.call.name == "await_sync"]
    assert waits and all(type(s.call.args[0]).__name__ == "RemovalQueue" for s in waits)


@pytest.mark.parametrize(
    ("name", "guard"),
    [("stale-cache-after-delete", "cache_coherence"), ("retire-vs-reads", "fence_before_unlink")],
)
def test_the_extra_scenarios_catch_a_guard_removed(name: str, guard: str, base_dir: Path) -> None:
    """The scenarios the explorer lacks are not idle: each catches a broken store the others catch too."""
    run, runs = find_counterexample(
        EXTRA[name],
        open_handle=store_opener(StoreVariant(**{guard: False})),
        max_preemptions=1,
        base_dir=base_dir,
    )
    assert run is not None, f"{guard}=False not caught in {runs} schedules of {name}"


def test_unfenced_late_write_breaks_r_conc_2_directly(base_dir: Path) -> None:
    run = run_schedule(
        SCENARIOS["retire-vs-late-write"],
        ChoiceSchedule(),
        open_handle=store_opener(StoreVariant(fence_lookup_on_write=False)),
        base_dir=base_dir,
    )
    assert any(failure.startswith("R-CONC-2") for failure in run.invariant_failures), run.describe()
    assert isinstance(run.verdict, Violation)
    # The run as a shared verdict: not linearizable comes first (R-CONC-1), its counterexample the run.
    assert run.result == Violation(requirement="R-CONC-1", counterexample=run.describe(), witness=run)
    assert f"verdict: {run.verdict.counterexample}" in run.describe()


def test_hypothesis_shrinks_a_missing_recheck_to_a_short_schedule(base_dir: Path) -> None:
    scenario = SCENARIOS["retire-vs-delete-reuse"]
    broken = store_opener(StoreVariant(recheck_fence=False))

    def fails(choices: list[int]) -> bool:
        return not run_schedule(
            scenario, ChoiceSchedule(tuple(choices)), open_handle=broken, base_dir=base_dir
        ).ok

    shrunk = find(
        st.lists(st.integers(0, 1), max_size=30),
        fails,
        settings=settings(max_examples=300, database=None, derandomize=True, deadline=None),
    )
    run = run_schedule(scenario, ChoiceSchedule(tuple(shrunk)), open_handle=broken, base_dir=base_dir)
    print(f"shrunk choices {shrunk}:\n{run.describe()}")
    assert not run.ok
    assert len(shrunk) <= 8 and len(run.switches) <= 2


def test_a_delete_between_retires_phases_is_linearizable(base_dir: Path) -> None:
    # Retire fences and syncs (phase 1), a delete and a reuse of the ID run, then retire's phase 2 finds
    # no fence and keeps the new ledger (R-CONC-3). Both removals report ``removed``: linearizable only
    # because the checker gives retire two points per ID, fence and completion (R-STORE-4, R-STATE-2).
    run = run_schedule(
        SCENARIOS["retire-vs-delete-reuse"],
        ThreadSchedule((0,) * 7 + (1,)),
        open_handle=store_opener(),
        base_dir=base_dir,
    )
    assert run.ok, run.describe()
    removals = [e for e in run.history if isinstance(e.op, Retire | Delete)]
    assert [e.result for e in removals] == [ModelOk(Removal(("a",), ()))] * 2
    final = run.history[-1]
    assert isinstance(final.op, ReadManifest) and isinstance(final.result, ModelOk)
    assert final.result.value == ManifestValue(('{"model_call_id":"m2"}',))


def test_missing_recheck_breaks_r_conc_3_directly(base_dir: Path) -> None:
    # Retire's phase 1, then a delete and a reuse of the ID, then retire's phase 2 (one switch).
    schedule = ThreadSchedule((0,) * 7 + (1,))
    scenario = SCENARIOS["retire-vs-delete-reuse"]
    broken = run_schedule(
        scenario, schedule, open_handle=store_opener(StoreVariant(recheck_fence=False)), base_dir=base_dir
    )
    assert any(failure.startswith("R-CONC-3") for failure in broken.invariant_failures), broken.describe()
    correct = run_schedule(scenario, schedule, open_handle=store_opener(), base_dir=base_dir)
    assert correct.ok and not correct.invariant_failures, correct.describe()
    assert [s.call.name for s in correct.trace].count("unlink") < [s.call.name for s in broken.trace].count(
        "unlink"
    )


def test_a_retire_invoked_before_a_delete_may_still_remove_the_reuse(base_dir: Path) -> None:
    # Why R-CONC-3's "started" means "fenced": retire is invoked first, but its phase 1 runs only after the
    # delete and the reusing write, so it takes effect after the write and rightly removes it.
    run = run_schedule(
        SCENARIOS["retire-vs-delete-reuse"],
        ThreadSchedule((0, 1)),
        open_handle=store_opener(),
        base_dir=base_dir,
    )
    assert run.ok and not run.invariant_failures, run.describe()
    invoked = [s.call.args[0] for s in run.trace if s.call.name == "invoke"]
    assert isinstance(invoked[0], Retire) and isinstance(invoked[1], Delete)
    final = run.history[-1]
    assert isinstance(final.op, ReadManifest) and final.result is not None
    assert "ROLLOUT_RETIRED" in repr(final.result)
