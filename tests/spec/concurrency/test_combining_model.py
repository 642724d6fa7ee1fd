"""Tests of combined removals in the step-level model (spec/concurrency/_combining.py; SPEC.md R-STORE-4,
R-STORE-5, R-STORE-9, R-CONC-1..3; docs/concurrency.md §Combined removals).

What they prove: a lone combined removal runs today's steps, after two steps of its own (enqueue, take);
a combiner takes every pending request and runs one batch over the union of their IDs while a later
request waits for the next batch; each request gets its own result (a retire of an ID the batch removed
reports it ``removed`` for every request, a delete only for the first); the configurations with combining
hold with every guard on, and so does every older configuration with combining switched on; the three
guards of combining are each caught (a waiter returning once taken, results handed out after phase 1, a
later retire reporting ``absent``) at the step the manifest pins; the configurations that predate combining
keep their pinned counts (switching combining off is the default).
"""

from __future__ import annotations

import dataclasses

import pytest
from capture_ledger.spec.concurrency import successor
from capture_ledger.spec.concurrency.explore import (
    CONFIGURATIONS,
    SLOW,
    explore,
    load_manifest,
    replay,
)
from capture_ledger.spec.concurrency.steps import (
    Client,
    Config,
    Guards,
    RecordCall,
    RetireCall,
    State,
    initial_state,
)
from capture_ledger.spec.core import model

MANIFEST = load_manifest()
SETUP = [0] * 7 + [1] * 7  # the two setup writes of a two-ID configuration

#: The counts pinned before combining was modelled (states, complete executions): unchanged.
BEFORE = {
    "retire-vs-late-write": (61, 5),
    "retire-vs-two-late-writes": (288, 28),
    "retire-vs-delete-reuse": (186, 16),
    "two-retires-vs-write": (769, 84),
    "delete-vs-write": (82, 9),
    "admit-vs-retire": (137, 14),
    "retire-vs-write-and-read": (133, 11),
    "retire-batch-vs-writes": (307, 14),
    "retire-batch-shared-stripe": (406, 23),
    "retire-vs-delete-vs-reads": (4545, 664),
    "shared-sync-two-retires": (1829, 63),
    "shared-sync-retire-vs-delete": (511, 10),
    "shared-sync-retires-and-delete": (1429, 124),
    "two-retires-vs-delete-reuse-read": (9584, 1032),
    "retire-batch-vs-three-writers": (10426, 719),
}


def _steps(config: Config, state: State, schedule: list[int]) -> tuple[list[str], State]:
    texts: list[str] = []
    for client in schedule:
        step = successor(config, Guards(), state, client)
        assert step is not None, (client, texts)
        texts.append(step[0].split(") ", 1)[1])
        state = step[1]
    return texts, state


def _result(state: State, client: int) -> model.Result | None:
    return state.calls[client][-1][2]


def test_combining_is_off_by_default_and_the_older_counts_are_unchanged() -> None:
    assert not Config(name="x", ids=("a",), clients=()).combine
    pinned = MANIFEST["configurations"]
    assert {n: (pinned[n]["states"], pinned[n]["complete_executions"]) for n in BEFORE} == BEFORE
    assert all(not CONFIGURATIONS[n].combine for n in BEFORE)
    # ... and the explorer still finds them (test_explore_manifest.py explores every one of them).
    run = explore(CONFIGURATIONS["retire-vs-late-write"])
    assert (run.states, run.complete) == BEFORE["retire-vs-late-write"]


def test_a_lone_combined_retire_runs_todays_steps_after_enqueue_and_take() -> None:
    config = Config(
        name="lone", ids=("a",), setup=2, combine=True,
        clients=(Client(0, (RecordCall("a", "m1"),)), Client(0, (RetireCall(("a",)),))),
    )  # fmt: skip
    texts, state = _steps(config, initial_state(config), [0] * 7 + [1] * 11)
    assert texts[7:] == [
        "enqueue request",
        "take the requests of clients 1: batch 1 over [a]",
        "lock stripe of a",
        "look up ledger of a: present",
        "create fence of a",
        "unlock stripe of a",
        "fsync directory",
        "lock stripe of a",
        "look up fence of a: present",
        "unlink ledger of a",
        "unlock stripe of a",
    ]
    assert successor(config, Guards(), state, 1) is not None  # the second sync, then it returns
    texts, state = _steps(config, state, [1])
    assert texts == ["fsync directory"]
    assert _result(state, 1) == model.Ok(model.Removal(("a",), ()))
    assert state.combiners == (-1, -1) and not state.uncovered and state.batches == (1, 0)


