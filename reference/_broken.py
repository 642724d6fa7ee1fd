"""The broken ledgers themselves: one small subclass of ``ReferenceLedger`` per deviation from SPEC.md
§Operations (§Writes, §Admission, §Reads, §Batches, §Retire, §Delete), each docstring naming the requirement
it breaks.

Each is one idea: the reference with one decision changed. ``capture_ledger.reference.mutants`` gives every
one a factory and a ``Mutant`` record, and is where they are imported from.

Two are not subclasses but wrappers, because their slip is in how handles relate to each other or to the
process: ``ManifestCachedPerHandle`` (each handle caches manifests and forgets them only on its own writes,
R-KIT-4) and ``LeaksDescriptorPerHandle`` (each handle opens a descriptor it never closes; what the kit
says of it depends on the process's descriptor limit, so it is in no registry that expects a requirement).

Not guaranteed: that a mutant breaks *only* its named requirement (a late write that re-creates a ledger
also skips the warning), or that these are the only bugs the kit catches.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from capture_ledger.reference._ledger import ReferenceLedger, logger
from capture_ledger.spec import (
    ConflictingRecordError,
    Manifest,
    RolloutRemoval,
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

__all__ = [
    "AdmitIgnoresFence",
    "BareStringAccepted",
    "ConflictAccepted",
    "DeleteLeavesFence",
    "DuplicatesReportedTwice",
    "FailureAppendedTwice",
    "FailureBesideItsCallDropped",
    "IdenticalAppendedTwice",
    "LateWriteRecreates",
    "LeaksDescriptorPerHandle",
    "LooseEquality",
    "ManifestCachedPerHandle",
    "ManifestReversed",
    "ManifestSortedByCall",
    "PartialBatch",
    "RetireReportsRetiredRemoved",
    "RetireSkipsAbsent",
    "RetiredHasRowsFalse",
    "RetiredManifestEmpty",
    "SilentDiscard",
    "WarningWithoutStagingKey",
    "release_leaked_descriptors",
]


# ------------------------------------------------------------------------------------ write mutants
class LateWriteRecreates(ReferenceLedger):
    """R-WRITE-4: a write to a Retired rollout re-creates its ledger instead of being discarded.

    The write never consults the fence, so the rows land beside it (the file-store bug the fence exists
    to prevent) and no warning is logged.
    """

    def _writable(self, rollout_id: str, key: str | None) -> list[dict[str, Any]] | None:
        return self._rows.setdefault(rollout_id, [])


class SilentDiscard(ReferenceLedger):
    """R-WRITE-5: a write to a Retired rollout is discarded without the warning."""

    def _writable(self, rollout_id: str, key: str | None) -> list[dict[str, Any]] | None:
        if rollout_id not in self._rows and rollout_id in self._fences:
            return None
        return super()._writable(rollout_id, key)


class WarningWithoutStagingKey(ReferenceLedger):
    """R-WRITE-5: the discarded-write warning names the rollout but not the row's staging key."""

    def _writable(self, rollout_id: str, key: str | None) -> list[dict[str, Any]] | None:
        if rollout_id not in self._rows and rollout_id in self._fences:
            logger.warning("discarded a late write to retired rollout %s", rollout_id)
            return None
        return super()._writable(rollout_id, key)


