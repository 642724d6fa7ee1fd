"""Process crashes for real: SIGKILL in the middle of writes, retires and deletes (R-CRASH-1..4).

A forked child process runs operations on a real ``FileLineageStore`` whose seam is a
``HookedFileSystem``: its ``before`` hook counts the store's seam calls and SIGKILLs the child just
before the ``kill_at``-th one. Every operation goes through ``spec.kit.HistoryRecorder`` with a
``HistoryJournal``: the call's invocation is journaled before the store is called, the whole event after
it returned, so the journal read back (``read_history``) is the child's history, the operation the kill
interrupted being the one unreturned event. The kill point is a seam-call index, not a moment: a given
seed and index kill the same operation at the same call in every run.

After each kill the parent reopens the directory with a fresh store (``crash.observe_directory``) and
checks:

- the contract (R-CRASH-1..4): each ID is in a state ``allowed_states`` permits, given the state read after
  the previous kill and the history (returned operations are durable; the interrupted one may have left
  its pre-state, its post-state or a state on its path);
- the public API reads what the files hold (R-STATE-3);
- ``check()`` reports nothing but what a crash may leave (torn last lines, interrupted retires, R-STORE-8).

The first test kills a seeded random workload at seeded call indexes, many times over one directory; the
same kills catch the variant that unlinks before fencing. The last kills a retire before each of its
seam calls in turn, on a fresh copy of one directory each time: the production store keeps the contract
at every point, and that variant is caught at the calls between its unlink and its fence.

A killed process keeps the kernel's page cache, so this tests the store's own ordering and recovery (torn
tails, fenced ledgers left by an interrupted retire, resuming on them), not the disk's persistence model;
``crash`` explores that. The journal is therefore not fsynced: only the process dies, not the machine.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem
from capture_ledger.impl.study import FsCall, HookedFileSystem, StoreVariant
from capture_ledger.impl.study.crash import StoreConfig, observe_directory
from capture_ledger.spec.concurrency.history import Event
from capture_ledger.spec.core.model import ABSENT, Delete, Operation, Record, Retire, RolloutState
from capture_ledger.spec.crash.contract import Span, allowed_states, broken_clauses
from capture_ledger.spec.kit import HistoryJournal, HistoryRecorder, read_history

KILLS = 40
IDS = tuple(f"r{i}" for i in range(5))
#: Operations a child is given: more than it reaches before any kill point drawn below.
OPERATIONS = 400
#: Kill points are drawn from 1..MAX_CALL (a record makes about 8 seam calls, a retire of 3 IDs about 20).
MAX_CALL = 600


def workload(seed: int) -> list[Operation]:
    """A seeded mix: 60% records of fresh rows, 20% retires and 20% deletes of one to three IDs."""
    rng = random.Random(seed)
    ops: list[Operation] = []
    for n in range(OPERATIONS):
        roll = rng.random()
        if roll < 0.6:
            ops.append(Record(rng.choice(IDS), {"model_call_id": f"s{seed}-c{n}", "n": n}))
        else:
            batch = rng.sample(IDS, rng.randint(1, 3))
            ops.append(Retire(batch) if roll < 0.8 else Delete(batch))
    return ops


def run_child(
    directory: Path, journal: Path, ops: Sequence[Operation], kill_at: int, variant: StoreVariant
) -> bool:
    """Fork a child that runs ``ops`` through the recorder and SIGKILLs itself just before its
    ``kill_at``-th seam call; whether it was killed (else it ran every operation)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child ends by SIGKILL or os._exit
        code = 0
        try:
            calls = 0

            def before(call: FsCall) -> None:
                nonlocal calls
                calls += 1
                if calls == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)

            seam = HookedFileSystem(OsFileSystem(directory), before=before)
            store = FileLineageStore(directory, fs=seam, ordering=variant.ordering())
            recorder = HistoryRecorder(journal=HistoryJournal(journal, durable=False))
            for op in ops:
                recorder.call(0, store, op)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, "the child failed"
    return False


def spans(events: Sequence[Event]) -> list[Span]:
    """One client's history as the crash contract reads it: in order, each after all before it."""
    return [
        Span(op=e.op, returned=e.returned is not None, follows=frozenset(range(i)))
        for i, e in enumerate(events)
    ]


