"""``fence_sync="auto"``: the file system under the directory, and the fence sync chosen for it (SPEC.md
R-STORE-10; impl/store/filesystems.py).

What they prove: the detection agrees with oracles it does not use (coreutils' ``stat -f`` for the type,
``/proc/fs/jbd2`` for an ext4 journal) on this machine's disk and on tmpfs; on a journaled ext4 image and an
unjournaled one, each made with ``mkfs.ext4`` and loop-mounted here (as root; skipped, saying why, where
mounting is refused), the store picks ``"directory"`` and ``"file"``; the choice is readable as
``store.fence_sync``, in ``statistics()`` and in one INFO line; an explicit ``fence_sync`` wins; the table
gives the option safe under every model to anything it does not know.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from capture_ledger.impl.store import choose, detect
from capture_ledger.impl.store.file_store import FileLineageStore


def _stat_type(path: Path) -> str:
    """The file system type as coreutils names it (``ext2/ext3`` for ext4's magic)."""
    return subprocess.run(
        ["stat", "-f", "-c", "%T", str(path)], check=True, capture_output=True, text=True
    ).stdout.strip()


def _jbd2_says(device: str) -> bool:
    """Whether jbd2 runs a journal for ``device`` (an oracle independent of ``/sys/fs/ext4``)."""
    jbd2 = Path("/proc/fs/jbd2")
    return jbd2.is_dir() and any(entry.name.startswith(f"{device}-") for entry in jbd2.iterdir())


def test_this_machines_disk_is_detected_as_its_oracles_say(tmp_path: Path) -> None:
    found = detect(tmp_path)
    kind = _stat_type(tmp_path)
    if kind != "ext2/ext3":
        pytest.skip(f"the test directory is on {kind}, not ext4: the ext4 oracle does not apply")
    assert found.file_system == "ext4" and found.device is not None
    journal = _jbd2_says(found.device)
    assert found.journal is journal, found.reason
    # docs/architecture.md §Facts: these machines' root file system is ext4 without a journal.
    expected = ("journaled", "directory") if journal else ("ext4-nojournal", "file")
    assert (found.model, found.fence_sync) == expected, found.reason
    with FileLineageStore(tmp_path) as store:
        assert store.fence_sync == expected[1]
        assert store.statistics().fence_sync == expected[1]


def test_tmpfs_keeps_nothing_across_a_crash_so_the_cheapest_option_is_safe() -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or _stat_type(shm) != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm")
    found = detect(shm)
    assert (found.file_system, found.model, found.fence_sync) == ("tmpfs", "volatile", "directory")


def test_the_choice_is_logged_once_and_an_explicit_option_wins(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="capture_ledger.impl.store.file_store"):
        auto = FileLineageStore(tmp_path)
        given = FileLineageStore(tmp_path, fence_sync="syncfs")
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(lines) == 2
    assert f"fence_sync={auto.fence_sync} (auto: " in lines[0]
    assert "fence_sync=syncfs (given)" in lines[1]
    assert given.fence_sync == "syncfs" and given.statistics().fence_sync == "syncfs"
    with pytest.raises(ValueError, match="fence_sync"):
        FileLineageStore(tmp_path, fence_sync="fast")  # type: ignore[arg-type]
    auto.close()
    given.close()


def test_the_table_gives_unknown_file_systems_the_option_safe_under_every_model() -> None:
    assert choose("ext4", True) == ("journaled", "directory")
    assert choose("xfs", None) == ("journaled", "directory")
    assert choose("btrfs", None) == ("journaled", "directory")
    assert choose("ext4", False) == ("ext4-nojournal", "file")
    assert choose("ext4", None) == ("unknown", "file")  # ext4 whose journal could not be found out
    for other in ("nfs", "overlay", "fuse", "zfs", "unknown"):
        assert choose(other, None) == ("unknown", "file")


# ------------------------------------------------------------------------------- loop-mounted ext4 images
def _mount_refused() -> str | None:
    if os.geteuid() != 0:
        return "mounting a loop image needs root"
    for tool in ("mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


@pytest.fixture
def ext4_image(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A fresh ext4 image (``request.param``: extra ``mkfs.ext4`` options) loop-mounted at a directory."""
    refused = _mount_refused()
    if refused is not None:
        pytest.skip(refused)
    image, mountpoint = tmp_path / "ext4.img", tmp_path / "mnt"
    mountpoint.mkdir()
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", *request.param, str(image), "16M"], check=True, capture_output=True
    )
    mounted = subprocess.run(
        ["mount", "-o", "loop", str(image), str(mountpoint)], check=False, capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"mount -o loop refused: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True, capture_output=True)


@pytest.mark.parametrize(
    ("ext4_image", "expected"),
    [
        pytest.param([], ("journaled", True, "directory"), id="with-journal"),
        pytest.param(["-O", "^has_journal"], ("ext4-nojournal", False, "file"), id="without-journal"),
    ],
    indirect=["ext4_image"],
)
def test_a_loop_mounted_ext4_image_gets_the_option_of_its_journal(
    ext4_image: Path, expected: tuple[str, bool, str]
) -> None:
    directory = ext4_image / "lineage"
    found = detect(ext4_image)
    assert (found.model, found.journal, found.fence_sync) == expected, found.reason
    assert found.device is not None and found.device.startswith("loop")
    assert _jbd2_says(found.device) is expected[1]  # the independent oracle agrees
    with FileLineageStore(directory) as store:
        assert store.fence_sync == expected[2]
        store.record("r", {"model_call_id": "m"})
        assert store.retire(["r"]) == {"removed": ["r"], "absent": []}
