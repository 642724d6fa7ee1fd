"""Fixtures of the store's tests: small file systems made and mounted in the test (loop ext4, tmpfs).

A test that needs one is skipped, saying why, where this process cannot mount (not root, no loop device,
no ``mkfs.ext4``), and fails instead when ``CI=true``: there the runner is expected to provide them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def mount_refused(kind: str) -> str | None:
    """Why a ``kind`` (``"ext4"`` or ``"tmpfs"``) file system cannot be mounted here, or ``None``."""
    if os.geteuid() != 0:
        return "mounting needs root"
    tools = ["mount", "umount"] + (["mkfs.ext4", "losetup"] if kind == "ext4" else [])
    for tool in tools:
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if kind == "ext4" and not Path("/dev/loop-control").exists():
        return "no loop devices (/dev/loop-control is missing)"
    return None


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def mount_ext4(image: Path, mountpoint: Path, *, size: str, options: tuple[str, ...] = ()) -> None:
    """Make an ext4 image of ``size`` and loop-mount it at ``mountpoint`` (skips or fails as above)."""
    refused = mount_refused("ext4")
    if refused is not None:
        _unavailable(refused)
    mountpoint.mkdir(exist_ok=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", *options, str(image), size], check=True, capture_output=True)
    mounted = subprocess.run(
        ["mount", "-o", "loop", str(image), str(mountpoint)], check=False, capture_output=True
    )
    if mounted.returncode != 0:
        _unavailable(f"mount -o loop refused: {mounted.stderr.decode(errors='replace').strip()}")


def mount_tmpfs(mountpoint: Path, *, size: str) -> None:
    """Mount a tmpfs of ``size`` at ``mountpoint`` (skips or fails as above)."""
    refused = mount_refused("tmpfs")
    if refused is not None:
        _unavailable(refused)
    mountpoint.mkdir(exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mountpoint)],
        check=False,
        capture_output=True,
    )
    if mounted.returncode != 0:
        _unavailable(f"mount -t tmpfs refused: {mounted.stderr.decode(errors='replace').strip()}")


def unmount(mountpoint: Path) -> None:
    """Unmount ``mountpoint`` (lazily if something still holds it)."""
    if subprocess.run(["umount", str(mountpoint)], check=False, capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False, capture_output=True)


@pytest.fixture
def small_ext4(tmp_path: Path) -> Iterator[Path]:
    """A fresh 32 MB ext4 image (with its journal) loop-mounted at a directory of ``tmp_path``."""
    mountpoint = tmp_path / "ext4"
    mount_ext4(tmp_path / "ext4.img", mountpoint, size="32M")
    try:
        yield mountpoint
    finally:
        unmount(mountpoint)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A fresh 4 MB tmpfs mounted at a directory of ``tmp_path``."""
    mountpoint = tmp_path / "tmpfs"
    mount_tmpfs(mountpoint, size="4m")
    try:
        yield mountpoint
    finally:
        unmount(mountpoint)
