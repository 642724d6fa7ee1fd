"""R-CONC-2, R-CONC-3 and R-STORE-9 read off a scheduled run: its trace of seam calls and the real directory.

``interleave`` runs a scenario under a schedule; at every point where all threads are parked it asks
``conc2_failure`` whether a ledger exists that must not (R-CONC-2), and at the end ``conc3_failure``
whether a retire removed a write made after a later delete (R-CONC-3) and ``sync_failure`` whether a
removal went on before a sync that began after its effects (R-STORE-4, R-STORE-5, R-STORE-9: what group
commit must keep). Each answers ``None`` or one line naming the clause, which the run reports beside the
linearizability verdict.

Not guaranteed: anything about operations whose effects bypass the seam (the trace does not show them), or
a reading of "started" other than the one documented on ``conc3_failure``.
"""

from __future__ import annotations

from collections.abc import Sequence

from capture_ledger.impl.store import fence_name, ledger_name
from capture_ledger.impl.store.fs import FileSystem
from capture_ledger.impl.study.interleave._scheduling import TraceStep
from capture_ledger.spec.core.model import Delete, Operation, Retire
from capture_ledger.spec.core.model import Ok as ResultOk

__all__ = ["conc2_failure", "conc3_failure", "sync_failure"]

#: The seam calls that sync the directory's entries.
_SYNCS = frozenset({"sync_dir", "syncfs"})


def conc2_failure(trace: Sequence[TraceStep], fs: FileSystem) -> str | None:
    """R-CONC-2: no ledger exists while its ID must be Retired.

    An ID must be Retired once a retire of it has returned, unless some delete of it may take effect
    after that retire: one not yet returned when the retire was invoked (concurrent, or later).
    """
    invoked: dict[int, int] = {}  # thread -> position of its current operation's invocation
    retires: list[tuple[int, Retire]] = []  # (position of the invocation, operation) of returned retires
    deletes: list[tuple[int, int | None, Delete]] = []  # (invocation, return or None, operation)
    for position, step in enumerate(trace):
        op = step.call.args[0] if step.call.args else None
        if step.call.name == "invoke":
            invoked[step.thread] = position
            if isinstance(op, Delete):
                deletes.append((position, None, op))
        elif step.call.name == "return" and isinstance(op, Delete):
            start = invoked[step.thread]
            deletes = [(i, position if i == start else r, d) for i, r, d in deletes]
        elif (
            step.call.name == "return" and isinstance(op, Retire) and isinstance(step.call.args[1], ResultOk)
        ):
            retires.append((invoked[step.thread], op))
    for start, retire in retires:
        for rollout_id in _batch(retire):
            if any(rollout_id in _batch(d) and (r is None or r > start) for _, r, d in deletes):
                continue
            if fs.stat(ledger_name(rollout_id)) is not None:
                return f"R-CONC-2: {ledger_name(rollout_id)} exists after retire([{rollout_id!r}]) returned"
    return None


def _batch(op: Retire | Delete) -> list[str]:
    """The IDs of a retire's or delete's batch (none when the batch is not a list, as validation refuses)."""
    ids = op.rollout_ids
    return [str(rid) for rid in ids] if isinstance(ids, list | tuple) else []


def conc3_failure(trace: Sequence[TraceStep]) -> str | None:
    """R-CONC-3: a write that started after a delete of its ID returned is never removed by a retire that
    fenced the ID before that delete started.

    "Started" is read as "ran its phase 1 for the ID" (``create_file`` of the fence): a retire invoked
    earlier whose phase 1 comes after the delete and the write may linearize after the write and remove it.
    Read off the trace: R fenced, then D invoked and returned, then a write W invoked that wrote the
    ledger (a ``write`` to it, or the ``rename`` of a new ledger's temporary onto its name); R's own
    ``unlink`` of that ledger afterwards, with no other unlink of it in between.
    """
    spans: dict[int, tuple[int, Operation]] = {}  # thread -> (invocation position, operation) now
    ops: list[tuple[int, int, int, Operation]] = []  # (thread, invoked, returned, operation)
    for position, step in enumerate(trace):
        if step.call.name == "invoke":
            spans[step.thread] = (position, step.call.args[0])  # type: ignore[assignment]
        elif step.call.name == "return":
            start, op = spans[step.thread]
            ops.append((step.thread, start, position, op))

    def steps(name: str, file: str) -> list[tuple[int, int]]:
        found = [
            (p, s.thread)
            for p, s in enumerate(trace)
            if s.call.name == name and s.call.args and s.call.args[0] == file and s.result is not False
        ]
        if name == "write":  # a ledger created under a temporary name is written by its rename into place
            found += [
                (p, s.thread)
                for p, s in enumerate(trace)
                if s.call.name == "rename" and len(s.call.args) > 1 and s.call.args[1] == file
            ]
        return sorted(found)

    for r_thread, r_start, r_end, retire in ops:
        if not isinstance(retire, Retire):
            continue
        for rollout_id in _batch(retire):
            ledger = ledger_name(rollout_id)
            fenced = [p for p, t in steps("create_file", fence_name(rollout_id)) if t == r_thread]
            fenced = [p for p in fenced if r_start < p < r_end]
            if not fenced:
                continue
            for _, d_start, d_end, delete in ops:
                if not (isinstance(delete, Delete) and rollout_id in _batch(delete) and d_start > fenced[0]):
                    continue
                for w_at, w_thread in steps("write", ledger):
                    began = [s for t, s, e, _ in ops if t == w_thread and s < w_at < e]
                    if not began or began[0] < d_end:
                        continue
                    later = [t for u, t in steps("unlink", ledger) if u > w_at]
                    if later and later[0] == r_thread:
                        return f"R-CONC-3: retire of {rollout_id!r} removed a write made after a later delete"
    return None


def sync_failure(trace: Sequence[TraceStep]) -> str | None:
    """R-STORE-4, R-STORE-5, R-STORE-9: a retire unlinks a ledger only after a sync that began after every
    fence lookup or creation it made before, and a retire or delete returns only after a sync that began
    after its last fence lookup or creation or its last unlink that removed a file; whoever issued that
    sync (group commit shares them).

    In a scheduled run every seam call is atomic, so "began after" is "comes later in the trace". Only
    operations that returned a result are judged (one that raised promised nothing).
    """
    began: dict[int, int] = {}  # thread -> position of its current operation's invocation
    for position, step in enumerate(trace):
        name = step.call.name
        if name == "invoke":
            began[step.thread] = position
            continue
        if name != "return" or not isinstance(step.call.args[0], Retire | Delete):
            continue
        if not isinstance(step.call.args[1], ResultOk):
            continue
        start = began[step.thread]
        pending: int | None = None  # position of the last effect no later sync has covered yet
        for at in range(start, position):
            other = trace[at]
            if other.call.name in _SYNCS:
                pending = None
            elif other.thread != step.thread:
                continue
            elif other.call.name == "create_file":
                pending = at
            elif other.call.name == "unlink" and other.result is not False:  # False: nothing was there
                if pending is not None and trace[pending].call.name == "create_file":
                    return (
                        f"R-STORE-9: T{step.thread} unlinked {other.call.args[0]} before a sync covered "
                        f"its fence ({trace[pending].call.args[0]})"
                    )
                pending = at
        if pending is not None:
            return (
                f"R-STORE-9: T{step.thread}'s {type(step.call.args[0]).__name__.lower()} returned before a "
                f"sync covered its {trace[pending].call.name} of {trace[pending].call.args[0]}"
            )
    return None
