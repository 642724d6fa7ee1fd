"""The catalogue of seeded bugs: which layer must kill each (docs/bugs.md).

``CATALOGUE`` lists every deliberately broken variant of the example ledgers as a ``Bug`` record: its name,
the example it varies (``sqlite``, ``directory`` or ``async``), the layer expected to kill it, the
requirement it breaks, a one-line description, and its factory as a ``module:callable`` target. The layers:

- ``sequential``: the conformance kit (``check_ledger``, ``capture-ledger verify``) kills it;
- ``concurrency``: only concurrent histories show it (``check_concurrency``, ``capture-ledger stress``): it
  passes the kit. ``processes`` says it shows only across processes (each with its own handles);
- ``crash``: only crash states show it (``capture-ledger crash --target``): it passes the kit and a stress
  run. ``model`` names the most lenient persistence model expected to show it (``journaled``, then
  ``weakest-posix``, then ``ext4-nojournal``, as in ``capture_ledger.spec.crash.durability``): a model that
  promises more than that one keeps the bug hidden.

``EXAMPLES`` lists the three correct ledgers with the layers that apply to each (the asynchronous ledger is
memory: no crash layer). Not guaranteed: that a layer finds a bug within any budget; the kill matrix
(``benchmarks/bug_matrix.py``, tests/examples/test_bug_catalogue.py) measures and holds that.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["BASES", "CATALOGUE", "EXAMPLES", "LAYERS", "Bug", "Example", "Layer", "bug", "load"]

#: The layers, in the order they run: a bug belongs to the first that kills it.
Layer = Literal["sequential", "concurrency", "crash"]
LAYERS: tuple[Layer, ...] = ("sequential", "concurrency", "crash")
#: The example ledgers the bugs vary, and the module of each.
BASES = {
    "sqlite": "examples.sqlite_ledger",
    "directory": "examples.directory_ledger",
    "async": "examples.async_ledger",
}
_BUG_MODULES = {
    "sqlite": "examples.bugs.sqlite_bugs",
    "directory": "examples.bugs.directory_bugs",
    "async": "examples.bugs.async_bugs",
}


def load(target: str) -> Callable[[Path], Any]:
    """The factory a ``module:callable`` target names (imported now)."""
    module, _, name = target.partition(":")
    factory: Callable[[Path], Any] = getattr(importlib.import_module(module), name)
    return factory


@dataclass(frozen=True, slots=True)
class Example:
    """A correct example ledger: its target and the layers that must pass it."""

    name: str
    target: str
    layers: tuple[Layer, ...]

    @property
    def factory(self) -> Callable[[Path], Any]:
        """The factory (imported on first use)."""
        return load(self.target)


@dataclass(frozen=True, slots=True)
class Bug:
    """One seeded bug: a variation of an example ledger that ``layer`` must kill.

    ``requirement`` is what the slip breaks; ``also`` lists requirements it breaks as a consequence, any of
    which a layer may name first (the kit names what it observes, and cannot tell a manifest read in the
    wrong order from rows appended in the wrong place).
    """

    name: str
    base: str
    layer: Layer
    requirement: str
    description: str
    processes: bool = False
    model: str | None = None
    also: tuple[str, ...] = ()

    @property
    def target(self) -> str:
        """``module:open_<name>``, for ``capture-ledger verify`` and the other layers."""
        return f"{_BUG_MODULES[self.base]}:open_{self.name}"

    @property
    def factory(self) -> Callable[[Path], Any]:
        """The factory (imported on first use)."""
        return load(self.target)


#: The SQLite ledger's control is WAL with FULL, its setting safe under every layer: in DELETE mode (the
#: factory's default, EXTRA) SQLite ignores a failed directory sync, so ``crash --target`` breaks R-STATE-3 on
#: ``record-retry-eio`` where strace makes that sync fail (docs/examples.md §SQLite), a finding about
#: SQLite, not a slip of the ledger.
EXAMPLES: tuple[Example, ...] = (
    Example("sqlite", "examples.sqlite_ledger:open_wal_full", LAYERS),
    Example("directory", "examples.directory_ledger:open_ledger", LAYERS),
    Example("async", "examples.async_ledger:open_ledger", ("sequential", "concurrency")),
)

_SEQ: Layer = "sequential"
_CONC: Layer = "concurrency"
_CRASH: Layer = "crash"

CATALOGUE: tuple[Bug, ...] = (
    # ---------------------------------------------------------------- the kit kills these
    Bug(
        "sqlite_rows_by_call_id",
        "sqlite",
        _SEQ,
        "R-READ-2",
        "manifest orders rows by model_call_id",
        also=("R-WRITE-2",),
    ),
    Bug("sqlite_retire_skips_absent", "sqlite", _SEQ, "R-RETIRE-2", "retire fences only IDs that had rows"),
    Bug(
        "sqlite_delete_keeps_fence", "sqlite", _SEQ, "R-DELETE-2", "delete removes the rows but not the fence"
    ),
    Bug(
        "dir_fence_name_mismatch",
        "directory",
        _SEQ,
        "R-WRITE-4",
        "fence written as RETIRED, looked up as retired",
        also=("R-RETIRE-1", "R-RETIRE-2", "R-ADMIT-2", "R-READ-3", "R-READ-4"),
    ),
    Bug(
        "dir_has_rows_by_directory",
        "directory",
        _SEQ,
        "R-READ-4",
        "has_rows asks whether the directory exists",
    ),
    Bug(
        "dir_unanchored_id_check",
        "directory",
        _SEQ,
        "R-ID-1",
        "record checks IDs with re.match, not fullmatch",
    ),
    Bug("async_retired_manifest_empty", "async", _SEQ, "R-READ-3", "a Retired manifest reads empty"),
    Bug(
        "async_loose_equality",
        "async",
        _SEQ,
        "R-WRITE-3",
        "rows compared with ==, so 1, 1.0 and True collide",
    ),
    Bug("async_partial_batch", "async", _SEQ, "R-BATCH-2", "retire validates each ID as it fences it"),
    # ---------------------------------------------------------------- only concurrency shows these
    Bug(
        "sqlite_deferred_write",
        "sqlite",
        _CONC,
        "R-CONC-1",
        "writes BEGIN deferred: the lock upgrade fails with 'database is locked' under contention",
    ),
    Bug(
        "sqlite_fence_checked_outside_transaction",
        "sqlite",
        _CONC,
        "R-CONC-2",
        "record checks the fence and appends in two transactions",
    ),
    Bug(
        "sqlite_process_fence_cache",
        "sqlite",
        _CONC,
        "R-ADMIT-1",
        "admission caches fenced IDs per process; another process's delete is never seen",
        processes=True,
    ),
    Bug(
        "dir_failure_without_lock",
        "directory",
        _CONC,
        "R-CONC-1",
        "record_failure takes no lock: two identical failures are both appended",
        also=("R-CONC-2",),
    ),
    Bug(
        "dir_fence_checked_before_lock",
        "directory",
        _CONC,
        "R-CONC-2",
        "record looks for the fence before taking the lock",
    ),
    Bug(
        "dir_retire_unlinks_before_fence",
        "directory",
        _CONC,
        "R-CONC-2",
        "retire unlinks the log, lets the lock go, then writes the fence",
        also=("R-CONC-1",),
    ),
    Bug(
        "async_check_then_act",
        "async",
        _CONC,
        "R-CONC-2",
        "record lets the lock go across an await between the fence check and the append",
    ),
    Bug(
        "async_lost_update",
        "async",
        _CONC,
        "R-CONC-1",
        "record_failure reads the rows, awaits, and stores its copy back, without the lock",
        also=("R-CONC-2",),
    ),
    Bug(
        "async_retire_fences_last",
        "async",
        _CONC,
        "R-CONC-2",
        "retire drops the rows, awaits with the lock let go, then adds the fence",
    ),
    Bug(
        "dir_retire_without_recheck",
        "directory",
        _CONC,
        "R-CONC-3",
        "two-phase retire unlinks the noted log without looking again for its fence",
    ),
    # ---------------------------------------------------------------- only a crash shows these
    Bug(
        "sqlite_delete_full",
        "sqlite",
        _CRASH,
        "R-CRASH-1",
        "SQLite's defaults (DELETE, FULL): the journal's unlink is not synced, a commit may roll back",
        model="journaled",
    ),
    Bug("sqlite_sync_off", "sqlite", _CRASH, "R-CRASH-1", "synchronous=OFF", model="journaled"),
    Bug(
        "sqlite_wal_normal",
        "sqlite",
        _CRASH,
        "R-CRASH-1",
        "WAL with synchronous=NORMAL: the last commits roll back",
        model="journaled",
    ),
    Bug(
        "sqlite_journal_memory",
        "sqlite",
        _CRASH,
        "R-CRASH-4",
        "journal_mode=MEMORY: a commit cut short is not undone",
        model="journaled",
    ),
    Bug(
        "sqlite_journal_off",
        "sqlite",
        _CRASH,
        "R-CRASH-4",
        "journal_mode=OFF: a commit cut short is not undone",
        model="journaled",
    ),
    Bug(
        "dir_append_without_fsync",
        "directory",
        _CRASH,
        "R-CRASH-1",
        "record returns after write() without an fsync of the log",
        model="journaled",
    ),
    Bug(
        "dir_row_in_two_writes",
        "directory",
        _CRASH,
        "R-CRASH-1",
        "the row is written in two write() calls with the fsync between them",
        model="journaled",
    ),
    Bug(
        "dir_new_log_not_synced",
        "directory",
        _CRASH,
        "R-CRASH-1",
        "a new log is fsynced but its directory is not",
        model="journaled",
    ),
    Bug(
        "dir_mkdir_without_parent_sync",
        "directory",
        _CRASH,
        "R-CRASH-1",
        "a new rollout directory's entry is not synced in rollouts/",
        model="weakest-posix",
    ),
    Bug(
        "dir_log_rewritten_in_place",
        "directory",
        _CRASH,
        "R-CRASH-1",
        "the log is rewritten in place (truncate, write) instead of replaced atomically",
        model="journaled",
    ),
    Bug(
        "dir_rewrite_renamed_without_fsync",
        "directory",
        _CRASH,
        "R-CRASH-1",
        "the rewritten log is renamed into place without an fsync of its data",
        model="journaled",
    ),
    Bug(
        "dir_rewrite_renamed_without_directory_sync",
        "directory",
        _CRASH,
        "R-CRASH-1",
        "the rewritten log is renamed into place without an fsync of the directory",
        model="journaled",
    ),
    Bug(
        "dir_fence_not_synced",
        "directory",
        _CRASH,
        "R-CRASH-2",
        "no directory fsync after the fence is created: the log may be unlinked before it is durable",
        model="journaled",
    ),
    Bug(
        "dir_fence_file_not_fsynced",
        "directory",
        _CRASH,
        "R-CRASH-2",
        "the empty fence file is never fsynced, only its directory",
        model="ext4-nojournal",
    ),
    Bug(
        "dir_no_sync_after_unlink",
        "directory",
        _CRASH,
        "R-CRASH-2",
        "retire returns without an fsync of the directory after unlinking the log",
        model="journaled",
    ),
    Bug(
        "dir_delete_without_sync",
        "directory",
        _CRASH,
        "R-CRASH-3",
        "delete returns without an fsync of the directory",
        model="journaled",
    ),
    Bug(
        "dir_retry_trusts_second_fsync",
        "directory",
        _CRASH,
        "R-CRASH-1",
        "a line whose fsync failed is left in the log, and the retry trusts a second fsync",
        model="journaled",
    ),
)

_BY_NAME = {b.name: b for b in CATALOGUE}


def bug(name: str) -> Bug:
    """The catalogued bug called ``name``.

    Raises:
        KeyError: no such bug.
    """
    return _BY_NAME[name]
