"""Recording a crash workload on any ledger from outside: its setup, then its operations under strace, the
trace parsed into the study's ``Recording`` (SPEC.md §Crash, R-CRASH-1..4; docs/crash-target.md §Recording).

``record_target(target, workload, scratch)`` runs, each in a child process (``driver``):

1. the *setup*: the factory opened on an empty workspace and the workload's setup operations, traced only to
   learn which bytes it removed (the ``ext4-nojournal`` model's stale blocks); the workspace after it is the
   durable baseline (opening the ledger is part of the setup: its schema, lock files and directories);
2. the *operations*, traced, each between invoke and return marks, on a fresh copy of that baseline at the
   same path. A workload's failed call (``FaultAt``: the n-th call of a kind, ``sync_dir``, ``fsync``, ...
   in one operation; ``sync``, ``rename``: the n-th of whatever the ledger makes) is made by strace (``-e
inject=SYSCALL:error=EIO:when=N``, the call skipped and failed), and whether it struck is read off the trace
(``(INJECTED)``: ``Recording.injected``; a fault whose call the operation never made is not injected, and
the judgement says "not exercised"); ``record_positions`` records a fault at *each* position, one run per
call the operation makes; a parked operation
   (``Pause``) is held by strace (``delay_enter`` at its thread's N-th call of the parking syscall) while the
   others run; operations on several threads (``threads``) start together, every sync held
   ``GATHER_DELAY`` seconds on its way out so that others queue behind it (group commit, R-STORE-9). N comes
   from a first, *reference* run without injection: the call of the planned kind in that operation, counted
   among its thread's calls of the same syscall, as strace counts them;
3. whether a parked operation was held as planned, read off the trace: its N-th call of the syscall comes
   after every other operation returned (``Recording.paused``; a variant without the call runs
   sequentially and says so, like the model study).

The result is the study's ``Recording`` (the same ``spans_at``, ``judge`` and pictures apply), with the
target's label as its configuration; the trace's threads are the kernel's thread IDs. ``supported(workload,
operations)`` says why a workload cannot run on a target that lacks some operation, or writes a torn line
in our store's own format.

Not guaranteed: that the OS schedules concurrent operations as the model study's scheduler does (a parked
operation is held by time, then checked); effects of processes the target starts outside the traced tree.
"""

from __future__ import annotations

import errno
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from capture_ledger.spec.core.model import Delete, Record, RecordFailure, Retire
from capture_ledger.spec.crash import replay
from capture_ledger.spec.crash.durability import Effect
from capture_ledger.spec.kit.crash._positions import FAULT_KINDS, each_position, positions
from capture_ledger.spec.kit.crash._trace import (
    FaultAt,
    Invoke,
    Recording,
    Return,
    TargetConfig,
    TraceEvent,
    Workload,
)
from capture_ledger.spec.kit.crash.strace._parser import (
    Marker,
    ParsedTrace,
    Snapshot,
    parse_trace,
    take_snapshot,
)
from capture_ledger.spec.kit.crash.strace._plan import Parked, RunPlan
from capture_ledger.spec.kit.crash.strace._syscalls import Syscall
from capture_ledger.spec.kit.crash.strace._tracing import Injection, run_traced

__all__ = [
    "GATHER_DELAY",
    "PARK_DELAY",
    "Target",
    "TraceError",
    "record_positions",
    "record_target",
    "supported",
]

#: Seconds strace holds a parked operation's call (the others must finish within it).
PARK_DELAY = 0.5
#: Seconds strace holds every sync on its way out in a workload run on several threads.
GATHER_DELAY = 0.05
_METHOD = {Record: "record", RecordFailure: "record_failure", Retire: "retire", Delete: "delete"}


class TraceError(RuntimeError):
    """The target could not be opened, or a traced run of it failed; the message says why."""


