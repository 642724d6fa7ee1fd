"""A capture ledger as a directory per rollout, holding a row log and a fence: an example ledger
(docs/examples.md).

What it is: ``<workspace>/rollouts/<id>/`` holds the rollout's row log ``rows.jsonl`` (one JSON object per
line, in append order) and, once the rollout is retired, an empty fence file ``RETIRED``.
``<workspace>/locks/`` holds 16 lock files, never deleted; an ID's lock is chosen by ``zlib.crc32`` (the same
in every process) and taken with ``fcntl.flock`` on a descriptor opened for the occasion, which excludes other
processes and other threads alike. Handles keep no state: any number of them, in any threads and processes,
are workers of one model server.

How it meets SPEC.md:

- Every operation on an ID runs under its lock, reads included, so every single-ID operation is
  linearizable (R-CONC-1); a batch takes the locks one ID at a time. A write looks for the fence only when the
  rollout has no rows (R-WRITE-4, R-WRITE-6); a discarded write logs one warning on
  ``capture_ledger.examples.directory`` naming the rollout and the staging key (R-WRITE-5).
- Inputs are validated before any file is touched (R-ID-1..2, R-BATCH-1..4, R-WRITE-1, R-WRITE-7); the ID
  rule keeps every name inside ``rollouts/`` (no slash, no leading dot).
- Appending a row (R-CRASH-1): one ``write`` of the line, then ``fsync`` of the log; when the log held no
  row yet (new, or left empty by a writer that crashed), also ``fsync`` of the rollout's directory, and when
  the directory is new, ``mkdir`` and ``fsync`` of ``rollouts/`` first. A line without its newline is a torn
  tail, not a row (as R-STORE-6 says of the file store): readers skip it and the next append cuts it off
  first. A complete line that does not parse was never written by this ledger: ``CorruptRowError``.
- Retire (R-RETIRE-1..4, R-CRASH-2, R-CRASH-4), per ID under its lock: create the fence (``fsync`` the fence
  file itself, so that a file system that persists a directory entry without its inode keeps it too), then
  ``fsync`` the directory; only then unlink the log, and ``fsync`` the directory again. A retire that finds
  the fence already there fsyncs it and the directory anyway, and so does an identical re-record its log,
  and a delete that finds nothing its directory: the call that made them may have failed at a sync (EIO),
  so the files being there proves nothing about a crash (as R-STORE-4 says of the file store). One unlink
  removes every row at once, so a crash leaves the pre-state, the fenced Live state (R-STATE-2; a retried
  retire or a delete completes it) or Retired.
- Delete (R-DELETE-1..3, R-CRASH-3), per ID under its lock: unlink the log and the fence, ``fsync`` the
  directory. Directories stay behind: an empty directory is an Absent rollout.

Not guaranteed: a file system without ``flock`` between the handles (NFS); atomicity of a batch across IDs;
speed (the whole log is read for each operation, one or two fsyncs per row); removal of the empty
directories.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import zlib
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
    "FENCE",
    "LOCK_STRIPES",
    "LOG",
    "CorruptRowError",
    "DirectoryLedger",
    "Log",
    "open_ledger",
    "read_log",
    "sync_directory",
    "warn_discarded",
    "write_file",
]

#: The fence file inside a rollout's directory.
FENCE = "RETIRED"
#: The row log inside a rollout's directory.
LOG = "rows.jsonl"
#: How many lock files ``<workspace>/locks/`` holds.
LOCK_STRIPES = 16

logger = logging.getLogger("capture_ledger.examples.directory")


class CorruptRowError(RuntimeError):
    """A complete line of a row log that is not a row: this ledger never writes one."""


class Log:
    """A rollout's row log as read: its rows (``{"kind": "record", "row": {...}}`` or ``{"kind":
    "failure", "model_call_id": ..., "reason": ...}``), whether the file exists, and the length of its
    complete lines (anything after that is a torn tail)."""

    __slots__ = ("complete", "exists", "rows")

    def __init__(self, rows: list[dict[str, Any]], *, exists: bool, complete: int) -> None:
        self.rows = rows
        self.exists = exists
        self.complete = complete


def read_log(path: Path) -> Log:
    """Read a row log; a missing file is an empty log, a last line without its newline a torn tail.

    Raises:
        CorruptRowError: a complete line that is not a row.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Log([], exists=False, complete=0)
    complete = data.rfind(b"\n") + 1
    rows = []
    for line in data[:complete].splitlines():
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or row.get("kind") not in ("record", "failure"):
                raise ValueError("not a row")
        except ValueError as error:
            raise CorruptRowError(f"{path} holds a line that is not a row ({error}): {line[:80]!r}") from None
        rows.append(row)
    return Log(rows, exists=True, complete=complete)


