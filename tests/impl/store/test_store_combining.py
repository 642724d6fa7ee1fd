"""Combining removals in the real store (impl/store/_combining.py; R-STORE-4, R-STORE-5, R-STORE-9, R-CONC-1).

With real files, real fsyncs and real threads, and counts (never times): retires that arrive while another
caller's batch runs are combined into the next batch (batches and syncs counted), each caller gets its own
results, an ID asked for by two callers gets the model's answer (retire: both the batch's result; delete:
the first ``removed``, the later ``absent``), a failed batch raises ``OSError`` to every caller in it and a
retry completes, and a lone caller makes exactly the seam calls it makes without combining. The moments are
placed with events through the seam's hooks (the first batch's first sync is held until the others wait).
"""

from __future__ import annotations

import errno
import functools
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from capture_ledger.impl.store import RemovalQueue, shared_combiners
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem
from capture_ledger.impl.study import FsCall, HookedFileSystem, StoreVariant

ROW = {"model_call_id": "m0", "staging_key": "r/m0"}


class Gate:
    """Holds the first ``sync_dir`` of the leader's handle until ``waiters`` calls wait in ``await_sync``."""

    def __init__(self, waiters: int) -> None:
        self.waiters = waiters
        self.waiting = 0
        self.changed = threading.Condition()
        self.held = threading.Event()
        self.log: list[tuple[str, str]] = []

    def note(self, call: FsCall) -> None:
        with self.changed:
            self.log.append((threading.current_thread().name, call.method))
            if call.method == "await_sync" and isinstance(call.args[0], RemovalQueue):
                self.waiting += 1
                self.changed.notify_all()

    def hold(self, call: FsCall) -> None:
        self.note(call)
        if call.method == "sync_dir" and not self.held.is_set():
            self.held.set()
            with self.changed:  # bounded only so that a broken store fails the test instead of hanging it
                self.changed.wait_for(lambda: self.waiting >= self.waiters, timeout=30)


def _live(directory: Path, ids: list[str]) -> None:
    with FileLineageStore(directory, fence_sync="directory") as writer:
        for rollout_id in ids:
            writer.record(rollout_id, ROW)


def _open(directory: Path, fs: OsFileSystem, before: Callable[[FsCall], None]) -> FileLineageStore:
    return FileLineageStore(
        directory,
        fs=HookedFileSystem(fs, before=before),
        fence_sync="directory",
        group_commit=False,
        combine_removals=True,
    )


def _retire_one(rollout_id: str) -> Callable[[FileLineageStore], object]:
    return lambda store: store.retire([rollout_id])


