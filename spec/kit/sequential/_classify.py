"""Which requirement a wrong result breaks: failures classified by requirement, not by where they were seen
(SPEC.md §Conformance, R-KIT-1..4; docs/kit.md §Which requirement).

The machine sees a ledger go wrong in two places, and each has its rule:

* **A call's own result** (value, exception class, warnings) differs from the model's: the requirement of
  the case the model took for that operation in that state (``call_requirement``). A ``record`` of a call
  that has a record is R-WRITE-3; a ``record`` of a call that has only a failure, R-WRITE-8 (failures never
  conflict); a ``manifest`` of a Retired rollout, R-READ-3; an invalid ID, R-ID-1 (R-ID-2 if not a
  ``str``); and so on.
* **A read-back** (R-KIT-2) shows a rollout in another state than the model's. Either the read is wrong or
  an earlier call left the wrong state. When ``has_rows`` and ``manifest`` disagree about the kind of state
  (Absent, Live, Retired), the one that disagrees with the model is wrong: the read's own requirement.
  When both show the same wrong kind, or the kinds are right but the rows are not, or only one read exists,
  the state is wrong, and the failure is attributed to the last operation that named that rollout ID
  (``change_requirement``), since every state change of an ID is made by an operation naming it. So one
  bug is reported once, under its own requirement, instead of as the read-back it later spoils.
  ``handles > 1``: if that operation's handle reads the state as the model says while another handle does
  not, the handles do not share one ledger: R-KIT-4 (checked first: a stale read on one handle is not the
  read's own slip). A manifest that lists exactly the model's records and failures in another order
  (``misordered``) is the manifest's own slip, R-READ-2, whatever the last operation was: rows appended in
  the wrong place and rows read in the wrong order look the same from outside.
* **A write's requirement** (``_write``): a ``record_failure`` whose call already has a record, or a
  failure with another reason, is R-WRITE-8 (failures never conflict: it must be appended); any other
  failure, R-WRITE-7.

Pure functions over the model's values. Not guaranteed: that a ledger with several bugs on one ID has each
attributed to its own requirement (the first one seen taints the ID, ``machine``).
"""

from __future__ import annotations

from collections.abc import Sequence

from capture_ledger.spec.core.ids import validate_rollout_id
from capture_ledger.spec.core.model import (
    Admit,
    Delete,
    Err,
    FailureEntry,
    HasRows,
    LedgerState,
    Live,
    Ok,
    Operation,
    ReadManifest,
    Record,
    RecordEntry,
    RecordFailure,
    Removal,
    Retire,
    Retired,
    RolloutState,
    manifest_value_of,
    rollout_ids_of,
    step,
)
from capture_ledger.spec.core.rows import validate_row

__all__ = [
    "call_requirement",
    "change_requirement",
    "misordered",
    "named_ids",
    "single_id_operation",
    "state_kind",
]


def named_ids(op: Operation) -> list[str]:
    """The valid rollout IDs ``op`` names, even when the operation as a whole is invalid (a batch holding an
    invalid ID, a bare string taken as a batch): the IDs a wrong implementation might have changed."""
    ids = rollout_ids_of(op)
    if not isinstance(ids, Err):
        return ids
    if isinstance(op, Retire | Delete):
        batch = op.rollout_ids
        items: Sequence[object] = (
            [batch] if isinstance(batch, str) else batch if isinstance(batch, list | tuple) else []
        )
        return [item for item in dict.fromkeys(i for i in items if isinstance(i, str)) if _valid(item)]
    return []


def _valid(rollout_id: str) -> bool:
    try:
        validate_rollout_id(rollout_id)
    except ValueError:
        return False
    return True


def single_id_operation(name: str, rollout_id: object) -> Operation:
    """The operation of the single-ID method ``name`` on ``rollout_id``, with fixed valid arguments
    otherwise (a write of call ``m0``): the read-back's reads and the machine's invalid-ID rule."""
    if name == "record":
        return Record(rollout_id, {"model_call_id": "m0"})
    if name == "record_failure":
        return RecordFailure(rollout_id, "m0", "timeout")
    if name == "admit":
        return Admit(rollout_id, "m0")
    return HasRows(rollout_id) if name == "has_rows" else ReadManifest(rollout_id)


def misordered(state: RolloutState, manifest: object) -> bool:
    """Whether ``manifest`` (what a ledger's ``manifest`` returned, as plain data) lists exactly the
    records and the failures of the Live ``state``, each list as a multiset, but not both in append order:
    the manifest's own slip (R-READ-2)."""
    if not isinstance(state, Live) or not isinstance(manifest, dict):
        return False
    try:
        got = manifest_value_of(manifest)
    except (KeyError, TypeError, ValueError, AttributeError):
        return False
    records = [e.canonical for e in state.entries if isinstance(e, RecordEntry)]
    failures = [(e.model_call_id, e.reason) for e in state.entries if isinstance(e, FailureEntry)]
    if (list(got.records), list(got.failures)) == (records, failures):
        return False
    return sorted(got.records) == sorted(records) and sorted(got.failures) == sorted(failures)


