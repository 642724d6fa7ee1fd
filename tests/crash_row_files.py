"""A deliberately broken ledger for the crash layer's removal workloads: one file per row (SPEC.md §Crash,
R-CRASH-4; docs/crash-target.md §Workloads).

What it is: ``<workspace>/rollouts/<id>/`` holds one file per row, ``row-NNNN.json`` (one canonical JSON
line, numbered in append order), and, once the rollout is retired, an empty fence file ``RETIRED``;
``<workspace>/lock`` is one ``flock`` taken by every operation. It is careful where the directory ledger is
(examples/directory_ledger.py): each row file is fsynced and its directory synced before ``record``
returns, the fence is made durable (file, then directory) before any row goes, a retried removal re-syncs
what it finds, and every removal syncs the directory before returning.

The bug: retire and delete unlink the row files **one at a time** and sync the directory once at the end,
so a crash (or an unlink that fails) part-way through leaves some of the rows and not the others: a state on
no operation's path, which R-CRASH-4 forbids (a fenced Live rollout must keep every row). A careful ledger
of this layout would move the rows away in one atomic step (rename the rollout's directory aside) first.
The crash layer's ``retire-rows``, ``delete-rows`` and ``*-rows-*-eio`` workloads catch it; the older
workloads, whose removals take rollouts of one row, cannot.

The crash layer's children import it as ``tests.crash_row_files:open_row_files`` with the repository root
as their working directory (tests/ is a namespace package there).
"""

from __future__ import annotations

import fcntl
import json
import os
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

from examples.directory_ledger import sync_directory, warn_discarded, write_file

__all__ = ["FENCE", "RowFileLedger", "open_row_files"]

#: The fence file inside a rollout's directory.
FENCE = "RETIRED"


