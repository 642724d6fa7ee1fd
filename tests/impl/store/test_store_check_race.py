"""``check(fix=True)`` beside running stores never removes a returned record (SPEC.md R-STORE-8, R-CONC-3).

``check`` lists the directory before it takes any rollout's lock. What it decided from that listing
(a ledger beside its fence: an interrupted retire) may be stale by the time it holds the lock: another
handle may have run ``delete([X])`` and then ``record(X, row)`` in between, and the ledger it now sees is
a new one, without a fence. The fix must re-check the fence (and re-read the ledger) under the lock.

Two runs: a deterministic interleaving through the seam (the other handle's delete and record run from a
hook at the moment ``check`` asks for the rollout's lock), and two real processes on a loop-mounted ext4
image (one retiring, deleting and re-recording in a loop, the other running ``check(fix=True)`` in a
loop), which counts records lost.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing import Queue
from multiprocessing.synchronize import Event
from pathlib import Path

from capture_ledger.impl.store import check, fence_name, ledger_name, rollout_slot
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem
from capture_ledger.impl.study import FsCall, HookedFileSystem

_ROW = {"model_call_id": "after-reuse", "staging_key": None}


def test_a_delete_and_record_between_the_listing_and_the_lock_is_not_undone(tmp_path: Path) -> None:
    """The listing shows X fenced (interrupted retire); before ``check`` locks X, another handle deletes
    X and records a new row. The fix must see that the fence is gone and leave the new ledger alone."""
    with FileLineageStore(tmp_path, stripes=4) as writer:
        writer.record("x", {"model_call_id": "before", "staging_key": None})
        (tmp_path / fence_name("x")).touch()  # a retire that crashed between its two phases
        stripe, _ = rollout_slot("x", 4)
        interleaved: list[str] = []

        def before(call: FsCall) -> None:
            if call.method == "lock" and call.args == (stripe,) and not interleaved:
                interleaved.append("delete+record")
                writer.delete(["x"])
                writer.record("x", _ROW)

        inner = OsFileSystem(tmp_path, stripes=4)
        try:
            findings = check(tmp_path, fix=True, fs=HookedFileSystem(inner, before=before))
        finally:
            inner.close_all()
        assert interleaved == ["delete+record"]
        assert [f.kind for f in findings] == []  # a healthy Live ledger by the time the lock was held
        with FileLineageStore(tmp_path, stripes=4) as fresh:
            assert fresh.manifest("x")["records"] == [_ROW]
        assert (tmp_path / ledger_name("x")).exists()


def test_an_interrupted_retire_found_under_the_lock_is_still_completed(tmp_path: Path) -> None:
    """The re-check does not stop the fix it exists for: a fence still there under the lock completes it."""
    with FileLineageStore(tmp_path, stripes=4) as store:
        store.record("x", {"model_call_id": "c", "staging_key": None})
    (tmp_path / fence_name("x")).touch()
    assert [(f.kind, f.fixed) for f in check(tmp_path, fix=True)] == [("interrupted-retire", True)]
    assert not (tmp_path / ledger_name("x")).exists()
    assert check(tmp_path) == []


def test_a_fence_created_after_the_listing_is_seen_under_the_lock(tmp_path: Path) -> None:
    """The other direction: the listing shows no fence, a retire's phase 1 fences X before ``check``
    locks it. Reported as the interrupted retire it now is; the fix completes it (as the retire will)."""
    with FileLineageStore(tmp_path, stripes=4) as store:
        store.record("x", {"model_call_id": "c", "staging_key": None})
    stripe, _ = rollout_slot("x", 4)

    def before(call: FsCall) -> None:
        if call.method == "lock" and call.args == (stripe,):
            (tmp_path / fence_name("x")).touch()

    inner = OsFileSystem(tmp_path, stripes=4)
    try:
        findings = check(tmp_path, fix=False, fs=HookedFileSystem(inner, before=before))
    finally:
        inner.close_all()
    assert [f.kind for f in findings] == ["interrupted-retire"]


# ----------------------------------------------------------------------------- two processes on real ext4
_ROUNDS = 120
_IDS = ("a", "b", "c", "d", "e", "f")
_PADDING = 40


def _writer(directory: str, lost: Queue[int], done: Event) -> None:
    """Retire, delete and re-record each ID every round; count rows of the previous round gone missing."""
    missing = 0
    with FileLineageStore(directory, stripes=4) as store:
        for rollout_id in _IDS:
            store.record(rollout_id, {"model_call_id": "r-1", "staging_key": None})
        for pad in range(_PADDING):  # listed before the IDs: the checker's window between listing and lock
            store.record(f"0pad-{pad:03d}", {"model_call_id": "p", "staging_key": None})
        for round_ in range(_ROUNDS):
            for rollout_id in _IDS:
                expected = {"model_call_id": f"r{round_ - 1}", "staging_key": None}
                if expected not in store.manifest(rollout_id)["records"] and round_ > 0:
                    missing += 1
                store.retire([rollout_id])
                store.delete([rollout_id])
                store.record(rollout_id, {"model_call_id": f"r{round_}", "staging_key": None})
    done.set()
    lost.put(missing)


def _checker(directory: str, fixed: Queue[int], done: Event) -> None:
    completed = 0
    while not done.is_set():
        completed += sum(f.fixed for f in check(directory, fix=True) if f.kind == "interrupted-retire")
    fixed.put(completed)


def test_check_fix_beside_a_running_store_loses_no_returned_record(small_ext4: Path) -> None:
    """Two processes on a loop-mounted ext4 image: every record the writer got back is still there at
    its next round, however many of the checker's fixes ran in between (before the re-check under the
    lock, runs like this lost about one record in five)."""
    directory = small_ext4 / "lineage"
    FileLineageStore(directory, stripes=4).close()
    context = multiprocessing.get_context("fork")
    done = context.Event()
    lost: Queue[int] = context.Queue()
    fixed: Queue[int] = context.Queue()
    checker = context.Process(target=_checker, args=(str(directory), fixed, done))
    writer = context.Process(target=_writer, args=(str(directory), lost, done))
    checker.start()
    writer.start()
    missing = lost.get(timeout=300)
    writer.join(60)
    completed = fixed.get(timeout=60)
    checker.join(60)
    assert (writer.exitcode, checker.exitcode) == (0, 0)
    print(f"{_ROUNDS * len(_IDS)} records, {missing} lost, {completed} interrupted retires completed")
    assert missing == 0
    with FileLineageStore(directory, stripes=4) as store:
        for rollout_id in _IDS:
            assert store.manifest(rollout_id)["records"] == [
                {"model_call_id": f"r{_ROUNDS - 1}", "staging_key": None}
            ]
