"""A large retire syncs its fences with one ``syncfs`` where that is cheaper (SPEC.md R-STORE-4,
R-STORE-10; docs/store.md §fence_sync="auto").

Without a journal ``fence_sync="auto"`` resolves to ``"file"`` (an fsync per new fence) and, from
``SYNCFS_FROM`` IDs a retire, one ``syncfs`` instead of those fsyncs and the phase-1 directory fsync
(measured cheaper from 16 IDs, ``benchmarks/bench_fence_sync.py``). Real files, real fsync and syncfs; the
calls are counted through the study's hooked seam. The crash study's ``fence_sync=file+syncfs``
configuration shows both paths clean under every model (``tests/impl/study/test_crash_study.py``).
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from capture_ledger.impl.store import SYNCFS_FROM, FileSystem, Ordering, OsFileSystem, detect
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.study import Fault, FaultyFileSystem, FsCall, HookedFileSystem


class Counting(HookedFileSystem):
    """Counts each seam method called, and which files were fsynced."""

    def __init__(self, inner: FileSystem) -> None:
        super().__init__(inner, after=self._count)
        self.counts: dict[str, int] = {}
        self.fsynced: list[str] = []

    def _count(self, call: FsCall, outcome: object) -> None:
        self.counts[call.method] = self.counts.get(call.method, 0) + 1
        if call.method == "fsync":
            self.fsynced.append(call.name)


def _retire(tmp_path: Path, size: int, ordering: Ordering | None) -> Counting:
    """Retire ``size`` Live IDs in one call through a counting seam (``ordering=None``: ``"auto"``)."""
    ids = [f"r{i:03d}" for i in range(size)]
    with FileLineageStore(tmp_path, fence_sync="directory") as writer:
        for rollout_id in ids:
            writer.record(rollout_id, {"model_call_id": "m"})
    inner = OsFileSystem(tmp_path)
    seam = Counting(inner)
    store = FileLineageStore(tmp_path, fs=seam, ordering=ordering, combine_removals=False)
    try:
        assert store.retire(ids)["removed"] == ids
    finally:
        store.close()
        inner.close_all()
    assert sorted(p.name for p in tmp_path.glob("*.retired")) == [f"{i}.lineage.retired" for i in ids]
    return seam


@pytest.mark.parametrize("size", [1, SYNCFS_FROM - 1])
def test_a_small_retire_fsyncs_each_new_fence(tmp_path: Path, size: int) -> None:
    seam = _retire(tmp_path, size, Ordering(fence_sync="file", syncfs_from=SYNCFS_FROM))
    assert len([n for n in seam.fsynced if n.endswith(".retired")]) == size
    assert seam.counts.get("syncfs", 0) == 0
    assert seam.counts["sync_dir"] == 2  # after the fences, after the unlinks (R-STORE-4)


@pytest.mark.parametrize("size", [SYNCFS_FROM, 64])
def test_a_large_retire_syncs_its_fences_with_one_syncfs(tmp_path: Path, size: int) -> None:
    seam = _retire(tmp_path, size, Ordering(fence_sync="file", syncfs_from=SYNCFS_FROM))
    assert [n for n in seam.fsynced if n.endswith(".retired")] == []
    assert seam.counts["syncfs"] == 1  # instead of the fences' fsyncs and the phase-1 directory fsync
    assert seam.counts["sync_dir"] == 1  # after the unlinks


def test_without_the_threshold_file_fsyncs_every_fence(tmp_path: Path) -> None:
    """The explicit ``fence_sync="file"`` keeps an fsync per fence at any size (what the threshold saves)."""
    seam = _retire(tmp_path, 64, Ordering(fence_sync="file"))
    assert len([n for n in seam.fsynced if n.endswith(".retired")]) == 64
    assert seam.counts.get("syncfs", 0) == 0


def test_auto_uses_the_threshold_only_without_a_journal(tmp_path: Path) -> None:
    """Wherever the test runs: on ext4 without a journal a large retire takes one syncfs, elsewhere not."""
    detection = detect(tmp_path)
    nojournal = detection.model == "ext4-nojournal"
    assert detection.syncfs_from == (SYNCFS_FROM if nojournal else None), detection
    seam = _retire(tmp_path, SYNCFS_FROM, None)
    assert seam.counts.get("syncfs", 0) == (1 if nojournal else 0), (detection, seam.counts)


@pytest.mark.parametrize(("fence_sync", "syncfs_from"), [("directory", 16), ("syncfs", 16), ("file", 0)])
def test_the_threshold_goes_with_file_only(fence_sync: str, syncfs_from: int) -> None:
    with pytest.raises(ValueError, match="syncfs_from"):
        Ordering(fence_sync=fence_sync, syncfs_from=syncfs_from)  # type: ignore[arg-type]


def test_after_a_failed_syncfs_the_retry_fsyncs_every_fence(tmp_path: Path) -> None:
    """R-STORE-13 for the batch path: the retire raises, and the retry does not trust a second syncfs
    (Linux reports a writeback error once per descriptor): it fsyncs each fence, found or new, and then
    the directory, and from then on the handle fsyncs fences one by one."""
    ids = [f"r{i:03d}" for i in range(SYNCFS_FROM)]
    with FileLineageStore(tmp_path, fence_sync="directory") as writer:
        for rollout_id in ids:
            writer.record(rollout_id, {"model_call_id": "m"})
    inner = OsFileSystem(tmp_path)
    failed: list[str] = []

    def plan(method: str, name: str) -> Fault | None:
        if method == "syncfs" and not failed:
            failed.append(method)
            return Fault(errno.EIO, "before")
        return None

    faulty = FaultyFileSystem(inner, plan=plan)
    seam = Counting(faulty)
    ordering = Ordering(fence_sync="file", syncfs_from=SYNCFS_FROM)
    store = FileLineageStore(tmp_path, fs=seam, ordering=ordering, combine_removals=False)
    try:
        with pytest.raises(OSError, match="syncfs"):
            store.retire(ids)
        assert ordering.syncfs_failed
        seam.counts.clear()
        seam.fsynced.clear()
        assert store.retire(ids)["removed"] == ids
        assert sorted(n for n in seam.fsynced if n.endswith(".retired")) == [
            f"{i}.lineage.retired" for i in ids
        ]
        assert seam.counts.get("syncfs", 0) == 0 and seam.counts["sync_dir"] == 2
    finally:
        store.close()
        inner.close_all()
