"""``check`` and ``read_snapshot`` on lineage directories (SPEC.md R-STORE-8, R-STATE-3, R-STORE-6,
R-STORE-11).

Directories are made by the store and then damaged the way a crash or a person would: an interrupted
retire (a ledger beside its fence), a torn tail, an empty ledger, a corrupt line, stray files. ``check``
must report each, and with ``fix=True`` repair only the safe ones, leaving the store reading the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from capture_ledger.impl.store import CorruptLedgerError, check, incarnation_seed, read_snapshot, seal
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem
from capture_ledger.spec.concurrency.history import apply_operation
from capture_ledger.spec.core.abstraction import abstract
from capture_ledger.spec.core.errors import RolloutRetiredError
from capture_ledger.spec.core.model import (
    Delete,
    LedgerState,
    Operation,
    Record,
    RecordFailure,
    Retire,
    step,
)

#: Handles the tests open, closed after each test (a dropped handle warns: ResourceWarning).
_OPEN: list[FileLineageStore] = []


def _store(directory: Path) -> FileLineageStore:
    store = FileLineageStore(directory, stripes=4)
    _OPEN.append(store)
    return store


@pytest.fixture(autouse=True)
def _close_handles() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def _kinds(directory: Path, *, fix: bool = False) -> list[tuple[str, str, bool]]:
    return [(f.kind, f.name, f.fixed) for f in check(directory, fix=fix)]


def test_a_healthy_directory_has_no_findings(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.record("a", {"model_call_id": "m"})
    store.retire(["b"])
    assert check(tmp_path) == []


def test_an_interrupted_retire_is_reported_and_completed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.record("a", {"model_call_id": "m"})
    (tmp_path / "a.lineage.retired").touch()  # a crash between retire's two phases
    assert _kinds(tmp_path) == [("interrupted-retire", "a.lineage.jsonl", False)]
    assert _kinds(tmp_path, fix=True) == [("interrupted-retire", "a.lineage.jsonl", True)]
    assert not (tmp_path / "a.lineage.jsonl").exists()
    with pytest.raises(RolloutRetiredError):
        store.manifest("a")  # the cached rows were not served: the fix bumped the removal counter
    assert check(tmp_path) == []


def test_torn_tails_and_empty_ledgers_are_fixed_stray_and_corrupt_files_never(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.record("torn", {"model_call_id": "m"})
    with (tmp_path / "torn.lineage.jsonl").open("ab") as file:
        file.write(b'{"record":')
    (tmp_path / "empty.lineage.jsonl").touch()
    (tmp_path / "bad.lineage.jsonl").write_bytes(b"not json\n")
    (tmp_path / "fenced.lineage.retired").write_bytes(b"x")
    for stray in ("notes.txt", "-bad.lineage.jsonl", ".capture-ledger.lock.x"):
        (tmp_path / stray).write_bytes(b"keep me")
    expected = [
        ("stray-file", "-bad.lineage.jsonl"),
        ("stray-file", ".capture-ledger.lock.x"),
        ("corrupt-line", "bad.lineage.jsonl"),
        ("empty-ledger", "empty.lineage.jsonl"),
        ("nonempty-fence", "fenced.lineage.retired"),
        ("stray-file", "notes.txt"),
        ("torn-tail", "torn.lineage.jsonl"),
    ]
    assert [(k, n) for k, n, _ in _kinds(tmp_path)] == expected
    fixed = {(k, n) for k, n, f in _kinds(tmp_path, fix=True) if f}
    assert fixed == {("empty-ledger", "empty.lineage.jsonl"), ("torn-tail", "torn.lineage.jsonl")}
    for stray in ("notes.txt", "-bad.lineage.jsonl", ".capture-ledger.lock.x"):
        assert (tmp_path / stray).read_bytes() == b"keep me"
    assert [(k, n) for k, n, _ in _kinds(tmp_path)] == [
        e for e in expected if e[0] not in ("empty-ledger", "torn-tail")
    ]
    assert store.manifest("torn")["records"] == [{"model_call_id": "m"}]
    with pytest.raises(CorruptLedgerError):
        store.manifest("bad")


def test_a_line_holding_a_nul_is_crash_residue_not_a_corrupt_line(tmp_path: Path) -> None:
    """R-STORE-11: a lost block of an unacknowledged append reads as NULs, possibly followed by the end of
    the row from a later block that was kept. From that line on nothing is a row: the rollout reads its
    acknowledged rows, ``check`` reports a torn tail, and the next append truncates the residue."""
    store = _store(tmp_path)
    store.record("a", {"model_call_id": "m"})
    ledger = tmp_path / "a.lineage.jsonl"
    good = ledger.read_bytes()
    residue = b"\0" * 20 + b'l_id":"n"}}\n' + b'{"record":{"model_call_id":"o"}}\n'
    ledger.write_bytes(good + residue)
    reader = _store(tmp_path)  # a fresh handle, as after a crash
    assert reader.manifest("a")["records"] == [{"model_call_id": "m"}]
    findings = check(tmp_path)
    assert [(f.kind, f.name) for f in findings] == [("torn-tail", "a.lineage.jsonl")]
    assert f"{len(residue)} bytes after the last complete line at byte {len(good)}" in findings[0].detail
    reader.record("a", {"model_call_id": "p"})
    seed = incarnation_seed(good[: good.index(b"\n") + 1])
    assert ledger.read_bytes() == good + seal(b'{"record":{"model_call_id":"p"}}', seed)
    assert check(tmp_path) == []


def test_a_nul_inside_the_last_complete_line_cuts_only_that_line(tmp_path: Path) -> None:
    """The residue starts at the line holding the NUL: the rows before it stay rows (R-STORE-11)."""
    store = _store(tmp_path)
    for call in ("m", "n"):
        store.record("a", {"model_call_id": call})
    ledger = tmp_path / "a.lineage.jsonl"
    data = ledger.read_bytes()
    second = data.index(b"\n", data.index(b"\n") + 1) + 1  # past the incarnation line and the first row
    ledger.write_bytes(data[: second + 5] + b"\0" + data[second + 6 :])
    assert _store(tmp_path).manifest("a")["records"] == [{"model_call_id": "m"}]
    assert [f.kind for f in check(tmp_path, fix=True)] == ["torn-tail"]
    assert ledger.read_bytes() == data[:second]


def test_check_refuses_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        check(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()


def test_read_snapshot_abstracts_to_the_model_state(tmp_path: Path) -> None:
    operations: list[Operation] = [
        Record("a", {"model_call_id": "m1", "x": [1, 2.5, None]}),
        RecordFailure("a", "m2", "timeout"),
        Record("b", {"model_call_id": "m1", "s": "é\u2028\ud800"}),
        Record("c", {"model_call_id": "m1"}),
        Retire(["b", "d"]),
        Record("b", {"model_call_id": "late"}),
        Delete(["c"]),
    ]
    store = _store(tmp_path)
    state = LedgerState()
    for op in operations:
        state, _ = step(state, op)
        apply_operation(store, op)
    fs = OsFileSystem(tmp_path, stripes=4)
    try:
        assert abstract(read_snapshot(fs)) == state
    finally:
        fs.close_all()
