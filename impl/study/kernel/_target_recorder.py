"""Recording any ledger's crash workloads on a real file-system image, under strace (SPEC.md §Crash,
R-CRASH-1..4; docs/crash-target.md §On the real kernel).

``record_target_on_kernel(target, workloads, fs, root)`` gives each workload a fresh image of ``fs`` of its
own (made by mkfs on a zeroed file), serves it through the block-log daemon, attaches a loop device with
direct I/O over it and mounts it, as ``recorder`` does for our own store; there it runs
``spec.kit.crash.strace.record_positions`` — the very recorder of ``crash --target``: the setup, reference and
faulted runs, each a child process under strace — with the workspace on the mounted image. Its own image makes
a workload's recording independent of the workloads run before it: no block or inode table holds what another
left (without a journal a crash may show such old bytes in a file, and on one shared image the directory
ledger's verdict moved between runs; the image costs about half a second per workload, and zeroing a shared
image's free blocks, though cheaper, left the verdict moving: docs/crash-target.md §On the real kernel). The
target is opened through ``target_factory.open_marked``, which makes the workspace durable and marks ``START``
when a run opens its first handle, ``I``/``R`` around each protocol call and ``END`` after the last close; the
recorder writes ``W <n>`` before workload ``n`` on its image. The strace recorder's plan and trace files are
symbolic links to ``root``, off the image, so the log holds the ledger's writes only. After the image's mounts
are torn down its log is cut: a workload that gave ``k`` recordings (one per fault position) owns the last
``k`` ``START``/``END`` segments after its ``W`` mark (the earlier ones are its setup and reference runs),
each with the image at its ``START`` as base.

Each ``I``/``R`` mark is mapped to the trace: the ``n``-th call on thread ``t`` is the ``n``-th ``Invoke`` of
``t``. A mark gets two counts of trace events: ``lower`` (events surely complete when it was written:
those up to the thread's own event before it) and ``upper`` (events that may have been: those before the
thread's own next event); for one thread they are equal. ``target_window`` turns them into the kernel
study's ``TraceWindow``: completed from ``lower`` before the crash, reached from ``upper`` after it.

Not guaranteed: block writes nobody waited for land where they happened to run (as in ``recorder``), so a
second run may log other writes (timing); under ``ext4-nojournal`` a free block may hold bytes of the same
workload's setup or reference run (the same bytes in every run), which the model's freed bytes do not list
beyond the setup's (a state showing them would be reported outside the model).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from capture_ledger.impl.study.kernel._blocklog import MARK, WRITE, LogRecord, read_log
from capture_ledger.impl.study.kernel._compare import TraceWindow
from capture_ledger.impl.study.kernel._filesystems import FsConfig, make_image
from capture_ledger.impl.study.kernel._host import fuse_daemon, loop_device, mounted
from capture_ledger.impl.study.kernel._recorder import LEDGER_DIRECTORY, KernelRecording
from capture_ledger.impl.study.kernel._target_factory import FACTORY
from capture_ledger.spec.crash.durability import describe_effect
from capture_ledger.spec.kit.crash import Invoke, Recording, Return, Workload
from capture_ledger.spec.kit.crash.strace import PARK_DELAY, Target, TraceError, record_positions

__all__ = [
    "TRACE_DIRECTORY",
    "TargetKernelRecording",
    "TraceMark",
    "record_target_on_kernel",
    "target_window",
    "window_text",
]

#: The directory of the image that holds each workload's scratch (its workspace below it).
TRACE_DIRECTORY = "trace"
#: The strace recorder's files kept off the image (symbolic links from its scratch directory).
_OFF_IMAGE = ("plan.json", "run.strace")


@dataclass(kw_only=True, frozen=True, slots=True)
class TraceMark:
    """An ``I``/``R`` mark at ``position`` in a segment's records: trace events ``[:lower]`` had completed
    when it was written, at most ``[:upper]`` had."""

    position: int
    lower: int
    upper: int


@dataclass(kw_only=True, frozen=True, slots=True)
class TargetKernelRecording:
    """One recording of a target on a real image: the strace recording, the image at its ``START``, the log
    up to its ``END``, the marks, and the workspace's path in the image (``workspace``)."""

    fs: FsConfig
    recording: Recording
    base: bytes
    records: tuple[LogRecord, ...]
    marks: tuple[TraceMark, ...]
    workspace: str
    seconds: float

    def kernel_recording(self) -> KernelRecording:
        """The kernel study's record of it (``timeline.block_timeline`` draws from it)."""
        return KernelRecording(
            fs=self.fs,
            recording=self.recording,
            base=self.base,
            records=self.records,
            marks=tuple((m.position, m.lower) for m in self.marks),
            seconds=self.seconds,
        )


