"""Lines that tell their incarnation (SPEC.md R-STORE-14, R-STORE-6, R-STORE-11, R-STORE-8).

A ledger the store creates opens with a random incarnation line and seals every later line with a CRC-32
over that line and the entry's JSON. Bytes of another incarnation (a stale block a crash left in a new
file without a journal, docs/crash.md §The kernel study) are crash residue: a torn tail, never rows and
never a corrupt line. Ledgers without the mark (written before it) read and grow as before. Real files.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from capture_ledger.impl.store import (
    INCARNATION_BYTES,
    CorruptLedgerError,
    bytes_have_rows,
    check,
    decode,
    encode,
    incarnation_line,
    incarnation_seed,
    seal,
)
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.spec.core.model import RecordEntry
from capture_ledger.spec.core.rows import canonical_json
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _calls(store: FileLineageStore, rollout_id: str) -> list[str]:
    return [r["model_call_id"] for r in store.manifest(rollout_id)["records"]]


def test_a_new_ledger_opens_with_its_incarnation_and_seals_every_line(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.record("a", {"model_call_id": "m", "x": [1, "é"]})
    store.record_failure("a", "n", "timeout")
    store.record("b", {"model_call_id": "m"})
    first, row, failure = _lines(tmp_path / "a.lineage.jsonl")
    assert first.startswith(b'{"incarnation":"') and len(first) == INCARNATION_BYTES
    seed = incarnation_seed(first)
    assert row == seal('{"record":{"model_call_id":"m","x":[1,"é"]}}'.encode(), seed)
    assert failure == seal(b'{"failure":{"model_call_id":"n","reason":"timeout"}}', seed)
    assert _lines(tmp_path / "b.lineage.jsonl")[0] != first  # each ledger file its own incarnation
    # The row as a model server sees it is unchanged by the seal.
    assert _store(tmp_path).manifest("a")["records"] == [{"model_call_id": "m", "x": [1, "é"]}]
    store.delete(["a"])
    store.record("a", {"model_call_id": "m"})
    assert _lines(tmp_path / "a.lineage.jsonl")[0] != first  # a re-created ledger: a new incarnation
    assert check(tmp_path) == []


def test_a_ledger_without_the_mark_reads_and_grows_as_before(tmp_path: Path) -> None:
    _store(tmp_path)  # lock files
    legacy = b'{"record":{"model_call_id":"m"}}\n{"failure":{"model_call_id":"n","reason":"r"}}\n'
    ledger = tmp_path / "a.lineage.jsonl"
    ledger.write_bytes(legacy)
    store = _store(tmp_path)
    assert _calls(store, "a") == ["m"]
    store.record("a", {"model_call_id": "o"})
    assert ledger.read_bytes() == legacy + b'{"record":{"model_call_id":"o"}}\n'  # unsealed, as before
    assert _calls(_store(tmp_path), "a") == ["m", "o"]
    assert check(tmp_path) == []
    ledger.write_bytes(legacy + b"not json\n")
    with pytest.raises(CorruptLedgerError):  # a legacy ledger's corruption is still corruption
        _store(tmp_path).manifest("a")


def test_a_deleted_incarnations_block_in_a_new_ledger_is_crash_residue(tmp_path: Path) -> None:
    """The kernel study's R-CRASH-3 case: a delete returned, the ID was recorded again, and a crash left
    the new file's size on disk but not its new block, which still held the deleted ledger's rows."""
    store = _store(tmp_path)
    for call in ("old1", "old2"):
        store.record("a", {"model_call_id": call})
    ledger = tmp_path / "a.lineage.jsonl"
    deleted = ledger.read_bytes()
    store.delete(["a"])
    store.record("a", {"model_call_id": "new"})
    fresh = ledger.read_bytes()
    old_rows = deleted[INCARNATION_BYTES:]
    for stale in (old_rows, deleted):  # the old rows, or a whole old block with its incarnation line
        ledger.write_bytes(fresh + stale)
        reader = _store(tmp_path)  # a fresh handle, as after the reboot
        assert _calls(reader, "a") == ["new"]
        findings = check(tmp_path)
        assert [(f.kind, f.name) for f in findings] == [("torn-tail", "a.lineage.jsonl")]
        assert f"{len(stale)} bytes after the last complete line at byte {len(fresh)}" in findings[0].detail
    reader.record("a", {"model_call_id": "next"})  # the next append cuts the residue away
    assert _calls(_store(tmp_path), "a") == ["new", "next"]
    assert check(tmp_path) == []


def test_a_line_spliced_from_two_incarnations_is_residue_not_corruption(tmp_path: Path) -> None:
    """A row across a block boundary whose second block is a stale one: its start is this ledger's, its
    end another's. The seal tells; without it the line would read as corrupt (R-STORE-8)."""
    store = _store(tmp_path)
    store.record("a", {"model_call_id": "m"})
    store.record("a", {"model_call_id": "n"})
    store.record("b", {"model_call_id": "n"})
    ledger = tmp_path / "a.lineage.jsonl"
    mine = _lines(ledger)
    other = _lines(tmp_path / "b.lineage.jsonl")[1]
    spliced = mine[2][:20] + other[20:]
    assert spliced != mine[2]
    ledger.write_bytes(mine[0] + mine[1] + spliced)
    assert _calls(_store(tmp_path), "a") == ["m"]
    assert [f.kind for f in check(tmp_path, fix=True)] == ["torn-tail"]
    assert ledger.read_bytes() == mine[0] + mine[1]


