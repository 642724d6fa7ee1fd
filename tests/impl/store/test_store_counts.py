"""Counted behaviour of ``FileLineageStore``, observed through a counting wrapper of the seam
(SPEC.md R-WRITE-6, R-STORE-3..6, R-BATCH-4).

Counts, never times. The wrapper records every ``FileSystem`` call with its file name, and the store runs
on real files with real fsyncs underneath. Variants with one step switched off show that each assertion
catches the step's absence. Two races are placed deterministically through the seam (another handle acts
between retire's phases, or right after its first unlink): R-CONC-3 needs the fence re-check, R-CONC-2 the
fence-before-unlink order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from capture_ledger.impl.store import FenceSync, Ordering, check, read_snapshot
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem, lock_file_name
from capture_ledger.impl.study import FsCall, HookedFileSystem, StoreVariant
from capture_ledger.spec.core.errors import InvalidRolloutIdError


class CountingFileSystem(HookedFileSystem):
    """``FileSystem`` that logs ``(method, file name or None, result)`` of every call after it returns."""

    def __init__(self, inner: OsFileSystem) -> None:
        super().__init__(inner, after=self._log)
        self.os = inner
        self.calls: list[tuple[str, str | None, object]] = []
        self.args: list[tuple[object, ...]] = []

    def _log(self, call: FsCall, outcome: object) -> None:
        self.calls.append((call.method, call.name or None, outcome))
        self.args.append(call.args)

    def clear(self) -> None:
        self.calls.clear()
        self.args.clear()

    def methods(self) -> list[str]:
        return [method for method, _, _ in self.calls]


STRIPES = 4


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[CountingFileSystem]:
    inner = OsFileSystem(tmp_path, stripes=STRIPES)
    yield CountingFileSystem(inner)
    inner.close_all()


def _store(fs: CountingFileSystem, variant: StoreVariant | None = None) -> FileLineageStore:
    return FileLineageStore(fs.os.directory, fs=fs, ordering=(variant or StoreVariant()).ordering())


def _row(call: str) -> dict[str, object]:
    return {"model_call_id": call, "staging_key": None, "tokens": 3}


def _fence_lookups(fs: CountingFileSystem) -> int:
    return sum(1 for method, name, _ in fs.calls if name and name.endswith(".retired") and method == "stat")


def test_a_write_to_a_live_ledger_looks_up_no_fence_and_costs_the_floor(fs: CountingFileSystem) -> None:
    store = _store(fs)
    store.record("r", _row("m0"))
    fs.clear()
    store.record("r", _row("m1"))
    assert _fence_lookups(fs) == 0  # R-WRITE-6
    # open + write + fsync + close (the floor), plus the size to validate the cache, under the lock.
    assert fs.methods() == [
        "lock",
        "generation",
        "open_append",
        "size",
        "write",
        "fsync",
        "close",
        "unlock",
    ]


def test_an_identical_re_record_syncs_only_rows_this_handle_did_not_make_durable(
    fs: CountingFileSystem,
) -> None:
    """R-CRASH-1 with R-WRITE-3: a re-recorded row is made durable before the call returns, unless this
    handle's own fsync already covered every row it knows (then it costs no sync)."""
    store, other = _store(fs), _store(fs)
    store.record("r", _row("m0"))
    fs.clear()
    store.record("r", _row("m0"))  # this handle appended and fsynced it: nothing to do
    assert "fsync" not in fs.methods() and "sync_dir" not in fs.methods()
    other.record("r", _row("m1"))  # a row this handle has not made durable
    fs.clear()
    store.record("r", _row("m0"))
    assert fs.methods().count("fsync") == 1 and fs.methods().count("sync_dir") == 1
    fs.clear()
    store.record("r", _row("m1"))  # confirmed durable just now
    assert "fsync" not in fs.methods()