def _race(
    directory: Path,
    leader_call: Callable[[FileLineageStore], object],
    calls: list[Callable[[FileLineageStore], object]],
    *,
    fail_second: bool = False,
) -> tuple[dict[str, object], FileLineageStore, FileLineageStore, Gate]:
    """The leader's call starts a batch whose first sync is held until every other call waits; the others
    (threads of a second handle) are then combined into the next batch."""
    gate = Gate(waiters=len(calls))
    inner = OsFileSystem(directory)
    failing = {"on": fail_second}

    def waiter_hook(call: FsCall) -> None:
        gate.note(call)
        if failing["on"] and call.method == "sync_dir":
            raise OSError(errno.EIO, "injected: the directory sync failed")

    leader = _open(directory, inner, gate.hold)
    others = _open(directory, inner, waiter_hook)
    results: dict[str, object] = {}

    def run(name: str, call: Callable[[], object]) -> threading.Thread:
        def body() -> None:
            try:
                results[name] = call()
            except OSError as error:
                results[name] = error

        return threading.Thread(target=body, name=name)

    leading = run("leader", lambda: leader_call(leader))
    leading.start()
    assert gate.held.wait(30)
    threads = [run(f"w{i}", functools.partial(c, others)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in [leading, *threads]:
        thread.join()
    failing["on"] = False
    return results, leader, others, gate


def test_retires_that_wait_are_combined_into_one_batch(tmp_path: Path) -> None:
    ids = [f"r{i}" for i in range(6)]
    _live(tmp_path, ids)
    calls = [_retire_one(i) for i in ids[1:]]
    results, leader, others, gate = _race(tmp_path, lambda s: s.retire(["r0"]), calls)
    assert results["leader"] == {"removed": ["r0"], "absent": []}
    for n, rollout_id in enumerate(ids[1:]):
        assert results[f"w{n}"] == {"removed": [rollout_id], "absent": []}  # each its own result
    stats = others.statistics()
    # Six retires, two batches: the leader's alone, then the five waiters' together.
    assert (stats.removal_batches, stats.removals_combined) == (2, 4)
    assert stats.combine_removals and not stats.group_commit
    # Each batch syncs twice (fences, unlinks), without group commit: 4 syncs for 6 retires, not 12.
    syncs = [call for _, call in gate.log if call == "sync_dir"]
    assert len(syncs) == 4
    assert leader.statistics().syncs_issued + others.statistics().syncs_issued == 4
    assert not list(tmp_path.glob("*.lineage.jsonl"))


def test_an_id_asked_for_by_two_callers_gets_the_models_answer(tmp_path: Path) -> None:
    _live(tmp_path, ["a", "b", "x", "d1", "d2", "y"])
    retires = [lambda s: s.retire(["a", "x"]), lambda s: s.retire(["x", "b"])]
    results, *_ = _race(tmp_path, lambda s: s.retire(["zz"]), retires)
    # Both retire requests of one batch get its result for x (the batch noted x's ledger).
    assert sorted(map(repr, [results["w0"], results["w1"]])) == sorted(
        [repr({"removed": ["a", "x"], "absent": []}), repr({"removed": ["x", "b"], "absent": []})]
    )
    deletes = [lambda s: s.delete(["d1", "y"]), lambda s: s.delete(["y", "d2"])]
    results, *_ = _race(tmp_path, lambda s: s.delete(["zz"]), deletes)
    got = [results["w0"], results["w1"]]
    # The first request in queue order gets y removed, the later one absent: a delete right after it.
    assert {"removed": ["d1", "y"], "absent": []} in got or {"removed": ["y", "d2"], "absent": []} in got
    assert sum(len(r["removed"]) for r in got if isinstance(r, dict)) == 3


def test_a_failed_batch_raises_to_every_caller_and_a_retry_completes(tmp_path: Path) -> None:
    ids = [f"r{i}" for i in range(4)]
    _live(tmp_path, ids)
    calls = [_retire_one(i) for i in ids[1:]]
    results, _, others, _ = _race(tmp_path, lambda s: s.retire(["r0"]), calls, fail_second=True)
    assert results["leader"] == {"removed": ["r0"], "absent": []}
    errors = [results[f"w{n}"] for n in range(3)]
    assert all(isinstance(e, OSError) and e.errno == errno.EIO for e in errors)  # none returned success
    assert sum("the combined retire failed" in str(e) for e in errors) == 2  # the combiner's own error once
    for rollout_id in ids[1:]:  # removals are idempotent: a retry of each completes
        assert others.retire([rollout_id]) == {"removed": [rollout_id], "absent": []}
    assert not list(tmp_path.glob("*.lineage.jsonl"))


def test_the_broken_waiter_returns_before_its_batch_ran(tmp_path: Path) -> None:
    """``await_combined_batch`` off: a waiter whose request another waiter's batch took returns at once,
    before that batch ran (every ID ``absent``, although its ledger was Live)."""
    ids = ["r0", "r1", "r2"]
    _live(tmp_path, ids)
    gate = Gate(waiters=2)
    inner = OsFileSystem(tmp_path)
    ordering = StoreVariant(await_combined_batch=False).ordering()

    def opened(before: Callable[[FsCall], None]) -> FileLineageStore:
        fs = HookedFileSystem(inner, before=before)
        return FileLineageStore(tmp_path, fs=fs, ordering=ordering, combine_removals=True)

    leader, other = opened(gate.hold), opened(gate.note)
    results: dict[str, object] = {}

    def retire(store: FileLineageStore, rollout_id: str) -> threading.Thread:
        return threading.Thread(target=lambda: results.__setitem__(rollout_id, store.retire([rollout_id])))

    first = retire(leader, "r0")
    first.start()
    assert gate.held.wait(30)
    waiters = [retire(other, "r1"), retire(other, "r2")]
    for thread in waiters:
        thread.start()
    for thread in [first, *waiters]:
        thread.join()
    got = sorted(repr(results[i]) for i in ("r1", "r2"))
    assert any("'removed': []" in g for g in got), got  # one returned on "taken", before its batch ran
    assert not list(tmp_path.glob("*.lineage.jsonl"))  # the batch itself still ran to its end
    inner.close_all()


def _note(log: list[tuple[str, str]], call: FsCall) -> None:
    log.append((call.method, call.name))


def test_a_lone_caller_makes_exactly_the_seam_calls_it_makes_without_combining(tmp_path: Path) -> None:
    calls: dict[bool, list[tuple[str, str]]] = {}
    for combine in (False, True):
        directory = tmp_path / str(combine)
        _live(directory, ["a", "b"])
        inner = OsFileSystem(directory)
        log: list[tuple[str, str]] = []
        store = FileLineageStore(
            directory,
            fs=HookedFileSystem(inner, before=functools.partial(_note, log)),
            fence_sync="directory",
            combine_removals=combine,
        )
        store.retire(["a", "c"])
        store.delete(["a", "b"])
        calls[combine] = log
        assert store.statistics().removal_batches == (2 if combine else 0)
        inner.close_all()
    assert calls[True] == calls[False]
    assert ("await_sync", "") not in calls[True]


def test_queues_are_shared_by_directory_and_off_gives_none(tmp_path: Path) -> None:
    first = FileLineageStore(tmp_path, combine_removals=True, fence_sync="directory")
    second = FileLineageStore(tmp_path, combine_removals=True, fence_sync="directory")
    assert first._combiners is not None and first._combiners is second._combiners
    assert shared_combiners(tmp_path) is shared_combiners(tmp_path)
    # A request runs in its combiner's batch, through the combiner's ordering: a handle that fsyncs each
    # fence must not have its retire run by one that does not (it would silently lose its fsyncs).
    careful = FileLineageStore(tmp_path, combine_removals=True, fence_sync="file")
    assert careful._combiners is not None and careful._combiners is not first._combiners
    off = FileLineageStore(tmp_path, combine_removals=False)
    assert not off.combine_removals and off._combiners is None
    for store in (first, second, careful, off):
        store.close()


@pytest.mark.parametrize(("fence_sync", "combined"), [("directory", True), ("file", False)])
def test_auto_combines_only_where_fences_sync_with_the_directory(
    tmp_path: Path, fence_sync: str, combined: bool
) -> None:
    """The default (``"auto"``) combines on journaled file systems and tmpfs, not on ext4 without a
    journal (docs/group-commit.md §The decision); a study's own seam or ordering only when asked."""
    store = FileLineageStore(tmp_path, fence_sync=fence_sync)  # type: ignore[arg-type]
    assert store.combine_removals is combined
    assert not store.group_commit  # off by default: it did not pay
    store.close()
    inner = OsFileSystem(tmp_path)
    assert not FileLineageStore(tmp_path, fs=inner, fence_sync="directory").combine_removals
    inner.close_all()


def test_a_waiter_whose_wait_raises_leaves_the_queue_and_the_next_one_combines(tmp_path: Path) -> None:
    """A waiter whose ``await_sync`` raises (an interrupt, an injected fault) before any batch took its
    request must leave the queue: else the running batch, ending, wakes that abandoned request and the
    waiters behind it sleep for ever (found in review; this test hung without the fix)."""
    _live(tmp_path, ["a", "b", "c"])
    gate = Gate(waiters=2)
    inner = OsFileSystem(tmp_path)

    def raising(call: FsCall) -> None:
        gate.note(call)
        if call.method == "await_sync":
            raise OSError(errno.EINTR, "injected: the wait was interrupted")

    leader, quitter, patient = (_open(tmp_path, inner, hook) for hook in (gate.hold, raising, gate.note))
    results: dict[str, object] = {}

    def run(name: str, store: FileLineageStore, rollout_id: str) -> threading.Thread:
        def body() -> None:
            try:
                results[name] = store.retire([rollout_id])
            except OSError as error:
                results[name] = error

        thread = threading.Thread(target=body, name=name, daemon=True)
        thread.start()
        return thread

    leading = run("leader", leader, "a")
    assert gate.held.wait(30)
    quitting = run("quitter", quitter, "b")
    quitting.join(30)
    waiting = run("patient", patient, "c")
    for thread in (leading, waiting):
        thread.join(30)
    assert not waiting.is_alive(), "the waiter behind the abandoned request was never woken"
    assert isinstance(results["quitter"], OSError)
    assert results["leader"] == {"removed": ["a"], "absent": []}
    assert results["patient"] == {"removed": ["c"], "absent": []}
    for store in (leader, quitter, patient):
        store.close()
    inner.close_all()
