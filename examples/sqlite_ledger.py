"""A capture ledger in one SQLite database (stdlib ``sqlite3``): an example ledger (docs/examples.md).

What it is: ``<workspace>/ledger.sqlite3`` holds two tables, ``rows`` (every record and failure row, in an
``AUTOINCREMENT`` order) and ``fences`` (one row per fenced rollout ID). Every handle has its own connection;
handles on one workspace, in any threads and processes, are workers of one model server.

How it meets SPEC.md:

- One transaction per operation. Writes (``record``, ``record_failure``, ``retire``, ``delete``) open with
  ``BEGIN IMMEDIATE``, so the fence check and the append (R-WRITE-4, R-WRITE-6), or the fence and the removal
  of the rows (R-RETIRE-1..3), happen under SQLite's write lock: every single-ID operation is linearizable,
  and a batch is even atomic across its IDs (more than R-CONC-1 asks). Reads run in one read transaction
  (``BEGIN``), so a manifest and its fence lookup see one snapshot (R-READ-1..4).
- A write looks for the fence only when the rollout has no rows (R-WRITE-6); a discarded write logs one
  warning on ``capture_ledger.examples.sqlite`` naming the rollout and the staging key (R-WRITE-5).
- Inputs are validated before the transaction begins (R-ID-1..2, R-BATCH-1..4, R-WRITE-1, R-WRITE-7); an
  empty batch opens no transaction.
- Several processes: a busy timeout of 30 s makes a writer wait for the write lock instead of failing;
  ``BEGIN IMMEDIATE`` takes the lock before the first read, so no transaction has to upgrade a read lock
  (the upgrade SQLite refuses with ``SQLITE_BUSY`` without waiting).
- Durability (R-CRASH-1..4) is SQLite's: ``synchronous`` and ``journal_mode`` are factory options. The
  default, the rollback journal (``DELETE``) with ``synchronous="EXTRA"``, is the setting SQLite's
  documentation describes as durable even when a power loss follows the commit closely: ``EXTRA`` is ``FULL``
  plus a sync of the directory after the journal is unlinked, so that a commit that returned cannot be rolled
  back by a journal that comes back. SQLite's own default, ``FULL``, leaves that unlink unsynced (the named
  factory ``open_delete_full``). The factory also syncs the workspace directory once after creating the
  database file. The module-level factories below name the other interesting combinations, so that
  ``capture-ledger verify examples.sqlite_ledger:open_wal_normal`` judges one of them.

Not guaranteed: durability under settings other than the default and WAL with ``FULL`` or ``EXTRA`` (and,
for ``journal_mode`` ``MEMORY`` or ``OFF``, the database's integrity at all, per SQLite's documentation); that
SQLite's own promises hold on a given file system (the crash layer checks them, docs/examples.md); a workspace
on a network file system (SQLite's locks need a local one); speed (several fsyncs per write).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
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

__all__ = [
    "DATABASE",
    "JOURNAL_MODES",
    "SYNCHRONOUS",
    "SqliteLedger",
    "open_delete_full",
    "open_delete_normal",
    "open_journal_memory",
    "open_journal_off",
    "open_ledger",
    "open_persist_full",
    "open_sync_off",
    "open_truncate_full",
    "open_wal_extra",
    "open_wal_full",
    "open_wal_normal",
    "warn_discarded",
]

#: The database file inside the workspace.
DATABASE = "ledger.sqlite3"
#: The values of ``PRAGMA synchronous`` and ``PRAGMA journal_mode`` the factory takes.
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
JOURNAL_MODES = ("DELETE", "TRUNCATE", "PERSIST", "WAL", "MEMORY", "OFF")
#: How long a writer waits for another process's write lock.
BUSY_TIMEOUT_SECONDS = 30.0

logger = logging.getLogger("capture_ledger.examples.sqlite")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS rows (seq INTEGER PRIMARY KEY AUTOINCREMENT, rollout_id TEXT NOT NULL, "
    "kind TEXT NOT NULL, model_call_id TEXT NOT NULL, body TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS rows_by_rollout ON rows (rollout_id, model_call_id)",
    "CREATE TABLE IF NOT EXISTS fences (rollout_id TEXT PRIMARY KEY)",
)


class SqliteLedger:
    """A ``CaptureLedger`` kept in ``<workspace>/ledger.sqlite3``; one connection per handle."""

    #: How ``manifest`` orders a rollout's rows: append order (R-READ-2).
    ORDER = "seq"

    def __init__(self, workspace: Path, *, synchronous: str = "EXTRA", journal_mode: str = "DELETE") -> None:
        if synchronous not in SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS)}, not {synchronous!r}")
        if journal_mode not in JOURNAL_MODES:
            raise ValueError(f"journal_mode must be one of {', '.join(JOURNAL_MODES)}, not {journal_mode!r}")
        self._lock = threading.Lock()  # one connection, used by one thread at a time
        Path(workspace).mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(
            Path(workspace) / DATABASE,
            timeout=BUSY_TIMEOUT_SECONDS,
            isolation_level=None,  # autocommit: this class issues BEGIN and COMMIT itself
            check_same_thread=False,
        )
        self._db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
        mode = self._db.execute(f"PRAGMA journal_mode = {journal_mode}").fetchone()[0]
        if str(mode).upper() != journal_mode:
            raise RuntimeError(f"SQLite kept journal_mode {mode!r} instead of {journal_mode!r}")
        self._db.execute(f"PRAGMA synchronous = {synchronous}")
        with self._transaction(write=True) as db:
            for statement in _SCHEMA:
                db.execute(statement)
        _sync_directory(Path(workspace))

    # ------------------------------------------------------------------ transactions
    def _begin(self, write: bool) -> str:
        return "BEGIN IMMEDIATE" if write else "BEGIN"

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute(self._begin(write))
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @staticmethod
    def _live(db: sqlite3.Connection, rollout_id: str) -> bool:
        return (
            db.execute("SELECT 1 FROM rows WHERE rollout_id = ? LIMIT 1", (rollout_id,)).fetchone()
            is not None
        )

    @staticmethod
    def _fenced(db: sqlite3.Connection, rollout_id: str) -> bool:
        found = db.execute("SELECT 1 FROM fences WHERE rollout_id = ?", (rollout_id,)).fetchone()
        return found is not None

    def _discards(self, db: sqlite3.Connection, rollout_id: str) -> bool:
        """Whether a write must be discarded: no rows, and a fence (R-WRITE-4, R-WRITE-6)."""
        return not self._live(db, rollout_id) and self._fenced(db, rollout_id)

    # ------------------------------------------------------------------ writes
    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        """Append ``row``; an identical re-record is a no-op, a different one raises (R-WRITE-2..3)."""
        validate_rollout_id(rollout_id)
        plain = validate_row(row)
        body, call = canonical_json(plain), plain["model_call_id"]
        with self._transaction(write=True) as db:
            discarded = self._discards(db, rollout_id)
            if not discarded:
                old = db.execute(
                    "SELECT body FROM rows WHERE rollout_id = ? AND kind = 'record' AND model_call_id = ?",
                    (rollout_id, call),
                ).fetchone()
                if old is not None and old[0] != body:
                    raise ConflictingRecordError(rollout_id, call)
                if old is None:
                    self._insert(db, rollout_id, "record", call, body)
        if discarded:
            warn_discarded(rollout_id, row_staging_key(plain))

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        """Append the failure row unless the identical failure is there (R-WRITE-7)."""
        validate_rollout_id(rollout_id)
        validate_failure(model_call_id, reason)
        with self._transaction(write=True) as db:
            discarded = self._discards(db, rollout_id)
            if not discarded:
                self._insert_failure(db, rollout_id, model_call_id, reason)
        if discarded:
            warn_discarded(rollout_id, None)

    def _insert_failure(
        self, db: sqlite3.Connection, rollout_id: str, model_call_id: str, reason: str
    ) -> None:
        same = db.execute(
            "SELECT 1 FROM rows WHERE rollout_id = ? AND kind = 'failure' AND model_call_id = ? AND body = ?",
            (rollout_id, model_call_id, reason),
        ).fetchone()
        if same is None:
            self._insert(db, rollout_id, "failure", model_call_id, reason)

    @staticmethod
    def _insert(db: sqlite3.Connection, rollout_id: str, kind: str, call: str, body: str) -> None:
        db.execute(
            "INSERT INTO rows (rollout_id, kind, model_call_id, body) VALUES (?, ?, ?, ?)",
            (rollout_id, kind, call, body),
        )

    # ------------------------------------------------------------------ admission and reads
    def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        """The staging key, or ``None`` when a fence exists (R-ADMIT-1..2)."""
        validate_rollout_id(rollout_id)
        validate_model_call_id(model_call_id)
        with self._transaction(write=False) as db:
            fenced = self._fenced(db, rollout_id)
        return None if fenced else staging_key(rollout_id, model_call_id)

    def manifest(self, rollout_id: str) -> Manifest:
        """The rows in append order; ``RolloutRetiredError`` when Retired (R-READ-1..3)."""
        validate_rollout_id(rollout_id)
        with self._transaction(write=False) as db:
            found = db.execute(
                f"SELECT kind, model_call_id, body FROM rows WHERE rollout_id = ? ORDER BY {self.ORDER}",
                (rollout_id,),
            ).fetchall()
            if not found and self._fenced(db, rollout_id):
                raise RolloutRetiredError(rollout_id)
        return {
            "rollout_id": rollout_id,
            "records": [_loads(body) for kind, _, body in found if kind == "record"],
            "failures": [
                {"model_call_id": c, "reason": body} for kind, c, body in found if kind == "failure"
            ],
        }

    def has_rows(self, rollout_id: str) -> bool:
        """Whether the rollout is Live; ``RolloutRetiredError`` when Retired (R-READ-4)."""
        validate_rollout_id(rollout_id)
        with self._transaction(write=False) as db:
            if self._live(db, rollout_id):
                return True
            if self._fenced(db, rollout_id):
                raise RolloutRetiredError(rollout_id)
            return False

    # ------------------------------------------------------------------ removal
    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Fence every ID and remove its rows, in one transaction (R-RETIRE-1..4)."""
        return self._each(rollout_ids, self._retire_one)

    def _retire_one(self, db: sqlite3.Connection, rollout_id: str) -> bool:
        had = self._live(db, rollout_id)
        db.execute("INSERT OR IGNORE INTO fences (rollout_id) VALUES (?)", (rollout_id,))
        db.execute("DELETE FROM rows WHERE rollout_id = ?", (rollout_id,))
        return had

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Remove every ID's rows and fence, in one transaction (R-DELETE-1..3)."""
        return self._each(rollout_ids, self._delete_one)

    def _delete_one(self, db: sqlite3.Connection, rollout_id: str) -> bool:
        had = self._live(db, rollout_id)
        db.execute("DELETE FROM fences WHERE rollout_id = ?", (rollout_id,))
        db.execute("DELETE FROM rows WHERE rollout_id = ?", (rollout_id,))
        return had

    def _each(
        self, rollout_ids: Sequence[str], remove_one: Callable[[sqlite3.Connection, str], bool]
    ) -> RolloutRemoval:
        """Validate the whole batch first (R-BATCH-1..2), then remove every ID in one write transaction
        (none for an empty batch): those whose ``remove_one`` says they had rows are ``removed``, the others
        ``absent``, in the batch's order."""
        batch = validate_rollout_ids(rollout_ids)
        if not batch:
            return {"removed": [], "absent": []}
        with self._transaction(write=True) as db:
            had = [rid for rid in batch if remove_one(db, rid)]
        return {"removed": had, "absent": [rid for rid in batch if rid not in had]}

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()