def test_a_write_to_another_handles_live_ledger_looks_up_no_fence(fs: CountingFileSystem) -> None:
    _store(fs).record("r", _row("m0"))
    other = _store(fs)
    fs.clear()
    other.record("r", _row("m1"))
    assert _fence_lookups(fs) == 0
    # the rows this handle had not seen, once, through the descriptor it appends with: no second open
    assert fs.methods().count("read_open") == 1 and "read" not in fs.methods()
    assert fs.methods().count("open_append") == 1


def test_a_write_to_a_rollout_without_rows_looks_for_the_fence_once(fs: CountingFileSystem) -> None:
    store = _store(fs)
    store.record("r", _row("m0"))
    assert _fence_lookups(fs) == 1
    creates = [(m, n) for m, n, _ in fs.calls if m in ("open_append", "fsync", "rename", "sync_dir")]
    # R-STORE-3: the new ledger is written under its temporary name (incarnation line and row, R-STORE-14),
    # fsynced, renamed into place, then the directory is synced.
    assert creates == [
        ("open_append", "r.lineage.jsonl"),
        ("fsync", ".r.lineage.jsonl.new"),
        ("rename", ".r.lineage.jsonl.new"),
        ("sync_dir", None),
    ]
    writes = [m for m in fs.methods() if m in ("write", "fsync")]
    assert writes == ["write", "fsync"]


@pytest.mark.parametrize("variant", [StoreVariant(), StoreVariant(sync_when_nothing_written=False)])
def test_retiring_a_retired_batch_writes_no_fence_and_syncs_once(
    fs: CountingFileSystem, variant: StoreVariant
) -> None:
    store = _store(fs, variant)
    store.record("a", _row("m0"))
    store.retire(["a", "b"])
    fs.clear()
    assert store.retire(["a", "b"]) == {"removed": [], "absent": ["a", "b"]}
    assert [r for m, _, r in fs.calls if m == "create_file" and r is not None] == []
    assert "unlink" not in fs.methods()
    syncs = fs.methods().count("sync_dir")
    if variant == StoreVariant():
        assert syncs == 1  # R-STORE-4: even when no fence was written
    else:
        assert syncs == 0  # the broken variant is caught by the assertion above


@pytest.mark.parametrize(
    "variant",
    [StoreVariant(), StoreVariant(sync_after_fences=False), StoreVariant(fence_before_unlink=False)],
)
def test_a_retire_that_removes_syncs_before_the_first_unlink_and_after_the_last(
    fs: CountingFileSystem, variant: StoreVariant
) -> None:
    store = _store(fs, variant)
    ids = [f"r{i}" for i in range(6)]
    for rollout_id in ids:
        store.record(rollout_id, _row("m0"))
    fs.clear()
    assert store.retire([*ids, "gone"]) == {"removed": ids, "absent": ["gone"]}
    order = [m for m in fs.methods() if m in ("create_file", "sync_dir", "unlink")]
    expected = ["create_file"] * 7 + ["sync_dir"] + ["unlink"] * 6 + ["sync_dir"]
    assert (order == expected) is (variant == StoreVariant())
    if variant == StoreVariant():
        # Phase 2 re-checks each fence under the lock before its unlink (R-CONC-3), once per ID; the IDs
        # go stripe by stripe (each stripe's lock taken once per phase), so in any order.
        checked = [n or "" for m, n, _ in fs.calls if m == "stat"]
        assert sorted(checked) == sorted(f"{rollout_id}.lineage.retired" for rollout_id in ids)


@pytest.mark.parametrize(
    ("fence_sync", "expected"),
    [
        ("directory", ["create_file", "create_file", "sync_dir", "unlink", "sync_dir"]),
        ("file", ["create_file", "fsync", "create_file", "fsync", "sync_dir", "unlink", "sync_dir"]),
        ("syncfs", ["create_file", "create_file", "syncfs", "unlink", "sync_dir"]),
    ],
)
def test_fence_sync_options_order_the_fence_durability_steps(
    fs: CountingFileSystem, fence_sync: FenceSync, expected: list[str]
) -> None:
    store = FileLineageStore(fs.os.directory, fs=fs, fence_sync=fence_sync)
    store.record("a", _row("m0"))
    fs.clear()
    store.retire(["a", "b"])
    steps = ("create_file", "fsync", "sync_dir", "syncfs", "unlink")
    assert [m for m in fs.methods() if m in steps] == expected


