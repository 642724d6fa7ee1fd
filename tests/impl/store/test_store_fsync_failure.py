"""What a record does after a write or an fsync of its line failed (SPEC.md R-STORE-13, R-CRASH-1).

After an fsync reports ``EIO`` Linux may drop the dirty pages (or keep them, marked clean) and let the next
fsync succeed: the "fsyncgate" behaviour PostgreSQL met. A retried record that finds its row in the page
cache and only fsyncs again would then acknowledge a row that is not on disk. The store's rule: a failed
append is cut away again under the same lock (a ledger the record created is unlinked), so the retry writes
the row anew and only its own successful fsync acknowledges it; when that undo fails too, or a re-record's
confirming fsync fails, the handle poisons the ledger and refuses re-records of its rows until the rollout
is removed.

The faults come from the study's fault-injecting seam (``FaultyFileSystem``, real files underneath); each
test watches the seam calls of the retry and asserts, by counting them, that no retried record returns
success for a row whose fsync failed without a later successful fsync of a rewrite of it.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from capture_ledger.impl.store import fence_name, ledger_name
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem
from capture_ledger.impl.study import Fault, FaultyFileSystem, FsCall, InjectedFaultError

_R = TypeVar("_R")

_ROW = {"model_call_id": "c2", "staging_key": None}


def creation_name(ledger: str) -> str:
    """The temporary a new ledger is written under before its rename (docs/store.md)."""
    return f".{ledger}.new"


class _Once:
    """Fail the ``occurrence``-th call ``call`` (of any file) once, then every ``also`` call once."""

    def __init__(self, call: str, fault: Fault, *, occurrence: int = 1, also: tuple[str, ...] = ()) -> None:
        self.call, self.fault, self.occurrence, self.also = call, fault, occurrence, set(also)
        self.seen = 0
        self.fired = False

    def __call__(self, call: str, name: str) -> Fault | None:
        if self.fired and call in self.also:
            self.also.discard(call)
            return Fault(errno.EIO, "before")
        if call != self.call or self.fired:
            return None
        self.seen += 1
        if self.seen == self.occurrence:
            self.fired = True
            return self.fault
        return None


class _Watched(FaultyFileSystem):
    """The fault injector, also noting every call (method and file) made through it."""

    def __init__(self, inner: OsFileSystem) -> None:
        super().__init__(inner)
        self.calls: list[tuple[str, str]] = []

    def around(self, call: FsCall, proceed: Callable[[], _R]) -> _R:
        self.calls.append((call.method, call.name))
        return super().around(call, proceed)


def _rewrite_then_fsync(calls: list[tuple[str, str]], name: str) -> bool:
    """Whether the calls hold a ``write`` to ``name`` followed by an ``fsync`` of it."""
    writes = [i for i, (method, file) in enumerate(calls) if method == "write" and file == name]
    return bool(writes) and any(m == "fsync" and f == name for m, f in calls[writes[-1] :])


@pytest.fixture
def seam(tmp_path: Path) -> Iterator[_Watched]:
    inner = OsFileSystem(tmp_path, stripes=4)
    watched = _Watched(inner)
    yield watched
    inner.close_all()


@pytest.mark.parametrize("when", ["after", "before"])
def test_a_retry_after_a_failed_fsync_of_an_append_writes_the_row_again(
    tmp_path: Path, seam: _Watched, when: str
) -> None:
    with FileLineageStore(tmp_path, fs=seam) as store:
        store.record("x", {"model_call_id": "c1", "staging_key": None})
        seam.plan = _Once("fsync", Fault(errno.EIO, when))
        with pytest.raises(InjectedFaultError):
            store.record("x", _ROW)
        seam.plan = None
        with FileLineageStore(tmp_path, stripes=4) as fresh:  # nothing unacknowledged left to find
            assert fresh.manifest("x")["records"] == [{"model_call_id": "c1", "staging_key": None}]
        seam.calls.clear()
        store.record("x", _ROW)  # the retry
        assert _rewrite_then_fsync(seam.calls, ledger_name("x")), seam.calls
        assert store.manifest("x")["records"][-1] == _ROW


def test_a_partial_write_on_a_full_disk_leaves_nothing_and_the_retry_rewrites(
    tmp_path: Path, seam: _Watched
) -> None:
    with FileLineageStore(tmp_path, fs=seam) as store:
        store.record("x", {"model_call_id": "c1", "staging_key": None})
        before = (tmp_path / ledger_name("x")).read_bytes()
        seam.plan = _Once("write", Fault(errno.ENOSPC, "partial"))
        with pytest.raises(InjectedFaultError):
            store.record("x", _ROW)
        seam.plan = None
        assert (tmp_path / ledger_name("x")).read_bytes() == before  # no half line left
        seam.calls.clear()
        store.record("x", _ROW)
        assert _rewrite_then_fsync(seam.calls, ledger_name("x"))


# A creation makes its temporary, writes the incarnation line and the row in one write, fsyncs it, renames
# it into place and syncs the directory (R-STORE-3); each step may fail.
@pytest.mark.parametrize("call", ["create_file", "write", "fsync", "rename", "sync_dir"])
def test_a_failed_creation_is_unlinked_and_the_retry_creates_it_again(
    tmp_path: Path, seam: _Watched, call: str
) -> None:
    temporary = creation_name(ledger_name("x"))
    with FileLineageStore(tmp_path, fs=seam) as store:
        seam.plan = _Once(call, Fault(errno.EIO, "after"))
        with pytest.raises(InjectedFaultError):
            store.record("x", _ROW)
        assert seam.plan.fired
        seam.plan = None
        assert not (tmp_path / ledger_name("x")).exists()
        assert not (tmp_path / temporary).exists()  # R-STORE-13: the undo removed both names
        seam.calls.clear()
        store.record("x", _ROW)
        assert ("create_file", temporary) in seam.calls
        assert _rewrite_then_fsync(seam.calls, temporary)
        rename = seam.calls.index(("rename", temporary))
        assert ("sync_dir", "") in seam.calls[rename:]
        assert seam.calls[-1][0] in ("sync_dir", "unlock")
        assert store.manifest("x")["records"] == [_ROW]


def test_a_temporary_left_by_a_failed_undo_is_replaced_by_the_next_creation(
    tmp_path: Path, seam: _Watched
) -> None:
    """The fsync fails and so does the undo's unlink: the temporary stays (residue no reader sees); the next
    creation unlinks it and makes its own, exclusively."""
    temporary = creation_name(ledger_name("x"))
    with FileLineageStore(tmp_path, fs=seam) as store:
        seam.plan = _Once("fsync", Fault(errno.EIO, "after"), also=("unlink",))
        with pytest.raises(InjectedFaultError):
            store.record("x", _ROW)
        seam.plan = None
        assert (tmp_path / temporary).exists() and not (tmp_path / ledger_name("x")).exists()
        assert store.manifest("x")["records"] == []  # ignored by reads
        store.record("x", _ROW)
        assert not (tmp_path / temporary).exists()
        assert store.manifest("x")["records"] == [_ROW]


def test_when_the_undo_fails_too_the_ledger_is_poisoned_until_removed(tmp_path: Path, seam: _Watched) -> None:
    with FileLineageStore(tmp_path, fs=seam) as store:
        store.record("x", {"model_call_id": "c1", "staging_key": None})
        seam.plan = _Once("fsync", Fault(errno.EIO, "after"), also=("truncate",))
        with pytest.raises(InjectedFaultError):
            store.record("x", _ROW)
        seam.plan = None
        for _ in range(2):  # refused, not acknowledged on a second fsync that may lie
            with pytest.raises(OSError) as refused:
                store.record("x", _ROW)
            assert refused.value.errno == errno.EIO and "refused" in str(refused.value)
        store.record("x", {"model_call_id": "c3", "staging_key": None})  # a new row: its own fsync
        store.delete(["x"])
        store.record("x", _ROW)  # a new ledger: nothing suspect in it
        assert store.manifest("x")["records"] == [_ROW]


def test_a_re_record_whose_confirming_fsync_failed_is_refused_afterwards(
    tmp_path: Path, seam: _Watched
) -> None:
    """Another handle wrote the row; this one must fsync it before acknowledging the re-record. When that
    fsync fails, a second one proves nothing: refused."""
    with FileLineageStore(tmp_path, stripes=4) as writer:
        writer.record("x", _ROW)
    with FileLineageStore(tmp_path, fs=seam) as store:
        seam.plan = _Once("fsync", Fault(errno.EIO, "after"))
        with pytest.raises(InjectedFaultError):
            store.record("x", _ROW)
        seam.plan = None
        with pytest.raises(OSError, match="refused"):
            store.record("x", _ROW)
        store.retire(["x"])
        store.delete(["x"])
        store.record("x", _ROW)


def test_a_new_fence_whose_fsync_failed_is_created_again_by_the_retry(tmp_path: Path, seam: _Watched) -> None:
    """``fence_sync="file"``: the fence this retire created failed its fsync; a second fsync of the same
    inode proves nothing, so the fence is unlinked again and the retry creates and fsyncs a new one."""
    with FileLineageStore(tmp_path, fs=seam, fence_sync="file") as store:
        store.record("x", {"model_call_id": "c1", "staging_key": None})
        seam.plan = _Once("fsync", Fault(errno.EIO, "after"))
        with pytest.raises(InjectedFaultError):
            store.retire(["x"])
        seam.plan = None
        assert not (tmp_path / fence_name("x")).exists()
        assert store.manifest("x")["records"] == [{"model_call_id": "c1", "staging_key": None}]
        seam.calls.clear()
        assert store.retire(["x"]) == {"removed": ["x"], "absent": []}
        assert ("create_file", fence_name("x")) in seam.calls
        created = seam.calls.index(("create_file", fence_name("x")))
        assert ("fsync", fence_name("x")) in seam.calls[created:]
