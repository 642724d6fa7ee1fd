"""System calls per ID of a removal batch, counted by real ``strace -f -c`` on a child process (SPEC.md
R-STORE-4, R-STORE-5; docs/group-commit.md §System calls per removal).

A child opens the store on a directory of 256 Live ledgers (written by another process, so that no row is
cached) and retires them in one call, or deletes 256 Retired IDs in one call; a second child does the same
setup without the removal. The difference of their file-system calls, over 256, is the batch's cost per ID.
Each stripe's lock is taken once per phase for all of the batch's IDs in it (``_removals.by_stripe``), so a
batch of 256 over 64 stripes makes 128 ``flock`` pairs per phase, not 256.

Not asserted: the ≤ 6 calls per retired ID of the goal, which needs a bounded read for ``probe`` and one
write of a stripe's removal counters per batch, both new seam methods (docs/followups.md).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
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


def test_a_retire_of_256_live_ids_makes_at_most_11_calls_per_id(tmp_path: Path) -> None:
    per_id, extra = _per_id(tmp_path, "retire")
    print(f"retire: {per_id:.2f} calls per ID: {extra}")
    assert per_id <= 11.25
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
