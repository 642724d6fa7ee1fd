"""How the store creates a ledger: whole, under a temporary name, renamed into place (SPEC.md R-STORE-3,
R-STORE-13, R-STORE-14, R-STORE-8; docs/store.md §Creating a ledger).

A new ledger is written under ``.<id>.lineage.jsonl.new`` (incarnation line and first row in one write),
fsynced, renamed to ``<id>.lineage.jsonl`` and the directory fsynced, all under the rollout's lock: two
syncs per new ledger. Without a journal a directory sync persists an entry but not an unsynced inode, and
a name re-created over a deleted ledger came back as that ledger (the kernel study, docs/crash.md); after
the rename the name only ever reaches a durable file. The tests watch the seam calls on real files, and
damage directories the way a crash would (a temporary left behind, a fence holding a removed ledger's
bytes) to show ``check`` and the readers treat them as crash residue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from capture_ledger.impl.store import check, incarnation_line, incarnation_seed, read_snapshot, seal
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem
from capture_ledger.impl.study import FsCall, HookedFileSystem

_R = TypeVar("_R")
_ROW = {"model_call_id": "m", "staging_key": None}


def _temporary(rollout_id: str) -> str:
    """The temporary name of ``rollout_id``'s ledger while it is created (pinned: docs/store.md)."""
    return f".{rollout_id}.lineage.jsonl.new"


class _Watched(HookedFileSystem):
    """Notes every seam call (method and file name)."""

    def __init__(self, inner: OsFileSystem) -> None:
        super().__init__(inner)
        self.calls: list[tuple[str, str]] = []

    def around(self, call: FsCall, proceed: Callable[[], _R]) -> _R:
        self.calls.append((call.method, call.name))
        return proceed()


@pytest.fixture
def seam(tmp_path: Path) -> Iterator[_Watched]:
    inner = OsFileSystem(tmp_path, stripes=4)
    yield _Watched(inner)
    inner.close_all()


def test_a_new_ledger_is_written_whole_under_its_temporary_then_renamed(
    tmp_path: Path, seam: _Watched
) -> None:
    """R-STORE-3: create the temporary exclusively, one write, its fsync, the rename, the directory sync;
    two syncs in all (three before the rename, when the incarnation line had its own fsync)."""
    temporary = _temporary("r")
    with FileLineageStore(tmp_path, fs=seam) as store:
        seam.calls.clear()
        store.record("r", _ROW)
        effects = [c for c in seam.calls if c[0] in ("create_file", "write", "fsync", "rename", "sync_dir")]
        assert effects == [
            ("create_file", temporary),
            ("write", temporary),
            ("fsync", temporary),
            ("rename", temporary),
            ("sync_dir", ""),
        ]
        assert sum(1 for m, _ in seam.calls if m in ("fsync", "sync_dir", "syncfs")) == 2
        assert seam.calls[-1] == ("unlock", "")  # all of it under the rollout's lock
        assert store.manifest("r")["records"] == [_ROW]
        seam.calls.clear()
        store.record("r", {"model_call_id": "n", "staging_key": None})  # an append: no rename
        assert "rename" not in [m for m, _ in seam.calls]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".capture")) == [
        "r.lineage.jsonl"
    ]
    data = (tmp_path / "r.lineage.jsonl").read_bytes()
    first = data[: data.index(b"\n") + 1]
    assert data.startswith(first) and data[len(first) :].startswith(
        seal(b'{"record":{"model_call_id":"m","staging_key":null}}', incarnation_seed(first))
    )