class DirectoryLedger:
    """A ``CaptureLedger`` kept as one directory per rollout under ``<workspace>/rollouts``."""

    def __init__(self, workspace: Path) -> None:
        self._root = Path(workspace) / "rollouts"
        self._locks = Path(workspace) / "locks"
        for directory in (self._root, self._locks):
            if not directory.is_dir():
                directory.mkdir(parents=True, exist_ok=True)
                sync_directory(directory.parent)

    # ------------------------------------------------------------------ files
    @contextmanager
    def _locked(self, rollout_id: str) -> Iterator[Path]:
        """Hold the ID's lock; yields the rollout's directory (which may not exist)."""
        stripe = zlib.crc32(rollout_id.encode()) % LOCK_STRIPES
        fd = os.open(self._locks / f"{stripe:02d}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self._root / rollout_id
        finally:
            os.close(fd)  # releases the lock

    @staticmethod
    def _fenced(directory: Path) -> bool:
        return (directory / FENCE).exists()

    def _make_directory(self, directory: Path) -> None:
        """Create the rollout's directory if missing, and sync ``rollouts/`` even when it was there: the
        call that made it may have failed at that sync (EIO), so its entry may not be durable yet."""
        if not directory.is_dir():
            os.mkdir(directory)
        sync_directory(self._root)

    def _append(self, directory: Path, log: Log, content: dict[str, Any]) -> None:
        """Append one line to the log: cut a torn tail, one write, fsync; a first row syncs the directory."""
        if not log.rows:
            self._make_directory(directory)
        fd = os.open(directory / LOG, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, log.complete)  # drops a torn tail; a no-op otherwise
            os.lseek(fd, log.complete, os.SEEK_SET)
            try:
                self._write_line(fd, (canonical_json(content) + "\n").encode())
            except OSError:
                # The write or its fsync failed: the line's pages may never reach the disk, and a later
                # fsync may succeed without them ("fsyncgate"). Cut the line away, so that the caller's
                # retry writes it anew instead of finding it in the page cache and trusting a second
                # fsync (SPEC.md §Decisions, after a failed fsync).
                os.ftruncate(fd, log.complete)
                raise
        finally:
            os.close(fd)
        if not log.rows:
            self._sync_new_log(directory)

    def _write_line(self, fd: int, line: bytes) -> None:
        write_all(fd, line)
        os.fsync(fd)

    def _sync_new_log(self, directory: Path) -> None:
        sync_directory(directory)

    def _write_fence(self, directory: Path) -> None:
        """Create the fence durably: the file fsynced, then the directory."""
        write_file(directory / FENCE, b"")
        sync_directory(directory)

    def _unlink_log(self, directory: Path) -> None:
        os.unlink(directory / LOG)
        sync_directory(directory)

    def _resync(self, directory: Path, name: str) -> None:
        """Make durable what an earlier call may have left unsynced: it wrote ``name`` (a row, a fence) or
        unlinked in ``directory`` and then failed at a sync (EIO), so finding the file is no proof that it
        survives a crash. fsync the file, its directory and ``rollouts/``."""
        fd = os.open(directory / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        sync_directory(directory)
        sync_directory(self._root)

    # ------------------------------------------------------------------ writes
    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        """Append ``row``; an identical re-record is a no-op, a different one raises (R-WRITE-2..3)."""
        validate_rollout_id(rollout_id)
        plain = validate_row(row)
        with self._locked(rollout_id) as directory:
            log = read_log(directory / LOG)
            if not log.rows and self._fenced(directory):
                warn_discarded(rollout_id, row_staging_key(plain))
                return
            for old in log.rows:
                if old["kind"] == "record" and old["row"]["model_call_id"] == plain["model_call_id"]:
                    if canonical_json(old["row"]) == canonical_json(plain):
                        self._resync(directory, LOG)  # a retry of a record whose fsync failed
                        return
                    raise ConflictingRecordError(rollout_id, plain["model_call_id"])
            self._append(directory, log, {"kind": "record", "row": plain})

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        """Append the failure row unless the identical failure is there (R-WRITE-7)."""
        validate_rollout_id(rollout_id)
        validate_failure(model_call_id, reason)
        failure = {"kind": "failure", "model_call_id": model_call_id, "reason": reason}
        with self._locked(rollout_id) as directory:
            log = read_log(directory / LOG)
            if not log.rows and self._fenced(directory):
                warn_discarded(rollout_id, None)
            elif failure not in log.rows:
                self._append(directory, log, failure)
            else:
                self._resync(directory, LOG)  # a retry of a failure whose fsync failed

    # ------------------------------------------------------------------ admission and reads
    def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        """The staging key, or ``None`` when a fence exists (R-ADMIT-1..2)."""
        validate_rollout_id(rollout_id)
        validate_model_call_id(model_call_id)
        with self._locked(rollout_id) as directory:
            fenced = self._fenced(directory)
        return None if fenced else staging_key(rollout_id, model_call_id)

    def manifest(self, rollout_id: str) -> Manifest:
        """The rows in append order; ``RolloutRetiredError`` when Retired (R-READ-1..3)."""
        validate_rollout_id(rollout_id)
        with self._locked(rollout_id) as directory:
            rows = read_log(directory / LOG).rows
            if not rows and self._fenced(directory):
                raise RolloutRetiredError(rollout_id)
        failures = [r for r in rows if r["kind"] == "failure"]
        return {
            "rollout_id": rollout_id,
            "records": [r["row"] for r in rows if r["kind"] == "record"],
            "failures": [{"model_call_id": f["model_call_id"], "reason": f["reason"]} for f in failures],
        }

    def has_rows(self, rollout_id: str) -> bool:
        """Whether the rollout is Live; ``RolloutRetiredError`` when Retired (R-READ-4)."""
        validate_rollout_id(rollout_id)
        with self._locked(rollout_id) as directory:
            if read_log(directory / LOG).rows:
                return True
            if self._fenced(directory):
                raise RolloutRetiredError(rollout_id)
            return False

    # ------------------------------------------------------------------ removal
    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Fence every ID durably, then unlink its log (R-RETIRE-1..4)."""
        return _each(rollout_ids, self._retire_one)

    def _retire_one(self, rollout_id: str) -> bool:
        with self._locked(rollout_id) as directory:
            log = read_log(directory / LOG)
            if not self._fenced(directory):
                self._make_directory(directory)
                self._write_fence(directory)
            else:
                self._resync(directory, FENCE)  # a retry: the fence, or an unlink, may not be durable yet
            if log.exists:
                self._unlink_log(directory)
            return bool(log.rows)

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Unlink every ID's log and fence (R-DELETE-1..3)."""
        return _each(rollout_ids, self._delete_one)

    def _delete_one(self, rollout_id: str) -> bool:
        with self._locked(rollout_id) as directory:
            log = read_log(directory / LOG)
            fenced = self._fenced(directory)
            if log.exists:
                os.unlink(directory / LOG)
            if fenced:
                os.unlink(directory / FENCE)
            if directory.is_dir():  # also when nothing was left: a retry after a failed sync
                self._sync_delete(directory)
            return bool(log.rows)

    def _sync_delete(self, directory: Path) -> None:
        sync_directory(directory)


def _each(rollout_ids: Sequence[str], remove_one: Callable[[str], bool]) -> RolloutRemoval:
    """Validate the whole batch first (R-BATCH-1..2), then remove one ID at a time: those whose
    ``remove_one`` says they had rows are ``removed``, the others ``absent``, in the batch's order."""
    batch = validate_rollout_ids(rollout_ids)
    removed = [rid for rid in batch if remove_one(rid)]
    return {"removed": removed, "absent": [rid for rid in batch if rid not in removed]}


# ------------------------------------------------------------------------------------- file helpers
def write_all(fd: int, data: bytes) -> None:
    """``write`` until every byte of ``data`` is written."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_file(path: Path, data: bytes) -> None:
    """Create (or replace the content of) ``path`` holding ``data``, and fsync it before returning."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_directory(directory: Path) -> None:
    """fsync ``directory``, so that entries created, renamed or removed in it survive a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def warn_discarded(rollout_id: str, key: str | None) -> None:
    """The one warning of a discarded write (R-WRITE-5)."""
    logger.warning("discarded a late write to retired rollout %s (staging key %s)", rollout_id, key)


def open_ledger(workspace: Path) -> DirectoryLedger:
    """Open a handle on the ledger in ``workspace`` (created by the first handle).

    Args:
        workspace: the directory holding ``rollouts/`` and ``locks/``.

    Returns:
        A new handle; it holds no state, so handles need no closing.

    Raises:
        OSError: the workspace cannot be created or written.
    """
    return DirectoryLedger(workspace)
