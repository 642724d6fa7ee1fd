"""The step-level explorer's bounded configurations (SPEC.md R-CONC-1..3, R-STORE-9; docs/concurrency.md).

Each configuration is a few clients, each a short program of the store's operations on one or two rollout
IDs, chosen so that the races the protocol's guards exist for can happen: a late write against a retire,
two retires against a delete and a reuse, a batch against writers, removals sharing a sync, removals
combined into one batch (``Config.combine``). ``explore`` exhausts each; ``SLOW`` are those only the slow
tests explore.

Not guaranteed: that these configurations reach every interleaving of larger programs (they are bounded).
"""

from __future__ import annotations

from capture_ledger.spec.concurrency.steps import (
    AdmitCall,
    Client,
    Config,
    DeleteCall,
    ManifestCall,
    RecordCall,
    RetireCall,
)

__all__ = ["CONFIGURATIONS", "SLOW"]


def _race(
    name: str,
    description: str,
    *clients: Client,
    ids: tuple[str, ...] = ("a",),
    handles: int = 2,
    stripes: tuple[int, ...] = (),
    setup_handle: int = 0,
    group_commit: bool = False,
    combine: bool = False,
) -> Config:
    """``clients`` racing on ``ids``, each of which a setup client on ``setup_handle`` first made Live
    with the row ``m1``."""
    setup = tuple(Client(setup_handle, (RecordCall(i, "m1"),)) for i in ids)
    return Config(
        name=name,
        description=description,
        ids=ids,
        setup=len(ids),
        handles=handles,
        stripes=stripes,
        clients=(*setup, *clients),
        group_commit=group_commit,
        combine=combine,
    )


