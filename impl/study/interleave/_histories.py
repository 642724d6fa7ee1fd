"""Seeded multi-process workloads on the file store, recorded as histories (SPEC.md R-CONC-1, R-KIT-4).

``random_operation`` draws one operation over a few contended rollout IDs. ``phased_client`` is the body of
one process in the multi-process tests: it opens its own ``FileLineageStore`` on a shared directory, runs
its operations phase by phase, all processes crossing a barrier between phases (so what must happen
before what does, in every run), and journals its events to a JSON-lines file call by call;
``random_client`` is one phase of seeded random operations. The recording itself (any ledger's calls, the
JSON lines) is ``spec.kit``'s.

Not guaranteed: any particular mix of operations beyond the weights documented on ``random_operation``, or
that two processes' calls within one phase overlap (the operating system schedules them).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.study._variants import StoreVariant
from capture_ledger.spec.core import model
from capture_ledger.spec.kit import HistoryJournal, HistoryRecorder

__all__ = ["phased_client", "random_client", "random_operation", "random_operations"]


# ------------------------------------------------------------------------------ multi-process workload
def random_operation(
    rng: random.Random, rollout_ids: Sequence[str], *, client: int, removals: bool = True
) -> model.Operation:
    """One random operation over ``rollout_ids``, weighted towards writes and reads.

    Rows are ``{"model_call_id": "c<k>", "v": k}`` for a small ``k``, so different clients re-record the
    identical row (a no-op, R-WRITE-3) and now and then a conflicting one (``"v": -k`` from client 1).
    ``removals=False`` leaves out retire and delete (a worker that only writes and reads).
    """
    rollout_id = rng.choice(rollout_ids)
    k = rng.randrange(3)
    kinds = ["record", "failure", "admit", "manifest", "has_rows", "retire", "delete"]
    weights = [30, 8, 8, 20, 8, 13, 13] if removals else [40, 10, 10, 25, 10, 0, 0]
    kind = rng.choices(kinds, weights=weights)[0]
    if kind == "record":
        value = -k if client == 1 and rng.random() < 0.1 else k
        return model.Record(rollout_id, {"model_call_id": f"c{k}", "v": value})
    if kind == "failure":
        return model.RecordFailure(rollout_id, f"f{k}", "timeout")
    if kind == "admit":
        return model.Admit(rollout_id, f"c{k}")
    if kind == "manifest":
        return model.ReadManifest(rollout_id)
    if kind == "has_rows":
        return model.HasRows(rollout_id)
    batch = rng.sample(list(rollout_ids), rng.randint(1, 2))
    return model.Retire(batch) if kind == "retire" else model.Delete(batch)


def random_operations(
    seed: int, client: int, count: int, rollout_ids: Sequence[str], *, removals: bool = True
) -> list[model.Operation]:
    """``count`` operations of ``random_operation`` for ``client``, seeded by ``seed`` and the client."""
    rng = random.Random(seed * 1000 + client)
    return [random_operation(rng, rollout_ids, client=client, removals=removals) for _ in range(count)]


def phased_client(
    directory: str,
    out: str,
    *,
    client: int,
    phases: Sequence[Sequence[model.Operation]],
    barrier: Any = None,
    variant: Mapping[str, bool] | None = None,
) -> None:
    """Body of one client process: its operations phase by phase on its own ``FileLineageStore``.

    Every client gets the same number of phases (some empty) and waits at ``barrier`` before each, so
    phase ``k`` starts in every process at once and only after every process finished phase ``k - 1``:
    what the phases order, every run orders the same way; within a phase the operating system schedules.

    Args:
        directory: the shared lineage directory.
        out: the JSON-lines file this client's events are journaled to, call by call.
        client: the client number.
        phases: this client's operations, per phase.
        barrier: a ``multiprocessing`` barrier for all clients (``None``: a single client, no waiting).
        variant: ``StoreVariant`` fields to switch (FOR STUDY ONLY: a guard-removed store).
    """
    ordering = StoreVariant(**(variant or {})).ordering()
    store = FileLineageStore(directory, ordering=ordering)
    journal = HistoryJournal(out, durable=False)  # only the process may die, not the machine
    recorder = HistoryRecorder(journal=journal)
    try:
        for phase in phases:
            if barrier is not None:
                barrier.wait()
            for op in phase:
                recorder.call(client, store, op)
    finally:
        journal.close()
        store.close()


def random_client(  # noqa: PLR0913 - a workload generator's knobs, all keyword-only
    directory: str,
    out: str,
    *,
    client: int,
    seed: int,
    operations: int,
    rollout_ids: Sequence[str],
    removals: bool = True,
    variant: Mapping[str, bool] | None = None,
    barrier: Any = None,
) -> None:
    """Body of one client process: seeded random operations (one phase of ``phased_client``).

    Args:
        directory: the shared lineage directory.
        out: the JSON-lines file to write this client's events to.
        client: the client number (also mixed into the seed).
        seed: the workload seed.
        operations: how many operations to perform.
        rollout_ids: the few IDs every client contends on.
        removals: whether this client also retires and deletes.
        variant: ``StoreVariant`` fields to switch (FOR STUDY ONLY: a guard-removed store).
        barrier: a ``multiprocessing`` barrier to wait at, so that all clients start together.
    """
    ops = random_operations(seed, client, operations, rollout_ids, removals=removals)
    phased_client(directory, out, client=client, phases=[ops], barrier=barrier, variant=variant)
