"""``FileLineageStore.sweep_cache``: dropping cached rows another handle removed (SPEC.md R-STORE-7).

What they prove, with two handles on one directory: a handle that did not serve a removal keeps the removed
ledgers' rows cached until it sweeps; the sweep drops exactly those (their removal counter moved), keeps the
rest, costs one counter read per cached ledger and takes no lock; a dropped entry that was still good only
costs a re-read. Counts, never times.
"""

from __future__ import annotations

from pathlib import Path

from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem
from capture_ledger.impl.study import HookedFileSystem


def _row(call: str) -> dict[str, object]:
    return {"model_call_id": call, "staging_key": None}


def test_a_sweep_drops_what_another_handle_removed_and_keeps_the_rest(tmp_path: Path) -> None:
    calls: list[str] = []
    inner = OsFileSystem(tmp_path)
    worker = FileLineageStore(tmp_path, fs=HookedFileSystem(inner, after=lambda c, _: calls.append(c.method)))
    server = FileLineageStore(tmp_path)  # the worker that serves the removals
    for rollout_id in ("a", "b", "c", "d"):
        worker.record(rollout_id, _row("m0"))
        worker.record(rollout_id, _row("m1"))
    assert worker.statistics().cached_rollouts == 4
    server.retire(["a"])
    server.delete(["b"])
    # The worker did not serve them: its entries of a and b stay until used or evicted.
    assert (worker.statistics().cached_rollouts, worker.statistics().cached_rows) == (4, 8)
    calls.clear()
    assert worker.sweep_cache() == 2
    assert calls == ["generation"] * 4  # one counter read per cached ledger, no lock
    assert (worker.statistics().cached_rollouts, worker.statistics().cached_rows) == (2, 4)
    assert worker.sweep_cache() == 0  # nothing moved since
    assert [r["model_call_id"] for r in worker.manifest("c")["records"]] == ["m0", "m1"]
    server.delete(["a", "c", "d"])
    assert worker.sweep_cache() == 2 and worker.statistics().cached_rows == 0
    worker.close()
    server.close()
    inner.close_all()


def test_a_handle_that_removed_a_ledger_has_nothing_left_to_sweep(tmp_path: Path) -> None:
    store = FileLineageStore(tmp_path)
    store.record("a", _row("m0"))
    store.retire(["a"])
    assert store.sweep_cache() == 0 and store.statistics().cached_rollouts == 0
    store.close()


def test_a_sweep_never_serves_stale_rows(tmp_path: Path) -> None:
    # Even an entry swept between a removal and a re-record is re-read, never served stale (R-STORE-7).
    worker = FileLineageStore(tmp_path)
    other = FileLineageStore(tmp_path)
    worker.record("a", _row("old"))
    other.delete(["a"])
    other.record("a", _row("new"))
    assert worker.sweep_cache() == 1
    assert [r["model_call_id"] for r in worker.manifest("a")["records"]] == ["new"]
    worker.close()
    other.close()
