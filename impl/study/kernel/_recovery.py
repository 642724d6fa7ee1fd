"""Recovering a crash state with the real kernel, as a reboot would (SPEC.md §Crash; docs/crash.md §The
kernel study).

``Recoverer`` keeps one image file on ``/dev/shm``, one loop device over it and one mountpoint. For each crash
state it rewrites the whole image (the image at ``START`` plus the state's writes), runs ``e2fsck -fp`` first
when the configuration has no journal (a boot's preen pass; when preen gives up, exit 4, ``e2fsck -fy`` as an
administrator would, and the state notes it), drops the loop device's buffer cache, and mounts it read-write,
so the kernel replays the journal (ext4), the log (XFS) or the log tree (btrfs) and processes orphans in its
own code; XFS and btrfs get no fsck first (a boot runs none: ``fsck.xfs`` does nothing, btrfs has no boot-time
check). The body then reads the lineage directory in place (``Recovered``); the mount is undone after it,
lazily when something still holds it.

Not guaranteed: recovery by anything but this kernel's ext4, XFS and btrfs and this e2fsprogs; a state the
kernel will not mount is reported (``Recovered.image`` is ``None`` and ``note`` says why), never raised.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator, Sequence
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


def _joined(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


class Recoverer:
    """One image, one loop device and one mountpoint under ``root``, reused for every state of ``fs``.

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
        self._stack = contextlib.ExitStack()
        self._image = root
        self._device = ""
        self._target = root

    def __enter__(self) -> Recoverer:
        self._new_slot()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stack.close()

    def _new_slot(self) -> None:
        self.slots += 1
        self._image = self.root / f"state-{self.slots}.img"
        self._target = self.root / f"state-{self.slots}"
        self._target.mkdir(parents=True, exist_ok=True)
        with open(self._image, "wb") as handle:
            handle.truncate(self.fs.image_bytes)  # a loop device takes its size when attached
        try:  # direct I/O over tmpfs where the kernel offers it: mounts measured faster
            self._device = self._stack.enter_context(loop_device(self._image, direct_io=True))
        except KernelSetupError:
            self._device = self._stack.enter_context(loop_device(self._image, direct_io=False))

    def abandon(self) -> None:
        """Give up the current mount (something still holds it: a hung reader); use a fresh slot."""
        unmount(self._target)
        self._new_slot()

    def _write(self, base: bytes, writes: Sequence[tuple[int, bytes]]) -> None:
        fd = os.open(self._image, os.O_WRONLY)
        try:
            os.pwrite(fd, base, 0)
            for offset, data in writes:
                os.pwrite(fd, data, offset)
        finally:
            os.close(fd)

    def _fsck(self) -> str:
        e2fsck = tool("e2fsck") or "e2fsck"
        done = subprocess.run([e2fsck, "-fp", str(self._image)], check=False, capture_output=True)
        if done.returncode < 4:
            return ""
        again = subprocess.run([e2fsck, "-fy", str(self._image)], check=False, capture_output=True)
        return f"e2fsck -p gave up (exit {done.returncode}); e2fsck -y exited {again.returncode}"

    @contextlib.contextmanager
    def recovered(self, base: bytes, writes: Sequence[tuple[int, bytes]]) -> Iterator[Recovered]:
        """Recover the image ``base`` + ``writes`` and yield what its lineage directory holds, mounted.

        Args:
            base: the image at ``START``.
            writes: the state's writes, in order (``states.materialize``).

        Yields:
            The recovered directory (unmounted after the body).
        """
        self._write(base, writes)
        note = self._fsck() if self.fs.fsck_first else ""
        drop_buffers(self._device)
        try:
            mount(self._device, self._target, self.fs.options, self.fs.kind)
        except OSError as error:
            yield Recovered(image=None, directory=None, note=_joined(note, f"mount failed: {error}"))
            return
        try:
            directory = self._target / LEDGER_DIRECTORY
            try:
                files = {
                    name: (directory / name).read_bytes()
                    for name in os.listdir(directory)
                    if name not in self.locks
                }
            except OSError as error:
                yield Recovered(
                    image=None,
                    directory=None,
                    note=_joined(note, f"the lineage directory cannot be read: {error}"),
                )
                return
            yield Recovered(image=DiskImage.of(files), directory=directory, note=note)
        finally:
            unmount(self._target)