def test_a_second_incarnation_line_ends_the_rows(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.record("a", {"model_call_id": "m"})
    ledger = tmp_path / "a.lineage.jsonl"
    data = ledger.read_bytes()
    ledger.write_bytes(data + incarnation_line() + data[INCARNATION_BYTES:])
    assert _calls(_store(tmp_path), "a") == ["m"]
    assert [f.kind for f in check(tmp_path)] == ["torn-tail"]


def test_a_correctly_sealed_line_that_is_not_an_entry_is_corruption(tmp_path: Path) -> None:
    """A seal that matches cannot come from a crash: a bad entry behind it is corruption (R-STORE-8)."""
    store = _store(tmp_path)
    store.record("a", {"model_call_id": "m"})
    ledger = tmp_path / "a.lineage.jsonl"
    data = ledger.read_bytes()
    seed = incarnation_seed(data[:INCARNATION_BYTES])
    ledger.write_bytes(data + seal(b'{"record":{"no_call_id":1}}', seed))
    with pytest.raises(CorruptLedgerError):
        _store(tmp_path).manifest("a")
    assert [f.kind for f in check(tmp_path)] == ["corrupt-line"]


def test_a_ledger_holding_only_its_incarnation_has_no_rows(tmp_path: Path) -> None:
    """A ledger holding only an incarnation line (a creator of an earlier version, which wrote ledgers in
    place, crashed after the incarnation line's fsync; today's creators rename a whole file into place):
    the ID is Absent, a retire reports it absent, and the next record appends to it (syncing the directory,
    as a creation does: the ``first_row`` path)."""
    _store(tmp_path)
    ledger = tmp_path / "a.lineage.jsonl"
    line = incarnation_line()
    ledger.write_bytes(line)
    assert not bytes_have_rows(line) and not bytes_have_rows(
        line + b'{"record":{"model_call_id":"x"}} 00000000\n'
    )
    store = _store(tmp_path)
    assert store.manifest("a")["records"] == []
    assert [f.kind for f in check(tmp_path)] == ["empty-ledger"]
    store.record("a", {"model_call_id": "m"})
    assert _lines(ledger)[0] == line  # the incarnation it found is kept, and seals the row
    assert _lines(ledger)[1] == seal(b'{"record":{"model_call_id":"m"}}', incarnation_seed(line))
    assert bytes_have_rows(ledger.read_bytes())
    assert store.retire(["a"]) == {"removed": ["a"], "absent": []}
    ledger.write_bytes(line)
    assert store.retire(["b"]) == {"removed": [], "absent": ["b"]}


def test_decoding_a_tail_needs_the_ledgers_seed() -> None:
    """A handle reads only the bytes appended since its cache (R-STORE-7): it passes the seed it read."""
    line = incarnation_line()
    seed = incarnation_seed(line)
    rows = [seal(b'{"record":{"model_call_id":"%s"}}' % c, seed) for c in (b"m", b"n")]
    whole = decode(line + rows[0] + rows[1])
    assert whole.seed == seed and len(whole.entries) == 2 and not whole.torn
    start = len(line) + len(rows[0])
    tail = decode(rows[1], start=start, seed=seed)
    assert (len(tail.entries), tail.end) == (1, start + len(rows[1]))
    other = decode(rows[1], start=start, seed=incarnation_seed(incarnation_line()))
    assert (other.entries, other.end, other.torn) == ((), start, True)


@settings(max_examples=300, deadline=None)
@given(
    mine=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=6, unique=True),
    theirs=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=6),
    keep=st.integers(min_value=0),
    cut=st.integers(min_value=0),
)
def test_another_incarnations_bytes_are_never_rows_nor_corruption(
    mine: list[str], theirs: list[str], keep: int, cut: int
) -> None:
    """Property: a ledger's bytes up to any point past its incarnation line (made durable before any row,
    so a crash cannot replace it), followed by any stretch of another ledger's bytes (a stale block at any
    offset), decode as a prefix of the ledger's own entries, never raising. (Before that line is durable
    the whole file may be another ledger's, consistent with itself: why it is fsynced first.)"""

    def ledger(calls: list[str]) -> tuple[bytes, list[RecordEntry]]:
        line = incarnation_line()
        seed = incarnation_seed(line)
        entries = [RecordEntry(c, canonical_json({"model_call_id": c})) for c in calls]
        return line + b"".join(encode(e, seed) for e in entries), entries

    own, entries = ledger(mine)
    other, _ = ledger(theirs)
    keep = INCARNATION_BYTES + keep % (len(own) - INCARNATION_BYTES + 1)
    cut %= len(other) + 1
    decoded = decode(own[:keep] + other[cut:])
    assert list(decoded.entries) == entries[: len(decoded.entries)]
    assert decoded.end <= keep or decoded.end == keep + len(other) - cut == len(own)
