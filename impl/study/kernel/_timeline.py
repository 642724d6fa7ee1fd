"""A crash state's block-level timeline: the store's operations and effects interleaved with the block
writes and flushes the kernel issued, and which writes the state kept (docs/crash.md §The kernel study).

Used for every kernel state reported outside its model and for every counterexample of the kernel study;
the lines read top to bottom in log order and stop at the end of the crash's window.

Not guaranteed: the wording (it is for people); which kernel structure a block belongs to is not named, only
whether it holds ledger text.
"""

from __future__ import annotations

from collections.abc import Sequence

from capture_ledger.impl.study.kernel._blocklog import FLUSH, MARK, WRITE
from capture_ledger.impl.study.kernel._recorder import KernelRecording
from capture_ledger.impl.study.kernel._states import CrashState, Epoch
from capture_ledger.spec.crash.durability import describe_effect
from capture_ledger.spec.kit.crash import Invoke, Return, TraceEvent

__all__ = ["block_timeline"]


def _event(event: TraceEvent, names: dict[int, str]) -> str:
    if isinstance(event, Invoke):
        return f"invoke op {event.op}: {event.label}"
    if isinstance(event, Return):
        return f"{'raised' if event.raised else 'return'} op {event.op}: {event.outcome}"
    return f"effect: {describe_effect(event, names)}"


def _snippet(data: bytes) -> str:
    text = data.rstrip(b"\0")
    if b'{"' in text[:64] or text[:1] == b"{":
        return f" {text[:40]!r}{'...' if len(text) > 40 else ''}"
    return ""


def block_timeline(recorded: KernelRecording, found: Sequence[Epoch], state: CrashState) -> str:
    """The timeline of ``state``: every record of the log up to its window's end, with each write of the
    crash's epoch marked kept or lost.

    Args:
        recorded: the recording the state comes from.
        found: its epochs (``states.epochs``).
        state: the crash state.

    Returns:
        One line per event; runs of durable writes are folded into one line.
    """
    trace = recorded.recording.trace
    names = recorded.recording.inode_names
    marks = dict(recorded.marks)
    epoch = found[state.epoch]
    fate: dict[int, list[tuple[int, int, bool, str]]] = {}
    for index, write in enumerate(epoch.writes):
        fate.setdefault(write.position, []).append(
            (write.offset, len(write.data), index in state.kept, _snippet(write.data))
        )
    lines = [f"state {state.label} of {len(epoch.writes)} ({state.kind}); fs {recorded.fs.name}"]
    completed = 0
    durable_run = 0

    def fold() -> None:
        nonlocal durable_run
        if durable_run:
            lines.append(f"  {durable_run} block write(s), durable")
            durable_run = 0

    for position, record in enumerate(recorded.records[: state.high]):
        if position == state.low + 1 and state.low >= 0:
            fold()
            lines.append("  ~~ the crash may happen from here on ~~")
        if record.op == MARK and position in marks:
            fold()
            for event in trace[completed : marks[position]]:
                lines.append(_event(event, names))
            completed = max(completed, marks[position])
        elif record.op == WRITE:
            if position in fate:
                fold()
                for offset, length, kept, snippet in fate[position]:
                    lines.append(f"  W block @{offset} +{length} {'KEPT' if kept else 'lost'}{snippet}")
            else:
                durable_run += 1
        elif record.op == FLUSH:
            fold()
            lines.append("  S flush")
    fold()
    closing = "flush" if epoch.closed is not None else "end of the run"
    lines.append(f"  ~~ crash (before the {closing} at log record {state.high}) ~~")
    return "\n".join(lines)
