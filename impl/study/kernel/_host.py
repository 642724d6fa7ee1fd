"""What the kernel study needs from the machine, and the mounts and devices it sets up and always tears down.

``missing()`` lists what is absent, each with how to get it: root, ``/dev/fuse``, ``/dev/loop-control``,
``losetup``, ``mkfs.ext4``, ``e2fsck``, and the ``kernel`` extra (``pyfuse3``, ``trio``; pyfuse3 builds
against libfuse3: ``apt-get install fuse3 libfuse3-dev pkg-config``); ``filesystems.lacking`` adds what
XFS and btrfs need (their mkfs, the kernel's support). ``strict()`` says whether a missing
piece must fail rather than skip (``CI=true``).

Context managers, each undoing exactly what it did, in ``finally``, even when the body raised or was
interrupted: ``workspace`` (a fresh directory on ``/dev/shm``), ``fuse_daemon`` (the block-log daemon as
its own process, its mount), ``loop_device`` (``LOOP_CONFIGURE``, else ``losetup``; detach), ``mounted``
(``mount(2)``; ``umount2(2)``, lazily when busy). ``leftovers(root)`` lists any mount, loop device or daemon
still tied to a workspace, so a test can show that a failed run left nothing.

Not guaranteed: cleanup after the process itself is killed with SIGKILL (a later run's ``leftovers`` and
``sweep`` find what it left), or on machines without util-linux.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import importlib.util
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "DAEMON_MODULE",
    "MOUNT_FLAGS",
    "KernelSetupError",
    "MissingSetupError",
    "drop_buffers",
    "fuse_daemon",
    "leftovers",
    "loop_device",
    "missing",
    "mount",
    "mounted",
    "strict",
    "sweep",
    "tool",
    "unmount",
    "workspace",
]

DAEMON_MODULE = "capture_ledger.impl.study.kernel._daemon"
_PREFIX = "capture-ledger-kernel-"
_SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")
_MNT_DETACH = 2
_BLKFLSBUF = 0x1261
_LOOP_CTL_GET_FREE = 0x4C82
_LOOP_CONFIGURE = 0x4C0A
_LOOP_CLR_FD = 0x4C01
_LO_FLAGS_DIRECT_IO = 16
_LO_NAME_SIZE = 64
_LOOP_INFO64 = 232  # struct loop_info64


class KernelSetupError(RuntimeError):
    """A step of the setup failed (a command, a mount, the daemon); the message says which and why."""


class MissingSetupError(KernelSetupError):
    """The machine lacks something the kernel study needs; ``reasons`` lists each missing piece."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons
        super().__init__("the kernel crash study cannot run here: " + "; ".join(reasons))


def strict() -> bool:
    """Whether a missing piece must fail instead of skip: in CI (``CI=true``)."""
    return os.environ.get("CI", "").lower() in ("true", "1")


def tool(name: str) -> str | None:
    """The path of command ``name``, looking in the sbin directories too (root's tools)."""
    found = shutil.which(name)
    if found:
        return found
    for directory in _SBIN:
        candidate = Path(directory) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def missing() -> list[str]:
    """What the machine lacks for the kernel study, each with how to get it (empty: all present)."""
    reasons = []
    if not sys.platform.startswith("linux"):
        return ["a Linux kernel (FUSE, loop devices and ext4)"]
    if os.geteuid() != 0:
        reasons.append("root (losetup, mount and mkfs.ext4 on a loop device need it)")
    if not os.path.exists("/dev/fuse"):
        reasons.append("/dev/fuse (load the fuse module: modprobe fuse)")
    if not os.path.exists("/dev/loop-control"):
        reasons.append("/dev/loop-control (load the loop module: modprobe loop)")
    for command, package in (("losetup", "util-linux"), ("mkfs.ext4", "e2fsprogs"), ("e2fsck", "e2fsprogs")):
        if tool(command) is None:
            reasons.append(f"{command} (apt-get install {package})")
    for module in ("pyfuse3", "trio"):
        if importlib.util.find_spec(module) is None:
            reasons.append(
                f"the Python package {module} (pip install -e '.[kernel]'; pyfuse3 builds against libfuse3: "
                "apt-get install fuse3 libfuse3-dev pkg-config)"
            )
    return reasons


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise KernelSetupError(f"{' '.join(command)}: {error}") from error
    if done.returncode != 0:
        raise KernelSetupError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout.strip()


