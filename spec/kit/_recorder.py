"""Recording histories of real ledger calls, for the linearizability checker (SPEC.md R-CONC-1, R-KIT-4).

``HistoryRecorder`` times each call of any ``CaptureLedger`` (invocation and return, on a clock that every
client shares: ``time.monotonic_ns`` by default, which is system-wide on one machine) and turns what the
call did into a model ``Result`` with ``spec.concurrency.history.observe``; the product is a list of
``spec.concurrency.history.Event``. ``RecordingLedger`` wraps one ledger handle so that ordinary code
calling it leaves a history behind. ``write_history``/``read_history`` store a history as JSON lines (one
``event_to_json`` line each), the format ``capture-ledger check-history`` reads.

``HistoryJournal`` is for a client that may be killed mid-call: given to a recorder, it appends each call's
invocation (an unreturned event) to a JSON-lines file *before* the ledger is called and the whole event
after it returned, each line with one ``write`` and, by default, an ``fsync``. ``read_history`` merges the
two lines of a call (the returned event replaces the unreturned one) and skips a torn last line, so a
killed client's file reads as its history: every returned call, and the one in flight as unreturned.

Not guaranteed: coroutine ledgers (calls must be synchronous), or any meaning for events whose clocks
differ (several machines). An exception that the spec allows no operation to raise (``OSError``, say) is
recorded as an event that never returned (the operation may or may not have taken effect) and re-raised.
Nothing here knows any particular ledger: what to call comes from ``apply_operation``.
"""

from __future__ import annotations

import os
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
    "HistoryJournal",
    "HistoryRecorder",
    "RecordingLedger",
    "read_history",
    "write_history",
]

#: A shared clock, read at each invocation and return.
Clock = Callable[[], float]


def _monotonic() -> float:
    return float(time.monotonic_ns())


class HistoryJournal:
    """Appends events to a JSON-lines file as they happen (see the module docstring).

    Args:
        path: the file; created if missing, appended to otherwise.
        durable: ``fsync`` after each line, so that the line survives the process being killed right after
            (a killed process keeps the kernel's page cache, so ``False`` suffices when only the process,
            not the machine, may die).
    """

    def __init__(self, path: str | Path, *, durable: bool = True) -> None:
        self.path = Path(path)
        self.durable = durable
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        """Append one ``event_to_json`` line for ``event``, with one ``write``."""
        line = (event_to_json(event) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)
            if self.durable:
                os.fsync(self._fd)

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class HistoryRecorder:
    """Collects ``Event`` values of calls made by any number of threads.

    Args:
        clock: the shared clock; ``time.monotonic_ns`` (as a float) unless given. The scheduler passes a
            logical clock so that a replayed schedule yields the identical history.
        journal: called with each call's unreturned event just before the ledger is called, and with the
            complete event after it returned (a ``HistoryJournal``, say).
    """

    def __init__(self, *, clock: Clock = _monotonic, journal: Callable[[Event], None] | None = None) -> None:
        self._clock = clock
        self._journal = journal
        self._lock = threading.Lock()
        self._events: list[Event] = []

    @property
    def events(self) -> list[Event]:
        """The events so far, in the order their calls ended (returned, or raised what no operation may)."""
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
        if self._journal is not None:
            self._journal(Event(client=client, op=op, invoked=invoked))
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
        event = Event(client=client, op=op, invoked=invoked, returned=returned, result=result)
        self.add(event)
        if self._journal is not None:
            self._journal(event)
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
    """Write ``events`` to ``path`` as JSON lines (one ``event_to_json`` line each)."""
    with open(path, "w", encoding="utf-8") as out:
        for event in events:
            out.write(event_to_json(event) + "\n")


def read_history(*paths: str | Path) -> list[Event]:
    """Read and merge the events of one or more JSON-lines files, ordered by invocation time.

    Within a file, a returned event replaces the unreturned event of the same call (same client and
    invocation time) written before it by a ``HistoryJournal``; a last line without its newline (torn by a
    kill while it was written) is skipped.

    Raises:
        ValueError: a complete line that is not an event.
    """
    events: list[Event] = []
    for path in paths:
        data = Path(path).read_text(encoding="utf-8")
        found: list[Event] = []
        pending: dict[tuple[int, float], int] = {}  # an unreturned call's position in ``found``
        for line in data.split("\n")[:-1]:  # the last piece is "" after a final newline, else torn
            if not line.strip():
                continue
            event = event_from_json(line)
            key = (event.client, event.invoked)
            at = pending.pop(key, None)
            if at is not None and found[at].op == event.op:
                found[at] = event
            else:
                at = len(found)
                found.append(event)
            if event.returned is None:
                pending[key] = at
        events.extend(found)
    events.sort(key=lambda event: (event.invoked, event.client))
    return events