def test_a_temporary_left_by_a_crash_is_ignored_reported_and_fixed(tmp_path: Path) -> None:
    """A crash before the rename leaves the temporary (rows never acknowledged, perhaps a removed ledger's
    bytes): readers ignore it, ``check`` calls it ``interrupted-create`` and ``fix=True`` unlinks it."""
    with FileLineageStore(tmp_path, stripes=4) as store:
        store.record("a", _ROW)
        ledger = (tmp_path / "a.lineage.jsonl").read_bytes()
    (tmp_path / _temporary("a")).write_bytes(ledger)  # a deleted ledger's bytes, say
    (tmp_path / _temporary("b")).write_bytes(b"")
    with FileLineageStore(tmp_path, stripes=4) as store:
        assert store.manifest("b")["records"] == [] and store.admit("b", "c") is not None
        store_fs = OsFileSystem(tmp_path, stripes=4)
        assert set(read_snapshot(store_fs)) == {"a"}
        store_fs.close_all()
    found = [(f.kind, f.name, f.fixed) for f in check(tmp_path)]
    assert found == [
        ("interrupted-create", _temporary("a"), False),
        ("interrupted-create", _temporary("b"), False),
    ]
    fixed = [(f.kind, f.fixed) for f in check(tmp_path, fix=True)]
    assert fixed == [("interrupted-create", True), ("interrupted-create", True)]
    assert not (tmp_path / _temporary("a")).exists() and check(tmp_path) == []


def test_a_leftover_temporary_is_replaced_by_the_next_creation(tmp_path: Path, seam: _Watched) -> None:
    """The next creator of the rollout unlinks what a crashed one left and creates its own exclusively: no
    byte of the leftover reaches the ledger."""
    leftover = incarnation_line() + b'{"record":{"model_call_id":"old"}} 00000000\n'
    (tmp_path / _temporary("r")).write_bytes(leftover)
    with FileLineageStore(tmp_path, fs=seam) as store:
        store.record("r", _ROW)
        assert store.manifest("r")["records"] == [_ROW]
    assert ("unlink", _temporary("r")) in seam.calls
    assert b"old" not in (tmp_path / "r.lineage.jsonl").read_bytes()
    assert not (tmp_path / _temporary("r")).exists()


def test_a_name_that_looks_like_a_temporary_of_no_valid_id_is_a_stray_file(tmp_path: Path) -> None:
    """Only ``.<valid id>.lineage.jsonl.new`` is a creation's temporary; anything else stays a stray file."""
    FileLineageStore(tmp_path, stripes=4).close()
    (tmp_path / ".-bad.lineage.jsonl.new").write_bytes(b"")
    (tmp_path / ".a.lineage.retired.new").write_bytes(b"")
    assert [(f.kind, f.name) for f in check(tmp_path, fix=True)] == [
        ("stray-file", ".-bad.lineage.jsonl.new"),
        ("stray-file", ".a.lineage.retired.new"),
    ]
    assert (tmp_path / ".-bad.lineage.jsonl.new").exists()


def test_a_fence_holding_a_removed_ledger_is_crash_residue_any_other_content_is_not(tmp_path: Path) -> None:
    """Without a journal an unsynced fence may come back as a removed ledger, whole
    (spec/crash/durability.py): ``stale-fence``, still a fence, emptied by ``fix``. A fence holding bytes
    that are no ledger's stays ``nonempty-fence`` and is never touched."""
    with FileLineageStore(tmp_path, stripes=4) as store:
        store.record("a", _ROW)
        ledger = (tmp_path / "a.lineage.jsonl").read_bytes()
        store.retire(["a", "b", "c"])
    (tmp_path / "a.lineage.retired").write_bytes(ledger)
    (tmp_path / "b.lineage.retired").write_bytes(b'{"record":{"model_call_id":"x"}}\n')  # a legacy ledger
    (tmp_path / "c.lineage.retired").write_bytes(b"hello\n")
    with FileLineageStore(tmp_path, stripes=4) as store:
        assert store.admit("a", "x") is None and store.admit("b", "x") is None  # still fences
    assert [(f.kind, f.name, f.fixed) for f in check(tmp_path)] == [
        ("stale-fence", "a.lineage.retired", False),
        ("stale-fence", "b.lineage.retired", False),
        ("nonempty-fence", "c.lineage.retired", False),
    ]
    assert [(f.kind, f.fixed) for f in check(tmp_path, fix=True)] == [
        ("stale-fence", True),
        ("stale-fence", True),
        ("nonempty-fence", False),
    ]
    assert (tmp_path / "a.lineage.retired").read_bytes() == b""
    assert (tmp_path / "c.lineage.retired").read_bytes() == b"hello\n"