@dataclass(kw_only=True, frozen=True, slots=True)
class Target:
    """A ledger factory to trace: ``module:callable``, keyword options, a label for reports, and the
    directory its module imports from."""

    target: str
    options: tuple[tuple[str, Any], ...] = ()
    label: str = ""
    cwd: Path | None = None

    @property
    def name(self) -> str:
        """The label, or the target with its options."""
        if self.label:
            return self.label
        extra = ", ".join(f"{k}={v}" for k, v in self.options)
        return f"{self.target}({extra})" if extra else self.target


def supported(workload: Workload, operations: Sequence[str]) -> str | None:
    """Why ``workload`` cannot run on a ledger with ``operations``, or ``None``."""
    if workload.torn:
        return "it writes a torn line in the file store's own format"
    missing = sorted({_METHOD[type(op)] for op in (*workload.setup, *workload.ops)} - set(operations))
    return f"the ledger has no {', '.join(missing)}" if missing else None


def _materialize(workspace: Path, snapshot: Snapshot) -> None:
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    for name, data in sorted(snapshot.items()):
        path = workspace / name
        if data is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


@dataclass(kw_only=True, frozen=True, slots=True)
class _Run:
    parsed: ParsedTrace
    calls: tuple[Syscall, ...]
    outcome: dict[str, Any]


def _traced(
    target: Target,
    workload: Workload,
    scratch: Path,
    *,
    ops: Sequence[Any],
    snapshot: Snapshot,
    groups: tuple[tuple[int, ...], ...] = (),
    parked: Parked | None = None,
    injections: Sequence[Injection] = (),
) -> _Run:
    workspace = scratch / "workspace"
    _materialize(workspace, snapshot)
    trace, result = scratch / "run.strace", scratch / "result.json"
    result.unlink(missing_ok=True)
    plan = RunPlan(
        target=target.target,
        workspace=str(workspace),
        ops=tuple(ops),
        result=str(result),
        options=dict(target.options),
        groups=groups,
        parked=parked,
    ).write(scratch / "plan.json")
    run = run_traced(
        [sys.executable, "-m", "capture_ledger.spec.kit.crash.strace._driver", str(plan)],
        trace,
        injections=injections,
        cwd=target.cwd,
    )
    if not result.exists():
        why = (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]
        raise TraceError(f"the traced run of {target.name} on {workload.name} failed: {why}")
    outcome: dict[str, Any] = json.loads(result.read_text(encoding="utf-8"))
    if outcome.get("error"):
        raise TraceError(f"cannot open {target.name}: {outcome['error']}")
    with trace.open(encoding="utf-8", errors="surrogateescape") as lines:  # read once: calls and effects
        parsed = parse_trace(lines, str(workspace), snapshot, cwd=str(target.cwd or Path.cwd()))
    return _Run(parsed=parsed, calls=parsed.calls, outcome=outcome)


def _marks(parsed: ParsedTrace, op: int) -> tuple[int, int, int] | None:
    """The thread, invoke line and return line of operation ``op``."""
    invoke = ret = tid = None
    for event in parsed.events:
        if isinstance(event.item, Marker) and event.item.text.split(" ", 1)[0] == str(op):
            if event.item.kind == "INVOKE":
                invoke, tid = event.line, event.tid
            elif event.item.kind == "RETURN":
                ret = event.line
    if invoke is None or ret is None or tid is None:
        return None
    return tid, invoke, ret


def _matches(call: Syscall, kinds: frozenset[str], effects: dict[int, type]) -> bool:
    if "lock" in kinds:
        if call.name == "flock" and ("LOCK_EX" in call.args or "LOCK_SH" in call.args):
            return True
        if call.name == "fcntl" and "F_SETLK" in call.args and "F_UNLCK" not in call.args:
            return True
    wanted = tuple(t for kind in kinds for t in FAULT_KINDS.get(kind, ()))
    return bool(wanted) and issubclass(effects.get(call.line, type(None)), wanted)


