"""System calls per ID of a removal batch, counted by real ``strace -f -c`` on a child process (SPEC.md
R-STORE-4, R-STORE-5; docs/group-commit.md §System calls per removal).

A child opens the store on a directory of 256 Live ledgers (written by another process, so that no row is
cached) and retires them in one call, or deletes 256 Retired IDs in one call; a second child does the same
setup without the removal. The difference of their file-system calls, over 256, is the batch's cost per ID.
Each stripe's lock is taken once per phase for all of the batch's IDs in it (``_removals.by_stripe``), so a
batch of 256 over 64 stripes makes 128 ``flock`` pairs per phase, not 256.

A retire's probe of an uncached ledger reads its first ``PROBE_BYTES`` with one ``pread`` and no ``fstat``
(``FileSystem.head``), and each stripe's removal counters are bumped with one read and one write per batch
(``FileSystem.advance_generations``). Not met: the goal of ≤ 6 calls per retired ID; what is left of the
8.5 (probe 3, fence 2, re-check 1, unlink 1, locks 1, counters 0.5) needs a protocol change: the probe as
one ``stat`` measured 6.51 and waits for SPEC.md (docs/group-commit.md §System calls per removal).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from capture_ledger.impl.store import PROBE_BYTES, OsFileSystem, bytes_have_rows, ledger_name
from capture_ledger.impl.store.file_store import FileLineageStore

IDS = [f"r{i:04d}" for i in range(256)]
#: The system calls the seam makes (``impl/store/fs.py``); the interpreter's own are the same in both
#: children and cancel out.
FILE_CALLS = {
    *("openat", "close", "fstat", "newfstatat", "statx", "pread64", "pwrite64", "write", "read"),
    *("fsync", "unlinkat", "flock", "lseek", "ftruncate", "renameat", "renameat2", "syncfs"),
}
CHILD = """
import sys
from pathlib import Path
from capture_ledger.impl.store import PROBE_BYTES, OsFileSystem, bytes_have_rows, ledger_name
from capture_ledger.impl.store.file_store import FileLineageStore
directory, operation, go = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
ids = [f"r{i:04d}" for i in range(256)]
store = FileLineageStore(directory, fence_sync="directory", combine_removals=False)
if go:
    result = getattr(store, operation)(ids)
    assert len(result["removed"]) + len(result["absent"]) == 256
store.close()
"""

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")


def _prepared(directory: Path, operation: str) -> None:
    directory.mkdir()
    with FileLineageStore(directory, fence_sync="directory") as writer:
        for rollout_id in IDS:
            writer.record(rollout_id, {"model_call_id": "m0"})
        if operation == "delete":
            writer.retire(IDS)


def _counts(directory: Path, operation: str, *, go: bool, out: Path) -> dict[str, int]:
    command = ["strace", "-f", "-c", "-o", str(out), sys.executable, "-c", CHILD, str(directory)]
    subprocess.run([*command, operation, "1" if go else "0"], check=True)
    counts: dict[str, int] = {}
    for line in out.read_text().splitlines():  # "% time, seconds, usecs/call, calls, [errors], name"
        fields = line.split()
        if len(fields) >= 5 and fields[-1] in FILE_CALLS and fields[3].isdigit():
            counts[fields[-1]] = int(fields[3])
    return counts


def _per_id(tmp_path: Path, operation: str) -> tuple[float, dict[str, int]]:
    ran: dict[bool, dict[str, int]] = {}
    for go in (False, True):
        directory = tmp_path / f"{operation}-{go}"
        _prepared(directory, operation)
        ran[go] = _counts(directory, operation, go=go, out=tmp_path / f"{operation}-{go}.txt")
    extra = {name: ran[True].get(name, 0) - ran[False].get(name, 0) for name in ran[True]}
    return sum(extra.values()) / len(IDS), extra


def test_a_retire_of_256_live_ids_makes_at_most_8_5_calls_per_id(tmp_path: Path) -> None:
    per_id, extra = _per_id(tmp_path, "retire")
    print(f"retire: {per_id:.2f} calls per ID: {extra}")
    assert per_id <= 8.55  # 11.0 before the bounded probe and the counters per stripe
    assert extra.get("pwrite64", 0) <= 64  # the removal counters: one write per stripe, not one per ID
    assert extra.get("newfstatat", 0) <= len(IDS)  # the re-check's stat only: the probe makes no fstat
    # Two phases, each stripe's lock once per phase: at most 2 x 64 locks and unlocks, not 2 x 256.
    assert extra.get("flock", 0) <= 2 * 2 * 64
    assert extra.get("unlinkat", 0) == len(IDS)
    assert extra.get("fsync", 0) == 2  # the batch's two directory syncs (R-STORE-4)


def test_a_delete_of_256_retired_ids_makes_at_most_3_calls_per_id(tmp_path: Path) -> None:
    per_id, extra = _per_id(tmp_path, "delete")
    print(f"delete: {per_id:.2f} calls per ID: {extra}")
    assert per_id <= 3
    assert extra.get("flock", 0) <= 2 * 64
    assert extra.get("fsync", 0) == 1  # the batch's one directory sync (R-STORE-5)


def test_the_counters_of_a_stripe_are_bumped_in_one_write(tmp_path: Path) -> None:
    """``advance_generations`` adds one per occurrence (two IDs may share a slot) and leaves the other
    counters of the span as they were."""
    fs = OsFileSystem(tmp_path, stripes=2)
    try:
        fs.advance_generation(1, 5)
        fs.advance_generations(1, [3, 7, 7])
        assert [fs.generation(1, slot) for slot in range(9)] == [0, 0, 0, 1, 0, 1, 0, 2, 0]
        assert [fs.generation(0, slot) for slot in range(9)] == [0] * 9
        fs.advance_generations(1, [])
        assert fs.generation(1, 7) == 2
    finally:
        fs.close_all()


def test_the_probe_reads_a_whole_ledger_whose_first_row_is_longer_than_its_head(tmp_path: Path) -> None:
    """A first row longer than ``PROBE_BYTES`` leaves the head without a complete line: the probe reads the
    whole file and the retire reports the ID removed, as before; a missing ledger reads ``None``."""
    with FileLineageStore(tmp_path, fence_sync="directory") as writer:
        writer.record("long", {"model_call_id": "m", "text": "x" * (3 * PROBE_BYTES)})
        writer.record("short", {"model_call_id": "m"})
    fs = OsFileSystem(tmp_path)
    try:
        head = fs.head(ledger_name("long"), PROBE_BYTES)
        assert head is not None and len(head) == PROBE_BYTES and not bytes_have_rows(head)
        assert fs.head(ledger_name("nothing"), PROBE_BYTES) is None
        short = fs.head(ledger_name("short"), PROBE_BYTES)
        assert short is not None and len(short) < PROBE_BYTES and bytes_have_rows(short)
    finally:
        fs.close_all()
    with FileLineageStore(tmp_path, fence_sync="directory") as remover:  # a new handle: nothing cached
        assert remover.retire(["long", "short", "nothing"]) == {
            "removed": ["long", "short"],
            "absent": ["nothing"],
        }
