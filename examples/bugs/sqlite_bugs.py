"""Seeded bugs in the SQLite example ledger (``examples.sqlite_ledger``; the catalogue is ``examples.bugs``).

Each bug is the slip of a real author: a small subclass of ``SqliteLedger`` overriding the one method that
differs, or a factory choosing unsafe settings, with a factory ``open_<name>(workspace)`` so that
``capture-ledger verify examples.bugs.sqlite_bugs:open_<name> --handles 3`` names it. The docstring says
the slip and the requirement it breaks; ``examples.bugs.catalogue`` says which layer must kill it.

Not guaranteed: that a bug breaks only the requirement named (the first one a layer will see).
"""

from __future__ import annotations

import sqlite3
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from capture_ledger.spec import (
    ConflictingRecordError,
    RolloutRemoval,
    staging_key,
    validate_rollout_id,
    validate_rollout_ids,
)
from capture_ledger.spec.core.rows import (
    canonical_json,
    row_staging_key,
    validate_model_call_id,
    validate_row,
)

from examples.sqlite_ledger import (
    SqliteLedger,
    open_delete_full,
    open_journal_memory,
    open_journal_off,
    open_sync_off,
    open_wal_normal,
    warn_discarded,
)

__all__ = [
    "open_sqlite_deferred_write",
    "open_sqlite_delete_full",
    "open_sqlite_delete_keeps_fence",
    "open_sqlite_fence_checked_outside_transaction",
    "open_sqlite_journal_memory",
    "open_sqlite_journal_off",
    "open_sqlite_process_fence_cache",
    "open_sqlite_retire_skips_absent",
    "open_sqlite_rows_by_call_id",
    "open_sqlite_sync_off",
    "open_sqlite_wal_normal",
]


# ------------------------------------------------------------------------------- shown sequentially
class RowsByCallId(SqliteLedger):
    """R-READ-2: the manifest orders rows by ``model_call_id`` ("they come out sorted anyway"), not by
    append order."""

    ORDER = "model_call_id, seq"


class RetireSkipsAbsent(SqliteLedger):
    """R-RETIRE-2: retire writes a fence only for IDs that had rows, so a never-recorded ID stays open to
    late writes."""

    def _retire_one(self, db: sqlite3.Connection, rollout_id: str) -> bool:
        if not self._live(db, rollout_id):
            return False
        return super()._retire_one(db, rollout_id)


class DeleteKeepsFence(SqliteLedger):
    """R-DELETE-2: delete removes the rows but not the fence ("delete is retire plus forgetting the rows"),
    so a deleted ID stays Retired and cannot be reused (R-DELETE-3)."""

    def _delete_one(self, db: sqlite3.Connection, rollout_id: str) -> bool:
        had = self._live(db, rollout_id)
        db.execute("DELETE FROM rows WHERE rollout_id = ?", (rollout_id,))
        return had


# --------------------------------------------------------------------------- shown by concurrency only
class DeferredWrite(SqliteLedger):
    """R-CONC-1: writes open with a plain ``BEGIN`` (deferred), so a write reads under a shared lock and
    then asks to upgrade it; with another writer about, SQLite refuses at once with ``database is locked``
    (the busy timeout does not apply to an upgrade), an error no operation may raise."""

    def _begin(self, write: bool) -> str:
        return "BEGIN"


class FenceCheckedOutsideTransaction(SqliteLedger):
    """R-CONC-2: ``record`` looks for the fence in one transaction and appends in another, so a retire
    that commits in between is followed by a write that re-creates the ledger."""

    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        validate_rollout_id(rollout_id)
        plain = validate_row(row)
        body, call = canonical_json(plain), plain["model_call_id"]
        with self._transaction(write=False) as db:
            discarded = self._discards(db, rollout_id)
        if discarded:
            warn_discarded(rollout_id, row_staging_key(plain))
            return
        with self._transaction(write=True) as db:
            old = db.execute(
                "SELECT body FROM rows WHERE rollout_id = ? AND kind = 'record' AND model_call_id = ?",
                (rollout_id, call),
            ).fetchone()
            if old is not None and old[0] != body:
                raise ConflictingRecordError(rollout_id, call)
            if old is None:
                self._insert(db, rollout_id, "record", call, body)