def test_an_unknown_fence_sync_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fence_sync"):
        FileLineageStore(tmp_path, fence_sync="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fence_sync"):  # one place says how fences are synced
        FileLineageStore(tmp_path, fence_sync="file", ordering=Ordering(fence_sync="file"))


def test_delete_syncs_once_per_non_empty_batch_and_leaves_only_lock_files(fs: CountingFileSystem) -> None:
    store = _store(fs)
    for rollout_id in ("a", "b", "c"):
        store.record(rollout_id, _row("m0"))
    store.retire(["b"])
    fs.clear()
    assert store.delete(["a", "b", "c", "d"]) == {"removed": ["a", "c"], "absent": ["b", "d"]}
    assert fs.methods().count("sync_dir") == 1
    fs.clear()
    assert store.delete(["a", "b"]) == {"removed": [], "absent": ["a", "b"]}
    assert fs.methods().count("sync_dir") == 1  # R-STORE-5: even when nothing was there
    assert fs.os.listdir() == [lock_file_name(s) for s in range(STRIPES)]
    assert read_snapshot(fs) == {}


def test_an_empty_batch_touches_nothing(fs: CountingFileSystem) -> None:
    store = _store(fs)
    assert store.retire([]) == {"removed": [], "absent": []}
    assert store.delete(()) == {"removed": [], "absent": []}
    assert fs.calls == []  # R-BATCH-4: zero seam calls


def test_a_torn_last_line_is_not_a_row_and_the_next_append_cuts_it(fs: CountingFileSystem) -> None:
    store = _store(fs)
    store.record("r", _row("m0"))
    path = fs.os.directory / "r.lineage.jsonl"
    whole = path.read_bytes()
    with path.open("ab") as file:  # a crash in the middle of an append that never returned
        file.write(b'{"record":{"model_call_id":"m1"')
    fresh = _store(fs)
    assert [r["model_call_id"] for r in fresh.manifest("r")["records"]] == ["m0"]  # R-STORE-6
    assert [f.kind for f in check(fs.os.directory, fs=fs)] == ["torn-tail"]
    fs.clear()
    fresh.record("r", _row("m1"))
    assert [a for (m, _, _), a in zip(fs.calls, fs.args, strict=True) if m == "truncate"] == [
        ("r.lineage.jsonl", len(whole))
    ]
    assert path.read_bytes().count(b"\n") == 3  # the incarnation line and two rows
    assert [r["model_call_id"] for r in _store(fs).manifest("r")["records"]] == ["m0", "m1"]
    assert check(fs.os.directory, fs=fs) == []


def test_the_first_row_in_a_leftover_empty_ledger_also_syncs_the_directory(fs: CountingFileSystem) -> None:
    (fs.os.directory / "r.lineage.jsonl").touch()  # a creator died before writing and syncing
    store = _store(fs)
    store.record("r", _row("m0"))
    assert _fence_lookups(fs) == 1  # no rows yet, so the fence is looked for (R-WRITE-6)
    # A new incarnation line, made durable before the row (R-STORE-14), then the row and the directory.
    steps = ["write", "fsync", "write", "fsync", "sync_dir"]
    assert [m for m in fs.methods() if m in ("write", "fsync", "sync_dir")] == steps
    assert (fs.os.directory / "r.lineage.jsonl").read_bytes().startswith(b'{"incarnation":"')
    fs.clear()
    store.record("r", _row("m1"))
    assert "sync_dir" not in fs.methods()


def test_statistics_count_fences_discards_and_operations(fs: CountingFileSystem) -> None:
    store = _store(fs)
    store.record("r", _row("m0"))
    store.retire(["r", "s"])
    store.record("r", {"model_call_id": "late", "staging_key": "r/late"})
    store.admit("r", "m9")
    stats = store.statistics()
    assert (stats.fences_written, stats.late_writes_discarded) == (2, 1)
    assert (stats.operations.record, stats.operations.retire, stats.operations.admit) == (2, 1, 1)
    assert (stats.cached_rollouts, stats.cached_rows) == (0, 0)  # removal dropped the entry


