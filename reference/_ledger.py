"""``ReferenceLedger``: the minimal, obviously-correct in-memory capture ledger (SPEC.md §Operations).

It stores exactly the model's state (a list of rows and a fence flag per rollout ID) under one lock, and
checks the rules in the order the spec gives them. Use it as the baseline of the conformance kit and as a
test double in framework code.

Not guaranteed: durability (it is memory), sharing between processes (each instance is its own ledger),
or speed. Thread-safe: every method runs under one lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from capture_ledger.spec import (
    ConflictingRecordError,
    Manifest,
    RolloutRemoval,
    RolloutRetiredError,
    staging_key,
    validate_rollout_id,
    validate_rollout_ids,
)
from capture_ledger.spec.core.rows import (
    canonical_json,
    row_staging_key,
    validate_failure,
    validate_model_call_id,
    validate_row,
)

__all__ = ["ReferenceLedger", "open_reference_ledger"]

logger = logging.getLogger("capture_ledger.reference")


class ReferenceLedger:
    """An in-memory ``CaptureLedger``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, list[dict[str, Any]]] = {}  # rollout ID -> rows (never empty)
        self._fences: set[str] = set()

    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        """Append ``row``; identical is a no-op, different raises ``ConflictingRecordError``."""
        validate_rollout_id(rollout_id)
        plain = validate_row(row)
        with self._lock:
            rows = self._writable(rollout_id, row_staging_key(plain))
            if rows is None:
                return
            for old in rows:
                if old.get("kind") == "record" and old["model_call_id"] == plain["model_call_id"]:
                    if canonical_json(old["row"]) == canonical_json(plain):
                        return
                    raise ConflictingRecordError(rollout_id, plain["model_call_id"])
            rows.append({"kind": "record", "model_call_id": plain["model_call_id"], "row": plain})

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        """Append ``{"model_call_id", "reason"}`` unless the identical failure is already there."""
        validate_rollout_id(rollout_id)
        validate_failure(model_call_id, reason)
        failure = {"kind": "failure", "model_call_id": model_call_id, "reason": reason}
        with self._lock:
            rows = self._writable(rollout_id, None)
            if rows is not None and failure not in rows:
                rows.append(failure)

    def _writable(self, rollout_id: str, key: str | None) -> list[dict[str, Any]] | None:
        # R-WRITE-6: the fence is consulted only when the rollout has no rows.
        if rollout_id in self._rows:
            return self._rows[rollout_id]
        if rollout_id in self._fences:
            logger.warning("discarded a late write to retired rollout %s (staging key %s)", rollout_id, key)
            return None
        return self._rows.setdefault(rollout_id, [])

    def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        """The staging key, or ``None`` when the rollout is fenced."""
        validate_rollout_id(rollout_id)
        validate_model_call_id(model_call_id)
        with self._lock:
            return None if rollout_id in self._fences else staging_key(rollout_id, model_call_id)

    def manifest(self, rollout_id: str) -> Manifest:
        """The rows in append order; ``RolloutRetiredError`` when Retired."""
        validate_rollout_id(rollout_id)
        with self._lock:
            rows = self._readable(rollout_id)
            return {
                "rollout_id": rollout_id,
                "records": [dict(r["row"]) for r in rows if r["kind"] == "record"],
                "failures": [
                    {"model_call_id": r["model_call_id"], "reason": r["reason"]}
                    for r in rows
                    if r["kind"] == "failure"
                ],
            }

    def has_rows(self, rollout_id: str) -> bool:
        """Whether the rollout is Live; ``RolloutRetiredError`` when Retired."""
        validate_rollout_id(rollout_id)
        with self._lock:
            return bool(self._readable(rollout_id))

    def _readable(self, rollout_id: str) -> list[dict[str, Any]]:
        rows = self._rows.get(rollout_id, [])
        if not rows and rollout_id in self._fences:
            raise RolloutRetiredError(rollout_id)
        return rows

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Fence every ID and drop its rows."""
        batch = validate_rollout_ids(rollout_ids)
        with self._lock:
            self._fences.update(batch)
            return self._remove(batch)

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Drop every ID's rows and fence."""
        batch = validate_rollout_ids(rollout_ids)
        with self._lock:
            self._fences.difference_update(batch)
            return self._remove(batch)

    def _remove(self, batch: list[str]) -> RolloutRemoval:
        removed = [rid for rid in batch if self._rows.pop(rid, None)]
        return {"removed": removed, "absent": [rid for rid in batch if rid not in removed]}


def open_reference_ledger(workspace: object = None) -> ReferenceLedger:
    """A fresh ``ReferenceLedger``; the kit's factory signature (the workspace is not used).

    Each call is a separate ledger, so check it with ``handles=1``.
    """
    return ReferenceLedger()