def _loads(body: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(body)
    return value


def warn_discarded(rollout_id: str, key: str | None) -> None:
    logger.warning("discarded a late write to retired rollout %s (staging key %s)", rollout_id, key)


def _sync_directory(directory: Path) -> None:
    """fsync ``directory``, so that a file just created in it keeps its entry across a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------- factories
def open_ledger(workspace: Path, *, synchronous: str = "EXTRA", journal_mode: str = "DELETE") -> SqliteLedger:
    """Open a handle on the ledger in ``workspace`` (safe settings by default: the rollback journal, EXTRA).

    Args:
        workspace: the directory holding ``ledger.sqlite3``; created (with the database) by the first handle.
        synchronous: ``PRAGMA synchronous``, one of ``SYNCHRONOUS``.
        journal_mode: ``PRAGMA journal_mode``, one of ``JOURNAL_MODES``.

    Returns:
        A new handle with its own connection.

    Raises:
        ValueError: an unknown setting.
        sqlite3.Error: the database cannot be opened.
    """
    return SqliteLedger(workspace, synchronous=synchronous, journal_mode=journal_mode)


def open_delete_full(workspace: Path) -> SqliteLedger:
    """SQLite's defaults: FULL syncs the journal and the database, not the directory after the journal's
    unlink; SQLite's documentation of EXTRA says a power loss right after the commit may then undo it."""
    return SqliteLedger(workspace, synchronous="FULL", journal_mode="DELETE")


def open_wal_full(workspace: Path) -> SqliteLedger:
    """WAL with a sync at every commit: durable per SQLite's documentation (its ``-shm`` file is mmap'ed)."""
    return SqliteLedger(workspace, synchronous="FULL", journal_mode="WAL")


def open_wal_extra(workspace: Path) -> SqliteLedger:
    """WAL with ``EXTRA``: as ``FULL`` in WAL mode, which already syncs the WAL at each commit."""
    return SqliteLedger(workspace, synchronous="EXTRA", journal_mode="WAL")


def open_truncate_full(workspace: Path) -> SqliteLedger:
    """The rollback journal truncated instead of deleted at commit, synced: durable per SQLite."""
    return SqliteLedger(workspace, synchronous="FULL", journal_mode="TRUNCATE")


def open_persist_full(workspace: Path) -> SqliteLedger:
    """The rollback journal's header zeroed instead of deleted at commit, synced: durable per SQLite."""
    return SqliteLedger(workspace, synchronous="FULL", journal_mode="PERSIST")


def open_delete_normal(workspace: Path) -> SqliteLedger:
    """The rollback journal with ``NORMAL``: SQLite says a power loss may corrupt the database."""
    return SqliteLedger(workspace, synchronous="NORMAL", journal_mode="DELETE")


def open_wal_normal(workspace: Path) -> SqliteLedger:
    """WAL with ``NORMAL``: consistent, but SQLite says the last commits may roll back on power loss."""
    return SqliteLedger(workspace, synchronous="NORMAL", journal_mode="WAL")


def open_sync_off(workspace: Path) -> SqliteLedger:
    """``synchronous=OFF``: no fsync at all; SQLite says a power loss may corrupt the database."""
    return SqliteLedger(workspace, synchronous="OFF", journal_mode="DELETE")


def open_journal_memory(workspace: Path) -> SqliteLedger:
    """The rollback journal kept in memory: a crash mid-transaction may corrupt the database."""
    return SqliteLedger(workspace, synchronous="FULL", journal_mode="MEMORY")


def open_journal_off(workspace: Path) -> SqliteLedger:
    """No rollback journal: a crash mid-transaction may leave it half applied or the database corrupt."""
    return SqliteLedger(workspace, synchronous="FULL", journal_mode="OFF")
