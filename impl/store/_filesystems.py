"""Which file system holds a lineage directory, and the fence sync that is safe there (SPEC.md R-STORE-10).

``FileLineageStore(directory, fence_sync="auto")`` (the default) asks ``detect(directory)`` at open. It reads
the file system type with ``statfs(2)`` (``f_type``) and, for ext4, whether it has a journal: it maps the
directory's ``st_dev`` to the kernel's block device name (``/sys/dev/block/<major>:<minor>``, else the mount
source in ``/proc/self/mountinfo``), then reads ``/sys/fs/ext4/<device>/journal_task`` (``<none>`` without a
journal, a thread ID with one), else looks for ``/proc/fs/jbd2/<device>-*`` (present only with a journal).
Each answer names the persistence model of the crash study (docs/crash.md) that matches it, and the
cheapest ``fence_sync`` the study shows safe under that model:

| detected | model | fence_sync |
|---|---|---|
| ext4 with a journal, XFS, btrfs | journaled | ``"directory"`` |
| ext4 without a journal | ext4-nojournal | ``"file"``; ``syncfs`` from ``SYNCFS_FROM`` (16) IDs a retire |
| tmpfs, ramfs (nothing survives a crash) | volatile | ``"directory"`` |
| anything else, or nothing detectable | unknown | ``"file"`` (safe under every model studied) |

``"file"`` rather than ``"syncfs"`` without a journal: both are safe there (with the incarnation lines of
R-STORE-14 and a new ledger renamed into place fsynced, R-STORE-3, the crash study finds ``"file"`` clean
under all three models and ``"syncfs"`` never broken, and so does the kernel study), but ``syncfs`` flushes
every dirty page of the whole file system, so its cost grows with other writers on it, while ``"file"``
costs one fsync of an empty file per new fence. Measured (benchmarks/bench_fence_sync.py, docs/store.md
§fence_sync="auto"): without a journal ``syncfs`` is cheaper than per-fence fsyncs from 16 IDs a batch on
(also with another job's 64 MiB dirty) and dearer for one ID, so there ``"file"`` fsyncs fences one by one
in a small retire and a retire of ``SYNCFS_FROM`` IDs or more syncs them with one ``syncfs``
(``Ordering(fence_sync="file", syncfs_from=16)``; ``Detection.syncfs_from``). With a journal
``"directory"`` is cheapest at every batch size measured (1 to 4096 IDs).

Nothing is cached: a device number can name another file system after an unmount (a loop device is
reused), and detecting costs a few hundred µs per open (one ``statfs``, ``/proc/self/mountinfo`` and one
``sysfs`` file). Not guaranteed: detection through stacked file
systems (overlayfs, FUSE, NFS answer "unknown" and get the safe option), that a device's journal is not
switched off by remounting while a store is open, or anything on platforms other than Linux (they answer
"unknown").
"""

from __future__ import annotations

import ctypes
import functools
import os
from dataclasses import dataclass
from pathlib import Path

from capture_ledger.impl.store._ordering import FenceSync

__all__ = ["MAGIC", "SYNCFS_FROM", "Detection", "choose", "detect"]

#: Without a journal, a retire of at least this many IDs syncs its fences with one ``syncfs``: cheaper than
#: an fsync per fence from 16 IDs on (0.23x at 16, 0.38x at 4096), dearer for one (2.6x) on this disk
#: (``benchmarks/bench_fence_sync.py --dir D --rounds 3``, docs/store.md).
SYNCFS_FROM = 16

#: ``statfs`` ``f_type`` values of the file systems this module knows (linux/magic.h).
MAGIC: dict[int, str] = {
    0xEF53: "ext4",  # ext2, ext3 and ext4 share it; the journal check tells them apart
    0x58465342: "xfs",
    0x9123683E: "btrfs",
    0x01021994: "tmpfs",
    0x858458F6: "ramfs",
}

_JOURNALED = frozenset({"xfs", "btrfs"})
_VOLATILE = frozenset({"tmpfs", "ramfs"})


@dataclass(frozen=True, slots=True)
class Detection:
    """What ``detect`` found about a directory's file system, and the choice that follows.

    Attributes:
        file_system: ``"ext4"``, ``"xfs"``, ``"btrfs"``, ``"tmpfs"``, ``"ramfs"``, another name read from
            ``/proc/self/mountinfo``, or ``"unknown"``.
        journal: for ext4, whether it has a journal (``None``: not ext4, or not found out).
        device: the kernel's block device name (``"vda"``, ``"loop0"``), when found.
        model: the crash study's persistence model that matches: ``"journaled"``, ``"ext4-nojournal"``,
            ``"volatile"`` or ``"unknown"``.
        fence_sync: the cheapest option the crash study shows safe under ``model``.
        reason: one sentence saying how it was decided.
        syncfs_from: with ``"file"`` on ext4 without a journal, the retire size from which one ``syncfs``
            makes a batch's fences durable (``SYNCFS_FROM``); ``None`` elsewhere.
    """

    file_system: str
    journal: bool | None
    device: str | None
    model: str
    fence_sync: FenceSync
    reason: str
    syncfs_from: int | None = None


