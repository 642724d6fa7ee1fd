"""Group commit in the real store (SPEC.md R-STORE-9; impl/store/syncs.py).

What they prove, with real files, real fsyncs and real threads, and counts (never times): removals that ask
for a sync while another caller's sync runs wait for the next one and share it, across the threads of one
handle and across handles on one directory; each still returns only after a sync that began after it asked
(the seam shows the order); a follower whose leader's sync fails raises ``OSError`` and a retry succeeds;
``group_commit=False`` gives every call its own syncs; handles share registers by the directory's identity;
a forked child starts with idle registers; a sync asked for from inside the same thread's running sync does
not wait for itself. The moments are placed with events through the seam's hooks, not with sleeps.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from capture_ledger.impl.store import SyncRegister, shared_syncs
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem, SyncWait
from capture_ledger.impl.study import FsCall, HookedFileSystem, StoreVariant

ROW = {"model_call_id": "m0", "staging_key": "r/m0"}


class Gate:
    """Holds the first ``sync_dir`` of a leader handle until ``followers`` other calls wait in
    ``await_sync`` (or have returned), so that they all ask while the leader's sync runs."""

    def __init__(self, followers: int) -> None:
        self.followers = followers
        self.waiting = 0
        self.changed = threading.Condition()
        self.held = False
        self.log: list[tuple[str, str]] = []  # (thread name, seam call) of every handle, in order

    def note(self, call: FsCall) -> None:
        with self.changed:
            self.log.append((threading.current_thread().name, call.method))
            if call.method == "await_sync":
                self.waiting += 1
                self.changed.notify_all()

    def done(self) -> None:
        with self.changed:
            self.waiting += 1
            self.changed.notify_all()

    def hold(self, call: FsCall) -> None:
        self.note(call)
        if call.method == "sync_dir" and not self.held:
            self.held = True
            with self.changed:
                # Bounded only so that a broken store fails the test instead of hanging it.
                self.changed.wait_for(lambda: self.waiting >= self.followers, timeout=30)


def _live(directory: Path, ids: list[str]) -> None:
    with FileLineageStore(directory, fence_sync="directory") as writer:
        for rollout_id in ids:
            writer.record(rollout_id, ROW)


