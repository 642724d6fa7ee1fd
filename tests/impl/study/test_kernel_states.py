"""The kernel study's pure parts: the block log, epochs and crash states, crash windows, reader classes
(SPEC.md §Crash; docs/crash.md §The kernel study). No root, no FUSE: hand-made logs.
"""

from __future__ import annotations

from pathlib import Path

from capture_ledger.impl.study.kernel import (
    DEFAULT_FILESYSTEMS,
    FILESYSTEMS,
    FLUSH,
    MARK,
    WRITE,
    LogRecord,
    crash_states,
    encode,
    epochs,
    materialize,
    read_log,
    reader_class,
    trace_window,
)
from capture_ledger.spec.crash.durability import DiskImage

BLOCK = 4


def log(*ops: str) -> list[LogRecord]:
    """``W<n>`` a write of n blocks (offset by position), ``S`` a flush, ``T<n>`` a mark."""
    records = []
    for position, op in enumerate(ops):
        if op.startswith("W"):
            data = bytes([position]) * BLOCK * int(op[1:])
            records.append(LogRecord(op=WRITE, seq=position, offset=position * 100, data=data))
        elif op == "S":
            records.append(LogRecord(op=FLUSH, seq=position, offset=0))
        else:
            records.append(LogRecord(op=MARK, seq=position, offset=0, data=f"T {op[1:]}".encode()))
    return records


def test_the_log_reads_back_what_the_daemon_writes(tmp_path: Path) -> None:
    path = tmp_path / "block.log"
    path.write_bytes(
        encode(WRITE, 1, 4096, b"abc", 7) + encode(FLUSH, 2, 0, b"", 8) + encode(MARK, 3, 0, b"T 4", 9)
    )
    assert read_log(path) == [
        LogRecord(op=WRITE, seq=1, offset=4096, data=b"abc"),
        LogRecord(op=FLUSH, seq=2, offset=0),
        LogRecord(op=MARK, seq=3, offset=0, data=b"T 4"),
    ]
    path.write_bytes(path.read_bytes()[:-2])  # a record cut short is left out
    assert len(read_log(path)) == 2


def test_epochs_cut_at_flushes_and_split_writes_into_blocks() -> None:
    found = epochs(log("W2", "S", "W1", "W1", "S", "W1"), block=BLOCK)
    assert [len(e.writes) for e in found] == [2, 2, 1]
    assert [(e.opened, e.closed) for e in found] == [(-1, 1), (1, 4), (4, None)]
    assert [w.offset for w in found[0].writes] == [0, 4]  # one write of two blocks: two pieces


def test_crash_states_are_every_prefix_and_bounded_subsets() -> None:
    found = epochs(log("W1", "W1", "W1", "S", "W1", "W1", "W1", "W1", "W1", "W1", "W1"), block=BLOCK)
    states, duplicates = crash_states(found, end=11, subsets=5, seed=1)
    assert duplicates == 0
    first = [s for s in states if s.epoch == 0]
    # 3 writes: prefixes (), (0,), (0,1); every other proper subset: (1,), (2,), (0,2), (1,2).
    assert {s.kept for s in first} == {(), (0,), (0, 1), (1,), (2,), (0, 2), (1, 2)}
    last = [s for s in states if s.epoch == 1]
    prefixes = [s for s in last if s.kind == "prefix"]
    assert len(prefixes) == 8  # the last epoch ends the run: its full set is a state too
    assert len([s for s in last if s.kind == "subset"]) == 5  # 2^7 - 8 others, sampled down to 5
    again, _ = crash_states(found, end=11, subsets=5, seed=1)
    assert again == states
    other, _ = crash_states(found, end=11, subsets=5, seed=2)
    assert other != states  # the sample follows the seed


def test_states_with_equal_images_are_kept_once() -> None:
    records = log("W1", "S", "W1")
    records[2] = LogRecord(
        op=WRITE, seq=2, offset=records[0].offset, data=records[0].data
    )  # rewrites the same block
    states, duplicates = crash_states(epochs(records, block=BLOCK), end=3)
    assert duplicates == 1 and [s.label for s in states] == ["e0+[]", "e1+[]"]


def test_a_state_is_its_earlier_epochs_and_its_kept_writes() -> None:
    found = epochs(log("W1", "S", "W1", "W1"), block=BLOCK)
    states, _ = crash_states(found, end=4)
    state = next(s for s in states if s.label == "e1+[1]")
    assert materialize(found, state) == [(0, bytes([0]) * BLOCK), (300, bytes([3]) * BLOCK)]
    assert (state.low, state.high) == (3, 4)  # after the write it keeps, before the end of the run


def test_the_crash_window_maps_onto_the_store_trace() -> None:
    marks = ((0, 0), (3, 2), (6, 5), (9, 7))
    window = trace_window(marks, low=4, high=8, length=9)
    assert (window.completed, window.reached) == (2, 7)  # between the marks around the window
    assert window.cuts == (2, 5)  # each history the crash may have followed
    assert trace_window(marks, low=-1, high=2, length=9).cuts == (0,)
    assert trace_window(marks, low=9, high=12, length=9).reached == 9  # after the last mark: the end


def test_reader_classes_tell_torn_text_from_bytes_never_written() -> None:
    line = b'{"record":{"model_call_id":"a"}}\n'
    torn = DiskImage.of({"r.lineage.jsonl": line + b'{"rec', ".lock": b"x"})
    other = DiskImage.of({"r.lineage.jsonl": line + line[:-1]})
    zeros = DiskImage.of({"r.lineage.jsonl": line + bytes(5)})
    assert reader_class(torn, {".lock"}) == reader_class(other) == (("r.lineage.jsonl", line, "text"),)
    assert reader_class(zeros) == (("r.lineage.jsonl", line, "zeros"),)


def test_the_file_system_configurations_and_their_models() -> None:
    """The pinned ``--fs`` names, the model each is held to, its block size (the unit a crash state keeps
    or loses); the table's first three run when none is named."""
    models = {name: fs.model for name, fs in FILESYSTEMS.items()}
    assert models == {
        "ext4-ordered": "journaled",
        "ext4-journal": "journaled",
        "ext4-nojournal": "ext4-nojournal",
        "ext4-ordered-4k": "journaled",
        "ext4-journal-4k": "journaled",
        "ext4-nojournal-4k": "ext4-nojournal",
        "xfs": "journaled",
        "btrfs": "journaled",
    }
    blocks = {name: fs.block for name, fs in FILESYSTEMS.items()}
    assert {blocks[n] for n in ("ext4-ordered", "ext4-journal", "ext4-nojournal")} == {1024}
    assert {b for n, b in blocks.items() if n not in DEFAULT_FILESYSTEMS} == {4096}
    assert DEFAULT_FILESYSTEMS == ("ext4-ordered", "ext4-journal", "ext4-nojournal")
    assert {fs.kind for fs in FILESYSTEMS.values()} == {"ext4", "xfs", "btrfs"}
    assert all(fs.fsck_first == (fs.model == "ext4-nojournal") for fs in FILESYSTEMS.values())
