"""Every checker reports; none crashes on what it checks (docs/verdicts.md).

Deliberately broken stores, each of a kind a real implementation could be, are put in front of the crash
explorer and the interleaving scheduler. Each must come back as a verdict with a readable counterexample,
never as a traceback out of the checker:

- crash explorer: a store that appends onto a torn tail without cutting it (the image holds a line no
  reader can parse), a store that raises when an image is read back, a store that hangs when reopened;
- scheduler: a store that raises ``RuntimeError`` in the middle of a retire, one that hangs inside a
  retire (no seam call for longer than the budget), one that deadlocks on its own stripe lock, and one
  that fails in the unscheduled parts of a run (opening a handle, setup, read-backs).

The same workloads and scenarios on the production store give ``ok``, so each test can fail. Budgets are
short so that the tests are quick; the assertions are on verdicts, never on time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from capture_ledger.impl.store import ledger_name
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import FileSystem, OsFileSystem
from capture_ledger.impl.study.crash import (
    RecordingFileSystem,
    StoreConfig,
    explore,
    observe_directory,
    record,
)
from capture_ledger.impl.study.interleave import ChoiceSchedule, Scenario, run_schedule
from capture_ledger.impl.study.interleave import explore as explore_schedules
from capture_ledger.spec.concurrency.linearizability import Ok
from capture_ledger.spec.core.model import Record, Retire
from capture_ledger.spec.kit.crash import Recording, Workload

#: Short budgets: the broken stores below hang for good, so any budget shows the verdict.
BUDGET = 0.3

ROW = {"model_call_id": "c1", "v": 1}


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at the end of a test, so that threads a hanging store left behind end too."""
    event = threading.Event()
    yield event
    event.set()


# ------------------------------------------------------------------------------------- crash explorer
class _TruncateIgnored:
    """A seam whose ``truncate`` does nothing: a ``FileLineageStore`` over it appends onto a torn tail
    without cutting it first (R-STORE-6 broken), leaving a complete line that is not a row."""

    def __init__(self, inner: FileSystem) -> None:
        self.inner = inner
        self.stripes = inner.stripes

    def truncate(self, fd: int, size: int) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _record_onto_torn_tail(directory: Path, *, broken: bool) -> Recording:
    """Record ``record('a', ...)`` onto a ledger with a torn last line, by a broken store or the real one."""
    workload = Workload(
        name="record-onto-torn-tail",
        setup=(Record("a", {"model_call_id": "c0"}),),
        torn=("a",),
        ops=(Record("a", ROW),),
    )
    if not broken:
        return record(workload, StoreConfig(), directory)
    inner = OsFileSystem(directory, stripes=4)
    try:
        with FileLineageStore(directory, fs=inner):
            pass  # the directory and its lock files
        # A ledger of the format before incarnation lines (read and appended to as before, R-STORE-14):
        # there an unsealed line glued to a torn tail is corruption no reader can parse. (In a ledger with
        # an incarnation line it would be crash residue, and the lost row an R-CRASH-1.)
        fd = inner.open_append(ledger_name("a"), create=True)
        assert fd is not None
        inner.write(fd, b'{"record":{"model_call_id":"c0"}}\n{"record":{"model_call_id":"tor')
        inner.fsync(fd)
        inner.close(fd)
        recorder = RecordingFileSystem(inner)
        with FileLineageStore(directory, fs=cast(FileSystem, _TruncateIgnored(recorder))) as store:
            recorder.invoke(0, repr(workload.ops[0]))
            store.record("a", ROW)
            recorder.returned(0, "None")
        return Recording(
            workload=workload,
            config=StoreConfig(label="truncate ignored"),
            baseline=recorder.baseline,
            trace=tuple(recorder.trace),
            threads=tuple(recorder.threads),
            inode_names=recorder.inode_names(),
            paused=None,
        )
    finally:
        inner.close_all()


