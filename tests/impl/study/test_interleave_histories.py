"""Recording histories of real ledger calls (``spec.kit``; R-CONC-1, R-KIT-4).

``RecordingLedger`` over a real ``FileLineageStore`` hands the caller exactly what the store did and leaves
a history the checker accepts; JSON lines round-trip; an exception the spec allows no operation to raise
(an ``OSError`` from a failing seam) is recorded as an unreturned call and re-raised. A journal written
call by call reads back as the history, with the call in flight unreturned and a torn last line skipped.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any, cast

import pytest
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import FileSystem, OsFileSystem
from capture_ledger.spec.concurrency.history import Event
from capture_ledger.spec.concurrency.linearizability import Ok, check_history
from capture_ledger.spec.core.errors import RolloutRetiredError
from capture_ledger.spec.core.model import Err, ErrorKind, Record, Retire
from capture_ledger.spec.kit import (
    HistoryJournal,
    HistoryRecorder,
    RecordingLedger,
    read_history,
    write_history,
)


class _FailingAppends:
    """A seam whose ``open_append`` fails with EIO (every other call goes to the real one)."""

    def __init__(self, inner: FileSystem) -> None:
        self.inner = inner
        self.stripes = inner.stripes

    def open_append(self, name: str, *, create: bool) -> int | None:
        raise OSError(errno.EIO, "injected")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_recording_ledger_is_transparent_and_its_history_linearizable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = HistoryRecorder()
    with FileLineageStore(tmp_path) as store:
        ledger = RecordingLedger(store, client=0, recorder=recorder)
        ledger.record("a", {"model_call_id": "c1", "v": 1})
        assert ledger.manifest("a")["records"] == [{"model_call_id": "c1", "v": 1}]
        assert ledger.admit("a", "c2") == "a/c2"
        assert ledger.retire(["a", "b"]) == {"removed": ["a"], "absent": ["b"]}
        with caplog.at_level(logging.WARNING, logger="capture_ledger"):
            ledger.record("a", {"model_call_id": "c2", "v": 2})  # discarded, one warning (R-WRITE-4..5)
        with pytest.raises(RolloutRetiredError):
            ledger.has_rows("a")
        assert ledger.delete(["a"]) == {"removed": [], "absent": ["a"]}
    events = recorder.events
    assert len(events) == 7 and all(e.returned is not None and e.invoked <= e.returned for e in events)
    assert events[5].result == Err(ErrorKind.ROLLOUT_RETIRED)
    assert isinstance(check_history(events), Ok)
    assert any("discarded" in r.getMessage() for r in caplog.records)

    path = tmp_path / "history.jsonl"
    write_history(events, path)
    assert read_history(path) == events


def test_an_unexpected_error_is_recorded_as_an_unreturned_call(tmp_path: Path) -> None:
    inner = OsFileSystem(tmp_path)
    recorder = HistoryRecorder()
    try:
        store = FileLineageStore(tmp_path, fs=cast(FileSystem, _FailingAppends(inner)))
        with pytest.raises(OSError, match="injected"):
            recorder.call(3, store, Record("a", {"model_call_id": "c1"}))
        recorder.call(3, store, Retire(["a"]))
    finally:
        inner.close_all()
    first, second = recorder.events
    assert first.client == 3 and first.returned is None and first.result is None
    assert second.returned is not None
    # The unreturned record may or may not have taken effect: both readings are linearizable.
    assert isinstance(check_history(recorder.events), Ok)


def test_a_journal_leaves_the_call_in_flight_as_unreturned(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = HistoryJournal(path)
    recorder = HistoryRecorder(journal=journal)
    with FileLineageStore(tmp_path / "lineage") as store:
        recorder.call(0, store, Record("a", {"model_call_id": "c1"}))
        recorder.call(0, store, Retire(["a"]))
        # What a kill in the middle of the third call leaves: its invocation line, and a torn line after.
        journal(Event(client=0, op=Record("a", {"model_call_id": "c2"}), invoked=10.0**30))
    journal.close()
    with open(path, "a", encoding="utf-8") as out:
        out.write('{"client": 0, "op": "rec')
    events = read_history(path)
    assert events[:2] == recorder.events
    assert [e.returned is None for e in events] == [False, False, True]
    assert isinstance(check_history(events), Ok)
    # Each returned call was written twice (invoked, then whole) and merged back into one event.
    assert len(path.read_text().splitlines()) == 6


def test_read_history_refuses_a_complete_line_that_is_not_an_event(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"client": 0, "op": "record"}\n')
    with pytest.raises(ValueError, match="not a history event"):
        read_history(path)
