"""The file-system configurations the kernel study runs, and the persistence model each is held to
(SPEC.md §Crash; docs/crash.md §The kernel study).

- ``ext4-ordered``: ext4 with its default journal, ``data=ordered`` — held to the ``journaled`` model;
- ``ext4-journal``: ext4 with ``data=journal`` (data through the journal too) — ``journaled``;
- ``ext4-nojournal``: ext4 made without a journal (``-O ^has_journal``), checked with ``e2fsck -p`` before
  it is mounted, as a boot would — ``ext4-nojournal``;
- ``ext4-ordered-4k``, ``ext4-journal-4k``, ``ext4-nojournal-4k``: the same three with 4 KiB blocks (the
  ``mkfs.ext4`` default on anything but tiny devices), 16 MiB images;
- ``xfs``: XFS as ``mkfs.xfs`` makes it (4 KiB blocks, CRCs, reflink; its log replayed by the mount) —
  ``journaled``;
- ``btrfs``: btrfs ``--mixed`` (data and metadata in the same block groups, the btrfs-progs advice below
  1 GiB; 4 KiB sectors and nodes), its log tree replayed by the mount — ``journaled``.

Every image is small, made on a plain file before the daemon serves it (so mkfs's own writes are not in the
log), with nothing left for background initialisation and no discards: ext4 at 1 KiB blocks 8 MiB, 64
inodes, inode tables and journal zeroed at once (the 1 KiB block lets a ledger of a few dozen rows span
blocks, which is where a lost block shows); ext4 at 4 KiB, XFS and btrfs 16 MiB. ``mkfs.xfs`` refuses a
file system below 300 MB (and a log below 64 MB) unless ``TEST_DIR``, ``TEST_DEV`` and ``QA_CHECK_FS``
are set, which is how fstests makes its small test file systems; the study sets them, and the image gets
one allocation group and the kernel's smallest log (1368 blocks). ``mkfs.btrfs --mixed`` takes 16 MiB,
its minimum.

``FsConfig.block`` is the unit a crash state keeps or loses (the file-system block) and the block size of
the ``ext4-nojournal`` model the configuration is compared with.

Not guaranteed: that other sizes, mkfs or mount options or kernels behave the same (the table in
docs/crash.md says which kernel and tools it was measured on).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from capture_ledger.impl.study.kernel._host import KernelSetupError, tool

__all__ = [
    "BLOCK_SIZE",
    "DEFAULT_FILESYSTEMS",
    "FILESYSTEMS",
    "IMAGE_BYTES",
    "MKFS",
    "FsConfig",
    "lacking",
    "make_image",
]

#: The block size of the 1 KiB ext4 images (the default configurations).
BLOCK_SIZE = 1024
#: The size of the 1 KiB ext4 images.
IMAGE_BYTES = 8 << 20
#: The size of the other images (ext4 at 4 KiB, XFS, btrfs).
_LARGER = 16 << 20
#: The command that makes each kind of file system, and the package that has it.
MKFS: dict[str, tuple[str, str]] = {
    "ext4": ("mkfs.ext4", "e2fsprogs"),
    "xfs": ("mkfs.xfs", "xfsprogs"),
    "btrfs": ("mkfs.btrfs", "btrfs-progs"),
}
#: What lifts mkfs.xfs's 300 MB floor (fstests sets the same variables).
_XFS_SMALL = {"TEST_DIR": "/nonexistent", "TEST_DEV": "/nonexistent", "QA_CHECK_FS": "1"}


@dataclass(kw_only=True, frozen=True, slots=True)
class FsConfig:
    """One file-system configuration: how to make and mount it, and the model it must stay inside.

    ``kind`` is the file-system type (``mount(2)``'s, and which mkfs); ``block`` its block size;
    ``image_bytes`` the image's size; ``mkfs`` extra mkfs arguments; ``options`` the mount options;
    ``fsck_first``: run ``e2fsck -p`` before mounting a recovered state (ext4 without a journal).
    """

    name: str
    model: str
    kind: str = "ext4"
    block: int = BLOCK_SIZE
    image_bytes: int = IMAGE_BYTES
    mkfs: tuple[str, ...] = ()
    options: str = ""
    fsck_first: bool = False
    summary: str = ""


def _ext4(block: int) -> tuple[FsConfig, ...]:
    suffix, size = ("", IMAGE_BYTES) if block == BLOCK_SIZE else (f"-{block // 1024}k", _LARGER)
    blocks = f", {block // 1024} KiB blocks"
    return (
        FsConfig(
            name=f"ext4-ordered{suffix}",
            model="journaled",
            block=block,
            image_bytes=size,
            summary=f"ext4, default journal (data=ordered){blocks}",
        ),
        FsConfig(
            name=f"ext4-journal{suffix}",
            model="journaled",
            block=block,
            image_bytes=size,
            options="data=journal",
            summary=f"ext4, data=journal{blocks}",
        ),
        FsConfig(
            name=f"ext4-nojournal{suffix}",
            model="ext4-nojournal",
            block=block,
            image_bytes=size,
            mkfs=("-O", "^has_journal"),
            fsck_first=True,
            summary=f"ext4 without a journal; e2fsck -p before mounting{blocks}",
        ),
    )


FILESYSTEMS: dict[str, FsConfig] = {
    c.name: c
    for c in (
        *_ext4(BLOCK_SIZE),
        *_ext4(4096),
        FsConfig(
            name="xfs",
            model="journaled",
            kind="xfs",
            block=4096,
            image_bytes=_LARGER,
            summary="XFS, mkfs.xfs defaults (4 KiB blocks, one allocation group, 1368-block log)",
        ),
        FsConfig(
            name="btrfs",
            model="journaled",
            kind="btrfs",
            block=4096,
            image_bytes=_LARGER,
            mkfs=("--mixed",),
            options="nodiscard",
            summary="btrfs --mixed (4 KiB sectors and nodes), mounted nodiscard",
        ),
    )
}

#: The configurations run when none is named: ext4 at 1 KiB blocks, the three the table was first made on.
DEFAULT_FILESYSTEMS: tuple[str, ...] = ("ext4-ordered", "ext4-journal", "ext4-nojournal")


def _kernel_has(kind: str) -> bool:
    """Whether the running kernel has file-system type ``kind``, built in or as a module mount would load."""
    try:
        with open("/proc/filesystems") as handle:
            if kind in (line.split()[-1] for line in handle if line.strip()):
                return True
    except OSError:
        return False
    modules = Path("/lib/modules") / os.uname().release / "kernel" / "fs" / kind
    return modules.is_dir() and any(modules.glob(f"{kind}.ko*"))


def lacking(config: FsConfig) -> list[str]:
    """What the machine lacks for ``config`` beyond ``host.missing`` (its mkfs, the kernel's support),
    each with how to get it; empty when nothing."""
    program, package = MKFS[config.kind]
    reasons = []
    if tool(program) is None:
        reasons.append(f"{program} (apt-get install {package})")
    if not _kernel_has(config.kind):
        reasons.append(f"the kernel's {config.kind} file system (modprobe {config.kind})")
    return reasons


def _command(config: FsConfig, path: Path) -> tuple[list[str], dict[str, str] | None]:
    program, _ = MKFS[config.kind]
    mkfs = tool(program) or program
    if config.kind == "ext4":
        options = "nodiscard,lazy_itable_init=0,lazy_journal_init=0"
        base = [mkfs, "-q", "-F", "-b", str(config.block), "-N", "64", "-E", options]
        return [*base, *config.mkfs, str(path)], None
    if config.kind == "xfs":
        return [mkfs, "-q", "-f", "-K", *config.mkfs, str(path)], {**os.environ, **_XFS_SMALL}
    return [mkfs, "-q", "-f", "-K", *config.mkfs, str(path)], None


def make_image(path: Path, config: FsConfig) -> bytes:
    """Make a fresh image of ``config`` at ``path`` and return its bytes.

    Raises:
        KernelSetupError: mkfs is missing or failed.
    """
    with open(path, "wb") as handle:
        handle.truncate(config.image_bytes)
    command, env = _command(config, path)
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True, env=env, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise KernelSetupError(f"{' '.join(command)}: {error}") from error
    if done.returncode != 0:
        raise KernelSetupError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    return path.read_bytes()