class _Fenced:
    """The process's fenced IDs of one database, shared by its handles (the bug of ``ProcessFenceCache``)."""

    __slots__ = ("__weakref__", "ids")

    def __init__(self) -> None:
        self.ids: set[str] = set()


_FENCED: weakref.WeakValueDictionary[str, _Fenced] = weakref.WeakValueDictionary()
_FENCED_LOCK = threading.Lock()


class ProcessFenceCache(SqliteLedger):
    """R-ADMIT-1: admission, on the hot path, remembers fenced IDs in a set shared by the process's handles
    and kept up to date by their retires and deletes; a delete in *another process* is never seen, so
    admission keeps refusing a deleted, reused ID (and a thread race can leave a stale entry too)."""

    def __init__(self, workspace: Path) -> None:
        super().__init__(workspace)
        with _FENCED_LOCK:
            self._shared = _FENCED.setdefault(str(Path(workspace).resolve()), _Fenced())
        self._cache = self._shared.ids

    def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        validate_rollout_id(rollout_id)
        validate_model_call_id(model_call_id)
        if rollout_id in self._cache:
            return None
        with self._transaction(write=False) as db:
            fenced = self._fenced(db, rollout_id)
        if fenced:
            self._cache.add(rollout_id)
            return None
        return staging_key(rollout_id, model_call_id)

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        result = super().retire(rollout_ids)
        self._cache.update(validate_rollout_ids(rollout_ids))
        return result

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        result = super().delete(rollout_ids)
        self._cache.difference_update(validate_rollout_ids(rollout_ids))
        return result


# ------------------------------------------------------------------------------ shown by a crash only
# Settings that SQLite's documentation itself calls unsafe across a power loss, chosen "for speed".


def open_sqlite_delete_full(workspace: Path) -> SqliteLedger:
    """R-CRASH-1: SQLite's own defaults (rollback journal, ``FULL``) "because they are the defaults": the
    journal's unlink, which commits, is not synced, and SQLite's documentation of ``EXTRA`` says a power loss
    right after the commit may bring the journal back and roll the returned transaction back."""
    return open_delete_full(workspace)


def open_sqlite_sync_off(workspace: Path) -> SqliteLedger:
    """R-CRASH-1: ``synchronous=OFF``: SQLite never fsyncs, so a record that returned may be lost."""
    return open_sync_off(workspace)


def open_sqlite_wal_normal(workspace: Path) -> SqliteLedger:
    """R-CRASH-1: WAL with ``synchronous=NORMAL`` ("safe in WAL mode"): the WAL is not synced at commit, so
    the last transactions that returned roll back after a power loss."""
    return open_wal_normal(workspace)


def open_sqlite_journal_memory(workspace: Path) -> SqliteLedger:
    """R-CRASH-4: the rollback journal kept in memory: a crash in the middle of a commit leaves pages half
    written with no journal to roll them back (a half-applied batch, or a corrupt database)."""
    return open_journal_memory(workspace)


def open_sqlite_journal_off(workspace: Path) -> SqliteLedger:
    """R-CRASH-4: no rollback journal at all: as ``journal_memory``, a commit cut short is not undone."""
    return open_journal_off(workspace)


# ---------------------------------------------------------------------------------------- factories
def open_sqlite_rows_by_call_id(workspace: Path) -> SqliteLedger:
    """``RowsByCallId`` (R-READ-2)."""
    return RowsByCallId(workspace)


def open_sqlite_retire_skips_absent(workspace: Path) -> SqliteLedger:
    """``RetireSkipsAbsent`` (R-RETIRE-2)."""
    return RetireSkipsAbsent(workspace)


def open_sqlite_delete_keeps_fence(workspace: Path) -> SqliteLedger:
    """``DeleteKeepsFence`` (R-DELETE-2)."""
    return DeleteKeepsFence(workspace)


def open_sqlite_deferred_write(workspace: Path) -> SqliteLedger:
    """``DeferredWrite`` (R-CONC-1)."""
    return DeferredWrite(workspace)


def open_sqlite_fence_checked_outside_transaction(workspace: Path) -> SqliteLedger:
    """``FenceCheckedOutsideTransaction`` (R-CONC-2)."""
    return FenceCheckedOutsideTransaction(workspace)


def open_sqlite_process_fence_cache(workspace: Path) -> SqliteLedger:
    """``ProcessFenceCache`` (R-ADMIT-1)."""
    return ProcessFenceCache(workspace)
