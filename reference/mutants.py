"""Deliberately broken capture ledgers the conformance kit must reject (SPEC.md §Conformance, R-KIT-1..6).

Each mutant is a one-idea deviation from SPEC.md §Operations, written as a small subclass of
``ReferenceLedger`` (or a thin wrapper around one), with a docstring naming the requirement it breaks.
``MUTANTS`` lists them as ``Mutant`` records; every one also has a module-level factory ``open_<name>`` so
that ``capture-ledger verify capture_ledger.reference.mutants:open_<name>`` runs the kit against it and
must exit non-zero. ``AsyncLedger`` wraps any ledger with coroutine methods (as NeMo Gym's are): the
correct ``open_async_reference`` must pass the kit, the async mutant must fail it (R-KIT-5).

This module is the registry: the factories, the shared multi-handle reference and ``MUTANTS``. The broken
ledgers are defined in the private ``_broken`` module and ``AsyncLedger`` in ``_async``; both are imported
from here.

Not guaranteed: that these are the only bugs the kit catches, or that a mutant breaks *only* its named
requirement (a late write that re-creates a ledger also skips the warning). Some requirements have no
mutant because no sequential test can observe them: R-WRITE-6 (when the fence is looked up) and
R-BATCH-4 (an empty batch touches nothing) are a matter of I/O and are checked by the store's tests.
``open_leaks_descriptor_per_handle`` is a factory but not in ``MUTANTS``: whether the kit finds anything
depends on the process's descriptor limit (tests/spec/kit/test_kit_across_examples.py runs it under a low
one, where the verdict is R-KIT-7, the descriptors exhausted).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from capture_ledger.reference._async import AsyncLedger
from capture_ledger.reference._broken import (
    AdmitIgnoresFence,
    BareStringAccepted,
    ConflictAccepted,
    DeleteLeavesFence,
    DuplicatesReportedTwice,
    FailureAppendedTwice,
    FailureBesideItsCallDropped,
    IdenticalAppendedTwice,
    LateWriteRecreates,
    LeaksDescriptorPerHandle,
    LooseEquality,
    ManifestCachedPerHandle,
    ManifestReversed,
    ManifestSortedByCall,
    PartialBatch,
    RetiredHasRowsFalse,
    RetiredManifestEmpty,
    RetireReportsRetiredRemoved,
    RetireSkipsAbsent,
    SilentDiscard,
    WarningWithoutStagingKey,
    release_leaked_descriptors,
)
from capture_ledger.reference._ledger import ReferenceLedger
from capture_ledger.spec.kit.sequential import LedgerFactory

__all__ = [
    "MUTANTS",
    "AdmitIgnoresFence",
    "AsyncLedger",
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
    "Mutant",
    "PartialBatch",
    "RetireReportsRetiredRemoved",
    "RetireSkipsAbsent",
    "RetiredHasRowsFalse",
    "RetiredManifestEmpty",
    "SilentDiscard",
    "WarningWithoutStagingKey",
    "open_async_reference",
    "open_leaks_descriptor_per_handle",
    "open_reference",
    "open_shared_reference",
    "release_leaked_descriptors",
]


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


def open_failure_beside_its_call_dropped(workspace: Path) -> FailureBesideItsCallDropped:
    """Factory of ``FailureBesideItsCallDropped``."""
    return FailureBesideItsCallDropped()


def open_manifest_sorted_by_call(workspace: Path) -> ManifestSortedByCall:
    """Factory of ``ManifestSortedByCall``."""
    return ManifestSortedByCall()


def open_manifest_reversed(workspace: Path) -> ManifestReversed:
    """Factory of ``ManifestReversed``."""
    return ManifestReversed()


def open_manifest_cached_per_handle(workspace: Path) -> ManifestCachedPerHandle:
    """R-KIT-4: a handle on the workspace's one shared ledger (``open_shared_reference``) with a manifest
    cache of its own, stale once another handle changes a rollout (``ManifestCachedPerHandle``)."""
    return ManifestCachedPerHandle(open_shared_reference(workspace))


def open_leaks_descriptor_per_handle(workspace: Path) -> LeaksDescriptorPerHandle:
    """Factory of ``LeaksDescriptorPerHandle`` (not in ``MUTANTS``: its verdict depends on the process's
    descriptor limit; ``release_leaked_descriptors`` closes what it leaked)."""
    return LeaksDescriptorPerHandle()


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
        _mutant(
            "failure_beside_its_call_dropped",
            "R-WRITE-8",
            "a failure is dropped when its call already has a record or another failure",
        ),
        _mutant("admit_ignores_fence", "R-ADMIT-2", "admission returns a key for a fenced rollout"),
        _mutant("manifest_sorted_by_call", "R-READ-2", "the manifest's rows are sorted by model_call_id"),
        _mutant("manifest_reversed", "R-READ-2", "the manifest lists its rows newest first"),
        _mutant("retired_manifest_empty", "R-READ-3", "a Retired manifest reads empty"),
        _mutant("retired_has_rows_false", "R-READ-4", "has_rows of a Retired rollout is False"),
        _mutant("retire_skips_absent", "R-RETIRE-2", "retire does not fence IDs that never recorded"),
        _mutant("retire_reports_retired_removed", "R-RETIRE-2", "retire reports Retired IDs as removed"),
        _mutant("delete_leaves_fence", "R-DELETE-2", "delete drops the rows but leaves the fence"),
        _mutant(
            "async_late_write_recreates", "R-WRITE-4", "late_write_recreates behind async methods (R-KIT-5)"
        ),
        _mutant("handles_not_shared", "R-KIT-4", "each handle is its own ledger", handles=2),
        _mutant(
            "manifest_cached_per_handle",
            "R-KIT-4",
            "each handle caches manifests, forgotten only on its own writes",
            handles=2,
        ),
    )
}
