"""The interleaving scenarios: the races that matter on the real file store (SPEC.md R-CONC-1..3).

``SCENARIOS`` are the operations ``interleave`` runs under every bounded schedule, each starting with
``a`` made Live by handle 0; ``store_opener`` opens ``FileLineageStore`` handles, optionally with a
guard-removed ``StoreVariant``; ``GUARDS`` are the variant switches whose absence some schedule of these
scenarios must reveal (R-STORE-4, R-STORE-7, R-WRITE-6, R-ADMIT-2).

Not guaranteed: that these scenarios cover every race of the store; the ``sync_*`` and ``fsync_appends``
switches change only what survives a crash, which no schedule can reveal (that is ``crash``'s job).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capture_ledger.impl.store.fs import FileSystem
from capture_ledger.impl.store.ordering import StoreVariant
from capture_ledger.impl.study.interleave import OpenHandle, Scenario
from capture_ledger.spec.core.model import (
    Admit,
    Delete,
    HasRows,
    Operation,
    ReadManifest,
    Record,
    RecordFailure,
    Retire,
)

__all__ = ["GUARDS", "SCENARIOS", "store_opener"]


def store_opener(variant: StoreVariant | None = None) -> OpenHandle:
    """Open ``FileLineageStore`` handles with ``variant`` (the production store when ``None``).

    Args:
        variant: the guards switched on or off; ``None`` is the production store.

    Returns:
        An ``OpenHandle`` for ``interleave.run_schedule`` and ``interleave.explore``.
    """
    from capture_ledger.impl.store.file_store import FileLineageStore

    chosen = variant if variant is not None else StoreVariant()

    def open_handle(directory: Path, fs: FileSystem) -> Any:
        return FileLineageStore(directory, fs=fs, variant=chosen)

    return open_handle


def _row(k: int) -> dict[str, object]:
    return {"model_call_id": f"c{k}", "v": k}


_LIVE_A: tuple[tuple[int, Operation], ...] = ((0, Record("a", _row(1))),)

#: The races of docs/interleavings.md, each starting with ``a`` made Live by handle 0.
SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario("retire-vs-late-write", ("a",), _LIVE_A, ((Retire(["a"]),), (Record("a", _row(2)),))),
        Scenario(
            "retire-vs-two-late-writes",
            ("a",),
            _LIVE_A,
            ((Retire(["a"]),), (Record("a", _row(2)),), (Record("a", _row(3)),)),
        ),
        Scenario(
            "retire-vs-delete-reuse",
            ("a",),
            _LIVE_A,
            ((Retire(["a"]),), (Delete(["a"]), Record("a", _row(2)))),
        ),
        Scenario(
            "two-retires-vs-write",
            ("a",),
            _LIVE_A,
            ((Retire(["a"]),), (Retire(["a"]),), (Record("a", _row(2)),)),
        ),
        Scenario("delete-vs-write", ("a",), _LIVE_A, ((Delete(["a"]),), (Record("a", _row(2)),))),
        Scenario("admit-vs-retire", ("a",), _LIVE_A, ((Retire(["a"]),), (Admit("a", "c2"),))),
        # Handle 1 has read (cached) a's rows before handle 0 deletes and reuses the ID (R-STORE-7).
        Scenario(
            "stale-cache-after-delete",
            ("a",),
            (*_LIVE_A, (1, ReadManifest("a"))),
            ((Delete(["a"]), Record("a", _row(2))), (Record("a", _row(3)),)),
        ),
        # Reads and a failure row between retire's phases see a fenced Live rollout (R-STATE-2).
        Scenario(
            "retire-vs-reads",
            ("a",),
            _LIVE_A,
            ((Retire(["a"]),), (HasRows("a"), RecordFailure("a", "c1", "timeout"), ReadManifest("a"))),
        ),
        # A batch is linearizable per ID, not atomic across IDs (R-CONC-1): writes to both IDs race it.
        Scenario(
            "batch-retire-vs-writes",
            ("a", "b"),
            (*_LIVE_A, (0, Record("b", _row(1)))),
            ((Retire(["a", "b"]),), (Record("b", _row(2)), Record("a", _row(2)))),
        ),
    ]
}


#: The guards ``StoreVariant`` can switch off whose absence a schedule (not a crash) must reveal.
GUARDS = (
    "recheck_fence",
    "fence_before_unlink",
    "fence_lookup_on_write",
    "admit_checks_fence",
    "cache_coherence",
)
