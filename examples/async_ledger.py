"""An asynchronous in-memory capture ledger: an example ledger with coroutine methods (docs/examples.md).

What it is: every method is ``async def``, as NeMo Gym's ledgers are. Handles opened on one workspace in one
process share one ``SharedState`` (found in a module-level registry keyed by the workspace's resolved path,
held weakly so that it goes when its last handle does): per rollout ID its rows, and the set of fenced IDs.
One ``asyncio.Lock`` per state serializes the operations, and each operation awaits in its middle (where a
real ledger would await its storage), so concurrent tasks really interleave: each waits at the lock while
another holds it across its await.

How it meets SPEC.md:

- Every operation validates its input before it takes the lock (R-ID-1..2, R-BATCH-1..4, R-WRITE-1,
  R-WRITE-7), then checks and acts under the lock, across its await, so every operation is linearizable
  (R-CONC-1) and a batch is even atomic across its IDs.
- A write looks for the fence only when the rollout has no rows (R-WRITE-4, R-WRITE-6); a discarded write
  logs one warning on ``capture_ledger.examples.async_memory`` naming the rollout and the staging key
  (R-WRITE-5). Rows are compared as canonical JSON (R-WRITE-3).
- Coroutine methods are what the conformance kit awaits (R-KIT-5).

Not guaranteed: durability of any kind (it is memory: a crash, or closing the last handle, forgets
everything, so the crash contract R-CRASH-1..4 is out of its reach and the crash layer does not apply);
sharing between processes (each process has its own state per workspace); use of one workspace's handles
from several event loops at once (the lock belongs to one loop: ``crash --target`` runs a coroutine ledger's
threaded workloads as tasks of one loop for this reason, docs/crash-target.md §How it works).
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
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

__all__ = ["AsyncMemoryLedger", "SharedState", "open_ledger", "pause", "warn_discarded"]

logger = logging.getLogger("capture_ledger.examples.async_memory")

#: One stored row: ``("record", model_call_id, canonical JSON)`` or ``("failure", model_call_id, reason)``.
Entry = tuple[str, str, str]


class SharedState:
    """What the handles of one workspace share in one process."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.rows: dict[str, list[Entry]] = {}  # rollout ID -> rows, never empty
        self.fences: set[str] = set()


_STATES: weakref.WeakValueDictionary[str, SharedState] = weakref.WeakValueDictionary()


def _state_of(workspace: Path) -> SharedState:
    key = str(Path(workspace).resolve())
    state = _STATES.get(key)
    if state is None:
        state = _STATES[key] = SharedState()
    return state


async def pause() -> None:
    """Where a real ledger awaits its storage: give every other ready task a turn."""
    await asyncio.sleep(0)


class AsyncMemoryLedger:
    """A ``CaptureLedger`` with coroutine methods over the state shared by its workspace's handles."""

    def __init__(self, workspace: Path) -> None:
        self._state = _state_of(workspace)

    # ------------------------------------------------------------------ writes
    async def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        """Append ``row``; an identical re-record is a no-op, a different one raises (R-WRITE-2..3)."""
        validate_rollout_id(rollout_id)
        plain = validate_row(row)
        entry = ("record", plain["model_call_id"], canonical_json(plain))
        state = self._state
        async with state.lock:
            if self._discards(rollout_id):
                warn_discarded(rollout_id, row_staging_key(plain))
                return
            await pause()
            rows = state.rows.get(rollout_id, [])
            for kind, call, body in rows:
                if kind == "record" and call == entry[1]:
                    if self._same(body, entry[2]):
                        return
                    raise ConflictingRecordError(rollout_id, call)
            state.rows[rollout_id] = [*rows, entry]

    async def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        """Append the failure row unless the identical failure is there (R-WRITE-7)."""
        validate_rollout_id(rollout_id)
        validate_failure(model_call_id, reason)
        entry = ("failure", model_call_id, reason)
        state = self._state
        async with state.lock:
            if self._discards(rollout_id):
                warn_discarded(rollout_id, None)
                return
            await pause()
            rows = state.rows.get(rollout_id, [])
            if entry not in rows:
                state.rows[rollout_id] = [*rows, entry]

    def _discards(self, rollout_id: str) -> bool:
        """No rows, and a fence (R-WRITE-4, R-WRITE-6); called with the lock held."""
        return rollout_id not in self._state.rows and rollout_id in self._state.fences

    def _same(self, old: str, new: str) -> bool:
        """Whether two rows are identical: their canonical JSON is equal (R-WRITE-3)."""
        return old == new

    # ------------------------------------------------------------------ admission and reads
    async def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        """The staging key, or ``None`` when a fence exists (R-ADMIT-1..2)."""
        validate_rollout_id(rollout_id)
        validate_model_call_id(model_call_id)
        async with self._state.lock:
            await pause()
            fenced = rollout_id in self._state.fences
        return None if fenced else staging_key(rollout_id, model_call_id)

    async def manifest(self, rollout_id: str) -> Manifest:
        """The rows in append order; ``RolloutRetiredError`` when Retired (R-READ-1..3)."""
        validate_rollout_id(rollout_id)
        rows = await self._readable(rollout_id)
        return {
            "rollout_id": rollout_id,
            "records": [_loads(body) for kind, _, body in rows if kind == "record"],
            "failures": [{"model_call_id": c, "reason": body} for kind, c, body in rows if kind == "failure"],
        }

    async def has_rows(self, rollout_id: str) -> bool:
        """Whether the rollout is Live; ``RolloutRetiredError`` when Retired (R-READ-4)."""
        validate_rollout_id(rollout_id)
        return bool(await self._readable(rollout_id))

    async def _readable(self, rollout_id: str) -> list[Entry]:
        async with self._state.lock:
            rows = self._state.rows.get(rollout_id, [])
            await pause()
            if not rows and rollout_id in self._state.fences:
                raise RolloutRetiredError(rollout_id)
            return rows

    # ------------------------------------------------------------------ removal
    async def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Fence every ID, then drop its rows (R-RETIRE-1..4)."""
        batch = validate_rollout_ids(rollout_ids)
        if not batch:
            return {"removed": [], "absent": []}
        state = self._state
        async with state.lock:
            had = [rid for rid in batch if rid in state.rows]
            state.fences.update(batch)
            await pause()
            for rid in had:
                del state.rows[rid]
        return {"removed": had, "absent": [rid for rid in batch if rid not in had]}

    async def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Drop every ID's rows and fence (R-DELETE-1..3)."""
        batch = validate_rollout_ids(rollout_ids)
        if not batch:
            return {"removed": [], "absent": []}
        state = self._state
        async with state.lock:
            had = [rid for rid in batch if state.rows.pop(rid, None)]
            await pause()
            state.fences.difference_update(batch)
        return {"removed": had, "absent": [rid for rid in batch if rid not in had]}


def _loads(body: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(body)
    return value


def warn_discarded(rollout_id: str, key: str | None) -> None:
    logger.warning("discarded a late write to retired rollout %s (staging key %s)", rollout_id, key)


async def open_ledger(workspace: Path) -> AsyncMemoryLedger:
    """Open a handle on the ledger of ``workspace`` in this process (a coroutine, as the handles' methods).

    Args:
        workspace: names the ledger; nothing is written there.

    Returns:
        A handle sharing its state with every other open handle on ``workspace`` in this process.
    """
    await pause()
    return AsyncMemoryLedger(workspace)
