"""Every guard of the store is studied somewhere. The crash study keeps its lists of guards by hand and the
scheduler takes the step model's, so a new ``StoreVariant`` field fails here until each explorer says what
it does with it; and each field really leaves its step out of the store's ordering."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from capture_ledger.impl.store import Ordering
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem
from capture_ledger.impl.study import STEP_NAMES, FsCall, HookedFileSystem, StoreVariant, VariantOrdering
from capture_ledger.impl.study.crash import OTHER_GUARDS, STEPS
from capture_ledger.impl.study.interleave import GUARDS
from capture_ledger.spec.concurrency.steps import GUARD_NAMES

VARIANT_FIELDS = set(STEP_NAMES)
#: Guards of the store's protocol that only a crash can show; no interleaving of live calls needs them.
DURABILITY_STEPS = {
    "sync_after_fences",
    "sync_when_nothing_written",
    "sync_after_unlinks",
    "fsync_appends",
    "sync_dir_on_create",
    "sync_delete",
}


def test_the_crash_study_ablates_every_store_variant_field() -> None:
    assert set(STEPS) | set(OTHER_GUARDS) == VARIANT_FIELDS
    assert not set(STEPS) & set(OTHER_GUARDS)


def test_the_scheduler_ablates_every_guard_that_is_not_about_durability() -> None:
    assert set(GUARDS) == VARIANT_FIELDS - DURABILITY_STEPS


def test_the_step_model_has_every_scheduling_guard_and_only_the_read_lock_besides() -> None:
    # read_lock: the exploration showed reads must hold the stripe lock; the store always does, so it has no
    # switch to turn off (docs/concurrency.md).
    assert set(GUARD_NAMES) == set(GUARDS) | {"read_lock"}


def test_the_default_variant_is_the_production_ordering() -> None:
    assert type(StoreVariant().ordering(fence_sync="file")) is Ordering
    assert StoreVariant().ordering(fence_sync="file").fence_sync == "file"
    assert isinstance(StoreVariant(sync_delete=False).ordering(), VariantOrdering)
    assert StoreVariant(**{"recheck_fence": False}) == StoreVariant(recheck_fence=False)  # from a mapping


def _calls(directory: Path, variant: StoreVariant) -> list[tuple[str, str]]:
    """Every seam call of one workload that exercises every step: a record, another handle's delete and
    re-record, a record on a stale cache, retires of a Live and an already retired ID, an admission and a
    late write to a Retired ID, a delete; and a retire that asks for its sync while another handle's shared
    sync is running (group commit, R-STORE-9)."""
    calls: list[tuple[str, str]] = []
    asked = threading.Event()  # the retire waits for the running sync, or has returned without waiting

    def log(call: FsCall, outcome: object) -> None:
        calls.append((call.method, call.name))

    def note_wait(call: FsCall) -> None:
        if call.method == "await_sync":
            asked.set()

    inner = OsFileSystem(directory, stripes=4)
    other = FileLineageStore(directory, fs=inner, group_commit=True)
    store = FileLineageStore(
        directory,
        fs=HookedFileSystem(inner, before=note_wait, after=log),
        ordering=variant.ordering(),
        group_commit=True,
    )
    store.record("r", {"model_call_id": "a"})
    other.delete(["r"])
    other.record("r", {"model_call_id": "x"})
    store.record("r", {"model_call_id": "b"})
    store.retire(["r", "s"])
    store.retire(["s"])
    store.admit("r", "c")
    store.record("r", {"model_call_id": "c"})
    store.delete(["r", "s"])

    def retire_t() -> None:
        try:
            store.retire(["t"])
        finally:
            asked.set()

    racer = threading.Thread(target=retire_t)

    def during_the_sync(call: FsCall) -> None:  # the leader's sync has started, not yet issued
        if call.method == "sync_dir" and not racer.is_alive() and not asked.is_set():
            racer.start()
            asked.wait()

    hooked = HookedFileSystem(inner, before=during_the_sync)
    leader = FileLineageStore(directory, fs=hooked, group_commit=True)
    leader.retire(["u"])
    racer.join()
    inner.close_all()
    return calls


#: The switches of combined removals: they change what a combined batch serves, and when (below).
COMBINING = ("await_combined_batch", "results_after_syncs", "same_retire_result")


@pytest.mark.parametrize("step", [s for s in STEP_NAMES if s not in COMBINING])
def test_each_switch_changes_what_the_store_does(tmp_path: Path, step: str) -> None:
    """No field is a dead switch: with it off, the same workload makes other seam calls, or fewer."""
    production = _calls(tmp_path / "production", StoreVariant())
    ablated = _calls(tmp_path / "ablated", StoreVariant(**{step: False}))
    assert ablated != production


def _served(directory: Path, variant: StoreVariant) -> tuple[list[str], bool]:
    """A leader's retire holds its first sync until two waiters (threads of another handle) wait; the
    waiters' requests (``[r1, x]`` and ``[x, r2]``) are then combined into one batch, whose first sync is
    held until the waiter that did not combine has returned (bounded: the production one cannot). Returns
    the waiters' results, and whether a waiter returned before that batch's first sync."""
    for rollout_id in ("r0", "r1", "r2", "x"):
        with FileLineageStore(directory, fence_sync="directory") as writer:
            writer.record(rollout_id, {"model_call_id": "a"})
    inner = OsFileSystem(directory, stripes=4)
    ordering = variant.ordering()
    events: list[str] = []
    changed = threading.Condition()
    waiting = [0]
    held = threading.Event()
    names = ("w1", "w2")

    def hook(call: FsCall) -> None:
        me = threading.current_thread().name
        if call.method == "await_sync":
            with changed:
                waiting[0] += 1
                changed.notify_all()
        if call.method != "sync_dir":
            return
        if me == "leader" and not held.is_set():
            held.set()
            with changed:
                changed.wait_for(lambda: waiting[0] >= 2, timeout=30)
        elif me in names and "batch 2 sync" not in events:
            with changed:
                changed.wait_for(lambda: any(f"returned {n}" in events for n in names), timeout=2)
                events.append("batch 2 sync")

    def store() -> FileLineageStore:
        return FileLineageStore(
            directory, fs=HookedFileSystem(inner, before=hook), ordering=ordering, combine_removals=True
        )

    leader, other = store(), store()
    results: dict[str, object] = {}

    def run(name: str, handle: FileLineageStore, ids: list[str]) -> threading.Thread:
        def body() -> None:
            results[name] = handle.retire(ids)
            with changed:
                events.append(f"returned {name}")
                changed.notify_all()

        return threading.Thread(target=body, name=name)

    first = run("leader", leader, ["r0"])
    first.start()
    assert held.wait(30)
    waiters = [run("w1", other, ["r1", "x"]), run("w2", other, ["x", "r2"])]
    for thread in waiters:
        thread.start()
    for thread in [first, *waiters]:
        thread.join()
    inner.close_all()
    early = events.index("batch 2 sync") > min(events.index(f"returned {n}") for n in names)
    return sorted(repr(results[n]) for n in names), early


@pytest.mark.parametrize("step", COMBINING)
def test_each_combining_switch_changes_what_a_batch_serves_or_when(tmp_path: Path, step: str) -> None:
    production = _served(tmp_path / "production", StoreVariant())
    assert production[1] is False  # no waiter returned before its batch synced
    assert production[0] == sorted(
        [repr({"removed": ["r1", "x"], "absent": []}), repr({"removed": ["x", "r2"], "absent": []})]
    )
    ablated = _served(tmp_path / "ablated", StoreVariant(**{step: False}))
    assert ablated != production
