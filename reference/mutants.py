"""Deliberately broken capture ledgers the conformance kit must reject (SPEC.md §Conformance, R-KIT-1..6).

Each mutant is a one-idea deviation from SPEC.md §Operations, written as a small subclass of
``ReferenceLedger`` (or a thin wrapper around one), with a docstring naming the requirement it breaks.
``MUTANTS`` lists them as ``Mutant`` records; every one also has a module-level factory ``open_<name>`` so
that ``capture-ledger verify capture_ledger.reference.mutants:open_<name>`` runs the kit against it and
must exit non-zero. ``AsyncLedger`` wraps any ledger with coroutine methods (as NeMo Gym's are): the
correct ``open_async_reference`` must pass the kit, the async mutant must fail it (R-KIT-5).

Not guaranteed: that these are the only bugs the kit catches, or that a mutant breaks *only* its named
requirement (a late write that re-creates a ledger also skips the warning). Some requirements have no
mutant because no sequential test can observe them: R-WRITE-6 (when the fence is looked up) and
R-BATCH-4 (an empty batch touches nothing) are a matter of I/O and are checked by the store's tests.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
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
from capture_ledger.spec.kit.sequential import LedgerFactory

__all__ = [
    "MUTANTS",
    "AsyncLedger",
    "Mutant",
    "open_async_reference",
    "open_reference",
    "open_shared_reference",
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


# ------------------------------------------------------------------------------------ async wrapper
class AsyncLedger:
    """A ledger whose methods are coroutines (as NeMo Gym's are), delegating to a synchronous one.

    Correct when the wrapped ledger is; the kit must await every method (R-KIT-5).
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        """``record``, awaited."""
        self._inner.record(rollout_id, row)

    async def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        """``record_failure``, awaited."""
        self._inner.record_failure(rollout_id, model_call_id, reason)

    async def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        """``admit``, awaited."""
        key: str | None = self._inner.admit(rollout_id, model_call_id)
        return key

    async def manifest(self, rollout_id: str) -> Manifest:
        """``manifest``, awaited."""
        manifest: Manifest = self._inner.manifest(rollout_id)
        return manifest

    async def has_rows(self, rollout_id: str) -> bool:
        """``has_rows``, awaited."""
        return bool(self._inner.has_rows(rollout_id))

    async def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """``retire``, awaited."""
        removal: RolloutRemoval = self._inner.retire(rollout_ids)
        return removal

    async def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """``delete``, awaited."""
        removal: RolloutRemoval = self._inner.delete(rollout_ids)
        return removal


# ------------------------------------------------------------------------------- multi-handle mutant
_SHARED_LOCK = threading.Lock()
_SHARED: dict[Path, ReferenceLedger] = {}


def open_shared_reference(workspace: Path) -> ReferenceLedger:
    """A correct factory for ``handles > 1``: every handle on ``workspace`` is one shared ledger.

    Args:
        workspace: the kit's workspace directory; handles opened on one workspace share state.

    Returns:
        The ``ReferenceLedger`` kept for ``workspace`` (made on first use).
    """
    with _SHARED_LOCK:
        # Keyed by path: the kit makes a fresh temporary workspace per example. The entries are small and
        # live as long as the process; acceptable for a test double.
        return _SHARED.setdefault(Path(workspace), ReferenceLedger())


# ---------------------------------------------------------------------------------- factories
def open_reference(workspace: Path) -> ReferenceLedger:
    """The correct baseline: a fresh ``ReferenceLedger`` (the workspace is not used)."""
    return ReferenceLedger()


def open_async_reference(workspace: Path) -> AsyncLedger:
    """The correct baseline behind coroutine methods: must pass the kit (R-KIT-5)."""
    return AsyncLedger(ReferenceLedger())


def open_late_write_recreates(workspace: Path) -> LateWriteRecreates:
    """Factory of ``LateWriteRecreates``."""
    return LateWriteRecreates()


def open_silent_discard(workspace: Path) -> SilentDiscard:
    """Factory of ``SilentDiscard``."""
    return SilentDiscard()


def open_warning_without_staging_key(workspace: Path) -> WarningWithoutStagingKey:
    """Factory of ``WarningWithoutStagingKey``."""
    return WarningWithoutStagingKey()


def open_conflict_accepted(workspace: Path) -> ConflictAccepted:
    """Factory of ``ConflictAccepted``."""
    return ConflictAccepted()


def open_identical_appended_twice(workspace: Path) -> IdenticalAppendedTwice:
    """Factory of ``IdenticalAppendedTwice``."""
    return IdenticalAppendedTwice()


def open_loose_equality(workspace: Path) -> LooseEquality:
    """Factory of ``LooseEquality``."""
    return LooseEquality()


def open_failure_appended_twice(workspace: Path) -> FailureAppendedTwice:
    """Factory of ``FailureAppendedTwice``."""
    return FailureAppendedTwice()


def open_retired_manifest_empty(workspace: Path) -> RetiredManifestEmpty:
    """Factory of ``RetiredManifestEmpty``."""
    return RetiredManifestEmpty()


def open_retired_has_rows_false(workspace: Path) -> RetiredHasRowsFalse:
    """Factory of ``RetiredHasRowsFalse``."""
    return RetiredHasRowsFalse()


def open_admit_ignores_fence(workspace: Path) -> AdmitIgnoresFence:
    """Factory of ``AdmitIgnoresFence``."""
    return AdmitIgnoresFence()


def open_bare_string_accepted(workspace: Path) -> BareStringAccepted:
    """Factory of ``BareStringAccepted``."""
    return BareStringAccepted()


def open_partial_batch(workspace: Path) -> PartialBatch:
    """Factory of ``PartialBatch``."""
    return PartialBatch()


def open_duplicates_reported_twice(workspace: Path) -> DuplicatesReportedTwice:
    """Factory of ``DuplicatesReportedTwice``."""
    return DuplicatesReportedTwice()


def open_retire_skips_absent(workspace: Path) -> RetireSkipsAbsent:
    """Factory of ``RetireSkipsAbsent``."""
    return RetireSkipsAbsent()


def open_retire_reports_retired_removed(workspace: Path) -> RetireReportsRetiredRemoved:
    """Factory of ``RetireReportsRetiredRemoved``."""
    return RetireReportsRetiredRemoved()


def open_delete_leaves_fence(workspace: Path) -> DeleteLeavesFence:
    """Factory of ``DeleteLeavesFence``."""
    return DeleteLeavesFence()


def open_async_late_write_recreates(workspace: Path) -> AsyncLedger:
    """R-WRITE-4, as ``LateWriteRecreates``, behind coroutine methods: the kit sees the bug only if it
    awaits them (R-KIT-5)."""
    return AsyncLedger(LateWriteRecreates())


def open_handles_not_shared(workspace: Path) -> ReferenceLedger:
    """R-KIT-4: each handle is its own ledger, so workers of one model server do not see each other's
    rows or fences. Only visible with ``handles > 1``."""
    return ReferenceLedger()


# ---------------------------------------------------------------------------------- registry
@dataclass(frozen=True, slots=True, kw_only=True)
class Mutant:
    """One deliberately broken ledger.

    Attributes:
        name: the snake_case name; its factory is ``open_<name>`` in this module.
        requirement: the SPEC.md requirement it breaks.
        factory: ``open_ledger(workspace)`` for ``check_ledger``.
        description: one line saying what is wrong.
        handles: the handles per workspace the kit needs to see the bug (1 for most).
    """

    name: str
    requirement: str
    factory: LedgerFactory
    description: str
    handles: int = 1

    @property
    def target(self) -> str:
        """The ``capture-ledger verify`` TARGET of this mutant."""
        return f"{__name__}:open_{self.name}"


def _mutant(name: str, requirement: str, description: str, *, handles: int = 1) -> Mutant:
    factory = globals()[f"open_{name}"]
    return Mutant(
        name=name, requirement=requirement, factory=factory, description=description, handles=handles
    )


#: Every mutant by name, in the order of SPEC.md's requirements.
MUTANTS: Mapping[str, Mutant] = {
    m.name: m
    for m in (
        _mutant("bare_string_accepted", "R-BATCH-1", "a bare str batch is taken as one ID"),
        _mutant("partial_batch", "R-BATCH-2", "valid IDs before an invalid one are already applied"),
        _mutant("duplicates_reported_twice", "R-BATCH-3", "an ID listed twice is reported twice"),
        _mutant("conflict_accepted", "R-WRITE-3", "a conflicting re-record is appended"),
        _mutant("identical_appended_twice", "R-WRITE-3", "an identical re-record is appended again"),
        _mutant("loose_equality", "R-WRITE-3", "rows compared with ==, so 1, 1.0 and True collide"),
        _mutant("late_write_recreates", "R-WRITE-4", "a write to a Retired rollout re-creates its ledger"),
        _mutant("silent_discard", "R-WRITE-5", "a discarded write logs no warning"),
        _mutant("warning_without_staging_key", "R-WRITE-5", "the warning omits the staging key"),
        _mutant("failure_appended_twice", "R-WRITE-7", "an identical failure is appended again"),
        _mutant("admit_ignores_fence", "R-ADMIT-2", "admission returns a key for a fenced rollout"),
        _mutant("retired_manifest_empty", "R-READ-3", "a Retired manifest reads empty"),
        _mutant("retired_has_rows_false", "R-READ-4", "has_rows of a Retired rollout is False"),
        _mutant("retire_skips_absent", "R-RETIRE-2", "retire does not fence IDs that never recorded"),
        _mutant("retire_reports_retired_removed", "R-RETIRE-2", "retire reports Retired IDs as removed"),
        _mutant("delete_leaves_fence", "R-DELETE-2", "delete drops the rows but leaves the fence"),
        _mutant(
            "async_late_write_recreates", "R-WRITE-4", "late_write_recreates behind async methods (R-KIT-5)"
        ),
        _mutant("handles_not_shared", "R-KIT-4", "each handle is its own ledger", handles=2),
    )
}
