"""What a traced child process is asked to run, as JSON (SPEC.md §Crash; docs/crash-target.md §The driver).

A ``RunPlan`` names the target (``module:callable`` and keyword options for it), the workspace, the operations
(``Record``, ``RecordFailure``, ``Retire``, ``Delete`` as JSON objects), how they run (``groups``: one thread
and handle per group, all at once; or ``pause``: one operation parked against the others; or one after another
on the main thread), and where the driver writes what happened. The recorder writes it, the driver (``python
-m capture_ledger.spec.kit.crash.strace._driver PLAN``) reads it. ``Parked`` says how a parked operation is
held from outside: strace delays its thread's ``count``-th call of ``syscall``; the others' thread first makes
``count`` calls of it on ``/dev/null``, so that its own ``count``-th is one of those (strace counts per
thread), then runs once the parked thread is seen stopped.

Not guaranteed: operations other than the four writes (crash workloads only write).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from capture_ledger.spec.core.model import Delete, Operation, Record, RecordFailure, Retire

__all__ = ["Parked", "RunPlan", "operation_from_json", "operation_to_json"]


def operation_to_json(op: Operation) -> dict[str, Any]:
    """``op`` as a JSON object.

    Raises:
        TypeError: ``op`` is not one of the four writes.
    """
    if isinstance(op, Record):
        return {"op": "record", "rollout_id": op.rollout_id, "row": op.row}
    if isinstance(op, RecordFailure):
        return {
            "op": "record_failure",
            "rollout_id": op.rollout_id,
            "model_call_id": op.model_call_id,
            "reason": op.reason,
        }
    if isinstance(op, Retire | Delete):
        return {"op": type(op).__name__.lower(), "rollout_ids": list(op.rollout_ids)}  # type: ignore[call-overload]
    raise TypeError(f"a crash workload writes; {op!r} is not a write")


def operation_from_json(data: Mapping[str, Any]) -> Operation:
    """The operation a JSON object from ``operation_to_json`` stands for.

    Raises:
        ValueError: an unknown operation.
    """
    kind = data["op"]
    if kind == "record":
        return Record(data["rollout_id"], data["row"])
    if kind == "record_failure":
        return RecordFailure(data["rollout_id"], data["model_call_id"], data["reason"])
    if kind == "retire":
        return Retire(list(data["rollout_ids"]))
    if kind == "delete":
        return Delete(list(data["rollout_ids"]))
    raise ValueError(f"unknown operation {kind!r}")


@dataclass(kw_only=True, frozen=True, slots=True)
class Parked:
    """Operation ``op`` runs on a thread of its own and is held at its ``count``-th call of ``syscall``
    (strace's ``delay_enter`` there, ``delay`` seconds); ``reference``: run it to the end first, then the
    others, with no hold (the run that finds ``count``)."""

    op: int
    syscall: str
    count: int
    delay: float
    reference: bool = False


@dataclass(kw_only=True, frozen=True, slots=True)
class RunPlan:
    """A traced child's work (see the module docstring)."""

    target: str
    workspace: str
    ops: tuple[Operation, ...]
    result: str
    options: dict[str, Any] = field(default_factory=dict)
    groups: tuple[tuple[int, ...], ...] = ()
    parked: Parked | None = None

    def to_json(self) -> str:
        """The plan as JSON text."""
        return json.dumps(
            {
                "target": self.target,
                "workspace": self.workspace,
                "ops": [operation_to_json(op) for op in self.ops],
                "result": self.result,
                "options": self.options,
                "groups": [list(g) for g in self.groups],
                "parked": asdict(self.parked) if self.parked else None,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> RunPlan:
        """The plan ``to_json`` wrote."""
        data = json.loads(text)
        parked = data.get("parked")
        return cls(
            target=data["target"],
            workspace=data["workspace"],
            ops=tuple(operation_from_json(op) for op in data["ops"]),
            result=data["result"],
            options=dict(data.get("options") or {}),
            groups=tuple(tuple(g) for g in data.get("groups") or ()),
            parked=Parked(**parked) if parked else None,
        )

    def write(self, path: Path) -> Path:
        """Write the plan to ``path``; returns it."""
        path.write_text(self.to_json(), encoding="utf-8")
        return path
