"""What a crash workload is and what a recorded run of it holds (SPEC.md §Crash, R-CRASH-1..4).

A ``Workload`` is setup operations (their files are the durable baseline), then a few ledger operations
whose effects are recorded, perhaps one of them parked against the others (``Pause``), run on threads of
their own (``threads``) or with injected faults (``FaultAt``, ``Fault``). A ``Recording`` is one run of
it: the baseline, the trace of durability effects (``spec.crash.durability``) with the ``Invoke`` and
``Return`` markers of each operation, whether a scheduled run ran as designed, and which of the requested
faults were actually injected (``injected``; one that never struck, the ledger making no such call, is *not
exercised*, and the judgement says so rather than "ok"). Recorders of any kind
produce it (our store's seam, strace for any ledger, the block log of a real kernel); the crash
judgement (``judgement``) reads it.

Not guaranteed: that a recorder saw every effect (each recorder says what it does not see).
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from typing import Any, Protocol

from capture_ledger.spec.concurrency.history import apply_operation
from capture_ledger.spec.core.model import Delete, Operation, Record, RecordFailure, Retire
from capture_ledger.spec.crash.durability import Baseline, Effect

__all__ = [
    "Configured",
    "Fault",
    "FaultAt",
    "Invoke",
    "Pause",
    "Recording",
    "Return",
    "TargetConfig",
    "TraceEvent",
    "Workload",
    "run_operation",
]


@dataclass(kw_only=True, frozen=True, slots=True)
class Invoke:
    """Store operation number ``op`` was invoked (on ``thread``); ``label`` is its ``repr``."""

    op: int
    label: str
    thread: str = "main"


@dataclass(kw_only=True, frozen=True, slots=True)
class Return:
    """Store operation number ``op`` returned; ``outcome`` is its result or raised exception, as text;
    ``raised`` when it raised (the caller got no acknowledgement)."""

    op: int
    outcome: str
    raised: bool = False


TraceEvent = Effect | Invoke | Return


class Configured(Protocol):
    """What a recording says of the ledger it ran: a label (a store configuration, or a target's name)."""

    @property
    def label(self) -> str:
        """The label reports show."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetConfig:
    """The configuration of a ledger recorded from outside: only its label."""

    label: str


@dataclass(frozen=True, slots=True)
class Fault:
    """One planned failure: ``code`` is ``errno.EIO`` or ``errno.ENOSPC``; ``when`` says at which moment."""

    code: int = errno.EIO
    when: str = "before"


@dataclass(kw_only=True, frozen=True, slots=True)
class Pause:
    """A fixed schedule: operation ``op`` runs on its own handle and thread and is parked before its
    ``occurrence``-th seam call named in ``calls``; meanwhile the other operations run, in order, on the
    main handle and thread; then it resumes and finishes (our store's seam study schedules it; a traced
    target is parked by time)."""

    op: int
    calls: frozenset[str]
    occurrence: int = 1


@dataclass(kw_only=True, frozen=True, slots=True)
class FaultAt:
    """During operation ``op``, its ``occurrence``-th call of kind ``call`` fails (``Fault``).

    ``call`` is a seam call name of our store (``sync_dir``, ``fsync``, ``syncfs``, ``create_file``,
    ``unlink``, ``write``, ``truncate``, ...) or a position among whatever the ledger makes: ``sync`` (any
    ``fsync``/``fdatasync`` of a file or a directory, or ``syncfs``), ``rename``. Each kind is counted over
    the operation's own calls (``FAULT_KINDS``: the effects of each kind). ``occurrence`` ``0`` means *each*
    position: the study runs the workload once per call of that kind the operation makes in a reference
    run without faults (``positions.each_position``), the n-th run failing the n-th call.
    """

    op: int
    call: str
    occurrence: int = 1
    fault: Fault = field(default_factory=Fault)


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """A crash-exploration workload: ``setup`` is run first and its files are the durable baseline; the
    effects of ``ops`` are recorded. ``torn`` lists IDs whose ledger gets a torn last line after setup;
    ``faults`` makes seam calls of given operations fail (an operation that raised is unacknowledged).
    ``threads`` (instead of ``pause``) runs each group of operation indexes on a thread of its own under
    a schedule that gathers them."""

    name: str
    ops: tuple[Operation, ...]
    setup: tuple[Operation, ...] = ()
    pause: Pause | None = None
    threads: tuple[tuple[int, ...], ...] = ()
    torn: tuple[str, ...] = ()
    faults: tuple[FaultAt, ...] = ()
    note: str = ""

    def ids(self) -> tuple[str, ...]:
        """Every rollout ID the workload names, sorted."""
        found: set[str] = set()
        for op in (*self.setup, *self.ops):
            if isinstance(op, Retire | Delete):
                found.update(str(i) for i in op.rollout_ids)  # type: ignore[attr-defined]
            else:
                found.add(str(getattr(op, "rollout_id", "")))
        return tuple(sorted(found))


def run_operation(ledger: Any, op: Operation) -> object:
    """Call the ledger method ``op`` stands for and return its result.

    Raises:
        TypeError: ``op`` is a read (workloads only write).
        Exception: whatever the ledger raises.
    """
    if isinstance(op, Record | RecordFailure | Retire | Delete):
        return apply_operation(ledger, op)
    raise TypeError(f"a crash workload writes; {op!r} is not a write")


@dataclass(kw_only=True, frozen=True, slots=True)
class Recording:
    """One recorded run: the baseline, the trace, and (for a scheduled workload) whether the schedule ran
    as designed: the parked operation reached its pause point and the others finished meanwhile."""

    workload: Workload
    config: Configured
    baseline: Baseline
    trace: tuple[TraceEvent, ...]
    threads: tuple[str, ...]
    inode_names: dict[int, str]
    paused: bool | None
    #: The workload's faults that were actually injected (the recorder saw each fail its call); a
    #: requested fault missing here was *not exercised* (the operation made no such call).
    injected: tuple[FaultAt, ...] = ()

    def not_injected(self) -> tuple[FaultAt, ...]:
        """The faults the workload requested that the run never injected."""
        return tuple(f for f in self.workload.faults if f not in self.injected)