def state_kind(state: RolloutState) -> str:
    """``"absent"``, ``"live"`` or ``"retired"``: what ``has_rows`` and ``manifest`` can tell apart."""
    if isinstance(state, Retired):
        return "retired"
    return "live" if isinstance(state, Live) else "absent"


def _invalid_id(op: Operation) -> str:
    if isinstance(op, Retire | Delete):
        batch = op.rollout_ids
        if isinstance(batch, str | bytes | bytearray) or not isinstance(batch, list | tuple):
            return "R-BATCH-1"
        return "R-BATCH-2" if all(isinstance(item, str) for item in batch) else "R-ID-2"
    return "R-ID-1" if isinstance(getattr(op, "rollout_id", None), str) else "R-ID-2"


def _write(op: Record | RecordFailure, state: RolloutState) -> str:
    if isinstance(state, Retired):
        return "R-WRITE-4"
    if isinstance(op, RecordFailure):
        beside = state.entries if isinstance(state, Live) else ()
        for e in beside:
            if e.model_call_id == op.model_call_id and (
                isinstance(e, RecordEntry) or (isinstance(e, FailureEntry) and e.reason != op.reason)
            ):
                return "R-WRITE-8"  # a failure beside a record or another failure of its call
        return "R-WRITE-7"
    try:
        call = validate_row(op.row)["model_call_id"]
    except (TypeError, ValueError):
        return "R-WRITE-1"
    entries = state.entries if isinstance(state, Live) else ()
    if any(isinstance(e, RecordEntry) and e.model_call_id == call for e in entries):
        return "R-WRITE-3"
    if any(isinstance(e, FailureEntry) and e.model_call_id == call for e in entries):
        return "R-WRITE-8"  # a record beside a failure of the same call: failures never conflict
    return "R-WRITE-2"


def _removal(op: Retire | Delete, state: RolloutState) -> str:
    if isinstance(op, Retire):
        return "R-RETIRE-1" if isinstance(state, Live) else "R-RETIRE-2"
    return "R-DELETE-1" if isinstance(state, Live) else "R-DELETE-2"


def _first_misreported(op: Retire | Delete, state: LedgerState, actual: object) -> str | None:
    """The first ID of the batch that ``actual`` (a removal, as plain data) puts in the wrong list, or
    leaves out; ``None`` when ``actual`` is no removal, or when every ID is in the right list and only the
    order or duplicates are wrong (R-BATCH-3)."""
    result = step(state, op)[1]
    expected = result.value if isinstance(result, Ok) else None
    if not isinstance(actual, dict) or not isinstance(expected, Removal):
        return None
    removed, absent = actual.get("removed"), actual.get("absent")
    if not isinstance(removed, list | tuple) or not isinstance(absent, list | tuple):
        return None
    for rollout_id in (*expected.removed, *expected.absent):
        if (rollout_id in removed, rollout_id in absent) != (
            rollout_id in expected.removed,
            rollout_id in expected.absent,
        ):
            return rollout_id
    return "R-BATCH-3"


def call_requirement(op: Operation, state: LedgerState, actual: object = None) -> str:
    """The requirement broken when ``op``, run in ``state``, did not give the model's result.

    Args:
        op: the operation.
        state: the model's state before it.
        actual: what the ledger returned, as plain data (used to tell which ID of a batch went wrong).
    """
    ids = rollout_ids_of(op)
    if isinstance(ids, Err):
        return _invalid_id(op)
    if isinstance(op, Record | RecordFailure):
        return _write(op, state.get(ids[0]))
    if isinstance(op, Admit):
        current = state.get(ids[0])
        fenced = isinstance(current, Retired) or (isinstance(current, Live) and current.fenced)
        valid = isinstance(op.model_call_id, str) and bool(op.model_call_id)
        return "R-ADMIT-2" if fenced and valid else "R-ADMIT-1"
    if isinstance(op, HasRows):
        return "R-READ-4"
    if isinstance(op, ReadManifest):
        kind = state_kind(state.get(ids[0]))
        return {"absent": "R-READ-1", "live": "R-READ-2", "retired": "R-READ-3"}[kind]
    if not ids:
        return "R-BATCH-4"
    wrong = _first_misreported(op, state, actual)
    if wrong == "R-BATCH-3":
        return wrong
    return _removal(op, state.get(wrong if wrong is not None else ids[0]))


def change_requirement(op: Operation, state: LedgerState, rollout_id: str) -> str:
    """The requirement that says which state ``op``, run in ``state``, leaves ``rollout_id`` in: the one a
    wrong state of that ID afterwards breaks, when ``op`` was the last operation naming it.

    Args:
        op: the last operation that named ``rollout_id``.
        state: the model's state before it.
        rollout_id: the ID read back wrong.
    """
    ids = rollout_ids_of(op)
    if isinstance(ids, Err):
        return "R-BATCH-2" if isinstance(op, Retire | Delete) else _invalid_id(op)
    before = state.get(rollout_id)
    if isinstance(op, Record | RecordFailure):
        return _write(op, before)
    if isinstance(op, Retire | Delete):
        return _removal(op, before)
    return call_requirement(op, state)  # reads and admission change nothing: their own requirement