def choose(file_system: str, journal: bool | None) -> tuple[str, FenceSync]:
    """The persistence model and the fence sync for a file system (the table of the module docstring).

    Args:
        file_system: the file system's name.
        journal: for ext4, whether it has a journal (``None`` when unknown).

    Returns:
        ``(model, fence_sync)``.
    """
    if file_system in _JOURNALED or (file_system == "ext4" and journal is True):
        return "journaled", "directory"
    if file_system == "ext4" and journal is False:
        return "ext4-nojournal", "file"
    if file_system in _VOLATILE:
        return "volatile", "directory"
    return "unknown", "file"


def detect(directory: str | os.PathLike[str]) -> Detection:
    """Detect the file system holding ``directory`` and choose its fence sync (R-STORE-10).

    Args:
        directory: an existing directory.

    Returns:
        The detection; never raises for a directory that cannot be examined (it answers "unknown").
    """
    try:
        st_dev = os.stat(directory).st_dev
    except OSError as error:
        return _decided("unknown", None, None, f"cannot stat the directory ({error.strerror})")
    return _detect(os.fspath(directory), st_dev)


def _decided(file_system: str, journal: bool | None, device: str | None, reason: str) -> Detection:
    model, fence_sync = choose(file_system, journal)
    syncfs_from = SYNCFS_FROM if model == "ext4-nojournal" else None
    return Detection(file_system, journal, device, model, fence_sync, reason, syncfs_from)


def _detect(directory: str, st_dev: int) -> Detection:
    magic = _statfs_type(directory)
    mount = _mount_of(st_dev)
    file_system = MAGIC.get(magic, "") if magic is not None else ""
    if not file_system:
        file_system = mount[0] if mount is not None else "unknown"
        if file_system in ("ext2", "ext3", "ext4"):
            file_system = "ext4"
    if file_system != "ext4":
        how = f"statfs f_type {magic:#x}" if magic is not None else "/proc/self/mountinfo"
        return _decided(file_system, None, None, f"{file_system} ({how})")
    device = _device_name(st_dev, mount[1] if mount is not None else None)
    if device is None:
        return _decided("ext4", None, None, "ext4, but its block device was not found")
    journal, how = _ext4_journal(device)
    return _decided("ext4", journal, device, f"ext4 on {device}: {how}")


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _statfs_type(directory: str) -> int | None:
    """``statfs(2)``'s ``f_type`` (the first field of ``struct statfs`` on Linux), or ``None``."""
    if os.uname().sysname != "Linux":
        return None
    buffer = ctypes.create_string_buffer(512)  # larger than struct statfs on every Linux architecture
    try:
        if _libc().statfs(os.fsencode(directory), buffer) != 0:
            return None
    except (AttributeError, OSError):
        return None
    return int(ctypes.c_long.from_buffer(buffer).value) & 0xFFFFFFFF


def _mount_of(st_dev: int) -> tuple[str, str] | None:
    """``(file system type, mount source)`` of the mount whose device is ``st_dev`` (mountinfo)."""
    wanted = f"{os.major(st_dev)}:{os.minor(st_dev)}"
    try:
        lines = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 2 and fields[2] == wanted and " - " in line:
            after = line.split(" - ", 1)[1].split()
            if len(after) >= 2:
                return after[0], after[1]
    return None


def _device_name(st_dev: int, source: str | None) -> str | None:
    """The kernel's name of the block device ``st_dev`` (``/sys/dev/block``), else the mount source's."""
    link = Path(f"/sys/dev/block/{os.major(st_dev)}:{os.minor(st_dev)}")
    try:
        return Path(os.path.realpath(link, strict=True)).name
    except OSError:
        pass
    if source is not None and source.startswith("/dev/"):
        return Path(os.path.realpath(source)).name
    return None


def _ext4_journal(device: str) -> tuple[bool | None, str]:
    """Whether the ext4 on ``device`` has a journal, and how that was found out."""
    task = Path("/sys/fs/ext4") / device / "journal_task"
    try:
        text = task.read_text(encoding="utf-8").strip()
    except OSError:
        text = None
    if text is not None:
        journal = text != "<none>"
        return journal, f"{task} reads {text!r}"
    jbd2 = Path("/proc/fs/jbd2")
    try:
        entries = [entry.name for entry in jbd2.iterdir()]
    except OSError:
        return None, f"neither {task} nor {jbd2} can be read"
    if any(name.startswith(f"{device}-") for name in entries):
        return True, f"{jbd2}/{device}-* exists"
    return False, f"no {jbd2}/{device}-* entry"