def test_an_image_no_reader_can_parse_is_a_violation_not_a_crash(tmp_path: Path) -> None:
    good = explore(_record_onto_torn_tail(tmp_path / "good", broken=False), "journaled")
    assert good.verdict == "ok", [v.render() for v in good.examples]

    result = explore(_record_onto_torn_tail(tmp_path / "broken", broken=True), "journaled")
    assert result.verdict == "violation"
    assert "R-STATE-3" in result.clauses
    example = next(v for v in result.examples if "R-STATE-3" in v.clauses)
    assert example.rollout_id == "a"
    assert example.observed.startswith("unreadable: the files do not map to states: CorruptLedgerError")
    # The counterexample is the timeline: the write onto the torn tail, then the image it left.
    assert example.effects[-1].startswith("write a.lineage.jsonl")
    assert dict(example.image)["a.lineage.jsonl"] == "2 line(s)"
    text = example.render()
    assert text.startswith("R-STATE-3, R-STORE-8 broken for 'a'") and "read back: unreadable" in text
    # check() names the corrupt line too, once per image (R-STORE-8).
    assert "R-STORE-8" in result.clauses


class _RaisesOnRead(FileLineageStore):
    """Reads back nothing: every manifest raises an exception no operation may raise."""

    def manifest(self, rollout_id: str) -> Any:
        raise RuntimeError(f"cannot read {rollout_id}")


def test_a_store_that_raises_when_an_image_is_read_is_a_violation(tmp_path: Path) -> None:
    recording = _record_onto_torn_tail(tmp_path, broken=False)

    def open_store(directory: Path, fs: FileSystem) -> FileLineageStore:
        return _RaisesOnRead(directory, fs=fs)

    result = explore(recording, "journaled", open_store=open_store)
    assert result.verdict == "violation" and result.clauses == {"R-STATE-3"}
    (example,) = result.examples
    assert example.rollout_id == "a" and example.cut == 0  # the very first image, before any effect
    assert "reading it back raised RuntimeError: cannot read a" in example.observed

    def refuses(directory: Path, fs: FileSystem) -> FileLineageStore:
        raise OSError("cannot open")

    observation = observe_directory(tmp_path, ("a",), open_store=refuses)
    assert observation.unreadable == "opening the store raised OSError: cannot open"


def test_a_store_that_hangs_when_reopened_is_a_violation(tmp_path: Path, release: threading.Event) -> None:
    recording = _record_onto_torn_tail(tmp_path, broken=False)

    class HangsWhenOpened(FileLineageStore):
        def __init__(self, directory: Path, fs: FileSystem) -> None:
            release.wait()
            super().__init__(directory, fs=fs)

    result = explore(recording, "journaled", open_store=HangsWhenOpened, read_budget=BUDGET)
    assert result.verdict == "violation" and result.clauses == {"R-STATE-3"}
    assert result.images > 1  # every image was judged, each on a fresh scratch directory
    (example,) = result.examples
    hang = f"the store did not answer within {BUDGET:g} s (a hang when reopened)"
    assert example.observed == f"unreadable: {hang}"


# ------------------------------------------------------------------------------------------ scheduler
#: ``a`` is made Live by handle 0; then a retire of it races a late write on handle 1.
RACE = Scenario(
    name="retire-vs-late-write",
    rollout_ids=("a",),
    setup=((0, Record("a", ROW)),),
    threads=((Retire(["a"]),), (Record("a", ROW),)),
)


def _opener(store: Any) -> Any:
    def open_handle(directory: Path, fs: FileSystem) -> Any:
        return store(directory, fs)

    return open_handle


class _Store(FileLineageStore):
    """The production store, keeping its seam at hand for the broken subclasses below."""

    def __init__(self, directory: Path, fs: FileSystem) -> None:
        super().__init__(directory, fs=fs)
        self.seam = fs


def test_the_production_store_passes_the_race(tmp_path: Path) -> None:
    found = explore_schedules(RACE, open_handle=_opener(_Store), preemption_bound=1, base_dir=tmp_path)
    assert found.exhausted and found.runs > 5 and not found.failures


class _UnlinkRaises:
    """A seam whose ``unlink`` raises ``RuntimeError``: a store over it fails in the middle of a retire,
    after its fence was written, with the stripe lock held."""

    def __init__(self, inner: FileSystem) -> None:
        self.inner = inner
        self.stripes = inner.stripes

    def unlink(self, name: str) -> bool:
        raise RuntimeError(f"cannot unlink {name}")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_store_that_raises_mid_retire_fails_the_run(tmp_path: Path) -> None:
    def open_handle(directory: Path, fs: FileSystem) -> Any:
        return _Store(directory, cast(FileSystem, _UnlinkRaises(fs)))

    run = run_schedule(RACE, ChoiceSchedule(), open_handle=open_handle, base_dir=tmp_path)
    assert not run.ok and run.stopped is None
    assert "T0 raised RuntimeError: cannot unlink a.lineage.jsonl" in run.invariant_failures
    retire = next(e for e in run.history if isinstance(e.op, Retire))
    assert retire.returned is None  # in the history as a call that never returned: it may have taken effect
    assert "invariant: T0 raised RuntimeError" in run.describe()
    found = explore_schedules(RACE, open_handle=open_handle, base_dir=tmp_path)
    assert found.failures and not found.exhausted


