"""Tests of the step-level model (spec/concurrency/steps.py; SPEC.md §Store, R-STORE-3..5, R-CONC-1).

What they prove: run one call at a time, the step model returns exactly what the sequential model returns
and leaves the directory in the state the model says (so the step model is a refinement of ``model``),
with and without group commit and combined removals;
retire and delete take the locks, syncs and unlinks DESIGN §5 lists, in that order; a retire of two IDs
is not atomic (a write to the second can come between the two IDs' phase-1 steps); guards are named; with
group commit (R-STORE-9) a lone removal leads its own syncs, a removal that asks while another's sync runs
waits for the next one and may share it, and without ``await_shared_sync`` the explorer catches one that
goes on early.
"""

from __future__ import annotations

import dataclasses

import pytest
from capture_ledger.spec.concurrency import successor
from capture_ledger.spec.concurrency.explore import CONFIGURATIONS, SLOW, explore
from capture_ledger.spec.concurrency.steps import (
    GUARD_NAMES,
    AdmitCall,
    Call,
    Client,
    Config,
    DeleteCall,
    Guards,
    ManifestCall,
    RecordCall,
    RetireCall,
    State,
    initial_state,
    operation_of,
)
from capture_ledger.spec.core import model
from capture_ledger.spec.kit import profile_settings
from hypothesis import given
from hypothesis import strategies as st

IDS = ("a", "b")


def _calls() -> st.SearchStrategy[Call]:
    rid = st.sampled_from(IDS)
    batch = st.lists(rid, min_size=1, max_size=2, unique=True).map(tuple)
    call = st.sampled_from(["m1", "m2"])
    return st.one_of(
        st.builds(RecordCall, rid, call),
        st.builds(ManifestCall, rid),
        st.builds(AdmitCall, rid, call),
        st.builds(RetireCall, batch),
        st.builds(DeleteCall, batch),
    )


def _run_alone(config: Config, guards: Guards | None = None) -> tuple[State, list[str]]:
    """Run the clients one after the other (the config's clients are all setup clients)."""
    guards = guards or Guards()
    state, texts = initial_state(config), []
    moved = True
    while moved:
        moved = False
        for client in range(len(config.clients)):
            step = successor(config, guards, state, client)
            if step is not None:
                text, state = step
                texts.append(text)
                moved = True
                break
    return state, texts


@given(st.lists(st.tuples(_calls(), st.integers(0, 1)), max_size=12), st.booleans(), st.booleans())
@profile_settings()
def test_one_call_at_a_time_the_step_model_is_the_sequential_model(
    calls: list[tuple[Call, int]], group_commit: bool, combine: bool
) -> None:
    clients = tuple(Client(handle, (call,)) for call, handle in calls)
    config = Config(
        name="sequential",
        ids=IDS,
        clients=clients,
        setup=len(clients),
        group_commit=group_commit,
        combine=combine,
    )
    state, _ = _run_alone(config)
    expected = model.LedgerState()
    for client, (call, _) in enumerate(calls):
        expected, result = model.step(expected, operation_of(call))
        observed = state.calls[client][0][2]
        assert observed is not None
        assert observed == result or (
            isinstance(result.value if isinstance(result, model.Ok) else None, model.Discarded)
            and observed == model.Ok(None)
        ), (call, observed, result)
    for position, rollout_id in enumerate(IDS):
        ledger, fence = state.ledgers[position], state.fences[position]
        after = expected.get(rollout_id)
        if isinstance(after, model.Live):
            assert ledger is not None
            assert [r.call for r in ledger.rows] == [e.model_call_id for e in after.entries]
            assert fence == after.fenced
        else:
            assert ledger is None
            assert fence == isinstance(after, model.Retired)


def _texts(calls: tuple[Call, ...], *, setup: tuple[Call, ...] = ()) -> list[str]:
    """The steps of ``calls`` run one after the other after ``setup``, without the client prefix."""

    def run(chain: tuple[Call, ...]) -> list[str]:
        clients = tuple(Client(0, (c,)) for c in chain)
        return _run_alone(Config(name="alone", ids=IDS, clients=clients, setup=len(clients)))[1]

    texts = run((*setup, *calls))[len(run(setup)) if setup else 0 :]
    return [t.split(") ", 1)[1] for t in texts]


def test_retire_fences_every_id_syncs_then_rechecks_and_unlinks() -> None:
    # R-STORE-4: phase 1 per ID (lock, look up, fence), one directory sync, phase 2 for IDs that had a
    # ledger (lock, re-check the fence, unlink), one more directory sync because something was unlinked.
    texts = _texts((RetireCall(("a", "b")),), setup=(RecordCall("a", "m1"),))
    assert texts == [
        "lock stripe of a",
        "look up ledger of a: present",
        "create fence of a",
        "unlock stripe of a",
        "lock stripe of b",
        "look up ledger of b: absent",
        "create fence of b",
        "unlock stripe of b",
        "fsync directory",
        "lock stripe of a",
        "look up fence of a: present",
        "unlink ledger of a",
        "unlock stripe of a",
        "fsync directory",
    ]


def test_a_retried_retire_writes_nothing_but_still_syncs_once() -> None:
    # R-STORE-4: one directory sync per non-empty batch even when no fence was written.
    texts = _texts((RetireCall(("a",)),), setup=(RetireCall(("a",)),))
    assert texts == [
        "lock stripe of a",
        "look up ledger of a: absent",
        "look up fence of a: present",
        "unlock stripe of a",
        "fsync directory",
    ]