def judge(
    directory: Path, ids: Sequence[str], events: Sequence[Event], initial: dict[str, RolloutState]
) -> tuple[dict[str, RolloutState], list[str]]:
    """Reopen ``directory``; the state read per ID and every way it breaks the contract."""
    observation = observe_directory(directory, ids, config=StoreConfig(stripes=64))
    assert observation.unreadable is None, observation.unreadable
    assert observation.mismatches == ()  # R-STATE-3
    assert observation.findings == ()  # only torn tails and interrupted retires (R-STORE-8)
    history = spans(events)
    states = {rid: observation.state(rid) for rid in ids}
    found = []
    for rid, state in states.items():
        if state not in allowed_states(history, rid, initial=initial[rid]):
            clauses = broken_clauses(history, rid, state, initial=initial[rid])
            last = [repr(s.op) for s in history[-3:]]
            found.append(f"{rid} read {state!r}; breaks {', '.join(clauses)}; last operations {last}")
    return states, found


def kill_rounds(tmp_path: Path, variant: StoreVariant) -> tuple[list[str], list[list[Event]]]:
    """``KILLS`` seeded kills over one directory; the contract breaches found and each round's history."""
    directory = tmp_path / "lineage"
    rng = random.Random(20261129)
    states: dict[str, RolloutState] = dict.fromkeys(IDS, ABSENT)
    found: list[str] = []
    histories = []
    for round_number in range(KILLS):
        journal = tmp_path / f"journal-{round_number}.jsonl"
        kill_at = rng.randint(1, MAX_CALL)
        assert run_child(directory, journal, workload(round_number), kill_at, variant)
        events = read_history(journal)
        histories.append(events)
        states, breaches = judge(directory, IDS, events, states)
        found += [f"kill {round_number} before call {kill_at}: {breach}" for breach in breaches]
    return found, histories


def test_sigkill_mid_operation_keeps_the_contract(tmp_path: Path) -> None:
    found, histories = kill_rounds(tmp_path, StoreVariant())
    assert found == []
    # Every kill lands inside an operation (seam calls happen only there): exactly one is in flight, last.
    for events in histories:
        assert [e.returned is None for e in events] == [False] * (len(events) - 1) + [True]
    returned = sum(len(events) - 1 for events in histories)
    interrupted = Counter(type(events[-1].op).__name__ for events in histories)
    print(f"{KILLS} kills, {returned} operations returned before them; interrupted: {dict(interrupted)}")
    assert returned > 10 * KILLS  # the seeded kill points let the child run, not die at once
    assert set(interrupted) == {"Record", "Retire", "Delete"}  # kills hit every kind of operation


def test_sigkill_catches_a_retire_that_unlinks_before_fencing(tmp_path: Path) -> None:
    """The same kills, on the variant that unlinks a retire's ledgers before fencing them: some kill lands
    between the two and leaves a returned-never retire's ID Absent, which R-CRASH-4 forbids."""
    found, _ = kill_rounds(tmp_path, StoreVariant(fence_before_unlink=False))
    assert found and all("breaks R-CRASH-4" in breach for breach in found), found


RETIRED_BATCH = ("r0", "r1", "r2")


def violations_at_every_call(tmp_path: Path, variant: StoreVariant) -> tuple[int, list[str]]:
    """Kill a retire before each of its seam calls in turn, on a fresh copy of one directory; judge."""
    template = tmp_path / "template"
    with FileLineageStore(template) as store:
        store.record("r0", {"model_call_id": "a"})
        store.record("r1", {"model_call_id": "b"})
    initial = {rid: observe_directory(template, RETIRED_BATCH).state(rid) for rid in RETIRED_BATCH}
    found: list[str] = []
    for step in range(1, 100):
        directory = tmp_path / f"kill-{step}"
        shutil.copytree(template, directory)
        journal = tmp_path / f"journal-{step}.jsonl"
        killed = run_child(directory, journal, [Retire(list(RETIRED_BATCH))], step, variant)
        _, breaches = judge(directory, RETIRED_BATCH, read_history(journal), initial)
        found += [f"killed before call {step}: {breach}" for breach in breaches]
        if not killed:
            return step - 1, found
    raise AssertionError("the retire never finished")


def test_sigkill_at_every_seam_call_of_a_retire(tmp_path: Path) -> None:
    """Deterministic kills: before each seam call of a retire in turn. The production store keeps the
    contract at every one; the variant that unlinks before fencing is caught (R-CRASH-4)."""
    kills, found = violations_at_every_call(tmp_path / "default", StoreVariant())
    assert kills >= 8 and found == []
    _, broken = violations_at_every_call(tmp_path / "broken", StoreVariant(fence_before_unlink=False))
    assert broken, "a retire that unlinks before fencing must be caught"
    assert all("R-CRASH-4" in breach for breach in broken), broken