def test_a_store_that_hangs_in_retire_fails_the_run(tmp_path: Path, release: threading.Event) -> None:
    class HangsInRetire(_Store):
        def retire(self, rollout_ids: Any) -> Any:
            release.wait()
            return super().retire(rollout_ids)

    run = run_schedule(
        RACE, ChoiceSchedule(), open_handle=_opener(HangsInRetire), base_dir=tmp_path, timeout=BUDGET
    )
    assert not run.ok
    assert run.stopped == f"T[0] ran {BUDGET}s without a seam call"
    assert [(e.op, e.returned) for e in run.history if isinstance(e.op, Retire)] == [(Retire(["a"]), None)]
    assert run.describe().splitlines()[-2] == f"stopped: {run.stopped}"
    found = explore_schedules(RACE, open_handle=_opener(HangsInRetire), base_dir=tmp_path, timeout=BUDGET)
    assert [f.stopped for f in found.failures] == [run.stopped]


def test_a_store_that_deadlocks_on_its_own_lock_fails_the_run(tmp_path: Path) -> None:
    class LocksTwice(_Store):
        def retire(self, rollout_ids: Any) -> Any:
            self.seam.lock(0)
            self.seam.lock(0)  # re-entering its own stripe: no thread can ever run again
            return super().retire(rollout_ids)

    run = run_schedule(RACE, ChoiceSchedule(), open_handle=_opener(LocksTwice), base_dir=tmp_path)
    assert not run.ok and run.stopped is not None
    assert run.stopped.startswith("deadlock: {0: lock(0)}")  # T0 waits for the stripe it holds
    assert [str(step) for step in run.trace if step.thread == 0][-1] == "T0 lock(0) -> None"
    assert isinstance(run.verdict, Ok)  # the history so far is linearizable: the run failed on the deadlock


def test_failures_outside_the_schedule_fail_the_run(tmp_path: Path, release: threading.Event) -> None:
    def refuses(directory: Path, fs: FileSystem) -> Any:
        raise OSError("no such store")

    run = run_schedule(RACE, ChoiceSchedule(), open_handle=refuses, base_dir=tmp_path)
    assert run.stopped == "opening the handles raised OSError: no such store" and not run.ok

    class HangsInRecord(_Store):
        def record(self, rollout_id: str, row: Any) -> None:
            release.wait()

    run = run_schedule(
        RACE, ChoiceSchedule(), open_handle=_opener(HangsInRecord), base_dir=tmp_path, timeout=BUDGET
    )
    assert run.stopped == f"setup {RACE.setup[0][1]!r} on handle 0 did not return within {BUDGET:g} s"

    class RaisesOnRead(_Store):
        def manifest(self, rollout_id: str) -> Any:
            raise RuntimeError("unreadable")

    run = run_schedule(RACE, ChoiceSchedule(), open_handle=_opener(RaisesOnRead), base_dir=tmp_path)
    assert run.stopped is None and not run.ok
    assert run.invariant_failures == tuple(
        f"reading 'a' back on handle {n} raised RuntimeError: unreadable" for n in range(3)
    )


def test_a_store_that_does_not_replay_ends_the_exploration(tmp_path: Path) -> None:
    opened = [0]

    class Nondeterministic(_Store):
        def retire(self, rollout_ids: Any) -> Any:
            for _ in range(max(0, 6 - opened[0])):  # fewer seam calls each time a handle is opened
                self.seam.stat("nothing")
            return super().retire(rollout_ids)

    def open_handle(directory: Path, fs: FileSystem) -> Any:
        opened[0] += 1
        return Nondeterministic(directory, fs)

    found = explore_schedules(RACE, open_handle=open_handle, base_dir=tmp_path, stop_at_first=False)
    assert not found.exhausted
    assert found.failures[-1].stopped is not None
    assert found.failures[-1].stopped.startswith("the store did not replay the prefix")