def _locate(run: _Run, op: int, kinds: frozenset[str], occurrence: int) -> tuple[str, int, int] | None:
    """The syscall, thread and per-thread count (strace's ``when``) of ``op``'s ``occurrence``-th call of
    ``kinds``, or ``None`` when it made no such call."""
    marks = _marks(run.parsed, op)
    if marks is None:
        return None
    tid, start, end = marks
    effects = {e.line: type(e.item) for e in run.parsed.events if e.tid == tid}
    found = [c for c in run.calls if c.tid == tid and start < c.line < end and _matches(c, kinds, effects)]
    if len(found) < occurrence:
        return None
    chosen = found[occurrence - 1]
    count = sum(1 for c in run.calls if c.tid == tid and c.name == chosen.name and c.line <= chosen.line)
    return chosen.name, tid, count


def _held(run: _Run, op: int, syscall: str, count: int) -> bool:
    """Whether ``op``'s thread made its ``count``-th ``syscall`` after every other operation returned."""
    marks = _marks(run.parsed, op)
    if marks is None:
        return False
    tid = marks[0]
    own = [c for c in run.calls if c.tid == tid and c.name == syscall]
    if len(own) < count:
        return False
    returns = [
        e.line
        for e in run.parsed.events
        if isinstance(e.item, Marker) and e.item.kind == "RETURN" and e.item.text.split(" ", 1)[0] != str(op)
    ]
    return all(line < own[count - 1].line for line in returns)


def _recording(
    target: Target,
    workload: Workload,
    run: _Run,
    freed: tuple[bytes, ...],
    paused: bool | None,
    injected: tuple[FaultAt, ...] = (),
) -> Recording:
    trace: list[TraceEvent] = []
    threads: list[str] = []
    for event in run.parsed.events:
        item = event.item
        if isinstance(item, Marker):
            number, _, rest = item.text.partition(" ")
            if not number.isdigit():
                continue
            if item.kind == "INVOKE":
                trace.append(Invoke(op=int(number), label=rest, thread=str(event.tid)))
            elif item.kind == "RETURN":
                status, _, outcome = rest.partition(" ")
                trace.append(Return(op=int(number), outcome=outcome, raised=status == "raised"))
            else:
                continue
        else:
            trace.append(item)
        threads.append(str(event.tid))
    baseline = replace(run.parsed.baseline, freed=freed)
    config = TargetConfig(label=target.name)
    return Recording(
        workload=workload,
        config=config,
        baseline=baseline,
        trace=tuple(trace),
        threads=tuple(threads),
        inode_names=dict(run.parsed.names),
        paused=paused,
        injected=injected,
    )


def _struck(run: _Run, fault: FaultAt, syscall: str) -> bool:
    """Whether strace injected a fault into a ``syscall`` of ``fault``'s operation in ``run``."""
    marks = _marks(run.parsed, fault.op)
    if marks is None:
        return False
    tid, start, end = marks
    return any(c.injected and c.tid == tid and c.name == syscall and start < c.line < end for c in run.calls)


def _faulted(
    target: Target,
    workload: Workload,
    scratch: Path,
    *,
    reference: _Run,
    snapshot: Snapshot,
    freed: tuple[bytes, ...],
) -> Recording:
    """The faulted run of ``workload``: each fault made by strace at the call the reference run locates."""
    injections, located = [], []
    for fault in workload.faults:
        where = _locate(reference, fault.op, frozenset({fault.call}), fault.occurrence)
        if where is not None:
            code = errno.errorcode.get(fault.fault.code, "EIO")
            injections.append(Injection(syscall=where[0], when=where[2], error=code))
            located.append((fault, where[0]))
    run = _traced(target, workload, scratch, ops=workload.ops, snapshot=snapshot, injections=injections)
    injected = tuple(fault for fault, syscall in located if _struck(run, fault, syscall))
    return _recording(target, workload, run, freed, None, injected)