def test_a_combiner_takes_every_pending_request_and_a_later_one_waits_for_the_next_batch() -> None:
    # retire [a, b] and retire [b] enqueue; the first takes both; retire [a] enqueues while the batch runs.
    config = CONFIGURATIONS["combine-three-overlapping-retires"]
    texts, state = _steps(config, initial_state(config), [*SETUP, 2, 3, 2, 4])
    assert texts[-2:] == ["take the requests of clients 2, 3: batch 1 over [a, b]", "enqueue request"]
    assert successor(config, Guards(), state, 3) is None  # taken: waits for its batch
    assert successor(config, Guards(), state, 4) is None  # pending while a batch runs
    texts, state = _steps(config, state, [2] * 18)  # the union's batch, as one retire of [a, b]
    assert texts.count("fsync directory") == 2
    assert _result(state, 2) == model.Ok(model.Removal(("a", "b"), ()))
    assert _result(state, 3) is None and successor(config, Guards(), state, 3) is not None
    texts, state = _steps(config, state, [4, 3])
    assert texts == [
        "take the requests of clients 4: batch 2 over [a]",
        "its batch completed: return its result",
    ]
    # A retire of an ID the batch removed reports it removed for every request asking for it.
    assert _result(state, 3) == model.Ok(model.Removal(("b",), ()))
    assert not state.early and state.uncovered == {(4, 0)}


def test_of_two_combined_deletes_of_one_id_only_the_first_removed_it() -> None:
    config = CONFIGURATIONS["combine-deletes-vs-retire"]
    texts, state = _steps(config, initial_state(config), [0] * 7 + [1, 2, 1] + [1] * 5 + [2])
    assert texts[9] == "take the requests of clients 1, 2: batch 1 over [a]"
    assert _result(state, 1) == model.Ok(model.Removal(("a",), ()))
    assert _result(state, 2) == model.Ok(model.Removal((), ("a",)))  # a delete right after the first


def _params(names: list[str]) -> list[object]:
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


@pytest.mark.parametrize("name", _params([n for n, c in CONFIGURATIONS.items() if c.combine]))
def test_every_combining_configuration_holds_with_every_guard_on(name: str) -> None:
    run = explore(CONFIGURATIONS[name])
    assert run.ok, str(run.counterexample)
    pinned = MANIFEST["configurations"][name]
    assert (run.states, run.complete) == (pinned["states"], pinned["complete_executions"])


#: The older configurations the fast tier explores with combining on (the others are slow: together
#: about 45,000 states with combining).
_FAST = {
    "retire-vs-delete-reuse",
    "two-retires-vs-write",
    "retire-batch-shared-stripe",
    "shared-sync-retires-and-delete",
}


@pytest.mark.parametrize(
    "name",
    [
        n if n in _FAST else pytest.param(n, marks=pytest.mark.slow)
        for n, c in CONFIGURATIONS.items()
        if not c.combine
    ],
)
def test_every_older_configuration_holds_with_combining(name: str) -> None:
    run = explore(dataclasses.replace(CONFIGURATIONS[name], combine=True))
    assert run.ok, str(run.counterexample)


BATCH_SYNCED = "R-STORE-9 no return before its batch synced"


@pytest.mark.parametrize(
    ("guard", "name", "last"),
    [
        ("await_combined_batch", "combine-retires-vs-late-write", "request taken: return at once"),
        ("results_after_syncs", "combine-retires-vs-late-write", "its batch completed: return its result"),
        ("await_combined_batch", "combine-deletes-vs-retire", "request taken: return at once"),
        ("results_after_syncs", "combine-shared-sync", "its batch completed: return its result"),
    ],
)
def test_a_caller_returning_before_its_batch_synced_is_caught(guard: str, name: str, last: str) -> None:
    config, guards = CONFIGURATIONS[name], Guards().without(guard)
    run = explore(config, guards)
    example = run.counterexample
    assert example is not None and example.property == BATCH_SYNCED, str(example)
    assert len(example.steps) == MANIFEST["ablation"][guard][name]["steps"]
    assert example.steps[-1].endswith(last)
    taken = next(i for i, step in enumerate(example.steps) if "take the requests" in step)
    assert not any("fsync directory" in step for step in example.steps[taken:])  # before the batch's syncs
    texts, state = replay(config, guards, example.schedule)
    assert tuple(texts) == example.steps and state.early
    assert explore(config).ok  # the guard on: none


def test_a_later_combined_retire_reporting_absent_is_not_linearizable() -> None:
    # The rule "a later request of an ID gets absent" for retire: a delete between the batch's phases
    # leaves the ID Absent, and no order lets the later retire report absent without leaving it Retired.
    config, guards = CONFIGURATIONS["combine-retires-vs-delete"], Guards().without("same_retire_result")
    run = explore(config, guards)
    example = run.counterexample
    assert example is not None and example.property == "linearizability", str(example)
    assert (
        len(example.steps) == MANIFEST["ablation"]["same_retire_result"]["combine-retires-vs-delete"]["steps"]
    )
    assert "take the requests of clients 1, 2: batch 1 over [a]" in example.steps[9]
    assert any("(delete [a]) unlink ledger of a" in step for step in example.steps)
    assert any("look up fence of a: absent, skip" in step for step in example.steps)
