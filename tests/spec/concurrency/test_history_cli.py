"""``capture-ledger check-history`` judges every file it is given, and refuses clearly what is not a history
(impl/cli/history.py; SPEC.md R-CONC-1, R-KIT-9).

What they prove: the exit code is 0, 1 or 2 for a linearizable, non-linearizable or undecided history, and
an undecided one says how many search steps it spent and how to allow more; a file that is not a history
(missing, not UTF-8, a line that is not JSON, an unknown operation, arguments or times or a result that do
not fit, a return before the invocation) exits 2 with ``error: FILE:LINE: why``; a torn last line is
skipped with a note; a killed client's journal and several clients' files are merged into one history.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from capture_ledger.impl.cli import history as history_cli
from capture_ledger.impl.cli.main import main
from capture_ledger.reference import ReferenceLedger
from capture_ledger.spec.concurrency import linearizability
from capture_ledger.spec.concurrency.history import Event, event_to_json
from capture_ledger.spec.core import model
from capture_ledger.spec.kit import HistoryJournal, HistoryRecorder

ROW = {"model_call_id": "m1"}
GOOD = [
    Event(client=0, op=model.Record("a", ROW), invoked=0, returned=1, result=model.Ok(None)),
    Event(client=1, op=model.HasRows("a"), invoked=2, returned=3, result=model.Ok(True)),
]


def _write(path: Path, events: list[Event], *, tail: str = "") -> str:
    path.write_text("".join(event_to_json(e) + "\n" for e in events) + tail, encoding="utf-8")
    return str(path)


def test_exit_codes_follow_the_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-history", _write(tmp_path / "good.jsonl", GOOD)]) == 0
    assert "2 events: Ok()" in capsys.readouterr().out
    bad = [*GOOD, Event(client=1, op=model.HasRows("a"), invoked=4, returned=5, result=model.Ok(False))]
    assert main(["check-history", _write(tmp_path / "bad.jsonl", bad)]) == 1
    assert "Violation(rollout_id='a'" in capsys.readouterr().out


def test_the_verdict_is_printed_before_the_witness_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = [*GOOD, Event(client=1, op=model.HasRows("a"), invoked=4, returned=5, result=model.Ok(False))]
    path = _write(tmp_path / "bad.jsonl", bad)
    before_witness: list[str] = []
    explain = linearizability.check_history

    def spy(events: list[Event], **kwargs: object) -> object:
        before_witness.append(capsys.readouterr().out)  # what was printed before the witness was asked for
        return explain(events, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(history_cli, "check_history", spy)
    assert main(["check-history", path]) == 1
    assert before_witness == ["3 events: Violation(requirement='R-CONC-1')\n"]
    rest = capsys.readouterr().out.splitlines()
    assert rest[0].startswith("Violation(rollout_id='a'") and rest[-1] == "])"
    assert any("HasRows(rollout_id='a')" in line for line in rest)


def test_a_history_beyond_the_budget_is_undecided_with_the_budget_spent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    busy = [
        Event(
            client=n,
            op=model.Record("a", {"model_call_id": f"m{n}"}),
            invoked=0,
            returned=9,
            result=model.Ok(None),
        )
        for n in range(6)
    ]
    busy.append(
        Event(
            client=9,
            op=model.ReadManifest("a"),
            invoked=10,
            returned=11,
            result=model.Ok(model.ManifestValue()),
        )
    )
    path = _write(tmp_path / "busy.jsonl", busy)
    assert main(["check-history", "--budget", "5", path]) == 2
    out = capsys.readouterr().out
    assert "Unknown(spent=5)" in out
    assert "the search budget of 5 steps ran out" in out and "--budget" in out
    # With no limit the same history is decided: the manifest lost every row.
    assert main(["check-history", "--budget", "0", path]) == 1
    with pytest.raises(SystemExit) as refused:
        main(["check-history", "--budget", "-1", path])
    assert refused.value.code == 2


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"client": 0, "op": "record", "args": {"rollout_id": "a", "row"', "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"client": 0, "op": "frobnicate", "args": {}, "invoked": 4}', "unknown operation 'frobnicate'"),
        (
            '{"client": 0, "op": "has_rows", "args": {"id": "a"}, "invoked": 4}',
            "has_rows takes the arguments",
        ),
        ('{"client": "x", "op": "has_rows", "args": {"rollout_id": "a"}, "invoked": 4}', "'client' must be"),
        ('{"client": 0, "op": "has_rows", "args": {"rollout_id": "a"}, "invoked": NaN}', "finite number"),
        (
            '{"client": 0, "op": "has_rows", "args": {"rollout_id": "a"}, "invoked": 6, "returned": 5}',
            "returned (5.0) before it was invoked (6.0)",
        ),
        (
            '{"client": 0, "op": "has_rows", "args": {"rollout_id": "a"}, "invoked": 4, '
            '"result": {"ok": true}}',
            "a result but no return time",
        ),
        (
            '{"client": 0, "op": "retire", "args": {"rollout_ids": ["a"]}, "invoked": 4, "returned": 5, '
            '"result": {"ok": {"removed": 1}}}',
            "does not fit Retire",
        ),
        (
            '{"client": 0, "op": "has_rows", "args": {"rollout_id": "a"}, "invoked": 4, "returned": 5, '
            '"result": {"error": "Gone"}}',
            "unknown error 'Gone'",
        ),
    ],
)
def test_a_line_that_is_not_an_event_is_refused_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, why: str
) -> None:
    path = _write(tmp_path / "broken.jsonl", GOOD, tail=line + "\n" + event_to_json(GOOD[1]) + "\n")
    assert main(["check-history", path]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: {path}:3: ")
    assert why in error


def test_files_that_cannot_be_read_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-history", str(tmp_path / "missing.jsonl")]) == 2
    assert "error:" in capsys.readouterr().err
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(event_to_json(GOOD[0]).encode() + b"\n\xe9\n")
    assert main(["check-history", str(latin)]) == 2
    assert "not UTF-8" in capsys.readouterr().err


def test_a_torn_last_line_is_skipped_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torn = event_to_json(
        Event(client=1, op=model.HasRows("a"), invoked=4, returned=5, result=model.Ok(False))
    )[:40]
    path = _write(tmp_path / "torn.jsonl", GOOD, tail=torn)
    assert main(["check-history", path]) == 0
    captured = capsys.readouterr()
    assert "2 events: Ok()" in captured.out
    assert f"note: {path}: skipped the last line, which has no newline (torn?)" in captured.err
    # A torn line in the middle is not a torn tail: the file is refused.
    middle = _write(tmp_path / "middle.jsonl", GOOD[:1], tail=torn + "\n" + event_to_json(GOOD[1]) + "\n")
    assert main(["check-history", middle]) == 2
    assert f"error: {middle}:2: not a history event: not JSON" in capsys.readouterr().err


def test_a_killed_clients_journal_and_several_files_merge(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger = ReferenceLedger()
    clock = iter(range(100))
    journal = HistoryJournal(tmp_path / "client0.jsonl", durable=False)
    recorder = HistoryRecorder(clock=lambda: float(next(clock)), journal=journal)
    recorder.call(0, ledger, model.Record("a", ROW))
    recorder.call(0, ledger, model.Retire(["a"]))
    journal(
        Event(client=0, op=model.Record("a", {"model_call_id": "m2"}), invoked=float(next(clock)))
    )  # killed mid-call
    journal.close()
    other = [
        Event(
            client=1,
            op=model.ReadManifest("a"),
            invoked=50,
            returned=51,
            result=model.Err(model.ErrorKind.ROLLOUT_RETIRED),
        )
    ]
    paths = [str(tmp_path / "client0.jsonl"), _write(tmp_path / "client1.jsonl", other)]
    assert len((tmp_path / "client0.jsonl").read_text().splitlines()) == 5  # two lines a returned call
    assert main(["check-history", *paths]) == 0
    assert "4 events: Ok()" in capsys.readouterr().out
    # The other client's read, judged with this journal, must see the retire: an empty manifest is wrong.
    empty = [
        Event(
            client=1,
            op=model.ReadManifest("a"),
            invoked=50,
            returned=51,
            result=model.Ok(model.ManifestValue()),
        )
    ]
    assert main(["check-history", paths[0], _write(tmp_path / "client1.jsonl", empty)]) == 1
    assert json.loads((tmp_path / "client0.jsonl").read_text().splitlines()[-1])["returned"] is None