def test_statistics_count_calls_that_raised(fs: CountingFileSystem) -> None:
    store = _store(fs)
    with pytest.raises(InvalidRolloutIdError):
        store.retire(["ok", "not an id"])
    with pytest.raises(TypeError):
        store.delete("ok")
    with pytest.raises(InvalidRolloutIdError):
        store.record("not an id", _row("m0"))
    operations = store.statistics().operations
    assert (operations.retire, operations.delete, operations.record) == (1, 1, 1)
    assert fs.calls == []  # nothing reached the directory (R-BATCH-2)


# ------------------------------------------------------------------------------------ the cache (R-STORE-7)
def _line_bytes(fs: CountingFileSystem) -> list[int]:
    return [len(r[1]) for m, _, r in fs.calls if m == "read" and isinstance(r, tuple)]


def test_reads_parse_only_the_new_tail(fs: CountingFileSystem) -> None:
    reader, writer = _store(fs), _store(fs)
    for n in range(5):
        writer.record("r", _row(f"m{n}"))
    assert len(reader.manifest("r")["records"]) == 5
    fs.clear()
    assert len(reader.manifest("r")["records"]) == 5
    assert "read" not in fs.methods()  # nothing new: one stat, no read
    writer.record("r", _row("m5"))
    fs.clear()
    assert len(reader.manifest("r")["records"]) == 6
    line = len(b'{"record":{"model_call_id":"m5","staging_key":null,"tokens":3}} 01234567\n')  # sealed
    assert _line_bytes(fs) == [line]  # only the appended line was read


def test_the_cache_is_bounded_by_rollouts_and_by_rows(tmp_path: Path) -> None:
    by_rollouts = FileLineageStore(tmp_path, stripes=STRIPES, cache_rollouts=3, cache_rows=100)
    for n in range(5):
        by_rollouts.record(f"r{n}", _row("m0"))
    assert (by_rollouts.statistics().cached_rollouts, by_rollouts.statistics().cached_rows) == (3, 3)
    by_rows = FileLineageStore(tmp_path, stripes=STRIPES, cache_rollouts=100, cache_rows=4)
    for n in range(3):
        for call in range(2):
            by_rows.record(f"s{n}", _row(f"m{call}"))
    assert (by_rows.statistics().cached_rollouts, by_rows.statistics().cached_rows) == (2, 4)
    assert [len(by_rows.manifest(f"s{n}")["records"]) for n in range(3)] == [2, 2, 2]
    off = FileLineageStore(tmp_path, stripes=STRIPES, cache_rollouts=0)
    off.record("t", _row("m0"))
    assert off.statistics().cached_rollouts == 0
    assert off.manifest("t")["records"] == [_row("m0")]
    for store in (by_rollouts, by_rows, off):
        store.close()


@pytest.mark.parametrize("coherent", [True, False])
def test_no_handle_serves_rows_another_handle_removed_even_when_the_inode_is_reused(
    fs: CountingFileSystem, coherent: bool
) -> None:
    first = _store(fs, StoreVariant(cache_coherence=coherent))
    other = _store(fs)
    first.record("r", _row("m1"))
    inode = fs.os.stat("r.lineage.jsonl")
    other.delete(["r"])
    other.record("r", _row("m2"))  # same length; ext4 hands out the freed inode again at once
    reused = fs.os.stat("r.lineage.jsonl")
    assert inode is not None and reused is not None and reused.size == inode.size
    served = [r["model_call_id"] for r in first.manifest("r")["records"]]
    # The removal counter catches it whether or not the inode number was reused (R-STORE-7).
    assert (served == ["m2"]) is coherent


