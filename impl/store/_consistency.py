"""Reading a lineage directory as the spec sees it, and checking it (SPEC.md R-STORE-8, R-STATE-3, R-STORE-6).

``read_snapshot(fs)`` reads a directory through the seam into ``spec.abstraction`` snapshots: per rollout
ID, the complete rows of its ledger (a torn last line is not a row) and whether a fence exists. The crash
explorer judges crash states with it; ``abstract(read_snapshot(fs))`` is the model state a reopened store
will serve.

``check(directory, fix=False)`` lists what a healthy directory should not hold:

- ``torn-tail``: bytes after a ledger's last complete line (a crash during an append that never returned).
  Fix: truncate them, under the rollout's lock, and fsync the file. The rows are unchanged.
- ``interrupted-retire``: a ledger beside its fence (the fenced Live state, R-STATE-2). Fix: complete the
  retire as a retried retire would: under the lock, unlink the ledger; then sync the directory.
- ``empty-ledger``: a ledger file with no complete row (a crash after creating it). Fix: unlink it under
  the lock; the rollout's state does not change (no rows either way).
- ``interrupted-create``: a new ledger's temporary (``.<id>.lineage.jsonl.new``, ``lines.creation_name``)
  left by a crash before its rename (R-STORE-3): no reader takes it for a ledger and no row in it was
  acknowledged. Fix: unlink it under the rollout's lock (a running creator holds that lock for as long as
  its temporary exists, so the fix never removes one in use); then sync the directory.
- ``corrupt-line``: a complete line that is not a row. Never fixed: a person must look.
- ``stale-fence``: a fence holding a removed ledger's bytes: without a journal a crash may bring a fence
  whose inode was never fsynced back as a removed file, whole (spec/crash/durability.py, ext4-nojournal).
  It still fences its rollout (a fence is its name, never its bytes). Fix: truncate it to empty and fsync
  it, under the rollout's lock.
- ``nonempty-fence``: a fence file with any other content (not written by the store). Never fixed.
- ``stray-file``: any other name (not a lock file, not a ledger or fence of a valid ID). Never deleted.

The listing only says which files to look at: every decision about a ledger (its rows, a torn tail,
whether its fence exists) is taken from reads made under the rollout's lock, and the fix is applied in
that same hold. So ``fix=True`` is safe beside running stores: a ledger that another handle deleted and
re-created after the listing is judged as the new, unfenced ledger it is, and left alone.

Not guaranteed: that a directory in use by running stores stays as reported after ``check`` returns (a
report is a snapshot; a fence created after the listing is seen only when its ledger is looked at, and a
fence alone is never reported).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from capture_ledger.impl.store._lines import (
    FENCE_SUFFIX,
    LEDGER_SUFFIX,
    CorruptLedgerError,
    decode,
    fence_name,
    ledger_name,
    ledger_of_creation,
)
from capture_ledger.impl.store._locks import rollout_slot, stripe_lock
from capture_ledger.impl.store.fs import FileSystem, OsFileSystem
from capture_ledger.spec.core.abstraction import ConcreteRollout
from capture_ledger.spec.core.errors import InvalidRolloutIdError
from capture_ledger.spec.core.ids import validate_rollout_id

__all__ = ["FINDING_KINDS", "Finding", "check", "read_snapshot"]

#: Every ``Finding.kind``, in the order ``check`` reports them per file.
FINDING_KINDS = (
    "torn-tail",
    "interrupted-retire",
    "empty-ledger",
    "interrupted-create",
    "corrupt-line",
    "stale-fence",
    "nonempty-fence",
    "stray-file",
)

_LOCK_NAME = re.compile(r"\.capture-ledger\.lock\.\d{3,}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One thing ``check`` found: its kind (``FINDING_KINDS``), the file's name, what is wrong, and
    whether ``check(fix=True)`` repaired it."""

    kind: str
    name: str
    detail: str
    fixed: bool = False


