"""Recovering a crash state with the real kernel, as a reboot would (SPEC.md §Crash; docs/crash.md §The
kernel study).

``Recoverer`` keeps *slots* — an image file on ``/dev/shm``, a loop device over it, a mountpoint — reused from
state to state. For each crash state it makes the image file hold exactly the image at ``START`` plus the
state's writes (the kernel's recovery of the state before wrote to the file in places only it knows, so every
64 KiB of the file is compared with the image in place, through a shared mapping, and rewritten where it
differs); then it runs ``e2fsck -fp`` first when the configuration has no journal (a boot's preen pass; when
preen gives up, exit 4, ``e2fsck -fy`` as an administrator would, and the state notes it), drops the loop
device's buffer cache, and mounts it read-write, so the kernel replays the journal (ext4), the log (XFS) or
the log tree (btrfs) and processes orphans in its own code; XFS and btrfs get no fsck first (a boot runs none:
``fsck.xfs`` does nothing, btrfs has no boot-time check). The mount adds ``noatime`` (reading the files back
then writes no inode; it changes nothing the recovery does). The lineage directory's files are read in the
process (no command), and the body reads the directory in place (``Recovered``); the mount is undone after it,
lazily when something still holds it.

``recovered`` recovers one state in the current slot. ``each`` recovers a sequence of states in order with
``ahead`` more slots: while the caller judges one state, a worker thread unmounts the slot used before and
recovers the next state in it (the kernel's mount, ``e2fsck`` and the image writes release the GIL, so the
two overlap on two cores). What each state recovers to is the same as with ``recovered``: every state gets
its own whole image, its own fsck and its own mount, on a loop device nobody else uses meanwhile.

XFS slots mount with ``nouuid`` (two copies of one image share a UUID; the option skips only the check
for a second mount of it); btrfs is never recovered ahead (its mount looks the file system up by the fsid
every copy shares).

``counts`` says what was done (``states``, ``attached`` loop devices, ``spawned`` processes — ``e2fsck``
only —, ``mounts``, the bytes ``written`` to image files); ``phases`` the seconds spent writing images, in
``e2fsck``, mounting, reading the files back and unmounting (in the worker thread under ``each``).

Not guaranteed: recovery by anything but this kernel's ext4, XFS and btrfs and this e2fsprogs; a state the
kernel will not mount is reported (``Recovered.image`` is ``None`` and ``note`` says why), never raised.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import subprocess
import time
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from capture_ledger.impl.store.fs import lock_file_name
from capture_ledger.impl.study.kernel._filesystems import FsConfig
from capture_ledger.impl.study.kernel._host import (
    KernelSetupError,
    drop_buffers,
    loop_device,
    mount,
    tool,
    unmount,
)
from capture_ledger.impl.study.kernel._recorder import LEDGER_DIRECTORY
from capture_ledger.spec.crash.durability import DiskImage

__all__ = ["Recovered", "Recoverer"]


@dataclass(kw_only=True, frozen=True, slots=True)
class Recovered:
    """A recovered state: the lineage directory's files (lock files left out) and where they are mounted,
    or ``None`` with ``note`` saying why the kernel would not give them; ``note`` also says when the
    preen pass of ``e2fsck`` was not enough."""

    image: DiskImage | None
    directory: Path | None
    note: str = ""


def _quietly(command: list[str]) -> int:
    """Run ``command``, its output discarded; its exit status."""
    return subprocess.run(
        command, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    ).returncode


def _joined(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


class _Slot:
    """An image file (open, and mapped shared: what the kernel wrote to it shows there), the loop device
    over it, the mountpoint; and ``shadow``, the bytes last written to
    the image (``base`` with the ``dirty`` ranges overwritten), so that the next image is made in memory by
    restoring those ranges and overwriting others, then compared with the file chunk by chunk."""

    __slots__ = ("base", "device", "dirty", "fd", "image", "mapped", "shadow", "target")

    def __init__(self, image: Path, device: str, target: Path) -> None:
        self.image = image
        self.device = device
        self.target = target
        self.base = b""
        self.shadow = bytearray()
        self.dirty: list[tuple[int, int]] = []
        self.fd = -1
        self.mapped = mmap.mmap(-1, 1)  # the image file's shared mapping, once the slot has one

    def prepare(self, base: bytes, writes: Sequence[tuple[int, bytes]]) -> bytearray:
        """``base`` with ``writes`` applied, in order (later writes to a range win)."""
        if self.base is not base:
            self.base, self.shadow, self.dirty = base, bytearray(base), []
        shadow = self.shadow
        for offset, length in self.dirty:
            shadow[offset : offset + length] = base[offset : offset + length]
        self.dirty = [(offset, len(data)) for offset, data in writes]
        for offset, data in writes:
            shadow[offset : offset + len(data)] = data
        return shadow


#: The unit in which an image file is compared with the image it must hold, and rewritten where it differs.
_CHUNK = 64 << 10

#: The file systems ``each`` recovers ahead. Not btrfs: its mount finds a file system by the fsid on the
#: device, the same in two slots' copies of one image (kernels since 6.7 give a clone a temporary fsid,
#: older ones refuse or pick the device already known), so its states are recovered one at a time.
_PIPELINED = ("ext4", "xfs")

#: The phases of a state's recovery, as ``Recoverer.phases`` names them.
PHASES = ("write", "fsck", "mount", "read", "unmount")


class Recoverer:
    """Slots (image, loop device, mountpoint) under ``root``, reused for every state of ``fs``.

    Args:
        root: a scratch directory (``host.workspace``).
        fs: the configuration: whether to run ``e2fsck`` first, the mount options.
        stripes: the store's lock stripes (their files are left out of the image read back).
    """

    def __init__(self, root: Path, fs: FsConfig, *, stripes: int) -> None:
        self.root = root
        self.fs = fs
        self.locks = {lock_file_name(s) for s in range(stripes)}
        self.slots = 0
        self.counts = {"states": 0, "attached": 0, "spawned": 0, "mounts": 0, "written": 0}
        self.phases = dict.fromkeys(PHASES, 0.0)
        # nouuid: XFS refuses a second mount of the same UUID, and two slots hold copies of one image; the
        # option skips only that check, nothing of the log's replay.
        extra = ("noatime", "nouuid") if fs.kind == "xfs" else ("noatime",)
        self._options = ",".join(o for o in (fs.options, *extra) if o)
        self._stack = contextlib.ExitStack()
        self._slot = _Slot(root, "", root)

    def __enter__(self) -> Recoverer:
        self._slot = self._new_slot()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stack.close()

    def _new_slot(self) -> _Slot:
        self.slots += 1
        image = self.root / f"state-{self.slots}.img"
        target = self.root / f"state-{self.slots}"
        target.mkdir(parents=True, exist_ok=True)
        with open(image, "wb") as handle:
            handle.truncate(self.fs.image_bytes)  # a loop device takes its size when attached
        try:  # direct I/O over tmpfs where the kernel offers it: mounts measured faster
            device = self._stack.enter_context(loop_device(image, direct_io=True))
        except KernelSetupError:
            device = self._stack.enter_context(loop_device(image, direct_io=False))
        self.counts["attached"] += 1
        self._stack.callback(unmount, target)  # before its loop device is detached
        slot = _Slot(image, device, target)
        slot.fd = os.open(image, os.O_RDWR | os.O_CLOEXEC)
        self._stack.callback(os.close, slot.fd)
        slot.mapped = self._stack.enter_context(mmap.mmap(slot.fd, self.fs.image_bytes))
        return slot

    def abandon(self) -> None:
        """Give up the current mount (something still holds it: a hung reader); use a fresh slot."""
        unmount(self._slot.target)
        self._slot = self._new_slot()

    def _timed(self, phase: str, started: float) -> float:
        now = time.perf_counter()
        self.phases[phase] += now - started
        return now

    def _write(self, slot: _Slot, base: bytes, writes: Sequence[tuple[int, bytes]]) -> None:
        """Make ``slot``'s image file hold ``base`` + ``writes``: every ``_CHUNK`` of the file is compared
        with the image (through a shared mapping: what the kernel's recovery of the state before left) and
        rewritten when it differs, so the file ends equal to the image whatever the kernel wrote."""
        image = slot.prepare(base, writes)
        with memoryview(image) as view, memoryview(slot.mapped) as current:
            for start in range(0, len(image), _CHUNK):
                end = min(start + _CHUNK, len(image))
                # ``startswith`` compares the file's chunk in place (a memcmp, no copy of either side)
                if not image.startswith(current[start:end], start):
                    if os.pwrite(slot.fd, view[start:end], start) != end - start:
                        raise OSError(f"a short write to {slot.image}")
                    self.counts["written"] += end - start

    def _fsck(self, slot: _Slot) -> str:
        e2fsck = tool("e2fsck") or "e2fsck"
        self.counts["spawned"] += 1
        done = _quietly([e2fsck, "-fp", str(slot.image)])
        if done < 4:
            return ""
        self.counts["spawned"] += 1
        again = _quietly([e2fsck, "-fy", str(slot.image)])
        return f"e2fsck -p gave up (exit {done}); e2fsck -y exited {again}"

    def _mount(self, slot: _Slot, base: bytes, writes: Sequence[tuple[int, bytes]]) -> tuple[str, bool]:
        """Unmount ``slot`` (its previous state), write ``base`` + ``writes``, fsck it when unjournaled and
        mount it: the note, and whether it is mounted (when not, the note says why)."""
        clock = time.perf_counter()
        unmount(slot.target)
        clock = self._timed("unmount", clock)
        self.counts["states"] += 1
        self._write(slot, base, writes)
        clock = self._timed("write", clock)
        note = self._fsck(slot) if self.fs.fsck_first else ""
        drop_buffers(slot.device)
        clock = self._timed("fsck", clock)
        try:
            mount(slot.device, slot.target, self._options, self.fs.kind)
        except OSError as error:
            return _joined(note, f"mount failed: {error}"), False
        finally:
            self.counts["mounts"] += 1
            self._timed("mount", clock)
        return note, True

    def _read(self, slot: _Slot, note: str, mounted: bool) -> Recovered:
        """What ``slot``'s mounted lineage directory holds (lock files left out), read in this process."""
        if not mounted:
            return Recovered(image=None, directory=None, note=note)
        clock = time.perf_counter()
        directory = slot.target / LEDGER_DIRECTORY
        try:
            files = {
                name: (directory / name).read_bytes()
                for name in os.listdir(directory)
                if name not in self.locks
            }
        except OSError as error:
            return Recovered(
                image=None,
                directory=None,
                note=_joined(note, f"the lineage directory cannot be read: {error}"),
            )
        finally:
            self._timed("read", clock)
        return Recovered(image=DiskImage.of(files), directory=directory, note=note)

    @contextlib.contextmanager
    def recovered(self, base: bytes, writes: Sequence[tuple[int, bytes]]) -> Iterator[Recovered]:
        """Recover the image ``base`` + ``writes`` and yield what its lineage directory holds, mounted.

        Args:
            base: the image at ``START``.
            writes: the state's writes, in order (``states.materialize``).

        Yields:
            The recovered directory (unmounted after the body).
        """
        slot = self._slot
        try:
            yield self._read(slot, *self._mount(slot, base, writes))
        finally:
            clock = time.perf_counter()
            unmount(slot.target)
            self._timed("unmount", clock)

    def each(
        self, base: bytes, states: Iterable[Sequence[tuple[int, bytes]]], *, ahead: int = 1
    ) -> Generator[Recovered, None, None]:
        """Recover each of ``states`` (their writes) in order; each stays mounted until the next is asked
        for. ``ahead`` more slots are recovered in a worker thread meanwhile (0: one at a time, as
        ``recovered``); the files are read back in the caller's thread. Close the iterator
        (``contextlib.closing``) to unmount what is left before the ``Recoverer`` closes.

        Yields:
            The recovered directories, in the order of ``states``.
        """
        if ahead < 1 or self.fs.kind not in _PIPELINED:
            for writes in states:
                with self.recovered(base, writes) as back:
                    yield back
            return
        pending: deque[tuple[_Slot, Future[tuple[str, bool]]]] = deque()
        free = deque([self._slot, *(self._new_slot() for _ in range(ahead))])
        remaining = iter(states)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernel-recover") as pool:
            try:
                while True:
                    while free:
                        try:
                            writes = next(remaining)
                        except StopIteration:
                            break
                        slot = free.popleft()
                        pending.append((slot, pool.submit(self._mount, slot, base, writes)))
                    if not pending:
                        return
                    self._slot, job = pending.popleft()
                    yield self._read(self._slot, *job.result())
                    free.append(self._slot)  # a fresh one if the caller abandoned it
            finally:
                for _, job in pending:
                    with contextlib.suppress(Exception):
                        job.result()
                for slot in (*free, *(slot for slot, _ in pending), self._slot):
                    unmount(slot.target)