def test_delete_unlinks_ledger_and_fence_under_the_lock_then_syncs_once() -> None:
    texts = _texts((DeleteCall(("a", "b")),), setup=(RecordCall("a", "m1"), RetireCall(("b",))))
    assert texts == [
        "lock stripe of a",
        "unlink ledger of a",
        "unlink fence of a: absent",
        "unlock stripe of a",
        "lock stripe of b",
        "unlink ledger of b: absent",
        "unlink fence of b",
        "unlock stripe of b",
        "fsync directory",
    ]


def test_a_new_ledger_is_synced_and_its_directory_entry_too() -> None:
    # R-STORE-3 and R-WRITE-6: the fence is looked up only when the rollout has no rows.
    first = _texts((RecordCall("a", "m1"),))
    assert first == [
        "lock stripe of a",
        "read ledger of a: none",
        "look up fence of a: absent",
        "create ledger of a with m1",
        "fsync ledger of a",
        "fsync directory",
        "unlock stripe of a",
    ]
    second = _texts((RecordCall("a", "m2"),), setup=(RecordCall("a", "m1"),))
    assert second == [
        "lock stripe of a",
        "read ledger of a: 1 row(s)",
        "append m2 to ledger of a",
        "fsync ledger of a",
        "unlock stripe of a",
    ]


def test_a_batch_is_not_atomic_across_ids() -> None:
    # R-CONC-1: a write to b may land after a's fence and before b's; the explorer accepts every such
    # execution, because the checker judges each ID on its own.
    config = Config(
        name="batch",
        ids=IDS,
        setup=1,
        clients=(
            Client(0, (RecordCall("b", "m1"),)),
            Client(0, (RetireCall(("a", "b")),)),
            Client(1, (RecordCall("b", "m2"), ManifestCall("b"))),
        ),
    )
    run = explore(config)
    assert run.ok, str(run.counterexample)
    assert run.complete > 1


def test_guards_are_named_and_switch_off_one_at_a_time() -> None:
    assert GUARD_NAMES == (
        "recheck_fence",
        "fence_before_unlink",
        "fence_lookup_on_write",
        "admit_checks_fence",
        "cache_coherence",
        "read_lock",
        "await_shared_sync",
        "await_combined_batch",
        "results_after_syncs",
        "same_retire_result",
    )
    off = Guards().without("recheck_fence")
    assert not off.recheck_fence
    assert all(getattr(off, name) for name in GUARD_NAMES if name != "recheck_fence")
    with pytest.raises(ValueError, match="unknown guard"):
        Guards().without("no_such_guard")


def _group(*clients: Client, ids: tuple[str, ...] = IDS) -> Config:
    return Config(name="shared", ids=ids, clients=clients, handles=3, group_commit=True)


def test_with_group_commit_a_lone_removal_leads_its_own_syncs() -> None:
    # R-STORE-9: with nobody else asking, each sync point starts a sync and completes it.
    config = _group(Client(0, (RetireCall(("a",)),)))
    state, texts = _run_alone(config)
    assert [t.split(") ", 1)[1] for t in texts] == [
        "lock stripe of a",
        "look up ledger of a: absent",
        "create fence of a",
        "unlock stripe of a; start sync 1",
        "fsync directory (sync 1)",
    ]
    assert (state.sync_started, state.sync_finished, state.sync_leader) == (1, 1, -1)


def test_with_group_commit_one_sync_serves_callers_that_asked_while_another_ran() -> None:
    # R-STORE-9: retire a starts sync 1; retires b and c ask while it runs, so they wait for sync 2,
    # which one of them starts and the other shares.
    config = _group(
        Client(0, (RetireCall(("a",)),)),
        Client(1, (RetireCall(("b",)),)),
        Client(2, (RetireCall(("c",)),)),
        ids=("a", "b", "c"),
    )
    state = initial_state(config)
    schedule = [0] * 4 + [1] * 4 + [2] * 4  # each up to its sync point; a leads sync 1, b and c wait
    for client in schedule:
        step = successor(config, Guards(), state, client)
        assert step is not None, client
        state = step[1]
    assert successor(config, Guards(), state, 1) is None  # waiting for sync 2
    for client, text in [
        (0, "fsync directory (sync 1)"),
        (1, "no sync running: start sync 2"),
        (2, None),  # still waiting: sync 2 runs
        (1, "fsync directory (sync 2)"),
        (2, "sync 2 finished: go on"),
    ]:
        step = successor(config, Guards(), state, client)
        if text is None:
            assert step is None
            continue
        assert step is not None and step[0].endswith(text), (step, text)
        state = step[1]
    assert state.sync_finished == 2 and not state.unsynced  # three retires, two syncs


def test_a_removal_that_goes_on_while_a_sync_runs_is_caught() -> None:
    # Without await_shared_sync a retire that asks while another's sync runs goes on at once: the
    # explorer reports the ghost breach (R-STORE-9), which the crash study shows losing its fence.
    config = _group(
        Client(0, (RetireCall(("a",)),)), Client(1, (RetireCall(("b",)),)), Client(2, (RecordCall("a", "m"),))
    )
    assert explore(config).ok
    run = explore(config, Guards().without("await_shared_sync"))
    assert run.counterexample is not None
    assert run.counterexample.property == "R-STORE-9 shared sync finished first"
    assert "count on running sync 1: go on" in run.counterexample.steps[-1]


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
        for n, c in CONFIGURATIONS.items()
        if not c.group_commit
    ],
)
def test_every_configuration_holds_with_group_commit(name: str) -> None:
    """Every R-CONC property and linearizability hold when the same clients share their syncs."""
    config = dataclasses.replace(CONFIGURATIONS[name], group_commit=True)
    run = explore(config)
    assert run.ok, str(run.counterexample)