def _threads(targets: list[Callable[[], None]], gate: Gate) -> list[threading.Thread]:
    def body(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            finally:
                gate.done()

        return run

    threads = [threading.Thread(target=body(t), name=f"follower-{i}") for i, t in enumerate(targets)]
    return threads


def test_retires_on_one_handle_share_the_sync_that_began_after_they_asked(tmp_path: Path) -> None:
    ids = [f"r{i}" for i in range(5)]
    _live(tmp_path, ids)
    gate = Gate(followers=4)
    inner = OsFileSystem(tmp_path)
    shared = FileLineageStore(
        tmp_path, fs=HookedFileSystem(inner, before=gate.note), fence_sync="directory", group_commit=True
    )
    leader = FileLineageStore(
        tmp_path, fs=HookedFileSystem(inner, before=gate.hold), fence_sync="directory", group_commit=True
    )
    results: dict[str, object] = {}

    def retire(rollout_id: str) -> Callable[[], None]:
        return lambda: results.__setitem__(rollout_id, shared.retire([rollout_id]))

    followers = _threads([retire(i) for i in ids[1:]], gate)
    # The leader's first sync starts, and is held until the four followers (threads of one handle) wait.
    leading = threading.Thread(target=lambda: results.__setitem__("r0", leader.retire(["r0"])), name="leader")
    leading.start()
    while not gate.held:
        threading.Event().wait(0.001)
    for thread in followers:
        thread.start()
    for thread in [leading, *followers]:
        thread.join()
    assert all(results[i] == {"removed": [i], "absent": []} for i in ids)
    stats = shared.statistics()
    # Without sharing, five retires issue ten syncs; here the four followers all waited for sync 2.
    assert stats.group_commit and stats.syncs_joined >= 3
    assert stats.syncs_issued + stats.syncs_joined == 10
    assert stats.syncs_issued <= 7
    # Every follower waited before its first unlink: none unlinked before sync 1 ended.
    first_unlink = next(n for n, (who, call) in enumerate(gate.log) if call == "unlink")
    waits = [n for n, (who, call) in enumerate(gate.log) if call == "await_sync"]
    assert len(waits) >= 4 and all(n < first_unlink for n in waits[:4])
    assert not list(tmp_path.glob("*.lineage.jsonl"))
    inner.close_all()


def test_handles_on_one_directory_share_one_register(tmp_path: Path) -> None:
    first = FileLineageStore(tmp_path, group_commit=True)
    second = FileLineageStore(
        tmp_path / ".." / tmp_path.name, group_commit=True
    )  # another path to the same directory
    (tmp_path / "other").mkdir()
    elsewhere = FileLineageStore(tmp_path / "other", group_commit=True)
    assert shared_syncs(tmp_path) is shared_syncs(tmp_path / ".." / tmp_path.name)
    assert shared_syncs(tmp_path) is not shared_syncs(tmp_path / "other")
    assert first._syncs is second._syncs is shared_syncs(tmp_path)
    assert elsewhere._syncs is not first._syncs
    alone = FileLineageStore(tmp_path, group_commit=False)
    assert alone._syncs is not first._syncs and not alone.group_commit
    for store in (first, second, elsewhere, alone):
        store.close()


def test_without_group_commit_every_call_issues_its_own_syncs(tmp_path: Path) -> None:
    ids = [f"r{i}" for i in range(8)]
    _live(tmp_path, ids)
    store = FileLineageStore(tmp_path, group_commit=False, combine_removals=False, fence_sync="directory")
    threads = [threading.Thread(target=store.retire, args=([i],)) for i in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = store.statistics()
    assert not stats.group_commit
    assert (stats.syncs_issued, stats.syncs_joined) == (16, 0)  # two per retire, each its own
    store.close()


class Syncing(HookedFileSystem):
    """A seam whose ``sync_dir`` waits for ``release`` (after setting ``entered``) and then raises EIO or
    syncs, and whose ``await_sync`` sets ``waiting`` first."""

    def __init__(self, inner: OsFileSystem, *, fail: bool) -> None:
        super().__init__(inner)
        self.fail = fail
        self.entered = threading.Event()
        self.release = threading.Event()
        self.waiting = threading.Event()

    def sync_dir(self) -> None:
        self.entered.set()
        self.release.wait()
        if self.fail:
            raise OSError(errno.EIO, "injected")
        self.inner.sync_dir()

    def await_sync(self, register: SyncWait, ticket: int) -> None:
        self.waiting.set()
        self.inner.await_sync(register, ticket)


def test_no_caller_returns_success_on_a_failed_shared_sync(tmp_path: Path) -> None:
    """A leads sync 1 and fails; B and C asked while it ran, so both need sync 2; whichever leads it
    fails too, and the other, which waited for that very sync, raises as well. D then succeeds."""
    register = SyncRegister("directory")
    inner = OsFileSystem(tmp_path)
    a, b, c = (Syncing(inner, fail=True) for _ in range(3))
    raised: dict[str, BaseException] = {}

    def call(name: str, fs: Syncing) -> threading.Thread:
        def run() -> None:
            try:
                register.sync(fs)
            except OSError as error:
                raised[name] = error

        thread = threading.Thread(target=run, name=name)
        thread.start()
        return thread

    threads = [call("a", a)]
    assert a.entered.wait(30)
    threads += [call("b", b), call("c", c)]
    assert b.waiting.wait(30) and c.waiting.wait(30)  # bounded only so that a broken store fails
    for fs in (a, b, c):
        fs.release.set()
    for thread in threads:
        thread.join()
    assert sorted(raised) == ["a", "b", "c"]
    assert all(isinstance(e, OSError) and e.errno == errno.EIO for e in raised.values())
    assert (register.started, register.finished, register.joined) == (2, 2, 0)
    assert not register._failures and not register._callers  # nothing left once nobody waits
    d = Syncing(inner, fail=False)
    d.release.set()
    assert register.sync(d) is True and register.finished == 3
    inner.close_all()


def test_a_retire_whose_sync_failed_is_retried_to_completion(tmp_path: Path) -> None:
    _live(tmp_path, ["r"])
    inner = OsFileSystem(tmp_path)
    failing = Syncing(inner, fail=True)
    failing.release.set()
    store = FileLineageStore(tmp_path, fs=failing, fence_sync="directory", group_commit=True)
    with pytest.raises(OSError):
        store.retire(["r"])
    failing.fail = False
    assert store.retire(["r"]) == {"removed": ["r"], "absent": []}  # still fenced Live: its rows were there
    assert not list(tmp_path.glob("*.lineage.jsonl"))
    inner.close_all()


def test_a_sync_asked_for_inside_the_same_threads_running_sync_issues_its_own(tmp_path: Path) -> None:
    inner = OsFileSystem(tmp_path)
    register = shared_syncs(tmp_path).directory
    nested: list[bool] = []

    def during(call: FsCall) -> None:
        if call.method == "sync_dir" and not nested:
            nested.append(register.sync(inner))  # would wait forever for itself if it followed

    assert register.sync(HookedFileSystem(inner, before=during)) is True
    assert nested == [True]
    inner.close_all()


def test_a_forked_child_starts_with_idle_registers(tmp_path: Path) -> None:
    """A child forked while a sync runs in the parent has no thread to finish it: its registers reset."""
    store = FileLineageStore(tmp_path, fence_sync="directory", group_commit=True)
    store.record("r", ROW)
    entered = threading.Event()
    release = threading.Event()

    def hold(call: FsCall) -> None:
        if call.method == "sync_dir":
            entered.set()
            release.wait()

    leader = FileLineageStore(
        tmp_path, fs=HookedFileSystem(OsFileSystem(tmp_path), before=hold), group_commit=True
    )
    thread = threading.Thread(target=leader.retire, args=(["other"],))
    thread.start()
    entered.wait()
    assert shared_syncs(tmp_path).directory.running
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        signal.alarm(20)  # a child that waits for the parent's sync would hang: end it instead
        code = 0 if store.retire(["r"]) == {"removed": ["r"], "absent": []} else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    release.set()
    thread.join()
    assert os.waitstatus_to_exitcode(status) == 0
    store.close()
    leader.close()


def test_the_broken_variant_returns_while_another_sync_runs(tmp_path: Path) -> None:
    """``StoreVariant(await_shared_sync=False)`` returns from a retire while the leader's sync is held: the
    production store would wait (the crash study shows the fence can then be lost, R-CRASH-2)."""
    _live(tmp_path, ["r0", "r1"])
    entered = threading.Event()
    release = threading.Event()

    def hold(call: FsCall) -> None:
        if call.method == "sync_dir" and not entered.is_set():
            entered.set()
            release.wait()

    inner = OsFileSystem(tmp_path)
    leader = FileLineageStore(
        tmp_path, fs=HookedFileSystem(inner, before=hold), fence_sync="directory", group_commit=True
    )
    hurried = FileLineageStore(
        tmp_path, ordering=StoreVariant(await_shared_sync=False).ordering(), group_commit=True
    )
    thread = threading.Thread(target=leader.retire, args=(["r0"],))
    thread.start()
    entered.wait()
    assert hurried.retire(["r1"]) == {"removed": ["r1"], "absent": []}  # returned: no sync was its own
    assert shared_syncs(tmp_path).directory.finished == 0  # ... and none had finished
    release.set()
    thread.join()
    hurried.close()
    inner.close_all()