class _RecordDecisions(ReferenceLedger):
    """The reference's ``record`` with its two decisions as methods, for the R-WRITE-3 mutants.

    Not a mutant: with these defaults it behaves exactly as ``ReferenceLedger.record``.
    """

    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        validate_rollout_id(rollout_id)
        plain = validate_row(row)
        with self._lock:
            rows = self._writable(rollout_id, row_staging_key(plain))
            if rows is None:
                return
            for old in rows:
                if old.get("kind") == "record" and old["model_call_id"] == plain["model_call_id"]:
                    if self._identical(old["row"], plain):
                        if self._skip_identical():
                            return
                    else:
                        self._conflict(rollout_id, plain["model_call_id"])
                    break
            rows.append({"kind": "record", "model_call_id": plain["model_call_id"], "row": plain})

    def _identical(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return canonical_json(old) == canonical_json(new)

    def _skip_identical(self) -> bool:
        return True

    def _conflict(self, rollout_id: str, model_call_id: str) -> None:
        raise ConflictingRecordError(rollout_id, model_call_id)


class ConflictAccepted(_RecordDecisions):
    """R-WRITE-3: a different row for a recorded ``model_call_id`` is appended instead of refused."""

    def _conflict(self, rollout_id: str, model_call_id: str) -> None:
        return


class IdenticalAppendedTwice(_RecordDecisions):
    """R-WRITE-3: re-recording an identical row appends it again instead of being a no-op."""

    def _skip_identical(self) -> bool:
        return False


class LooseEquality(_RecordDecisions):
    """R-WRITE-3: "identical" is Python ``==``, not canonical JSON, so ``1``, ``1.0`` and ``True`` collide.

    A row that differs from the recorded one only in ``1`` vs ``1.0`` (or ``True``) is silently taken as
    a no-op instead of raising ``ConflictingRecordError``.
    """

    def _identical(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        return old == new


class FailureAppendedTwice(ReferenceLedger):
    """R-WRITE-7: an identical failure row is appended again."""

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        validate_rollout_id(rollout_id)
        validate_failure(model_call_id, reason)
        with self._lock:
            rows = self._writable(rollout_id, None)
            if rows is not None:
                rows.append({"kind": "failure", "model_call_id": model_call_id, "reason": reason})


class FailureBesideItsCallDropped(ReferenceLedger):
    """R-WRITE-8: a failure is dropped when its call already has a row (a record, or a failure with another
    reason), as if failures conflicted; only an identical failure may be left out (R-WRITE-7)."""

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        validate_rollout_id(rollout_id)
        validate_failure(model_call_id, reason)
        with self._lock:
            known = any(row["model_call_id"] == model_call_id for row in self._rows.get(rollout_id, []))
        if not known:
            super().record_failure(rollout_id, model_call_id, reason)


# ------------------------------------------------------------------------------- read/admit mutants
class RetiredManifestEmpty(ReferenceLedger):
    """R-READ-3: the manifest of a Retired rollout reads as empty instead of raising RolloutRetiredError.

    (The source document's "after removal the manifest returns an empty ledger" holds after delete only.)
    """

    def manifest(self, rollout_id: str) -> Manifest:
        validate_rollout_id(rollout_id)
        with self._lock:
            retired = rollout_id in self._fences and rollout_id not in self._rows
        if retired:
            return {"rollout_id": rollout_id, "records": [], "failures": []}
        return super().manifest(rollout_id)


def _by_call(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=lambda row: str(row.get("model_call_id")))


class ManifestSortedByCall(ReferenceLedger):
    """R-READ-2: the manifest lists records and failures sorted by ``model_call_id`` ("they come out sorted
    anyway"), not in append order."""

    def manifest(self, rollout_id: str) -> Manifest:
        found = super().manifest(rollout_id)
        return {
            "rollout_id": found["rollout_id"],
            "records": _by_call(list(found["records"])),
            "failures": _by_call(list(found["failures"])),
        }


class ManifestReversed(ReferenceLedger):
    """R-READ-2: the manifest lists records and failures newest first."""

    def manifest(self, rollout_id: str) -> Manifest:
        found = super().manifest(rollout_id)
        records, failures = list(found["records"]), list(found["failures"])
        return {"rollout_id": found["rollout_id"], "records": records[::-1], "failures": failures[::-1]}


class RetiredHasRowsFalse(ReferenceLedger):
    """R-READ-4: ``has_rows`` of a Retired rollout returns ``False`` instead of raising."""

    def has_rows(self, rollout_id: str) -> bool:
        validate_rollout_id(rollout_id)
        with self._lock:
            return bool(self._rows.get(rollout_id))


class AdmitIgnoresFence(ReferenceLedger):
    """R-ADMIT-2: admission returns the staging key even when the rollout is fenced."""

    def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        validate_rollout_id(rollout_id)
        validate_model_call_id(model_call_id)
        return staging_key(rollout_id, model_call_id)


# ------------------------------------------------------------------------------------ batch mutants
class BareStringAccepted(ReferenceLedger):
    """R-BATCH-1: a bare ``str`` batch is taken as a batch of one ID instead of raising ``TypeError``."""

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        return super().retire([rollout_ids] if isinstance(rollout_ids, str) else rollout_ids)

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        return super().delete([rollout_ids] if isinstance(rollout_ids, str) else rollout_ids)


class PartialBatch(ReferenceLedger):
    """R-BATCH-2: each ID is validated only when its turn comes, so the valid IDs before an invalid one
    are already retired or deleted when ``InvalidRolloutIdError`` is raised."""

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        return self._one_by_one(rollout_ids, fence=True)

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        return self._one_by_one(rollout_ids, fence=False)

    def _one_by_one(self, rollout_ids: Sequence[str], *, fence: bool) -> RolloutRemoval:
        if isinstance(rollout_ids, str | bytes | bytearray) or not isinstance(rollout_ids, Sequence):
            raise TypeError("rollout_ids must be a list or tuple of rollout IDs")  # R-BATCH-1 is kept
        removed: dict[str, None] = {}
        absent: dict[str, None] = {}
        for rollout_id in rollout_ids:
            validate_rollout_id(rollout_id)  # too late: the IDs before this one are already changed
            with self._lock:
                if fence:
                    self._fences.add(rollout_id)
                else:
                    self._fences.discard(rollout_id)
                if self._rows.pop(rollout_id, None):
                    removed[rollout_id] = None
                elif rollout_id not in removed:
                    absent[rollout_id] = None
        return {"removed": list(removed), "absent": list(absent)}


class DuplicatesReportedTwice(ReferenceLedger):
    """R-BATCH-3: a batch is not de-duplicated, so an ID listed twice is reported twice."""

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        validate_rollout_ids(rollout_ids)
        with self._lock:
            self._fences.update(rollout_ids)
            return self._remove(list(rollout_ids))

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        validate_rollout_ids(rollout_ids)
        with self._lock:
            self._fences.difference_update(rollout_ids)
            return self._remove(list(rollout_ids))


# ------------------------------------------------------------------------------ retire/delete mutants
class RetireSkipsAbsent(ReferenceLedger):
    """R-RETIRE-2: retire fences only IDs that have rows, so an Absent ID stays Absent (a late first
    write from an abandoned attempt is then accepted)."""

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        batch = validate_rollout_ids(rollout_ids)
        with self._lock:
            self._fences.update(rid for rid in batch if self._rows.get(rid))
            return self._remove(batch)


class RetireReportsRetiredRemoved(ReferenceLedger):
    """R-RETIRE-2: retiring an already Retired ID reports it ``removed`` instead of ``absent``."""

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        batch = validate_rollout_ids(rollout_ids)
        with self._lock:
            fenced = self._fences.intersection(batch)
            self._fences.update(batch)
            removal = self._remove(batch)
        removed = [rid for rid in batch if rid in removal["removed"] or rid in fenced]
        return {"removed": removed, "absent": [rid for rid in batch if rid not in removed]}


class DeleteLeavesFence(ReferenceLedger):
    """R-DELETE-2 (and R-DELETE-3): delete drops the rows but leaves the fence, so a deleted rollout
    still reads as Retired and its ID cannot be reused."""

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        batch = validate_rollout_ids(rollout_ids)
        with self._lock:
            return self._remove(batch)


# ------------------------------------------------------------------------------------ handle mutants
class ManifestCachedPerHandle:
    """R-KIT-4: each handle on one shared ledger caches the manifests it reads, and forgets a rollout's only
    when it writes, retires or deletes that rollout itself. A change another handle (another worker) makes
    is not seen by this one until it changes the rollout too: the stale read of a per-worker cache.

    Args:
        shared: the one ledger every handle on a workspace shares.
    """

    def __init__(self, shared: ReferenceLedger) -> None:
        self._shared = shared
        self._manifests: dict[str, Manifest] = {}

    def _forget(self, rollout_ids: object) -> None:
        items = [rollout_ids] if isinstance(rollout_ids, str) else rollout_ids
        for rollout_id in items if isinstance(items, list | tuple) else ():
            if isinstance(rollout_id, str):
                self._manifests.pop(rollout_id, None)

    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        self._forget(rollout_id)
        self._shared.record(rollout_id, row)

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        self._forget(rollout_id)
        self._shared.record_failure(rollout_id, model_call_id, reason)

    def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        return self._shared.admit(rollout_id, model_call_id)

    def manifest(self, rollout_id: str) -> Manifest:
        cached = self._manifests.get(rollout_id) if isinstance(rollout_id, str) else None
        if cached is None:
            cached = self._manifests[rollout_id] = self._shared.manifest(rollout_id)
        return {
            "rollout_id": cached["rollout_id"],
            "records": [dict(row) for row in cached["records"]],
            "failures": [
                {"model_call_id": f["model_call_id"], "reason": f["reason"]} for f in cached["failures"]
            ],
        }

    def has_rows(self, rollout_id: str) -> bool:
        return self._shared.has_rows(rollout_id)

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        self._forget(rollout_ids)
        return self._shared.retire(rollout_ids)

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        self._forget(rollout_ids)
        return self._shared.delete(rollout_ids)


_LEAKED_LOCK = threading.Lock()
_LEAKED: list[int] = []


def release_leaked_descriptors() -> int:
    """Close every descriptor ``LeaksDescriptorPerHandle`` leaked so far (for tests); return how many."""
    with _LEAKED_LOCK:
        leaked, _LEAKED[:] = list(_LEAKED), []
    for descriptor in leaked:
        os.close(descriptor)
    return len(leaked)


class LeaksDescriptorPerHandle(ReferenceLedger):
    """R-KIT-7 when the process runs out: each handle opens a descriptor (of ``os.devnull``) that nothing
    ever closes, not even ``close()``, as a handle that leaks a lock file would. Correct otherwise, so the
    kit's verdict depends on how many handles a run opens against the process's descriptor limit: a
    verdict that the descriptors were exhausted, naming how many handles were open, or none at all.
    ``release_leaked_descriptors`` closes them (for tests)."""

    def __init__(self) -> None:
        super().__init__()
        descriptor = os.open(os.devnull, os.O_RDONLY)
        with _LEAKED_LOCK:
            _LEAKED.append(descriptor)

    def close(self) -> None:
        """Closes nothing: the descriptor stays open."""