def _rollout_of(name: str) -> tuple[str, str] | None:
    """``(rollout ID, suffix)`` when ``name`` is a ledger or fence of a valid ID."""
    for suffix in (LEDGER_SUFFIX, FENCE_SUFFIX):
        if name.endswith(suffix):
            try:
                return validate_rollout_id(name[: -len(suffix)]), suffix
            except InvalidRolloutIdError:
                return None
    return None


def read_snapshot(fs: FileSystem) -> dict[str, ConcreteRollout]:
    """Read every rollout of the directory behind ``fs`` as the store would serve it (R-STATE-3).

    Args:
        fs: the seam over the directory (a recorder's replayed state, or ``OsFileSystem``).

    Returns:
        Per rollout ID with a ledger file or a fence: its complete rows and whether it is fenced.
        Lock files and stray names are left out.

    Raises:
        CorruptLedgerError: a complete line is not a row (the store would raise it too).
    """
    snapshot: dict[str, ConcreteRollout] = {}
    ledgers: dict[str, ConcreteRollout] = {}
    fences: set[str] = set()
    for name in fs.listdir():
        parsed = _rollout_of(name)
        if parsed is None:
            continue
        rollout_id, suffix = parsed
        if suffix == FENCE_SUFFIX:
            fences.add(rollout_id)
            continue
        got = fs.read(name, 0)
        if got is not None:
            ledgers[rollout_id] = ConcreteRollout(decode(got[1], name=name).entries, False)
    for rollout_id in sorted(set(ledgers) | fences):
        entries = ledgers[rollout_id].entries if rollout_id in ledgers else ()
        snapshot[rollout_id] = ConcreteRollout(entries, rollout_id in fences)
    return snapshot


def check(
    directory: str | os.PathLike[str], *, fix: bool = False, fs: FileSystem | None = None
) -> list[Finding]:
    """Check a lineage directory; with ``fix``, repair what is safe (see the module docstring).

    Args:
        directory: the lineage directory.
        fix: repair torn tails, interrupted retires and empty ledgers, each under the rollout's lock.
        fs: the seam to use; default ``OsFileSystem`` with as many stripes as the directory has lock files.

    Returns:
        The findings, sorted by file name.

    Raises:
        FileNotFoundError: ``directory`` does not exist.
        OSError: the file system failed.
    """
    owned: OsFileSystem | None = None
    if fs is None:
        names = os.listdir(directory)  # raises FileNotFoundError; OsFileSystem would create it
        stripes = sum(1 for name in names if _LOCK_NAME.fullmatch(name)) or 64
        owned = OsFileSystem(Path(directory), stripes=stripes)
        fs = owned
    try:
        return _check(fs, fix=fix)
    finally:
        if owned is not None:
            owned.close_all()


