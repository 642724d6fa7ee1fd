"""Seeded bugs in the asynchronous example ledger (``examples.async_ledger``; the catalogue is
``examples.bugs``).

Each bug is the slip of a real author: a small subclass of ``AsyncMemoryLedger`` overriding the one
coroutine that differs, with a factory ``open_<name>(workspace)`` so that
``capture-ledger verify examples.bugs.async_bugs:open_<name> --handles 3`` names it. The docstring says the
slip and the requirement it breaks; ``examples.bugs.catalogue`` says which layer must kill it. The
asynchronous ledger keeps nothing on disk, so none of these is a crash bug.

Not guaranteed: that a bug breaks only the requirement named (the first one a layer will see).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from capture_ledger.spec import (
    ConflictingRecordError,
    Manifest,
    RolloutRemoval,
    validate_rollout_id,
    validate_rollout_ids,
)
from capture_ledger.spec.core.rows import canonical_json, row_staging_key, validate_failure, validate_row

from examples.async_ledger import AsyncMemoryLedger, pause, warn_discarded

__all__ = [
    "open_async_check_then_act",
    "open_async_loose_equality",
    "open_async_lost_update",
    "open_async_partial_batch",
    "open_async_retire_fences_last",
    "open_async_retired_manifest_empty",
]


# ------------------------------------------------------------------------------- shown sequentially
class RetiredManifestEmpty(AsyncMemoryLedger):
    """R-READ-3: the manifest of a Retired rollout reads as empty ("no rows is no rows") instead of raising
    ``RolloutRetiredError``."""

    async def manifest(self, rollout_id: str) -> Manifest:
        validate_rollout_id(rollout_id)
        async with self._state.lock:
            rows = self._state.rows.get(rollout_id, [])
        return {
            "rollout_id": rollout_id,
            "records": [json.loads(body) for kind, _, body in rows if kind == "record"],
            "failures": [{"model_call_id": c, "reason": body} for kind, c, body in rows if kind == "failure"],
        }


class LooseEquality(AsyncMemoryLedger):
    """R-WRITE-3: rows are compared as parsed values with ``==``, so ``1``, ``1.0`` and ``True`` are "the
    same row" and a conflicting re-record is taken as a no-op."""

    def _same(self, old: str, new: str) -> bool:
        return bool(json.loads(old) == json.loads(new))


class PartialBatch(AsyncMemoryLedger):
    """R-BATCH-2: retire validates each ID as it fences it, so the IDs before an invalid one are already
    Retired when the error is raised."""

    async def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        if isinstance(rollout_ids, str | bytes) or not isinstance(rollout_ids, Sequence):
            raise TypeError("rollout_ids must be a list of rollout IDs")
        removed: list[str] = []
        absent: list[str] = []
        async with self._state.lock:
            for rollout_id in dict.fromkeys(rollout_ids):
                validate_rollout_id(rollout_id)
                self._state.fences.add(rollout_id)
                had = self._state.rows.pop(rollout_id, None)
                (removed if had else absent).append(rollout_id)
        return {"removed": removed, "absent": absent}


# --------------------------------------------------------------------------- shown by concurrency only
class CheckThenAct(AsyncMemoryLedger):
    """R-CONC-2: ``record`` looks for the fence under the lock, lets the lock go while it awaits (staging
    the row "without holding up others"), and appends under the lock again without looking again: a retire
    that runs in between is followed by a write that re-creates the ledger."""

    async def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        validate_rollout_id(rollout_id)
        plain = validate_row(row)
        body, call = canonical_json(plain), plain["model_call_id"]
        async with self._state.lock:
            if self._discards(rollout_id):
                warn_discarded(rollout_id, row_staging_key(plain))
                return
        await pause()
        async with self._state.lock:
            rows = self._state.rows.get(rollout_id, [])
            for kind, old_call, old in rows:
                if kind == "record" and old_call == call:
                    if old == body:
                        return
                    raise ConflictingRecordError(rollout_id, call)
            self._state.rows[rollout_id] = [*rows, ("record", call, body)]


class LostUpdate(AsyncMemoryLedger):
    """R-CONC-1: ``record_failure`` takes no lock ("a failure never conflicts"): it reads the rows, awaits,
    and stores its copy back, so two failures of one rollout in flight at once keep only one, and a failure
    that straddles a retire re-creates the ledger."""

    async def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        validate_rollout_id(rollout_id)
        validate_failure(model_call_id, reason)
        entry = ("failure", model_call_id, reason)
        if self._discards(rollout_id):
            warn_discarded(rollout_id, None)
            return
        rows = self._state.rows.get(rollout_id, [])
        await pause()
        if entry not in rows:
            self._state.rows[rollout_id] = [*rows, entry]


class RetireFencesLast(AsyncMemoryLedger):
    """R-CONC-2: retire drops the rows under the lock, lets it go while it awaits the fence's write (to
    storage, in a real ledger), and only then adds the fence: a write in between finds neither rows nor a
    fence, starts a new ledger, and that ledger outlives the retire."""

    async def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        batch = validate_rollout_ids(rollout_ids)
        if not batch:
            return {"removed": [], "absent": []}
        async with self._state.lock:
            had = [rid for rid in batch if self._state.rows.pop(rid, None)]
        await pause()
        async with self._state.lock:
            self._state.fences.update(batch)
        return {"removed": had, "absent": [rid for rid in batch if rid not in had]}


# ---------------------------------------------------------------------------------------- factories
async def open_async_retired_manifest_empty(workspace: Path) -> AsyncMemoryLedger:
    """``RetiredManifestEmpty`` (R-READ-3)."""
    return RetiredManifestEmpty(workspace)


async def open_async_loose_equality(workspace: Path) -> AsyncMemoryLedger:
    """``LooseEquality`` (R-WRITE-3)."""
    return LooseEquality(workspace)


async def open_async_partial_batch(workspace: Path) -> AsyncMemoryLedger:
    """``PartialBatch`` (R-BATCH-2)."""
    return PartialBatch(workspace)


async def open_async_check_then_act(workspace: Path) -> AsyncMemoryLedger:
    """``CheckThenAct`` (R-CONC-2)."""
    return CheckThenAct(workspace)


async def open_async_lost_update(workspace: Path) -> AsyncMemoryLedger:
    """``LostUpdate`` (R-CONC-1)."""
    return LostUpdate(workspace)


async def open_async_retire_fences_last(workspace: Path) -> AsyncMemoryLedger:
    """``RetireFencesLast`` (R-CONC-2)."""
    return RetireFencesLast(workspace)
