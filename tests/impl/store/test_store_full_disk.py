"""Retire and delete free space on a full file system (SPEC.md R-STORE-4, R-STORE-5, R-STORE-12).

A small tmpfs and a small loop-mounted ext4 image are filled to ``ENOSPC`` by a filler file in the test;
then retire and delete, through the handle that wrote the ledgers and through a fresh one, must succeed and
leave their batches Retired or Absent as a fresh handle reads them. Before lock files got their blocks at
creation, the first removal counter bumped in each stripe (a ``pwrite`` into an empty lock file) needed a
new block and every removal failed with ``ENOSPC``: space could not be freed through the API.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import GENERATION_SLOTS, lock_file_name
from capture_ledger.spec.core.errors import RolloutRetiredError

_IDS = [f"full-{n:02d}" for n in range(24)]


def _fill(directory: Path) -> int:
    """Write a filler file until the file system refuses a single byte more; the bytes written."""
    written = 0
    with open(directory / "filler", "wb", buffering=0) as filler:
        for chunk in (1 << 20, 1 << 14, 1 << 10, 1):
            while True:
                try:
                    written += filler.write(b"\xff" * chunk)
                except OSError as error:
                    assert error.errno == errno.ENOSPC
                    break
        try:
            os.fsync(filler.fileno())
        except OSError as error:  # a delayed allocation may find no block at write-back either
            assert error.errno == errno.ENOSPC
    return written


def _removals_on_a_full_file_system(root: Path) -> None:
    directory = root / "lineage"
    with FileLineageStore(directory, stripes=8) as writer:
        for rollout_id in _IDS:
            writer.record(rollout_id, {"model_call_id": "c", "staging_key": None, "pad": "x" * 300})
        assert _fill(root) > 0
        with pytest.raises(OSError) as refused:  # the disk is really full: a new row cannot be written
            writer.record("one-more", {"model_call_id": "c", "pad": "y" * 8192})
        assert refused.value.errno == errno.ENOSPC
        assert writer.retire(_IDS[:6]) == {"removed": _IDS[:6], "absent": []}
        assert writer.delete(_IDS[6:12]) == {"removed": _IDS[6:12], "absent": []}
        with FileLineageStore(directory, stripes=8) as fresh:  # a handle that never cached the ledgers
            assert fresh.retire(_IDS[12:18]) == {"removed": _IDS[12:18], "absent": []}
            assert fresh.delete(_IDS[18:]) == {"removed": _IDS[18:], "absent": []}
            assert fresh.delete(_IDS[:6]) == {"removed": [], "absent": _IDS[:6]}
    with FileLineageStore(directory, stripes=8) as reader:
        for rollout_id in _IDS[12:18]:
            with pytest.raises(RolloutRetiredError):
                reader.manifest(rollout_id)
        for rollout_id in _IDS[:12] + _IDS[18:]:
            assert reader.manifest(rollout_id)["records"] == []
    left = [p.name for p in directory.iterdir() if not p.name.startswith(".")]  # no "one-more" ledger either
    assert sorted(left) == sorted(f"{rollout_id}.lineage.retired" for rollout_id in _IDS[12:18])


def test_removals_succeed_on_a_full_tmpfs(small_tmpfs: Path) -> None:
    _removals_on_a_full_file_system(small_tmpfs)


def test_removals_succeed_on_a_full_ext4_image(small_ext4: Path) -> None:
    _removals_on_a_full_file_system(small_ext4)


def test_lock_files_hold_their_counter_blocks_from_creation(tmp_path: Path) -> None:
    """What makes it work: every lock file is created with its whole counter area allocated (so a
    counter's ``pwrite`` needs no new block), and an older, empty lock file gets it at the next open."""
    FileLineageStore(tmp_path, stripes=4).close()
    old = tmp_path / lock_file_name(3)
    old.write_bytes(b"")  # as an earlier version left it
    FileLineageStore(tmp_path, stripes=4).close()
    for stripe in range(4):
        st = os.stat(tmp_path / lock_file_name(stripe))
        assert st.st_size == GENERATION_SLOTS * 8
        assert st.st_blocks * 512 >= GENERATION_SLOTS * 8, (stripe, st.st_blocks)