def target_window(marks: Sequence[TraceMark], low: int, high: int, length: int) -> TraceWindow:
    """Where in the trace a crash between log records ``low`` and ``high`` happened."""
    completed = max((m.lower for m in marks if m.position <= low), default=0)
    reached = min((m.upper for m in marks if m.position >= high), default=length)
    cuts = {completed} | {m.lower for m in marks if low < m.position < high}
    return TraceWindow(completed=completed, reached=max(reached, completed), cuts=tuple(sorted(cuts)))


def window_text(recording: Recording, window: TraceWindow, files: tuple[tuple[str, str], ...] | None) -> str:
    """What the block timeline cannot place: the trace's events in the crash window (marks fall only
    around operations), and the image the kernel gave back."""
    names = recording.inode_names
    events = recording.trace[window.completed : window.reached]
    lines = [
        "trace events in the crash window (under way or complete; which blocks each wrote is not known):"
    ]
    lines += [f"  {_event(e, names)}" for e in events] or ["  (none)"]
    if files is not None:
        lines.append("→ kernel image: " + ("; ".join(f"{n}: {d}" for n, d in files) or "(empty)"))
    return "\n".join(lines)


def _event(event: object, names: dict[int, str]) -> str:
    if isinstance(event, Invoke):
        return f"invoke op {event.op}: {event.label}"
    if isinstance(event, Return):
        return f"{'raised' if event.raised else 'return'} op {event.op}: {event.outcome}"
    return f"effect: {describe_effect(event, names)}"  # type: ignore[arg-type]


def _marks(recording: Recording, texts: Sequence[tuple[int, str]]) -> tuple[TraceMark, ...]:
    """Map each ``I``/``R`` mark (position, text) to its counts in ``recording.trace``."""
    trace, threads = recording.trace, recording.threads
    invokes: dict[str, list[int]] = {}
    returns: dict[int, int] = {}
    for index, event in enumerate(trace):
        if isinstance(event, Invoke):
            invokes.setdefault(threads[index], []).append(index)
    for index, event in enumerate(trace):
        if isinstance(event, Return):
            returns[event.op] = index
    own: dict[str, list[int]] = {}
    for index, tid in enumerate(threads):
        own.setdefault(tid, []).append(index)
    found = []
    for position, text in texts:
        kind, tid, number = text.split(" ")
        calls = invokes.get(tid, [])
        if int(number) >= len(calls):
            continue  # a call the trace has no Invoke for (the ledger called itself): not a mark
        invoke = calls[int(number)]
        op = trace[invoke]
        assert isinstance(op, Invoke)
        mine = own[tid]
        if kind == "I":
            after = [i for i in mine if i > invoke]
            found.append(
                TraceMark(position=position, lower=invoke + 1, upper=after[0] if after else len(trace))
            )
            continue
        end = returns.get(op.op)
        if end is None:
            continue
        before = [i for i in mine if i < end]
        found.append(TraceMark(position=position, lower=(before[-1] + 1) if before else 0, upper=end))
    return tuple(found)


def _segments(records: Sequence[LogRecord]) -> dict[int, list[tuple[int, int]]]:
    """Per ``W <n>`` mark, the (``START``, ``END``) positions of the runs after it."""
    segments: dict[int, list[tuple[int, int]]] = {}
    current, start = -1, None
    for position, record in enumerate(records):
        if record.op != MARK:
            continue
        if record.text.startswith("W "):
            current, start = int(record.text[2:]), None
        elif record.text == "START":
            start = position
        elif record.text == "END" and start is not None:
            segments.setdefault(current, []).append((start, position))
            start = None
    return segments