def _configs() -> dict[str, Config]:
    a, b = "a", "b"
    configs = [
        _race(
            "retire-vs-late-write",
            "a retire of a live rollout against one late write on another handle",
            Client(0, (RetireCall((a,)),)),
            Client(1, (RecordCall(a, "m2"),)),
        ),
        _race(
            "retire-vs-two-late-writes",
            "a retire against two late writes, each on its own handle",
            Client(0, (RetireCall((a,)),)),
            Client(1, (RecordCall(a, "m2"),)),
            Client(2, (RecordCall(a, "m3"),)),
            handles=3,
        ),
        _race(
            "retire-vs-delete-reuse",
            "a retire against a delete of the same ID and a write that re-uses it",
            Client(0, (RetireCall((a,)),)),
            Client(1, (DeleteCall((a,)), RecordCall(a, "m2"))),
        ),
        _race(
            "two-retires-vs-write",
            "two retires of one ID on two handles against a late write on a third",
            Client(0, (RetireCall((a,)),)),
            Client(1, (RetireCall((a,)),)),
            Client(2, (RecordCall(a, "m2"),)),
            handles=3,
        ),
        _race(
            "delete-vs-write",
            "a delete against a write and a read on a handle that has the ledger cached",
            Client(1, (DeleteCall((a,)),)),
            Client(0, (RecordCall(a, "m2"), ManifestCall(a))),
        ),
        _race(
            "admit-vs-retire",
            "admission and a read against a retire",
            Client(0, (RetireCall((a,)),)),
            Client(1, (AdmitCall(a, "m2"), ManifestCall(a))),
        ),
        _race(
            "retire-vs-write-and-read",
            "a retire against a late write and a read on a handle that has the ledger cached",
            Client(0, (RetireCall((a,)),)),
            Client(1, (RecordCall(a, "m2"), ManifestCall(a))),
            setup_handle=1,
        ),
        _race(
            "retire-batch-vs-writes",
            "a retire of two IDs against a late write to each, on another handle",
            Client(0, (RetireCall((a, b)),)),
            Client(1, (RecordCall(b, "m2"), RecordCall(a, "m2"))),
            ids=(a, b),
        ),
        _race(
            "retire-batch-shared-stripe",
            "two IDs on one lock stripe: a retire of both against a delete and re-use of one",
            Client(0, (RetireCall((a, b)),)),
            Client(1, (DeleteCall((b,)), RecordCall(b, "m2"))),
            ids=(a, b),
            stripes=(0, 0),
        ),
        _race(
            "retire-vs-delete-vs-reads",
            "a retire and a delete of one ID against reads and an admission on a third handle",
            Client(0, (RetireCall((a,)),)),
            Client(1, (DeleteCall((a,)),)),
            Client(2, (ManifestCall(a), AdmitCall(a, "m2"), ManifestCall(a))),
            handles=3,
        ),
        # Group commit (R-STORE-9): the removals share one sync register, as the handles of one process do.
        _race(
            "shared-sync-two-retires",
            "group commit: retires of two IDs on two handles share syncs, against a late write to one",
            Client(0, (RetireCall((a,)),)),
            Client(1, (RetireCall((b,)),)),
            Client(2, (RecordCall(a, "m2"),)),
            ids=(a, b),
            handles=3,
            group_commit=True,
        ),
        _race(
            "shared-sync-retire-vs-delete",
            "group commit: a retire and a delete share syncs; the delete's ID is re-used",
            Client(0, (RetireCall((a,)),)),
            Client(1, (DeleteCall((b,)), RecordCall(b, "m2"))),
            ids=(a, b),
            group_commit=True,
        ),
        _race(
            "shared-sync-retires-and-delete",
            "group commit: two retires and a delete of one ID, on three handles, share syncs",
            Client(0, (RetireCall((a,)),)),
            Client(1, (RetireCall((a,)),)),
            Client(2, (DeleteCall((a,)),)),
            handles=3,
            group_commit=True,
        ),
        # Combined removals: requests of one kind share a batch a combiner runs (_combining.py).
        _race(
            "combine-overlapping-retires",
            "combining: retires of [a, b] and [b] on two handles, combined into one batch or run apart",
            Client(0, (RetireCall((a, b)),)),
            Client(1, (RetireCall((b,)),)),
            ids=(a, b),
            combine=True,
        ),
        _race(
            "combine-retires-vs-delete",
            "combining: two retires of one ID, combined, against a delete of it",
            Client(0, (RetireCall((a,)),)),
            Client(1, (RetireCall((a,)),)),
            Client(2, (DeleteCall((a,)),)),
            handles=3,
            combine=True,
        ),
        _race(
            "combine-retires-vs-late-write",
            "combining: two retires of one ID, combined, against a late write on a third handle",
            Client(0, (RetireCall((a,)),)),
            Client(1, (RetireCall((a,)),)),
            Client(2, (RecordCall(a, "m2"),)),
            handles=3,
            combine=True,
        ),
        _race(
            "combine-shared-sync",
            "combining and group commit: retires of [a] and [a, b], combined, against a late write to a",
            Client(0, (RetireCall((a,)),)),
            Client(1, (RetireCall((a, b)),)),
            Client(2, (RecordCall(a, "m2"),)),
            ids=(a, b),
            handles=3,
            group_commit=True,
            combine=True,
        ),
        # Larger: explored by the slow tests and `capture-ledger explore`.
        _race(
            "two-retires-vs-delete-reuse-read",
            "two retires against a delete, a re-use and a read, on three handles",
            Client(0, (RetireCall((a,)),)),
            Client(1, (RetireCall((a,)),)),
            Client(2, (DeleteCall((a,)), RecordCall(a, "m2"), ManifestCall(a))),
            handles=3,
            setup_handle=2,
        ),
        _race(
            "retire-batch-vs-three-writers",
            "a retire of two IDs against late writes to both and an admission, on three handles",
            Client(0, (RetireCall((a, b)),)),
            Client(1, (RecordCall(a, "m2"), ManifestCall(a))),
            Client(2, (RecordCall(b, "m2"), AdmitCall(b, "m3"))),
            ids=(a, b),
            handles=3,
        ),
        _race(
            "combine-three-overlapping-retires",
            "combining: retires of [a, b], [b] and [a] on three handles, combined into shared batches",
            Client(0, (RetireCall((a, b)),)),
            Client(1, (RetireCall((b,)),)),
            Client(2, (RetireCall((a,)),)),
            ids=(a, b),
            handles=3,
            combine=True,
        ),
        _race(
            "combine-deletes-vs-retire",
            "combining: two deletes of one ID, combined, against a retire of it",
            Client(0, (DeleteCall((a,)),)),
            Client(1, (DeleteCall((a,)),)),
            Client(2, (RetireCall((a,)),)),
            handles=3,
            combine=True,
        ),
        _race(
            "combine-retires-vs-delete-reuse",
            "combining: two retires of one ID, combined, against a delete and a re-use of it",
            Client(0, (RetireCall((a,)),)),
            Client(1, (RetireCall((a,)),)),
            Client(2, (DeleteCall((a,)), RecordCall(a, "m2"))),
            handles=3,
            combine=True,
        ),
        _race(
            "combine-shared-sync-vs-delete",
            "combining and group commit: retires of a and b and a delete of a share batches and syncs",
            Client(0, (RetireCall((a,)),)),
            Client(1, (RetireCall((b,)),)),
            Client(2, (DeleteCall((a,)),)),
            ids=(a, b),
            handles=3,
            group_commit=True,
            combine=True,
        ),
    ]
    return {c.name: c for c in configs}


#: The bounded configurations, by name (simplest first).
CONFIGURATIONS: dict[str, Config] = _configs()
#: The configurations the slow tests explore (CI explores the others).
SLOW: frozenset[str] = frozenset(
    {
        "two-retires-vs-delete-reuse-read",
        "retire-batch-vs-three-writers",
        "combine-three-overlapping-retires",
        "combine-deletes-vs-retire",
        "combine-retires-vs-delete-reuse",
        "combine-shared-sync-vs-delete",
    }
)