def _check(fs: FileSystem, *, fix: bool) -> list[Finding]:
    names = fs.listdir()
    findings: list[Finding] = []
    unlinked = False
    for name in names:
        if _LOCK_NAME.fullmatch(name):
            continue
        creating = ledger_of_creation(name)
        parsed = _rollout_of(name if creating is None else creating)
        if parsed is None or (creating is not None and parsed[1] != LEDGER_SUFFIX):
            findings.append(Finding(kind="stray-file", name=name, detail="not a ledger, fence or lock file"))
            continue
        if creating is not None:
            found = _interrupted_create(fs, name, parsed[0], fix=fix)
            if found is not None:
                unlinked |= found.fixed
                findings.append(found)
            continue
        rollout_id, suffix = parsed
        if suffix == FENCE_SUFFIX:
            stat = fs.stat(name)
            if stat is not None and stat.size:
                found = _nonempty_fence(fs, name, rollout_id, fix=fix)
                if found is not None:
                    findings.append(found)
            continue
        stripe, slot = rollout_slot(rollout_id, fs.stripes)
        with stripe_lock(fs, stripe):
            got = fs.read(name, 0)
            if got is None:
                continue  # removed since the listing
            stat, data = got
            try:
                decoded = decode(data, name=name)
            except CorruptLedgerError as error:
                findings.append(Finding(kind="corrupt-line", name=name, detail=str(error)))
                continue
            if decoded.torn:
                repaired = fix and _truncate(fs, name, decoded.end)
                findings.append(
                    Finding(
                        kind="torn-tail",
                        name=name,
                        detail=f"{stat.size - decoded.end} bytes after the last complete line at "
                        f"byte {decoded.end}" + ("; truncated" if repaired else ""),
                        fixed=repaired,
                    )
                )
            # Decided under the lock, never from the listing: since it was taken another handle may have
            # deleted X and recorded it anew (no fence now: fixing would unlink returned records), or a
            # retire may have fenced it (R-STORE-8, R-CONC-3).
            if fs.stat(fence_name(rollout_id)) is not None:
                if fix:
                    fs.advance_generation(stripe, slot)
                    unlinked |= fs.unlink(ledger_name(rollout_id))
                findings.append(
                    Finding(
                        kind="interrupted-retire",
                        name=name,
                        detail=f"a ledger of {len(decoded.entries)} rows beside its fence"
                        + ("; retire completed (ledger unlinked)" if fix else ""),
                        fixed=fix,
                    )
                )
            elif not decoded.entries:
                if fix:
                    fs.advance_generation(stripe, slot)
                    unlinked |= fs.unlink(name)
                findings.append(
                    Finding(
                        kind="empty-ledger",
                        name=name,
                        detail="a ledger file with no complete row" + ("; unlinked" if fix else ""),
                        fixed=fix,
                    )
                )
    if unlinked:
        fs.sync_dir()
    return findings


def _is_ledger_bytes(data: bytes) -> bool:
    """Whether ``data`` reads as a ledger's lines (what a removed ledger brought back as a fence holds)."""
    try:
        decoded = decode(data)
    except CorruptLedgerError:
        return False
    return bool(decoded.entries) or decoded.seed is not None


def _nonempty_fence(fs: FileSystem, name: str, rollout_id: str, *, fix: bool) -> Finding | None:
    """The finding for a fence with content, judged (and with ``fix`` emptied) under the rollout's lock:
    ``stale-fence`` when it holds a ledger's lines, else ``nonempty-fence``; ``None`` if gone or empty."""
    stripe, _ = rollout_slot(rollout_id, fs.stripes)
    with stripe_lock(fs, stripe):
        got = fs.read(name, 0)
        if got is None or not got[0].size:
            return None
        size = got[0].size
        if not _is_ledger_bytes(got[1]):
            return Finding(kind="nonempty-fence", name=name, detail=f"a fence of {size} bytes")
        emptied = fix and _truncate(fs, name, 0)
    return Finding(
        kind="stale-fence",
        name=name,
        detail=f"a fence holding {size} bytes of a removed ledger (a crash without a journal)"
        + ("; emptied" if emptied else ""),
        fixed=emptied,
    )


def _interrupted_create(fs: FileSystem, name: str, rollout_id: str, *, fix: bool) -> Finding | None:
    """The finding for temporary ``name`` of a ledger's creation, judged (and with ``fix`` unlinked) under
    the rollout's lock; ``None`` when it is gone by then (its creator finished)."""
    stripe, _ = rollout_slot(rollout_id, fs.stripes)
    with stripe_lock(fs, stripe):
        stat = fs.stat(name)
        if stat is None:
            return None
        removed = fix and fs.unlink(name)
    return Finding(
        kind="interrupted-create",
        name=name,
        detail=f"the temporary ({stat.size} bytes) of a ledger creation a crash interrupted before its "
        "rename" + ("; unlinked" if removed else ""),
        fixed=removed,
    )


def _truncate(fs: FileSystem, name: str, end: int) -> bool:
    fd = fs.open_append(name, create=False)
    if fd is None:
        return False
    try:
        fs.truncate(fd, end)
        fs.fsync(fd)
    finally:
        fs.close(fd)
    return True
