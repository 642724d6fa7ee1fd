"""What a run of the step-level model is made of: the protocol's guards, the calls, the clients and their
configuration (SPEC.md §Store, §Concurrency; R-STORE-1..9, R-CONC-1..3).

``Config.combine`` switches on combined removals (``spec/concurrency/_combining.py``); the guards
``await_combined_batch``, ``results_after_syncs`` and ``same_retire_result`` apply only then.

``Guards`` holds one switch per guard of the protocol (all on by default), so that each can be shown
necessary; the calls are the store's operations as the step model knows them (a row is its model call ID
only), and ``operation_of`` maps each to the sequential model's operation; a ``Config`` is a bounded set of
rollout IDs, lock stripes and clients. The public names are re-exported by ``spec.concurrency.steps``,
which is where to import them from.

Not guaranteed here: that a configuration is small enough to explore, or that its calls cover every
operation (there is no ``record_failure`` or ``has_rows`` call: the step model leaves failures out).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from capture_ledger.spec.core import model

__all__ = [
    "GUARD_NAMES",
    "AdmitCall",
    "Call",
    "Client",
    "Config",
    "DeleteCall",
    "Guards",
    "ManifestCall",
    "RecordCall",
    "RetireCall",
    "describe",
    "operation_of",
]


# -------------------------------------------------------------------------------------------- guards
@dataclass(frozen=True, slots=True, kw_only=True)
class Guards:
    """The protocol's guards; each may be switched off to show that it is needed."""

    recheck_fence: bool = True
    fence_before_unlink: bool = True
    fence_lookup_on_write: bool = True
    admit_checks_fence: bool = True
    cache_coherence: bool = True
    read_lock: bool = True
    await_shared_sync: bool = True
    await_combined_batch: bool = True
    results_after_syncs: bool = True
    same_retire_result: bool = True

    def without(self, name: str) -> Guards:
        """These guards with ``name`` switched off.

        Raises:
            ValueError: not a guard's name.
        """
        if name not in GUARD_NAMES:
            raise ValueError(f"unknown guard {name!r}; choose one of {', '.join(GUARD_NAMES)}")
        return dataclasses.replace(self, **{name: False})


GUARD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Guards))


# --------------------------------------------------------------------------------------------- calls
@dataclass(frozen=True, slots=True)
class RecordCall:
    """``record(rollout_id, {"model_call_id": call})``."""

    rollout_id: str
    call: str


@dataclass(frozen=True, slots=True)
class RetireCall:
    """``retire(rollout_ids)``: phase 1 fences, one directory sync, phase 2 unlinks (R-STORE-4)."""

    rollout_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeleteCall:
    """``delete(rollout_ids)``: unlink ledger and fence under each lock, one directory sync (R-STORE-5)."""

    rollout_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AdmitCall:
    """``admit(rollout_id, call)``: one fence lookup, no lock."""

    rollout_id: str
    call: str


@dataclass(frozen=True, slots=True)
class ManifestCall:
    """``manifest(rollout_id)``: under the lock, the ledger (through the handle's cache), maybe the fence."""

    rollout_id: str


Call = RecordCall | RetireCall | DeleteCall | AdmitCall | ManifestCall


def operation_of(call: Call) -> model.Operation:
    """The sequential model's operation for a call."""
    if isinstance(call, RecordCall):
        return model.Record(call.rollout_id, {"model_call_id": call.call})
    if isinstance(call, RetireCall):
        return model.Retire(list(call.rollout_ids))
    if isinstance(call, DeleteCall):
        return model.Delete(list(call.rollout_ids))
    if isinstance(call, AdmitCall):
        return model.Admit(call.rollout_id, call.call)
    return model.ReadManifest(call.rollout_id)


@dataclass(frozen=True, slots=True)
class Client:
    """A program: calls made one after the other on one handle."""

    handle: int
    calls: tuple[Call, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """A bounded configuration: rollout IDs, lock stripes, and clients.

    The first ``setup`` clients run alone, one after the other, before the others start (their calls are
    part of the history); the rest run concurrently.
    """

    name: str
    ids: tuple[str, ...]
    clients: tuple[Client, ...]
    setup: int = 0
    handles: int = 2
    #: The stripe of each ID (by position in ``ids``); by default every ID has its own.
    stripes: tuple[int, ...] = ()
    description: str = ""
    #: The removals' syncs go through one shared register (R-STORE-9); else each is its caller's own step.
    group_commit: bool = False
    #: Removals are combined (per kind, one batch at a time runs the union of the pending requests); else
    #: each removal runs its own batch. See ``spec/concurrency/_combining.py``.
    combine: bool = False

    def stripe(self, rollout_id: str) -> int:
        """The lock stripe of an ID (R-STORE-2)."""
        index = self.ids.index(rollout_id)
        return self.stripes[index] if self.stripes else index


def describe(call: Call) -> str:
    """A call as a step's description names it: ``retire [a, b]``."""
    if isinstance(call, RecordCall):
        return f"record {call.rollout_id} {call.call}"
    if isinstance(call, RetireCall | DeleteCall):
        verb = "retire" if isinstance(call, RetireCall) else "delete"
        return f"{verb} [{', '.join(call.rollout_ids)}]"
    if isinstance(call, AdmitCall):
        return f"admit {call.rollout_id} {call.call}"
    return f"manifest {call.rollout_id}"