def _rows(directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The rollout's row files and rows, in append order; a file without its newline (a crashed write)
    is no row."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith("row-"))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        data = (directory / name).read_bytes()
        if data.endswith(b"\n"):
            found.append((directory / name, json.loads(data)))
    return found


class RowFileLedger:
    """A ``CaptureLedger`` kept as one file per row under ``<workspace>/rollouts/<id>/``."""

    def __init__(self, workspace: Path) -> None:
        self._root = Path(workspace) / "rollouts"
        self._lock = Path(workspace) / "lock"
        if not self._root.is_dir():
            self._root.mkdir(parents=True, exist_ok=True)
            sync_directory(self._root.parent)

    @contextmanager
    def _locked(self, rollout_id: str) -> Iterator[Path]:
        fd = os.open(self._lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield self._root / rollout_id
        finally:
            os.close(fd)

    def _resync(self, path: Path) -> None:
        """fsync ``path``, its directory and ``rollouts/``: an earlier call may have failed at a sync."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        sync_directory(path.parent)
        sync_directory(self._root)

    def _append(
        self, directory: Path, rows: list[tuple[Path, dict[str, Any]]], content: Mapping[str, Any]
    ) -> None:
        """One new row file: written, fsynced, its directory synced (``rollouts/`` too when new)."""
        if not directory.is_dir():
            os.mkdir(directory)
            sync_directory(self._root)
        number = int(rows[-1][0].name[4:8]) + 1 if rows else 0
        path = directory / f"row-{number:04d}.json"
        try:
            write_file(path, (canonical_json(content) + "\n").encode())
        except OSError:
            # Its pages may never reach the disk, and a later fsync may succeed without them: remove the
            # file, so that the caller's retry writes the row anew instead of trusting a second fsync.
            path.unlink(missing_ok=True)
            raise
        sync_directory(directory)

    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        """Add ``row``; an identical re-record is a no-op, a different one raises (R-WRITE-2..3)."""
        validate_rollout_id(rollout_id)
        plain = validate_row(row)
        with self._locked(rollout_id) as directory:
            rows = _rows(directory)
            if not rows and (directory / FENCE).exists():
                warn_discarded(rollout_id, row_staging_key(plain))
                return
            for path, old in rows:
                if old["kind"] == "record" and old["row"]["model_call_id"] == plain["model_call_id"]:
                    if canonical_json(old["row"]) == canonical_json(plain):
                        self._resync(path)
                        return
                    raise ConflictingRecordError(rollout_id, plain["model_call_id"])
            self._append(directory, rows, {"kind": "record", "row": plain})

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        """Add the failure row unless the identical failure is there (R-WRITE-7)."""
        validate_rollout_id(rollout_id)
        validate_failure(model_call_id, reason)
        failure = {"kind": "failure", "model_call_id": model_call_id, "reason": reason}
        with self._locked(rollout_id) as directory:
            rows = _rows(directory)
            same = [path for path, old in rows if old == failure]
            if not rows and (directory / FENCE).exists():
                warn_discarded(rollout_id, None)
            elif same:
                self._resync(same[0])
            else:
                self._append(directory, rows, failure)

    def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        """The staging key, or ``None`` when a fence exists (R-ADMIT-1..2)."""
        validate_rollout_id(rollout_id)
        validate_model_call_id(model_call_id)
        with self._locked(rollout_id) as directory:
            fenced = (directory / FENCE).exists()
        return None if fenced else staging_key(rollout_id, model_call_id)

    def manifest(self, rollout_id: str) -> Manifest:
        """The rows in append order; ``RolloutRetiredError`` when Retired (R-READ-1..3)."""
        validate_rollout_id(rollout_id)
        with self._locked(rollout_id) as directory:
            rows = [row for _, row in _rows(directory)]
            if not rows and (directory / FENCE).exists():
                raise RolloutRetiredError(rollout_id)
        return {
            "rollout_id": rollout_id,
            "records": [r["row"] for r in rows if r["kind"] == "record"],
            "failures": [
                {"model_call_id": r["model_call_id"], "reason": r["reason"]}
                for r in rows
                if r["kind"] == "failure"
            ],
        }

    def has_rows(self, rollout_id: str) -> bool:
        """Whether the rollout is Live; ``RolloutRetiredError`` when Retired (R-READ-4)."""
        validate_rollout_id(rollout_id)
        with self._locked(rollout_id) as directory:
            if _rows(directory):
                return True
            if (directory / FENCE).exists():
                raise RolloutRetiredError(rollout_id)
            return False

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Fence every ID durably, then unlink its row files one by one (the bug) (R-RETIRE-1..4)."""
        return _each(rollout_ids, self._retire_one)

    def _retire_one(self, rollout_id: str) -> bool:
        with self._locked(rollout_id) as directory:
            rows = _rows(directory)
            if (directory / FENCE).exists():
                self._resync(directory / FENCE)  # a retry: the fence, or an unlink, may not be durable
            else:
                if not directory.is_dir():
                    os.mkdir(directory)
                    sync_directory(self._root)
                write_file(directory / FENCE, b"")
                sync_directory(directory)
            for path, _ in rows:
                os.unlink(path)  # one at a time: a crash in between leaves some rows (R-CRASH-4)
            sync_directory(directory)
            return bool(rows)

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Unlink every ID's row files one by one (the bug), then its fence (R-DELETE-1..3)."""
        return _each(rollout_ids, self._delete_one)

    def _delete_one(self, rollout_id: str) -> bool:
        with self._locked(rollout_id) as directory:
            rows = _rows(directory)
            for path, _ in rows:
                os.unlink(path)
            if (directory / FENCE).exists():
                os.unlink(directory / FENCE)
            if directory.is_dir():
                sync_directory(directory)
            return bool(rows)


def _each(rollout_ids: Sequence[str], remove_one: Callable[[str], bool]) -> RolloutRemoval:
    batch = validate_rollout_ids(rollout_ids)
    removed = [rid for rid in batch if remove_one(rid)]
    return {"removed": removed, "absent": [rid for rid in batch if rid not in removed]}


def open_row_files(workspace: Path) -> RowFileLedger:
    """Open a handle on the row-file ledger in ``workspace`` (created by the first handle)."""
    return RowFileLedger(workspace)