def test_removal_drops_the_entry_in_the_removing_handle(fs: CountingFileSystem) -> None:
    store = _store(fs)
    store.record("a", _row("m0"))
    store.record("b", _row("m0"))
    assert store.statistics().cached_rollouts == 2
    store.retire(["a"])
    assert store.statistics().cached_rollouts == 1
    store.delete(["b"])
    assert store.statistics().cached_rollouts == 0


# ------------------------------------------------------- races placed deterministically through the seam
class RacingFileSystem(CountingFileSystem):
    """Runs ``hook`` once, after the first ``unlock`` that follows a call of ``after`` (no lock of ours is
    held then), or right after the first ``sync_dir`` when ``after`` is ``"sync_dir"``."""

    def __init__(self, inner: OsFileSystem, after: str, hook: Callable[[], None]) -> None:
        super().__init__(inner)
        self.after = self._race
        self.trigger = after
        self.hook: Callable[[], None] | None = hook

    def _race(self, call: FsCall, outcome: object) -> None:
        self._log(call, outcome)
        due = call.method == "sync_dir" if self.trigger == "sync_dir" else call.method == "unlock"
        if self.hook is not None and due and self.trigger in self.methods():
            hook, self.hook = self.hook, None
            hook()


@pytest.mark.parametrize("recheck", [True, False])
def test_a_write_after_a_delete_is_never_removed_by_an_older_retire(tmp_path: Path, recheck: bool) -> None:
    other = FileLineageStore(tmp_path, stripes=STRIPES)
    other.record("r", _row("old"))

    def delete_and_reuse() -> None:  # between retire's phase 1 and phase 2
        other.delete(["r"])
        other.record("r", _row("new"))

    inner = OsFileSystem(tmp_path, stripes=STRIPES)
    racing = RacingFileSystem(inner, "sync_dir", delete_and_reuse)
    store = FileLineageStore(tmp_path, fs=racing, ordering=StoreVariant(recheck_fence=recheck).ordering())
    assert store.retire(["r"]) == {"removed": ["r"], "absent": []}
    survivors = [r["model_call_id"] for r in other.manifest("r")["records"]]
    # R-CONC-3: the re-check under the lock sees the fence gone and keeps the new attempt's ledger; the
    # broken variant removes a write that was acknowledged after the delete.
    assert survivors == (["new"] if recheck else [])
    inner.close_all()
    other.close()


@pytest.mark.parametrize("fence_first", [True, False])
def test_no_ledger_is_re_created_after_its_retire_returned(tmp_path: Path, fence_first: bool) -> None:
    other = FileLineageStore(tmp_path, stripes=STRIPES)
    other.record("r", _row("m0"))
    late = {"model_call_id": "late", "staging_key": "r/late"}
    inner = OsFileSystem(tmp_path, stripes=STRIPES)
    # A late write lands right after retire's first unlink and its unlock.
    racing = RacingFileSystem(inner, "unlink", lambda: other.record("r", late))
    store = FileLineageStore(
        tmp_path, fs=racing, ordering=StoreVariant(fence_before_unlink=fence_first).ordering()
    )
    store.retire(["r"])
    # R-CONC-2: after retire returned, the ledger exists only if the broken order let the write re-create it.
    assert (tmp_path / "r.lineage.jsonl").exists() is (not fence_first)
    inner.close_all()
    other.close()


def test_a_batch_takes_each_stripes_lock_once_per_phase(fs: CountingFileSystem) -> None:
    """A retire of 32 Live IDs over 4 stripes locks each stripe once in phase 1 and once in phase 2 (8
    locks, not 64), and a delete once (4); each ID still gets its own fence re-check under the lock."""
    store = _store(fs)
    ids = [f"r{i}" for i in range(32)]
    for rollout_id in ids:
        store.record(rollout_id, _row("m0"))
    fs.clear()
    assert store.retire(ids)["removed"] == ids
    locks = [n for m, n, _ in fs.calls if m == "lock"]
    assert len(locks) == 2 * STRIPES
    assert fs.methods().count("stat") == len(ids)
    fs.clear()
    assert store.delete(ids)["absent"] == ids
    assert fs.methods().count("lock") == STRIPES