# ------------------------------------------------------------------------------------------ mounts
@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


#: The mount options that are ``mount(2)`` flags rather than the file system's own (``mount(8)`` splits
#: them off the same way); ``ro`` is deliberately not among them: recovery mounts read-write.
MOUNT_FLAGS = {"noatime": 1024, "nodiratime": 2048, "nosuid": 2, "nodev": 4, "noexec": 8}


def mount(device: str, target: Path, options: str = "", kind: str = "ext4") -> None:
    """``mount(2)`` ``device`` on ``target`` as file-system type ``kind`` with ``options`` (read-write: the
    journal or log is replayed). Words of ``options`` in ``MOUNT_FLAGS`` become flags, the rest the file
    system's data string.

    Raises:
        OSError: the kernel refused.
    """
    words = [w for w in options.split(",") if w]
    flags = sum(MOUNT_FLAGS[w] for w in set(words) if w in MOUNT_FLAGS)
    data = ",".join(w for w in words if w not in MOUNT_FLAGS).encode() or None
    if _libc().mount(device.encode(), str(target).encode(), kind.encode(), flags, data) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"mount {device} on {target}: {os.strerror(code)}")


def unmount(target: Path) -> None:
    """Unmount ``target``; lazily (``MNT_DETACH``) when it is busy. Nothing when it is not mounted."""
    path = str(target).encode()
    if _libc().umount2(path, 0) == 0:
        return
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOENT):
        return  # not mounted
    if _libc().umount2(path, _MNT_DETACH) != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.ENOENT):
        raise OSError(code, f"umount {target}: {os.strerror(code)}")


@contextlib.contextmanager
def mounted(device: str, target: Path, options: str = "", kind: str = "ext4") -> Iterator[Path]:
    """Mount ``device`` on ``target`` (file-system type ``kind``) for the body; unmount after, lazily when
    busy."""
    target.mkdir(parents=True, exist_ok=True)
    mount(device, target, options, kind)
    try:
        yield target
    finally:
        unmount(target)


def drop_buffers(device: str) -> None:
    """Drop the block device's buffer cache (``BLKFLSBUF``): its backing file was rewritten underneath."""
    fd = os.open(device, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, _BLKFLSBUF, 0)
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------ loop devices
def _clear(device: str) -> bool:
    """Detach ``device`` with ``LOOP_CLR_FD`` (the kernel detaches it once its last user closes it when it
    is still held: autoclear); whether it is detached or will be."""
    try:
        handle = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return not _attached(device)
    try:
        fcntl.ioctl(handle, _LOOP_CLR_FD, 0)
    except OSError as error:
        return error.errno == errno.ENXIO  # not attached
    finally:
        os.close(handle)
    return True


def _detach(device: str) -> None:
    if _clear(device):
        return
    for attempt in range(20):
        done = subprocess.run(["losetup", "-d", device], check=False, capture_output=True, text=True)
        if done.returncode == 0 or "No such device" in done.stderr or not _attached(device):
            return
        time.sleep(0.05 * (attempt + 1))


def _attached(device: str) -> bool:
    return Path(f"/sys/block/{Path(device).name}/loop/backing_file").exists()


