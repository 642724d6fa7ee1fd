"""Seeded bugs in the directory example ledger (``examples.directory_ledger``; the catalogue is
``examples.bugs``).

Each bug is the slip of a real author: a small subclass of ``DirectoryLedger`` overriding the one method
that differs, with a factory ``open_<name>(workspace)`` so that
``capture-ledger verify examples.bugs.directory_bugs:open_<name> --handles 3`` names it. The docstring says
the slip and the requirement it breaks; ``examples.bugs.catalogue`` says which layer must kill it.

Not guaranteed: that a bug breaks only the requirement named (the first one a layer will see).
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from capture_ledger.spec import (
    ConflictingRecordError,
    InvalidRolloutIdError,
    RolloutRemoval,
    validate_rollout_id,
    validate_rollout_ids,
)
from capture_ledger.spec.core.rows import canonical_json, row_staging_key, validate_failure, validate_row

from examples.directory_ledger import (
    FENCE,
    LOG,
    DirectoryLedger,
    Log,
    read_log,
    sync_directory,
    warn_discarded,
    write_all,
    write_file,
)

__all__ = [
    "open_dir_append_without_fsync",
    "open_dir_delete_without_sync",
    "open_dir_failure_without_lock",
    "open_dir_fence_checked_before_lock",
    "open_dir_fence_file_not_fsynced",
    "open_dir_fence_name_mismatch",
    "open_dir_fence_not_synced",
    "open_dir_has_rows_by_directory",
    "open_dir_log_rewritten_in_place",
    "open_dir_mkdir_without_parent_sync",
    "open_dir_new_log_not_synced",
    "open_dir_no_sync_after_unlink",
    "open_dir_retire_unlinks_before_fence",
    "open_dir_retire_without_recheck",
    "open_dir_retry_trusts_second_fsync",
    "open_dir_rewrite_renamed_without_directory_sync",
    "open_dir_rewrite_renamed_without_fsync",
    "open_dir_row_in_two_writes",
    "open_dir_unanchored_id_check",
]


# ------------------------------------------------------------------------------- shown sequentially
class FenceNameMismatch(DirectoryLedger):
    """R-WRITE-4: the fence is looked up as ``retired`` while retire writes ``RETIRED`` (a rename of the
    constant that missed one place), so no write ever sees a fence and a late write re-creates the ledger;
    a retired rollout reads as Absent (R-RETIRE-1)."""

    @staticmethod
    def _fenced(directory: Path) -> bool:
        return (directory / "retired").exists()


class HasRowsByDirectory(DirectoryLedger):
    """R-READ-4: ``has_rows`` asks whether the rollout's directory exists, which is also true of a Retired
    rollout (its fence is there) and of a deleted one (the directory stays)."""

    def has_rows(self, rollout_id: str) -> bool:
        validate_rollout_id(rollout_id)
        return (self._root / rollout_id).is_dir()


_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class UnanchoredIdCheck(DirectoryLedger):
    """R-ID-1: ``record`` checks the ID with its own ``re.match`` (anchored at the start only), so
    ``'a b'`` or ``'a/b'`` pass and name a directory outside the rule (or outside ``rollouts/``)."""

    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        if not isinstance(rollout_id, str) or not _ID.match(rollout_id):
            raise InvalidRolloutIdError(rollout_id, "does not match the ID rule")
        plain = validate_row(row)
        with self._locked(rollout_id) as directory:
            log = read_log(directory / LOG)
            if not log.rows and self._fenced(directory):
                warn_discarded(rollout_id, row_staging_key(plain))
                return
            for old in log.rows:
                if old["kind"] == "record" and old["row"]["model_call_id"] == plain["model_call_id"]:
                    if canonical_json(old["row"]) == canonical_json(plain):
                        return
                    raise ConflictingRecordError(rollout_id, plain["model_call_id"])
            self._append(directory, log, {"kind": "record", "row": plain})


# --------------------------------------------------------------------------- shown by concurrency only
class FailureWithoutLock(DirectoryLedger):
    """R-CONC-1: ``record_failure`` takes no lock ("failures never conflict"), so two identical failures in
    flight at once are both appended, and a failure racing a retire re-creates the ledger (R-CONC-2)."""

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        validate_rollout_id(rollout_id)
        validate_failure(model_call_id, reason)
        failure = {"kind": "failure", "model_call_id": model_call_id, "reason": reason}
        directory = self._root / rollout_id
        log = read_log(directory / LOG)
        if not log.rows and self._fenced(directory):
            warn_discarded(rollout_id, None)
        elif failure not in log.rows:
            self._append(directory, log, failure)


class FenceCheckedBeforeLock(DirectoryLedger):
    """R-CONC-2: ``record`` looks for the fence before taking the lock (a fast path for the common case),
    so a retire that runs between the look and the append is followed by a write that re-creates the
    ledger after the retire returned."""

    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        validate_rollout_id(rollout_id)
        plain = validate_row(row)
        directory = self._root / rollout_id
        if not read_log(directory / LOG).rows and self._fenced(directory):
            warn_discarded(rollout_id, row_staging_key(plain))
            return
        with self._locked(rollout_id):
            log = read_log(directory / LOG)
            for old in log.rows:
                if old["kind"] == "record" and old["row"]["model_call_id"] == plain["model_call_id"]:
                    if canonical_json(old["row"]) == canonical_json(plain):
                        return
                    raise ConflictingRecordError(rollout_id, plain["model_call_id"])
            self._append(directory, log, {"kind": "record", "row": plain})


class RetireUnlinksBeforeFence(DirectoryLedger):
    """R-CONC-2: retire unlinks the log under the lock and writes the fence under a second taking of it
    (two loops merged badly), so in between the rollout reads Absent and a late write starts a ledger
    that the fence then leaves standing."""

    def _retire_one(self, rollout_id: str) -> bool:
        with self._locked(rollout_id) as directory:
            log = read_log(directory / LOG)
            if log.exists:
                self._unlink_log(directory)
        with self._locked(rollout_id) as directory:
            if not self._fenced(directory):
                self._make_directory(directory)
                self._write_fence(directory)
        return bool(log.rows)


class RetireWithoutRecheck(DirectoryLedger):
    """R-CONC-3: retire runs in two phases, as the file store's does (fence every ID, then unlink the logs
    noted in phase 1), to hold each lock briefly, but phase 2 does not look again for the fence: after a
    delete and a new ledger of the same ID in between, it unlinks the new ledger."""

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        batch = validate_rollout_ids(rollout_ids)
        noted: dict[str, Log] = {}
        for rollout_id in batch:
            with self._locked(rollout_id) as directory:
                noted[rollout_id] = read_log(directory / LOG)
                if not self._fenced(directory):
                    self._make_directory(directory)
                    self._write_fence(directory)
        for rollout_id, log in noted.items():
            if log.exists:
                with self._locked(rollout_id) as directory, contextlib.suppress(FileNotFoundError):
                    self._unlink_log(directory)
        removed = [rid for rid in batch if noted[rid].rows]
        return {"removed": removed, "absent": [rid for rid in batch if rid not in removed]}


# ------------------------------------------------------------------------------ shown by a crash only
class AppendWithoutFsync(DirectoryLedger):
    """R-CRASH-1: the line is written and ``record`` returns without an fsync of the log ("the page cache
    will get it there"), so a row that returned may be gone after a crash."""

    def _write_line(self, fd: int, line: bytes) -> None:
        write_all(fd, line)


class RowInTwoWrites(DirectoryLedger):
    """R-CRASH-1: the row is written in two ``write()`` calls, the JSON and then its newline, with the
    fsync placed after the first: after a crash a returned row may lack its newline, a torn tail."""

    def _write_line(self, fd: int, line: bytes) -> None:
        write_all(fd, line[:-1])
        os.fsync(fd)
        write_all(fd, line[-1:])


class NewLogNotSynced(DirectoryLedger):
    """R-CRASH-1: a new log is fsynced but its directory is not ("the file is synced"), so the log's
    entry, and every row in it that returned, may be gone after a crash."""

    def _sync_new_log(self, directory: Path) -> None:
        return


class MkdirWithoutParentSync(DirectoryLedger):
    """R-CRASH-1: a new rollout's directory is created without an fsync of ``rollouts/``, so on a file
    system that may persist the rollout directory's contents without its own entry the first rows vanish."""

    def _make_directory(self, directory: Path) -> None:
        if not directory.is_dir():
            os.mkdir(directory)


def _rewritten(log: Log, content: dict[str, Any]) -> bytes:
    return b"".join((canonical_json(row) + "\n").encode() for row in [*log.rows, content])


class LogRewrittenInPlace(DirectoryLedger):
    """R-CRASH-1: each record rewrites the whole log with ``open(path, "w")`` (truncate, write, fsync) to
    drop any torn tail, instead of writing a temporary file and renaming it over: a crash between the
    truncation and the write loses every row that had returned."""

    def _append(self, directory: Path, log: Log, content: dict[str, Any]) -> None:
        self._make_directory(directory)
        write_file(directory / LOG, _rewritten(log, content))
        if not log.rows:
            self._sync_new_log(directory)


class RewriteRenamedWithoutFsync(DirectoryLedger):
    """R-CRASH-1: the log is rewritten to a temporary file renamed over it, but the temporary file is not
    fsynced before the rename, so after a crash the renamed log may be empty: every row gone."""

    def _append(self, directory: Path, log: Log, content: dict[str, Any]) -> None:
        self._make_directory(directory)
        temporary = directory / f".tmp-{uuid.uuid4().hex}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, _rewritten(log, content))
        finally:
            os.close(fd)
        os.rename(temporary, directory / LOG)
        sync_directory(directory)


class RewriteRenamedWithoutDirectorySync(DirectoryLedger):
    """R-CRASH-1: the log is rewritten to a temporary file, fsynced and renamed over the log, but the
    directory is not fsynced after the rename, so the new row that returned may be gone after a crash."""

    def _append(self, directory: Path, log: Log, content: dict[str, Any]) -> None:
        self._make_directory(directory)
        temporary = directory / f".tmp-{uuid.uuid4().hex}"
        write_file(temporary, _rewritten(log, content))
        os.rename(temporary, directory / LOG)


class FenceNotSynced(DirectoryLedger):
    """R-CRASH-2: the new fence is fsynced but its directory is not ("the unlink's sync covers it"): a
    retire of a rollout without rows returns with the fence not durable, and where the log is unlinked a
    file system free to reorder may keep the unlink and lose the fence (R-CRASH-4)."""

    def _write_fence(self, directory: Path) -> None:
        write_file(directory / FENCE, b"")


class FenceFileNotFsynced(DirectoryLedger):
    """R-CRASH-2: the fence is created with ``open``/``close`` and only the directory is fsynced ("it is
    empty, there is nothing to sync"); a file system that persists the entry but not the new inode (ext4
    without a journal) drops the fence after a crash."""

    def _write_fence(self, directory: Path) -> None:
        os.close(os.open(directory / FENCE, os.O_WRONLY | os.O_CREAT, 0o644))
        sync_directory(directory)


class NoSyncAfterUnlink(DirectoryLedger):
    """R-CRASH-2: retire unlinks the log and returns without an fsync of the directory, so after a crash
    the log may be back beside the fence: fenced Live, not Retired."""

    def _unlink_log(self, directory: Path) -> None:
        os.unlink(directory / LOG)


class DeleteWithoutSync(DirectoryLedger):
    """R-CRASH-3: delete unlinks the log and the fence without an fsync of the directory, so after a
    crash the old ledger or fence of a deleted (perhaps reused) ID may be back."""

    def _sync_delete(self, directory: Path) -> None:
        return


class RetryTrustsSecondFsync(DirectoryLedger):
    """R-CRASH-1: when the fsync of an appended line fails, the line stays in the log; the caller's retry
    finds it there and fsyncs again, and that second fsync may succeed while the line's pages were never
    written ("fsyncgate"): a row that returned is gone after a crash. The example cuts the line away
    instead, so the retry writes it anew."""

    def _append(self, directory: Path, log: Log, content: dict[str, Any]) -> None:
        if not log.rows:
            self._make_directory(directory)
        fd = os.open(directory / LOG, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, log.complete)
            os.lseek(fd, log.complete, os.SEEK_SET)
            self._write_line(fd, (canonical_json(content) + "\n").encode())
        finally:
            os.close(fd)
        if not log.rows:
            self._sync_new_log(directory)


# ---------------------------------------------------------------------------------------- factories
def open_dir_fence_name_mismatch(workspace: Path) -> DirectoryLedger:
    """``FenceNameMismatch`` (R-WRITE-4)."""
    return FenceNameMismatch(workspace)


def open_dir_has_rows_by_directory(workspace: Path) -> DirectoryLedger:
    """``HasRowsByDirectory`` (R-READ-4)."""
    return HasRowsByDirectory(workspace)


def open_dir_unanchored_id_check(workspace: Path) -> DirectoryLedger:
    """``UnanchoredIdCheck`` (R-ID-1)."""
    return UnanchoredIdCheck(workspace)


def open_dir_failure_without_lock(workspace: Path) -> DirectoryLedger:
    """``FailureWithoutLock`` (R-CONC-1)."""
    return FailureWithoutLock(workspace)


def open_dir_fence_checked_before_lock(workspace: Path) -> DirectoryLedger:
    """``FenceCheckedBeforeLock`` (R-CONC-2)."""
    return FenceCheckedBeforeLock(workspace)


def open_dir_retire_unlinks_before_fence(workspace: Path) -> DirectoryLedger:
    """``RetireUnlinksBeforeFence`` (R-CONC-2)."""
    return RetireUnlinksBeforeFence(workspace)


def open_dir_retire_without_recheck(workspace: Path) -> DirectoryLedger:
    """``RetireWithoutRecheck`` (R-CONC-3)."""
    return RetireWithoutRecheck(workspace)


def open_dir_append_without_fsync(workspace: Path) -> DirectoryLedger:
    """``AppendWithoutFsync`` (R-CRASH-1)."""
    return AppendWithoutFsync(workspace)


def open_dir_row_in_two_writes(workspace: Path) -> DirectoryLedger:
    """``RowInTwoWrites`` (R-CRASH-1)."""
    return RowInTwoWrites(workspace)


def open_dir_new_log_not_synced(workspace: Path) -> DirectoryLedger:
    """``NewLogNotSynced`` (R-CRASH-1)."""
    return NewLogNotSynced(workspace)


def open_dir_mkdir_without_parent_sync(workspace: Path) -> DirectoryLedger:
    """``MkdirWithoutParentSync`` (R-CRASH-1)."""
    return MkdirWithoutParentSync(workspace)


def open_dir_log_rewritten_in_place(workspace: Path) -> DirectoryLedger:
    """``LogRewrittenInPlace`` (R-CRASH-1)."""
    return LogRewrittenInPlace(workspace)


def open_dir_rewrite_renamed_without_fsync(workspace: Path) -> DirectoryLedger:
    """``RewriteRenamedWithoutFsync`` (R-CRASH-1)."""
    return RewriteRenamedWithoutFsync(workspace)


def open_dir_rewrite_renamed_without_directory_sync(workspace: Path) -> DirectoryLedger:
    """``RewriteRenamedWithoutDirectorySync`` (R-CRASH-1)."""
    return RewriteRenamedWithoutDirectorySync(workspace)


def open_dir_fence_not_synced(workspace: Path) -> DirectoryLedger:
    """``FenceNotSynced`` (R-CRASH-2)."""
    return FenceNotSynced(workspace)


def open_dir_fence_file_not_fsynced(workspace: Path) -> DirectoryLedger:
    """``FenceFileNotFsynced`` (R-CRASH-2)."""
    return FenceFileNotFsynced(workspace)


def open_dir_no_sync_after_unlink(workspace: Path) -> DirectoryLedger:
    """``NoSyncAfterUnlink`` (R-CRASH-2)."""
    return NoSyncAfterUnlink(workspace)


def open_dir_retry_trusts_second_fsync(workspace: Path) -> DirectoryLedger:
    """``RetryTrustsSecondFsync`` (R-CRASH-1)."""
    return RetryTrustsSecondFsync(workspace)


def open_dir_delete_without_sync(workspace: Path) -> DirectoryLedger:
    """``DeleteWithoutSync`` (R-CRASH-3)."""
    return DeleteWithoutSync(workspace)