def _setup(target: Target, workload: Workload, scratch: Path) -> tuple[Snapshot, tuple[bytes, ...]]:
    setup = _traced(target, workload, scratch, ops=workload.setup, snapshot={})
    effects: list[Effect] = [e.item for e in setup.parsed.events if not isinstance(e.item, Marker)]
    freed = tuple(replay(setup.parsed.baseline, effects).freed)
    return take_snapshot(scratch / "workspace"), freed


def record_positions(
    target: Target, workload: Workload, scratch: Path, *, park_delay: float = PARK_DELAY
) -> tuple[Recording, ...]:
    """Record ``workload`` on ``target``; a workload whose fault strikes *each* position (``occurrence=0``)
    gives one recording per call of that kind its operation makes in a reference run
    (``positions.each_position``: ``<name>@<n>``; a single ``@1``, not exercised, when it makes none).

    Raises:
        TraceError: the target could not be opened, or a traced run failed.
    """
    each = [f for f in workload.faults if f.occurrence == 0]
    if not each:
        return (record_target(target, workload, scratch, park_delay=park_delay),)
    snapshot, freed = _setup(target, workload, scratch)
    plain = replace(workload, faults=())
    reference = _traced(target, plain, scratch, ops=workload.ops, snapshot=snapshot)
    count = positions(_recording(target, plain, reference, freed, None), each[0])
    return tuple(
        _faulted(target, w, scratch, reference=reference, snapshot=snapshot, freed=freed)
        for w in each_position(workload, count)
    )


def record_target(
    target: Target, workload: Workload, scratch: Path, *, park_delay: float = PARK_DELAY
) -> Recording:
    """Record ``workload`` on ``target`` from outside (see the module docstring).

    Args:
        target: the ledger factory.
        workload: a crash workload the target supports (``supported``).
        scratch: an empty directory for the workspace, the plans and the traces.
        park_delay: seconds a parked operation is held.

    Returns:
        The recording, as the model study's.

    Raises:
        TraceError: the target could not be opened, or a traced run failed.
        ValueError: the workload's fault strikes each position (``record_positions`` records it).
    """
    if any(f.occurrence == 0 for f in workload.faults):
        raise ValueError(f"{workload.name} faults each position: record it with record_positions")
    snapshot, freed = _setup(target, workload, scratch)
    ops = workload.ops
    if workload.faults:
        reference = _traced(target, workload, scratch, ops=ops, snapshot=snapshot)
        return _faulted(target, workload, scratch, reference=reference, snapshot=snapshot, freed=freed)
    if workload.pause is not None:
        pause = workload.pause
        plan = Parked(op=pause.op, syscall="", count=0, delay=park_delay, reference=True)
        reference = _traced(target, workload, scratch, ops=ops, snapshot=snapshot, parked=plan)
        where = _locate(reference, pause.op, pause.calls, pause.occurrence)
        if where is None:  # the operation never makes the call it parks at: it ran alone, first
            return _recording(target, workload, reference, freed, False)
        syscall, _, count = where
        held = Parked(op=pause.op, syscall=syscall, count=count, delay=park_delay)
        injection = Injection(syscall=syscall, when=count, delay_enter=park_delay)
        run = _traced(
            target, workload, scratch, ops=ops, snapshot=snapshot, parked=held, injections=[injection]
        )
        return _recording(target, workload, run, freed, _held(run, pause.op, syscall, count))
    if workload.threads:
        slow = Injection(syscall="fsync,fdatasync,syncfs", delay_exit=GATHER_DELAY)
        run = _traced(
            target, workload, scratch, ops=ops, snapshot=snapshot, groups=workload.threads, injections=[slow]
        )
        return _recording(target, workload, run, freed, None)
    run = _traced(target, workload, scratch, ops=ops, snapshot=snapshot)
    return _recording(target, workload, run, freed, None)
