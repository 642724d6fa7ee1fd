"""The interleaving scenarios: the explorer's races, run on the real file store (SPEC.md R-CONC-1..3).

``SCENARIOS`` are the operations ``interleave`` runs under every bounded schedule. Each of the step-level
explorer's configurations (``spec.concurrency.explore.CONFIGURATIONS``) becomes one scenario of the same
name (``scenario_of``): its setup clients' calls run first, each on its handle; its other clients become
the scheduled threads, ordered by handle (thread *i* runs on handle *i*); each call becomes the model
operation ``steps.operation_of`` makes of it; and the configuration's stripes are kept by choosing real
rollout IDs that share (or do not share) a lock stripe of ``interleave.run_schedule``'s 64 as the
configuration's IDs do. ``SLOW`` are those the explorer itself explores only in the slow tests.

Two scenarios the explorer lacks are kept here (``EXTRA``), because the step model cannot express them:
``retire-vs-reads`` (``has_rows`` and a failure row between retire's phases, R-STATE-2: the step model has
neither ``has_rows`` nor failure rows) and ``stale-cache-after-delete`` (a handle with a cached view of the
ledger appends after another handle deleted and re-created it with a row of the same length, R-STORE-7:
the step model's caches have no inodes or sizes, so the real file system's inode reuse is not in it).

A configuration with combined removals (``Config.combine``) becomes a scenario whose handles combine
(``Scenario.combine``: ``combine_removals=True``); every scenario's handles share their syncs
(``group_commit=True``).

``store_opener`` opens ``FileLineageStore`` handles, optionally with a guard-removed ``StoreVariant``;
``GUARDS`` are the variant switches whose absence some schedule of these scenarios must reveal: the step
model's guards that the store has a switch for (R-STORE-4, R-STORE-7, R-WRITE-6, R-ADMIT-2).

Not guaranteed: that these scenarios cover every race of the store; the ``sync_*`` and ``fsync_appends``
switches change only what survives a crash, which no schedule can reveal (that is ``crash``'s job).
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

from capture_ledger.impl.store import stripe_of
from capture_ledger.impl.store.fs import FileSystem
from capture_ledger.impl.study._variants import STEP_NAMES, StoreVariant
from capture_ledger.impl.study.interleave._explore import OpenHandle, Scenario
from capture_ledger.spec.concurrency import explore
from capture_ledger.spec.concurrency.steps import (
    GUARD_NAMES,
    Call,
    Config,
    DeleteCall,
    RetireCall,
    operation_of,
)
from capture_ledger.spec.core.model import (
    Delete,
    HasRows,
    Operation,
    ReadManifest,
    Record,
    RecordFailure,
    Retire,
)

__all__ = ["EXTRA", "GUARDS", "SCENARIOS", "SLOW", "STRIPES", "scenario_of", "store_opener"]

#: The lock stripes of ``interleave.run_schedule``'s handles, which the rollout IDs are chosen for.
STRIPES = 64


def store_opener(variant: StoreVariant | None = None) -> OpenHandle:
    """Open ``FileLineageStore`` handles with ``variant`` (the production store when ``None``).

    Args:
        variant: the guards switched on or off; ``None`` is the production store.

    Returns:
        An ``OpenHandle`` for ``interleave.run_schedule`` and ``interleave.explore``.
    """
    from capture_ledger.impl.store.file_store import FileLineageStore

    chosen = variant if variant is not None else StoreVariant()

    def open_handle(directory: Path, fs: FileSystem, *, combine: bool = False) -> Any:
        # Group commit on in every scenario (their handles share syncs, R-STORE-9), whatever the default.
        return FileLineageStore(
            directory, fs=fs, ordering=chosen.ordering(), group_commit=True, combine_removals=combine
        )

    return open_handle


def _real_ids(config: Config) -> dict[str, str]:
    """A rollout ID per configuration ID, sharing a real stripe just where the configuration's IDs do."""
    chosen: dict[str, str] = {}
    for rollout_id in config.ids:
        same = {chosen[o] for o in chosen if config.stripe(o) == config.stripe(rollout_id)}
        others = {stripe_of(chosen[o], STRIPES) for o in chosen if chosen[o] not in same}
        wanted = {stripe_of(s, STRIPES) for s in same}
        for name in itertools.chain([rollout_id], (f"{rollout_id}{k}" for k in itertools.count())):
            stripe = stripe_of(name, STRIPES)
            if (stripe in wanted if wanted else stripe not in others) and name not in chosen.values():
                chosen[rollout_id] = name
                break
    return chosen


def _operation(call: Call, ids: dict[str, str]) -> Operation:
    if isinstance(call, RetireCall | DeleteCall):
        return operation_of(dataclasses.replace(call, rollout_ids=tuple(ids[r] for r in call.rollout_ids)))
    return operation_of(dataclasses.replace(call, rollout_id=ids[call.rollout_id]))


def scenario_of(config: Config) -> Scenario:
    """The scheduler's scenario for one of the step-level explorer's configurations (module docstring).

    Args:
        config: a bounded configuration whose concurrent clients use handles ``0..n-1``, one each.

    Returns:
        The scenario, under the configuration's name.

    Raises:
        ValueError: the concurrent clients' handles are not ``0..n-1``.
    """
    ids = _real_ids(config)
    concurrent = sorted(config.clients[config.setup :], key=lambda client: client.handle)
    if [client.handle for client in concurrent] != list(range(len(concurrent))):
        raise ValueError(f"{config.name}: concurrent clients must use handles 0..n-1, one each")
    return Scenario(
        name=config.name,
        rollout_ids=tuple(ids[rollout_id] for rollout_id in config.ids),
        setup=tuple(
            (client.handle, _operation(c, ids))
            for client in config.clients[: config.setup]
            for c in client.calls
        ),
        threads=tuple(tuple(_operation(c, ids) for c in client.calls) for client in concurrent),
        combine=config.combine,
    )


def _row(k: int) -> dict[str, object]:
    return {"model_call_id": f"m{k}"}


_LIVE_A: tuple[tuple[int, Operation], ...] = ((0, Record("a", _row(1))),)

#: The scenarios the explorer has no configuration for (see the module docstring).
EXTRA: dict[str, Scenario] = {
    s.name: s
    for s in [
        # Reads and a failure row between retire's phases see a fenced Live rollout (R-STATE-2).
        Scenario(
            name="retire-vs-reads",
            rollout_ids=("a",),
            setup=_LIVE_A,
            threads=(
                (Retire(["a"]),),
                (
                    HasRows("a"),
                    RecordFailure("a", "m1", "timeout"),
                    ReadManifest("a"),
                ),
            ),
        ),
        # Handle 1 has read (cached) a's rows before handle 0 deletes and reuses the ID (R-STORE-7).
        Scenario(
            name="stale-cache-after-delete",
            rollout_ids=("a",),
            setup=(*_LIVE_A, (1, ReadManifest("a"))),
            threads=((Delete(["a"]), Record("a", _row(2))), (Record("a", _row(3)),)),
        ),
    ]
}

#: Every scenario: one per explorer configuration, then ``EXTRA``.
SCENARIOS: dict[str, Scenario] = {
    **{name: scenario_of(config) for name, config in explore.CONFIGURATIONS.items()},
    **EXTRA,
}
#: The scenarios whose configurations the explorer explores only in its slow tests (three busy threads).
SLOW: frozenset[str] = explore.SLOW

#: The guards ``StoreVariant`` can switch off whose absence a schedule (not a crash) must reveal.
GUARDS: tuple[str, ...] = tuple(name for name in GUARD_NAMES if name in STEP_NAMES)
