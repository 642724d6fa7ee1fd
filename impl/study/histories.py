"""Recording histories of real ledger calls, for the linearizability checker (SPEC.md R-CONC-1, R-KIT-4).

``HistoryRecorder`` times each call of a ``CaptureLedger`` (invocation and return, on a clock that every
client shares: ``time.monotonic_ns`` by default, which is system-wide on one machine) and turns what the
call did into a model ``Result`` with ``spec.history.observe``; the product is a list of
``spec.history.Event``. ``RecordingLedger`` wraps one ledger handle so that ordinary code recording through
it leaves a history behind. ``write_history``/``read_history`` store a history as JSON lines in the format
``capture-ledger check-history`` reads.

``random_client`` is the body of one process in the multi-process test: it opens its own
``FileLineageStore`` on a shared directory, performs seeded random operations over a few rollout IDs and
writes its events to a JSON-lines file.

Not guaranteed: coroutine ledgers (calls must be synchronous), or any meaning for events whose clocks
differ (several machines). An exception that the spec allows no operation to raise (``OSError``, say)
is recorded as an event that never returned (the operation may or may not have taken effect) and
re-raised.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from capture_ledger.spec.concurrency.history import (
    Event,
    apply_operation,
    event_from_json,
    event_to_json,
    observe,
)
from capture_ledger.spec.core.model import (
    Admit,
    Delete,
    HasRows,
    Operation,
    ReadManifest,
    Record,
    RecordFailure,
    Result,
    Retire,
)
from capture_ledger.spec.core.protocol import Manifest, RolloutRemoval

__all__ = [
    "HistoryRecorder",
    "RecordingLedger",
    "apply_operation",
    "random_client",
    "random_operation",
    "read_history",
    "write_history",
]

Clock = Callable[[], float]


def _monotonic() -> float:
    return float(time.monotonic_ns())


class HistoryRecorder:
    """Collects ``Event`` values of calls made by any number of threads.

    Args:
        clock: the shared clock; ``time.monotonic_ns`` (as a float) unless given. The scheduler passes a
            logical clock so that a replayed schedule yields the identical history.
    """

    def __init__(self, *, clock: Clock = _monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._events: list[Event] = []

    @property
    def events(self) -> list[Event]:
        """The events so far, in the order their calls returned (unreturned ones last)."""
        with self._lock:
            return list(self._events)

    def add(self, event: Event) -> None:
        """Append an event recorded elsewhere (another process's JSON lines, say)."""
        with self._lock:
            self._events.append(event)

    def call(self, client: int, ledger: Any, op: Operation) -> tuple[Result, Any]:
        """Perform ``op`` on ``ledger`` as ``client`` and record it.

        Returns:
            The observed result and the raw outcome (return value or exception instance), so that a
            wrapper can hand the caller exactly what the ledger did.

        Raises:
            BaseException: whatever the ledger raised that the spec allows no operation to raise; the
                event is then recorded as unreturned (its effect is unknown).
        """
        invoked = self._clock()
        try:
            outcome: Any = apply_operation(ledger, op)
        except Exception as error:
            outcome = error
        returned = self._clock()
        try:
            result = observe(op, outcome)
        except ValueError:
            self.add(Event(client=client, op=op, invoked=invoked))
            if isinstance(outcome, BaseException):
                raise outcome from None
            raise
        self.add(Event(client=client, op=op, invoked=invoked, returned=returned, result=result))
        return result, outcome


class RecordingLedger:
    """A ``CaptureLedger`` that forwards every call to ``ledger`` and records it in ``recorder``.

    Args:
        ledger: the handle to wrap (synchronous methods).
        client: the client number written into each event.
        recorder: where events go; a new ``HistoryRecorder`` on ``time.monotonic_ns`` unless given.
    """

    def __init__(self, ledger: Any, *, client: int, recorder: HistoryRecorder | None = None) -> None:
        self.ledger = ledger
        self.client = client
        self.recorder = recorder if recorder is not None else HistoryRecorder()

    def _run(self, op: Operation) -> Any:
        _, outcome = self.recorder.call(self.client, self.ledger, op)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        """``record``, recorded."""
        self._run(Record(rollout_id, row))

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        """``record_failure``, recorded."""
        self._run(RecordFailure(rollout_id, model_call_id, reason))

    def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        """``admit``, recorded."""
        key: str | None = self._run(Admit(rollout_id, model_call_id))
        return key

    def manifest(self, rollout_id: str) -> Manifest:
        """``manifest``, recorded."""
        manifest: Manifest = self._run(ReadManifest(rollout_id))
        return manifest

    def has_rows(self, rollout_id: str) -> bool:
        """``has_rows``, recorded."""
        rows: bool = self._run(HasRows(rollout_id))
        return rows

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """``retire``, recorded."""
        removal: RolloutRemoval = self._run(Retire(list(rollout_ids)))
        return removal

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """``delete``, recorded."""
        removal: RolloutRemoval = self._run(Delete(list(rollout_ids)))
        return removal


# ------------------------------------------------------------------------------------------- JSON lines
def write_history(events: Iterable[Event], path: str | Path) -> None:
    """Write ``events`` to ``path`` as JSON lines (one ``spec.history.event_to_json`` line each)."""
    with open(path, "w", encoding="utf-8") as out:
        for event in events:
            out.write(event_to_json(event) + "\n")


def read_history(*paths: str | Path) -> list[Event]:
    """Read and merge the events of one or more JSON-lines files, ordered by invocation time.

    Raises:
        ValueError: a line that is not an event.
    """
    events: list[Event] = []
    for path in paths:
        with open(path, encoding="utf-8") as lines:
            events.extend(event_from_json(line) for line in lines if line.strip())
    events.sort(key=lambda event: (event.invoked, event.client))
    return events


# ------------------------------------------------------------------------------ multi-process workload
def random_operation(
    rng: random.Random, rollout_ids: Sequence[str], *, client: int, removals: bool = True
) -> Operation:
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
        return Record(rollout_id, {"model_call_id": f"c{k}", "v": value})
    if kind == "failure":
        return RecordFailure(rollout_id, f"f{k}", "timeout")
    if kind == "admit":
        return Admit(rollout_id, f"c{k}")
    if kind == "manifest":
        return ReadManifest(rollout_id)
    if kind == "has_rows":
        return HasRows(rollout_id)
    batch = rng.sample(list(rollout_ids), rng.randint(1, 2))
    return Retire(batch) if kind == "retire" else Delete(batch)


def random_client(
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
    """Body of one client process: seeded random operations on its own ``FileLineageStore``.

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
    from capture_ledger.impl.store.file_store import FileLineageStore
    from capture_ledger.impl.store.ordering import StoreVariant

    rng = random.Random(seed * 1000 + client)
    store = FileLineageStore(directory, variant=StoreVariant(**(variant or {})))
    recorder = HistoryRecorder()
    if barrier is not None:
        barrier.wait()
    try:
        for _ in range(operations):
            op = random_operation(rng, rollout_ids, client=client, removals=removals)
            recorder.call(client, store, op)
    finally:
        write_history(recorder.events, out)
        store.close()
