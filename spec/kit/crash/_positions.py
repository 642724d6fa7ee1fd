"""Faults by position in a ledger's own calls, and what a run did with them (SPEC.md §Crash, R-CRASH-1..4,
R-STORE-13; docs/crash-target.md §Faults).

A ``FaultAt`` names a kind of call (``FAULT_KINDS``: the effects each kind is counted by) and its position
among the calls of that kind the faulted operation makes. ``positions(recording, fault)`` counts, in a
recording made *without* the fault (a reference run), the calls of the fault's kind the operation made on
its own thread, between its invoke and return marks; ``each_position(workload, count)`` turns a workload
whose fault has ``occurrence=0`` ("each") into one workload per position, named ``<name>@<n>`` (when the
operation made no such call, a single ``@1`` whose fault can never strike: it is reported not exercised).
``describe_fault`` says what a fault was, for reports.

Not guaranteed: that a position in a reference run is the same call in the faulted run up to the fault
(it is, for a deterministic ledger: the runs are identical until the fault strikes).
"""

from __future__ import annotations

import errno
from dataclasses import replace

from capture_ledger.spec.crash.durability import (
    Create,
    Fsync,
    Rename,
    SyncDir,
    Syncfs,
    Truncate,
    Unlink,
    Write,
)
from capture_ledger.spec.kit.crash._trace import FaultAt, Invoke, Recording, Return, Workload

__all__ = ["FAULT_KINDS", "describe_fault", "each_position", "positions"]

#: The effects by which each kind of call is counted (a seam call name of our store, or a kind of any
#: ledger's calls: ``sync`` is every file or directory sync, ``rename`` every rename).
FAULT_KINDS: dict[str, tuple[type, ...]] = {
    "sync": (Fsync, SyncDir, Syncfs),
    "sync_dir": (SyncDir,),
    "syncfs": (Syncfs,),
    "fsync": (Fsync,),
    "create_file": (Create,),
    "open_append": (Create,),
    "unlink": (Unlink,),
    "rename": (Rename,),
    "write": (Write,),
    "truncate": (Truncate,),
}

_ORDINAL = {1: "1st", 2: "2nd", 3: "3rd"}


def positions(recording: Recording, fault: FaultAt) -> int:
    """How many calls of ``fault``'s kind its operation made in ``recording`` (a run without the fault)."""
    kinds = FAULT_KINDS.get(fault.call, ())
    thread = None
    inside = False
    count = 0
    for event, issued in zip(recording.trace, recording.threads, strict=True):
        if isinstance(event, Invoke) and event.op == fault.op:
            inside, thread = True, issued
        elif isinstance(event, Return) and event.op == fault.op:
            break
        elif inside and issued == thread and kinds and isinstance(event, kinds):
            count += 1
    return count


def each_position(workload: Workload, count: int) -> tuple[Workload, ...]:
    """One workload per position of ``workload``'s "each" fault (``occurrence=0``), ``count`` of them (at
    least one); a workload without such a fault is returned as it is."""
    each = [f for f in workload.faults if f.occurrence == 0]
    if not each:
        return (workload,)
    return tuple(
        replace(
            workload,
            name=f"{workload.name}@{n}",
            faults=tuple(replace(f, occurrence=n) if f.occurrence == 0 else f for f in workload.faults),
        )
        for n in range(1, max(count, 1) + 1)
    )


def describe_fault(fault: FaultAt) -> str:
    """``EIO after at the 2nd sync of operation 0`` and the like."""
    code = errno.errorcode.get(fault.fault.code, str(fault.fault.code))
    n = fault.occurrence
    where = "each" if n == 0 else _ORDINAL.get(n, f"{n}th")
    return f"{code} {fault.fault.when} at the {where} {fault.call} of operation {fault.op}"