def _configure(backing: Path, *, direct_io: bool) -> str | None:
    """Attach a free loop device to ``backing`` with ``ioctl`` calls, as ``losetup`` does, without a process
    (``LOOP_CTL_GET_FREE``, ``LOOP_CONFIGURE``); ``None`` when the kernel or ``/dev`` does not offer it."""
    name = str(backing).encode()[: _LO_NAME_SIZE - 1]
    flags = _LO_FLAGS_DIRECT_IO if direct_io else 0
    try:
        source = os.open(backing, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
        try:
            for _ in range(20):  # another process may take the free device first
                device = f"/dev/loop{fcntl.ioctl(control, _LOOP_CTL_GET_FREE)}"
                handle = os.open(device, os.O_RDWR | os.O_CLOEXEC)
                try:
                    info = struct.pack("=5Q4I", 0, 0, 0, 0, 0, 0, 0, 0, flags) + name.ljust(
                        _LO_NAME_SIZE, b"\0"
                    )
                    info = info.ljust(_LOOP_INFO64, b"\0")
                    fcntl.ioctl(handle, _LOOP_CONFIGURE, struct.pack("=II", source, 0) + info + bytes(64))
                    return device
                except OSError as error:
                    if error.errno != errno.EBUSY:
                        return None
                finally:
                    os.close(handle)
        finally:
            os.close(control)
    except OSError:
        return None
    finally:
        os.close(source)
    return None


@contextlib.contextmanager
def loop_device(backing: Path, *, direct_io: bool) -> Iterator[str]:
    """A loop device over ``backing`` for the body; detached after. Attached and detached with ``ioctl`` calls
    where the kernel offers ``LOOP_CONFIGURE`` (no process), else with ``losetup``.

    Args:
        backing: the image file.
        direct_io: attach with direct I/O (``--direct-io=on``) and check that the kernel kept it (the
            faithful setting over the FUSE image: one request per block-layer write, in order).

    Raises:
        KernelSetupError: ``losetup`` failed, or direct I/O was asked for and refused.
    """
    device = _configure(backing, direct_io=direct_io)
    if device is None:
        losetup = tool("losetup") or "losetup"
        device = _run([losetup, "-f", "--show", f"--direct-io={'on' if direct_io else 'off'}", str(backing)])
    try:
        if direct_io:
            dio = Path(f"/sys/block/{Path(device).name}/loop/dio")
            if dio.exists() and dio.read_text().strip() != "1":
                raise KernelSetupError(f"{device}: the kernel refused direct I/O on {backing}")
        yield device
    finally:
        _detach(device)


# ------------------------------------------------------------------------------------------ daemon
@contextlib.contextmanager
def fuse_daemon(mountpoint: Path, log: Path, base: Path, *, timeout: float = 20.0) -> Iterator[Path]:
    """The block-log daemon serving ``base`` at ``mountpoint/disk.img``, as its own process.

    Yields:
        The control file (``mountpoint/ctl``).

    Raises:
        KernelSetupError: the daemon exited or did not mount within ``timeout`` seconds (its stderr says
            why).
    """
    mountpoint.mkdir(parents=True, exist_ok=True)
    errors = mountpoint.parent / f"{mountpoint.name}.stderr"
    with open(errors, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", DAEMON_MODULE, str(mountpoint), str(log), str(base)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        control = mountpoint / "ctl"
        deadline = time.monotonic() + timeout
        while not (os.path.ismount(mountpoint) and control.exists()):
            if process.poll() is not None:
                raise KernelSetupError(
                    f"the FUSE daemon exited ({process.returncode}): "
                    f"{errors.read_text(errors='replace').strip()[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise KernelSetupError(f"the FUSE daemon did not mount {mountpoint} within {timeout:g} s")
            time.sleep(0.01)
        yield control
    finally:
        unmount(mountpoint)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        if os.path.ismount(mountpoint):
            unmount(mountpoint)


# --------------------------------------------------------------------------------------- workspace
@contextlib.contextmanager
def workspace() -> Iterator[Path]:
    """A fresh directory on ``/dev/shm`` (tmpfs: images need no durability) for one run; removed after,
    once nothing is mounted in it."""
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    root = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=base))
    try:
        yield root
    finally:
        sweep(root)
        shutil.rmtree(root, ignore_errors=True)


def leftovers(root: Path) -> list[str]:
    """Mounts, loop devices and daemon processes still tied to ``root`` (empty after a clean teardown)."""
    root_text = str(root)
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point == root_text or point.startswith(root_text + "/"):
                found.append(f"mount {point}")
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):
            target = backing.read_text().strip()
            if target.startswith(root_text + "/"):
                found.append(f"loop device /dev/{backing.parent.parent.name} over {target}")
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            arguments = cmdline.read_bytes().split(b"\0")
            ours = any(a.startswith(root_text.encode()) for a in arguments)
            if DAEMON_MODULE.encode() in arguments and ours:
                found.append(f"daemon process {cmdline.parent.name}")
    return found


def sweep(root: Path) -> None:
    """Tear down whatever ``leftovers(root)`` finds: unmount (innermost first), kill, detach."""
    for item in sorted(leftovers(root), key=len, reverse=True):
        kind, _, rest = item.partition(" ")
        if kind == "mount":
            with contextlib.suppress(OSError):
                unmount(Path(rest))
        elif kind == "daemon":
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(rest.split()[-1]), signal.SIGKILL)
    for item in leftovers(root):
        if item.startswith("loop device "):
            _detach(item.split()[2])
