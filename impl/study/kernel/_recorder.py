"""Record a crash-study workload on a real file-system image (ext4, XFS, btrfs): the store's trace and the
kernel's block writes (SPEC.md §Crash, R-CRASH-1..4; docs/crash.md §The kernel study).

``record_on_kernel`` makes a fresh image of a file-system configuration, serves it through the block-log
daemon (its own process), attaches a loop device with direct I/O over it, mounts it, and runs the workload
on a directory of the mount exactly as ``recording.record`` does on a temporary one (setup, torn lines,
injected faults; ``StoreConfig.run_workload``: a paused operation under the scheduler, a workload's
``threads`` each on a handle of its own under the gathering schedule; every handle opened by the
configuration, ``StoreConfig.open``, so ``group_commit`` and ``combine_removals`` hold as in the model
study), through a ``RecordingFileSystem`` that also writes a mark into the block log after every event it
records: ``T n`` says the store's trace then held
``n`` completed events. The setup is made durable (``syncfs``) before the ``START`` mark, so the image at
``START`` is the durable baseline (with the bytes the setup removed, ``freed``, which its free blocks may
still hold); ``END`` follows the last operation. Everything is torn down in
``finally`` (unmount, detach, stop the daemon), whatever failed.

The result, ``KernelRecording``, holds the ordinary ``Recording`` (the model study's input: baseline and
trace, and the faults the workload's plan injected, ``Recording.injected``, as ``recording.record`` keeps
them: a requested fault the run never injected is ``Recording.not_injected``, "not exercised"), the image at
``START`` and the log between ``START`` and ``END``.

Not guaranteed: block I/O that nobody waited for (background writeback, the journal's timer) lands in the
log where it happened to run; workloads are short so that it rarely does.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from capture_ledger.impl.store.fs import FileSystem, OsFileSystem
from capture_ledger.impl.study.crash import (
    RecordingFileSystem,
    StoreConfig,
    freed_by_setup,
    lay_baseline,
    operation_runner,
)
from capture_ledger.impl.study.kernel._blocklog import MARK, WRITE, LogRecord, read_log
from capture_ledger.impl.study.kernel._filesystems import FsConfig, make_image
from capture_ledger.impl.study.kernel._host import KernelSetupError, fuse_daemon, loop_device, mounted
from capture_ledger.spec.kit.crash import Recording, Workload

__all__ = ["LEDGER_DIRECTORY", "KernelRecording", "MarkingRecorder", "record_on_kernel"]

#: The lineage directory inside each image.
LEDGER_DIRECTORY = "ledger"


class MarkingRecorder(RecordingFileSystem):
    """A ``RecordingFileSystem`` that marks the block log each time its trace grows (``T n``).

    The mark is written from ``appended``, under the recorder's mutex, right after the event: an effect is
    appended after its system call returned, so every block the call waited for is logged before the mark
    that counts it; and since no other thread can append meanwhile, even when several threads share the
    recorder (a workload's ``threads``, a ``Pause``) every length is marked, once, in order.
    """

    def __init__(self, inner: FileSystem, mark: Callable[[str], None]) -> None:
        self._mark = mark
        self._marked = -1
        self._mark_lock = threading.Lock()
        super().__init__(inner)

    def progress(self) -> None:
        """Mark the trace's current length, unless it was already marked."""
        self._mark_length(len(self.trace))

    def appended(self, length: int) -> None:
        """Mark that the trace holds ``length`` events now."""
        self._mark_length(length)

    def _mark_length(self, length: int) -> None:
        with self._mark_lock:
            if length != self._marked:
                self._marked = length
                self._mark(f"T {length}")


@dataclass(kw_only=True, frozen=True, slots=True)
class KernelRecording:
    """One workload run on a real image: the store's recording, the image at ``START``, the block log.

    ``records`` are the log's records strictly between the ``START`` and ``END`` marks; ``marks`` maps the
    position (in ``records``) of each ``T n`` mark to ``n``.
    """

    fs: FsConfig
    recording: Recording
    base: bytes
    records: tuple[LogRecord, ...]
    marks: tuple[tuple[int, int], ...]
    seconds: float


def _drive(
    workload: Workload, config: StoreConfig, directory: Path, mark: Callable[[str], None]
) -> Recording:
    """``recording.record`` on ``directory``, through a ``MarkingRecorder``, with ``START``/``END`` marks."""
    # One handle for the setup and the recording, as ``record`` has (``OsFileSystem.listdir`` opens the
    # directory afresh per listing, so the recorder's baseline lists what the setup wrote, btrfs included).
    inner = OsFileSystem(directory, stripes=config.stripes)
    try:
        lay_baseline(workload, directory, inner)
        inner.syncfs()  # the baseline is durable before START
        recorder, run = operation_runner(workload, inner, lambda seam: MarkingRecorder(seam, mark))
        mark("START")
        recorder.progress()
        paused = config.run_workload(workload, directory=directory, recorder=recorder, run=run)
        mark("END")
        return Recording(
            workload=workload,
            config=config,
            baseline=replace(recorder.baseline, freed=freed_by_setup(workload, stripes=config.stripes)),
            trace=tuple(recorder.trace),
            threads=tuple(recorder.threads),
            inode_names=recorder.inode_names(),
            paused=paused,
            injected=tuple(recorder.injected),
        )
    finally:
        inner.close_all()


def _split(records: list[LogRecord], base: bytes) -> tuple[bytes, list[LogRecord]]:
    """The image at ``START`` (``base`` plus every write before it) and the records up to ``END``."""
    texts = [r.text if r.op == MARK else "" for r in records]
    try:
        start = texts.index("START")
        end = texts.index("END", start)
    except ValueError as error:
        raise KernelSetupError("the block log has no START or END mark") from error
    image = bytearray(base)
    for record in records[:start]:
        if record.op == WRITE:
            image[record.offset : record.offset + len(record.data)] = record.data
    return bytes(image), records[start + 1 : end]


def record_on_kernel(workload: Workload, config: StoreConfig, fs: FsConfig, root: Path) -> KernelRecording:
    """Run ``workload`` with store ``config`` on a fresh ``fs`` image served by the block-log daemon.

    Args:
        workload: what to run (a crash-study workload).
        config: the store under study.
        fs: the file-system configuration.
        root: an empty scratch directory (``host.workspace``) for the image, the log and the mounts.

    Returns:
        The recording, the image at ``START`` and the block log up to ``END``.

    Raises:
        KernelSetupError: a setup step failed (everything set up is torn down first).
        Exception: whatever the workload's setup raised (likewise after teardown).
    """
    started = time.perf_counter()
    root.mkdir(parents=True, exist_ok=True)
    base_path, log = root / "base.img", root / "block.log"
    base = make_image(base_path, fs)
    with (
        fuse_daemon(root / "fuse", log, base_path) as control,
        loop_device(root / "fuse" / "disk.img", direct_io=True) as device,
        mounted(device, root / fs.kind, fs.options, fs.kind) as target,
    ):
        directory = target / LEDGER_DIRECTORY
        directory.mkdir()
        fd = os.open(control, os.O_WRONLY)
        try:

            def mark(text: str) -> None:
                os.write(fd, f"MARK {text}".encode())

            recording = _drive(workload, config, directory, mark)
        finally:
            os.close(fd)
    start, records = _split(read_log(log), base)
    marks = tuple(
        (position, int(r.text[2:]))
        for position, r in enumerate(records)
        if r.op == MARK and r.text.startswith("T ")
    )
    return KernelRecording(
        fs=fs,
        recording=recording,
        base=start,
        records=tuple(records),
        marks=marks,
        seconds=time.perf_counter() - started,
    )