def _record_workload(
    target: Target, index: int, workload: Workload, fs: FsConfig, root: Path, *, park_delay: float
) -> tuple[list[TargetKernelRecording], str | None]:
    """Record ``workload`` (the ``index``-th) on ``target`` on a fresh ``fs`` image of its own: its
    recordings, or why it could not be recorded."""
    root.mkdir(parents=True)
    base_path, log = root / "base.img", root / "block.log"
    base = make_image(base_path, fs)
    with (
        fuse_daemon(root / "fuse", log, base_path) as control,
        loop_device(root / "fuse" / "disk.img", direct_io=True) as device,
        mounted(device, root / fs.kind, fs.options, fs.kind) as mount,
    ):
        (mount / LEDGER_DIRECTORY).mkdir()  # the recoverer's directory; the workspaces lie beside it
        (mount / TRACE_DIRECTORY).mkdir()
        options = (("target", target.target), ("control", str(control)), ("options", dict(target.options)))
        wrapped = Target(target=FACTORY, options=options, label=target.name, cwd=target.cwd)
        fd = os.open(control, os.O_WRONLY)
        try:
            os.write(fd, f"MARK W {index}".encode())
            scratch = mount / TRACE_DIRECTORY / workload.name
            side = root / "side"
            scratch.mkdir()
            side.mkdir()
            for name in _OFF_IMAGE:
                (scratch / name).symlink_to(side / name)
            began = time.perf_counter()
            try:
                recordings = record_positions(wrapped, workload, scratch, park_delay=park_delay)
            except TraceError as error:
                return [], str(error)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            seconds = (time.perf_counter() - began) / len(recordings)
        finally:
            os.close(fd)
    records = read_log(log)
    runs = _segments(records).get(index, [])
    if len(runs) < len(recordings):
        return [], f"the block log has {len(runs)} START/END runs, not {len(recordings)}"
    wanted = {
        run[0]: (recording, run[1])
        for recording, run in zip(recordings, runs[-len(recordings) :], strict=True)
    }
    found: list[TargetKernelRecording] = []
    image = bytearray(base)
    for position, record in enumerate(records):
        if position in wanted:
            recording, end = wanted[position]
            segment = records[position + 1 : end]
            texts = [
                (i, r.text) for i, r in enumerate(segment) if r.op == MARK and r.text[:2] in ("I ", "R ")
            ]
            found.append(
                TargetKernelRecording(
                    fs=fs,
                    recording=recording,
                    base=bytes(image),
                    records=tuple(segment),
                    marks=_marks(recording, texts),
                    workspace=f"{TRACE_DIRECTORY}/{workload.name}/workspace",
                    seconds=seconds,
                )
            )
        if record.op == WRITE:
            image[record.offset : record.offset + len(record.data)] = record.data
    return found, None


def record_target_on_kernel(
    target: Target,
    workloads: Sequence[Workload],
    fs: FsConfig,
    root: Path,
    *,
    park_delay: float = PARK_DELAY,
) -> tuple[list[TargetKernelRecording], list[tuple[str, str]]]:
    """Record each of ``workloads`` on ``target``, each on a fresh ``fs`` image of its own (see the module
    docstring).

    Args:
        target: the ledger factory.
        workloads: crash workloads the target supports (``strace.supported``).
        fs: the file-system configuration.
        root: an empty scratch directory (``host.workspace``).
        park_delay: seconds a parked operation is held.

    Returns:
        The recordings, in the order of ``workloads``, and ``(workload, why)`` for each workload that could
        not be recorded.

    Raises:
        KernelSetupError: a setup step of an image failed (everything set up is torn down first).
    """
    root.mkdir(parents=True, exist_ok=True)
    found: list[TargetKernelRecording] = []
    failed: list[tuple[str, str]] = []
    for index, workload in enumerate(workloads):
        directory = root / f"w{index}"
        try:
            recordings, why = _record_workload(target, index, workload, fs, directory, park_delay=park_delay)
        finally:
            shutil.rmtree(directory, ignore_errors=True)  # the image and its log: one workload's at a time
        found += recordings
        if why is not None:
            failed.append((workload.name, why))
    return found, failed
