"""The file-system configurations the kernel study runs, and the persistence model each is held to
(SPEC.md §Crash; docs/crash.md §The kernel study).

- ``ext4-ordered``: ext4 with its default journal, ``data=ordered`` — held to the ``journaled`` model;
- ``ext4-journal``: ext4 with ``data=journal`` (data through the journal too) — ``journaled``;
- ``ext4-nojournal``: ext4 made without a journal (``-O ^has_journal``), checked with ``e2fsck -p`` before
  it is mounted, as a boot would — ``ext4-nojournal``.

Every image is small (8 MiB, 1 KiB blocks, 64 inodes), made on a plain file with ``mkfs.ext4`` before the
daemon serves it (so mkfs's own writes are not in the log), with the inode tables and journal zeroed at
once (no background initialisation writes during a run) and no discards. The 1 KiB block lets a ledger of a
few dozen rows span blocks, which is where a lost block shows.

Not guaranteed: that other block sizes, mount options or kernels behave the same (the table in
docs/crash.md says which kernel it was measured on).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from capture_ledger.impl.study.kernel._host import KernelSetupError, tool

__all__ = ["BLOCK_SIZE", "FILESYSTEMS", "IMAGE_BYTES", "FsConfig", "make_image"]

#: The file-system block size of every image: the unit in which writes reach the disk.
BLOCK_SIZE = 1024
#: The size of every image.
IMAGE_BYTES = 8 << 20


@dataclass(kw_only=True, frozen=True, slots=True)
class FsConfig:
    """One file-system configuration: how to make and mount it, and the model it must stay inside."""

    name: str
    model: str
    mkfs: tuple[str, ...] = ()
    options: str = ""
    fsck_first: bool = False
    summary: str = ""


FILESYSTEMS: dict[str, FsConfig] = {
    c.name: c
    for c in (
        FsConfig(
            name="ext4-ordered",
            model="journaled",
            summary="ext4, default journal (data=ordered)",
        ),
        FsConfig(
            name="ext4-journal",
            model="journaled",
            options="data=journal",
            summary="ext4, data=journal",
        ),
        FsConfig(
            name="ext4-nojournal",
            model="ext4-nojournal",
            mkfs=("-O", "^has_journal"),
            fsck_first=True,
            summary="ext4 without a journal; e2fsck -p before mounting",
        ),
    )
}


def make_image(path: Path, config: FsConfig) -> bytes:
    """Make a fresh image of ``config`` at ``path`` and return its bytes.

    Raises:
        KernelSetupError: ``mkfs.ext4`` failed.
    """
    with open(path, "wb") as handle:
        handle.truncate(IMAGE_BYTES)
    command = [
        tool("mkfs.ext4") or "mkfs.ext4",
        "-q",
        "-F",
        "-b",
        str(BLOCK_SIZE),
        "-N",
        "64",
        "-E",
        "nodiscard,lazy_itable_init=0,lazy_journal_init=0",
        *config.mkfs,
        str(path),
    ]
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise KernelSetupError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    return path.read_bytes()
