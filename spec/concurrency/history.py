"""Recorded histories of ledger operations, for the linearizability checker (SPEC.md R-CONC-1).

A history is a list of ``Event``: which client called which operation (a ``model`` operation value), when
it was invoked and when it returned (any monotonic clock shared by the clients), and what it returned, as a
model ``Result``. An event that never returned (its client crashed or was killed) has ``returned=None``
and ``result=None``: it may or may not have taken effect.

``observe`` turns what an implementation did (a return value or an exception) into a ``Result``;
``results_match`` compares a model result with an observed one, treating a discarded write (which an
implementation reports only by a log warning) as the ``None`` it returns. ``to_json``/``from_json`` give a
JSON-lines format for ``capture-ledger check-history``.

Not guaranteed: that two clients' clocks agree unless they read one system-wide monotonic clock
(``time.monotonic_ns`` on one machine does).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from capture_ledger.spec.core.model import (
    Admit,
    Delete,
    Discarded,
    Err,
    ErrorKind,
    HasRows,
    ManifestValue,
    Ok,
    Operation,
    ReadManifest,
    Record,
    RecordFailure,
    Removal,
    Result,
    Retire,
    manifest_value_of,
)

__all__ = [
    "METHOD_NAMES",
    "Event",
    "apply_operation",
    "event_from_json",
    "event_to_json",
    "observe",
    "results_match",
]


@dataclass(kw_only=True, frozen=True, slots=True)
class Event:
    """One operation of a history: invocation, return (or ``None`` if it never returned) and result."""

    client: int
    op: Operation
    invoked: float
    returned: float | None = None
    result: Result | None = None


def apply_operation(ledger: Any, op: Operation) -> Any:
    """Call the ledger method that ``op`` names and return what it returns (exceptions propagate).

    The one dispatch from operation values to ``CaptureLedger`` methods, used by the conformance kit, the
    history recorder and the crash explorer. For a coroutine method the awaitable is returned unawaited.

    Raises:
        TypeError: ``op`` is not an operation value.
    """
    if isinstance(op, Record):
        return ledger.record(op.rollout_id, op.row)
    if isinstance(op, RecordFailure):
        return ledger.record_failure(op.rollout_id, op.model_call_id, op.reason)
    if isinstance(op, Admit):
        return ledger.admit(op.rollout_id, op.model_call_id)
    if isinstance(op, ReadManifest):
        return ledger.manifest(op.rollout_id)
    if isinstance(op, HasRows):
        return ledger.has_rows(op.rollout_id)
    if isinstance(op, Retire):
        return ledger.retire(op.rollout_ids)
    if isinstance(op, Delete):
        return ledger.delete(op.rollout_ids)
    raise TypeError(f"not an operation: {op!r}")


def observe(op: Operation, outcome: object) -> Result:
    """The ``Result`` an implementation produced: ``outcome`` is its return value or the exception.

    Raises:
        ValueError: an exception the spec never allows for any operation (not ``TypeError``/``ValueError``
            or a ledger error), or a manifest or removal of the wrong shape.
    """
    if isinstance(outcome, BaseException):
        kind = ErrorKind.of(outcome)
        if kind is None:
            raise ValueError(f"{op!r} raised an unexpected {type(outcome).__name__}: {outcome}")
        return Err(kind)
    if isinstance(op, Record | RecordFailure | Admit | HasRows):
        return Ok(outcome)
    try:
        if isinstance(op, ReadManifest):
            if not isinstance(outcome, dict):
                raise TypeError("not a dict")
            return Ok(manifest_value_of(outcome))
        if isinstance(op, Retire | Delete):
            if not isinstance(outcome, dict):
                raise TypeError("not a dict")
            removed, absent = outcome["removed"], outcome["absent"]
            if not all(isinstance(i, str) for i in (*removed, *absent)):
                raise TypeError("an ID that is not a string")
            return Ok(Removal(tuple(removed), tuple(absent)))
    except (KeyError, TypeError, ValueError) as error:
        what = "a manifest" if isinstance(op, ReadManifest) else "a RolloutRemoval"
        raise ValueError(
            f"{op!r} returned {outcome!r}, not {what} ({type(error).__name__}: {error})"
        ) from None
    raise ValueError(f"unknown operation {op!r}")


def results_match(expected: Result, observed: Result) -> bool:
    """Whether an observed result is the model's: exact, except that a discarded write returns ``None``.

    An ``Err`` matches when the kinds are equal, or the model's kind accepts the observed kind (a model
    ``INVALID_INPUT`` accepts an observed ``TYPE_ERROR``).
    """
    if isinstance(expected, Err) or isinstance(observed, Err):
        if not (isinstance(expected, Err) and isinstance(observed, Err)):
            return False
        return expected.kind == observed.kind or (
            expected.kind is ErrorKind.INVALID_INPUT and observed.kind is ErrorKind.TYPE_ERROR
        )
    value = None if isinstance(expected.value, Discarded) else expected.value
    return type(value) is type(observed.value) and value == observed.value


# ------------------------------------------------------------------------------------------- JSON lines
_OPS: dict[str, type[Operation]] = {
    "record": Record,
    "record_failure": RecordFailure,
    "admit": Admit,
    "manifest": ReadManifest,
    "has_rows": HasRows,
    "retire": Retire,
    "delete": Delete,
}
#: The ``CaptureLedger`` method each operation type calls.
METHOD_NAMES: dict[type[Operation], str] = {cls: name for name, cls in _OPS.items()}


def _result_to_json(result: Result | None) -> Any:
    if result is None:
        return None
    if isinstance(result, Err):
        return {"error": result.kind.name}
    value = result.value
    if isinstance(value, ManifestValue):
        return {"ok": {"records": [json.loads(r) for r in value.records], "failures": value.failures}}
    if isinstance(value, Removal):
        return {"ok": {"removed": list(value.removed), "absent": list(value.absent)}}
    if isinstance(value, Discarded):
        return {"ok": None}
    return {"ok": value}


def _result_from_json(op: Operation, data: Any) -> Result | None:
    if data is None:
        return None
    if not isinstance(data, dict) or len(data) != 1 or not ({"ok", "error"} & set(data)):
        raise ValueError('a result is {"ok": value} or {"error": kind}')
    if "error" in data:
        kind = data["error"]
        if kind not in ErrorKind.__members__:
            raise ValueError(f"unknown error {kind!r}; the errors are {', '.join(ErrorKind.__members__)}")
        return Err(ErrorKind[kind])
    value = data["ok"]
    if isinstance(op, ReadManifest):
        return observe(
            op,
            {
                "rollout_id": op.rollout_id,
                "records": value["records"],
                "failures": [{"model_call_id": m, "reason": r} for m, r in value["failures"]],
            },
        )
    return observe(op, value)


def event_to_json(event: Event) -> str:
    """One JSON line for ``event``."""
    op = event.op
    args = {name: getattr(op, name) for name in op.__dataclass_fields__}
    return json.dumps(
        {
            "client": event.client,
            "op": METHOD_NAMES[type(op)],
            "args": args,
            "invoked": event.invoked,
            "returned": event.returned,
            "result": _result_to_json(event.result),
        },
        sort_keys=True,
    )


def _time(data: dict[str, Any], key: str) -> float:
    value = data.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{key!r} must be a finite number, not {value!r}")
    return float(value)


def event_from_json(line: str) -> Event:
    """Parse one JSON line written by ``event_to_json`` (or by another recorder in the same format).

    Raises:
        ValueError: the line is not such an event; the message says why: not a JSON object (a torn line,
            say), an unknown operation, arguments that do not fit it, a client that is not an integer, a
            time that is not a finite number, a return before the invocation, a result without a return
            time, or a result that does not fit the operation (R-KIT-9).
    """
    try:
        return _parse(line)
    except ValueError as error:
        raise ValueError(f"not a history event: {error}") from None


def _parse(line: str) -> Event:
    try:
        data = json.loads(line)
    except ValueError as error:  # json.JSONDecodeError, or a number too large
        raise ValueError(f"not JSON ({error}), perhaps torn: {line[:120]!r}") from None
    if not isinstance(data, dict):
        raise ValueError(f"not a JSON object: {line[:120]!r}")
    name = data.get("op")
    cls = _OPS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown operation {name!r}; the operations are {', '.join(_OPS)}")
    args = data.get("args")
    fields = list(cls.__dataclass_fields__)
    if not isinstance(args, dict) or sorted(args) != sorted(fields):
        raise ValueError(f"{name} takes the arguments {fields}, not {args!r}")
    op = cls(**args)
    client = data.get("client")
    if type(client) is not int:
        raise ValueError(f"'client' must be an integer, not {client!r}")
    invoked = _time(data, "invoked")
    returned = None if data.get("returned") is None else _time(data, "returned")
    if returned is not None and returned < invoked:
        raise ValueError(f"it returned ({returned}) before it was invoked ({invoked})")
    if returned is None and data.get("result") is not None:
        raise ValueError("it has a result but no return time")
    try:
        result = _result_from_json(op, data.get("result"))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ValueError(f"result {data.get('result')!r} does not fit {op!r}: {error}") from None
    return Event(client=client, op=op, invoked=invoked, returned=returned, result=result)
