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

Then the kills meet faults. In a child whose seam is the study's ``FaultyFileSystem``, seeded writes
fail with ``ENOSPC`` (before any byte, or halfway) and seeded fsyncs and directory syncs with ``EIO``
(before or after their effect); in another, records fill a 4 MB tmpfs until the real ``ENOSPC``. Each
child logs every fault as it strikes and how every call ended, and retries a failed call once with the
fault cleared (on the full disk, after deleting every ID to free space). After each kill the parent
judges the contract as above, with each failed call as one that never returned, and audits the log: every
call a fault struck raised (none returned ok, and the journal holds it unreturned), no call raised without
a fault, every retry returned (R-STORE-12, R-STORE-13). Each test counts kills, faults struck, calls
raised, retries that returned and returned calls judged, and asserts them positive. The slow test runs the
reliability campaign's kill storm (``impl.study.kill_storm``) and asserts it finds no violation.

A killed process keeps the kernel's page cache, so this tests the store's own ordering and recovery (torn
tails, fenced ledgers left by an interrupted retire, resuming on them), not the disk's persistence model;
``crash`` explores that. The journal is therefore not fsynced: only the process dies, not the machine.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import signal
import subprocess
import sys
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from capture_ledger.impl.store import FenceSync
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem
from capture_ledger.impl.study import (
    Fault,
    FaultyFileSystem,
    FsCall,
    HookedFileSystem,
    StoreVariant,
    kill_storm,
)
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


# ------------------------------------------------------------------------------ kills meeting faults
# The same kills, in processes whose store also meets failed system calls: injected ones through the
# study's ``FaultyFileSystem`` (ENOSPC at writes, EIO at fsyncs and directory syncs), and the real ENOSPC
# of a full tmpfs. Each child logs, unbuffered, every fault the moment it strikes (``f <attempt> ...``) and
# how each call ended (``r <attempt> ok`` or ``r <attempt> raised <errno> <exception>``); after a call
# raised it retries it once with the fault cleared. The parent then holds, per attempt: whether a fault
# struck, whether the call raised, whether the retry returned, and the journal's history to judge.

#: The faulted calls, the error each fails with, and the moments it strikes at (``impl.study.faults``).
INJECTED = {
    "write": (errno.ENOSPC, ("before", "partial")),
    "fsync": (errno.EIO, ("after", "before")),
    "sync_dir": (errno.EIO, ("after", "before")),
}
#: The chance that an armed ``write``, ``fsync`` or ``sync_dir`` fails (one fault per attempt at most).
FAULT_RATE = 0.05
FAULT_KILLS = 24


class _Child:
    """In a forked child: counts seam calls (SIGKILL just before the ``kill_at``-th), runs calls through
    the recorder and logs each attempt's end and each fault struck to ``log_fd``."""

    def __init__(self, journal: Path, log_fd: int, kill_at: int) -> None:
        self.recorder = HistoryRecorder(journal=HistoryJournal(journal, durable=False))
        self.log_fd, self.kill_at = log_fd, kill_at
        self.calls = self.attempt = 0
        self.struck = False

    def count(self) -> None:
        self.calls += 1
        if self.calls == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    def note(self, text: str) -> None:
        os.write(self.log_fd, f"{text}\n".encode())

    def call(self, store: FileLineageStore, op: Operation) -> bool:
        """Run ``op``; whether it returned (``False``: it raised ``OSError``)."""
        self.struck = False
        try:
            self.recorder.call(0, store, op)
        except OSError as error:
            code = errno.errorcode.get(error.errno or 0, str(error.errno))
            self.note(f"r {self.attempt} raised {code} {type(error).__name__}")
            returned = False
        else:
            self.note(f"r {self.attempt} ok")
            returned = True
        self.attempt += 1
        return returned


def fork_child(log: Path, body: Callable[[int], None]) -> bool:
    """Run ``body(log_fd)`` in a forked child; whether it was SIGKILLed (else it finished)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child ends by SIGKILL or os._exit
        code = 0
        try:
            body(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, "the child failed"
    return False


def read_log(log: Path) -> tuple[dict[int, str], dict[int, str]]:
    """The faults struck and the ends, each by attempt number, from a child's log."""
    faults: dict[int, str] = {}
    ends: dict[int, str] = {}
    for line in log.read_text().split("\n")[:-1]:
        kind, attempt, rest = line.split(" ", 2)
        (faults if kind == "f" else ends)[int(attempt)] = rest
    return faults, ends


def audit_attempts(
    events: Sequence[Event], faults: dict[int, str], ends: dict[int, str], tally: Counter[str]
) -> list[str]:
    """Against the child's log: every struck fault made its call raise (never return ok) and be journaled
    unreturned; no call raised without one; each retry after a raise returned. Counts into ``tally``."""
    found = []
    for i, event in enumerate(events):
        end, fault = ends.get(i), faults.get(i)
        op = type(event.op).__name__
        if end is None:
            assert i == len(events) - 1, "only the call the kill interrupted has no end"
            continue
        returned = end == "ok"
        if returned != (event.returned is not None):
            found.append(f"attempt {i} ({op}) ended {end!r} but the journal says otherwise")
        if fault is not None:
            tally["faults struck"] += 1
            tally[f"struck at {fault.split()[0]}"] += 1
            tally[f"struck in {op}"] += 1
            if returned or "InjectedFaultError" not in end:
                found.append(f"attempt {i} ({op}): {fault} struck, yet it ended {end!r}")
            else:
                tally["raised"] += 1
        elif not returned:
            found.append(f"attempt {i} ({op}) raised without a fault: {end!r}")
        if returned:
            tally["acknowledged"] += 1
        elif i + 1 < len(events):
            if events[i + 1].op != event.op:
                found.append(f"attempt {i} ({op}) raised and was not retried")
            elif ends.get(i + 1) == "ok":
                tally["recovered"] += 1
            elif ends.get(i + 1) is not None:
                found.append(
                    f"the retry of attempt {i} ({op}) failed with the fault cleared: {ends[i + 1]!r}"
                )
    return found


def run_faulted_child(
    directory: Path,
    journal: Path,
    log: Path,
    ops: Sequence[Operation],
    kill_at: int,
    seed: int,
    fence_sync: FenceSync,
) -> bool:
    """A child whose store meets injected faults at seeded seam calls and retries each failed call once,
    fault cleared; SIGKILLed just before its ``kill_at``-th seam call."""

    def body(log_fd: int) -> None:
        child = _Child(journal, log_fd, kill_at)
        rng = random.Random(seed)
        armed = False

        def plan(call: str, name: str) -> Fault | None:
            child.count()
            if not armed or child.struck or call not in INJECTED or rng.random() >= FAULT_RATE:
                return None
            code, moments = INJECTED[call]
            fault = Fault(code, rng.choice(moments))
            child.struck = True
            child.note(f"f {child.attempt} {call} {errno.errorcode[code]} {fault.when} {name}")
            return fault

        seam = FaultyFileSystem(OsFileSystem(directory), plan=plan)
        store = FileLineageStore(directory, fs=seam, fence_sync=fence_sync)
        for op in ops:
            armed = True
            if not child.call(store, op):
                armed = False  # the fault clears: the retry must succeed
                child.call(store, op)

    return fork_child(log, body)


@pytest.mark.parametrize("fence_sync", ["directory", "file"])
def test_sigkill_with_injected_enospc_and_eio_keeps_the_contract(
    tmp_path: Path, fence_sync: FenceSync
) -> None:
    """Kills of processes whose writes fail with ENOSPC and whose fsyncs and directory syncs fail with
    EIO: no returned call is lost (R-CRASH-1..4), every call a fault struck raised, and its retry
    returned once the fault cleared (R-STORE-12, R-STORE-13)."""
    directory = tmp_path / "lineage"
    rng = random.Random(20261201)
    states: dict[str, RolloutState] = dict.fromkeys(IDS, ABSENT)
    found: list[str] = []
    tally: Counter[str] = Counter()
    for round_number in range(FAULT_KILLS):
        journal, log = tmp_path / f"journal-{round_number}.jsonl", tmp_path / f"log-{round_number}"
        kill_at = rng.randint(100, MAX_CALL)
        ops = workload(1000 + round_number)
        tally["kills"] += run_faulted_child(directory, journal, log, ops, kill_at, round_number, fence_sync)
        events = read_history(journal)
        found += [f"kill {round_number}: {f}" for f in audit_attempts(events, *read_log(log), tally)]
        states, breaches = judge(directory, IDS, events, states)
        found += [f"kill {round_number} before call {kill_at}: {breach}" for breach in breaches]
    print(f"fence_sync={fence_sync}: {dict(sorted(tally.items()))}")
    assert found == []
    assert tally["kills"] == FAULT_KILLS
    assert tally["acknowledged"] > 10 * FAULT_KILLS  # returned calls, each judged after its kill
    assert tally["raised"] > 0 and tally["recovered"] > 0
    assert all(tally[f"struck at {call}"] > 0 for call in INJECTED), tally
    assert tally["struck in Record"] > 0 and tally["struck in Retire"] + tally["struck in Delete"] > 0


FULL_IDS = tuple(f"f{i}" for i in range(6))
FULL_KILLS = 8
#: Bytes left free on the tmpfs for the ledgers: about 150 padded rows before the first ENOSPC.
HEADROOM = 256 * 1024
PAD = "p" * 1500


@pytest.fixture
def full_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MB tmpfs with a lineage directory (lock files made) and a filler that leaves ``HEADROOM``."""
    reason = None if os.geteuid() == 0 and shutil.which("mount") else "mounting a tmpfs needs root and mount"
    mountpoint = tmp_path / "tmpfs"
    mountpoint.mkdir()
    if reason is None:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mountpoint)],
            check=False,
            capture_output=True,
        )
        reason = mounted.stderr.decode(errors="replace").strip() if mounted.returncode else None
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {reason}")
        pytest.skip(reason)
    try:
        FileLineageStore(mountpoint / "lineage").close()  # lock files, their counter blocks allocated
        with open(mountpoint / "filler", "wb", buffering=0) as filler:
            with contextlib.suppress(OSError):
                while True:
                    filler.write(b"\xff" * 65536)
            os.ftruncate(filler.fileno(), max(0, filler.tell() - HEADROOM))
        yield mountpoint
    finally:
        if subprocess.run(["umount", str(mountpoint)], check=False, capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mountpoint)], check=False, capture_output=True)


def run_full_disk_child(directory: Path, journal: Path, log: Path, kill_at: int, seed: int) -> bool:
    """A child recording padded rows on a nearly full file system; when a record fails (ENOSPC) it deletes
    every ID to free space and records again; SIGKILLed just before its ``kill_at``-th seam call."""

    def body(log_fd: int) -> None:
        child = _Child(journal, log_fd, kill_at)
        seam = HookedFileSystem(OsFileSystem(directory), before=lambda _: child.count())
        store = FileLineageStore(directory, fs=seam)
        for n in range(100_000):
            op = Record(FULL_IDS[n % len(FULL_IDS)], {"model_call_id": f"s{seed}-c{n}", "pad": PAD})
            if not child.call(store, op):
                child.call(store, Delete(list(FULL_IDS)))  # R-STORE-12: frees space on the full disk
                child.call(store, op)

    return fork_child(log, body)


def test_sigkill_on_a_full_tmpfs_keeps_the_contract(full_tmpfs: Path, tmp_path: Path) -> None:
    """Kills of processes writing to a full tmpfs (real ENOSPC): no returned call is lost (R-CRASH-1..4), a
    failed record raised ENOSPC (judged as a call that never returned), the delete after it returned on the
    full disk (R-STORE-12) and the record's retry then returned."""
    directory = full_tmpfs / "lineage"
    rng = random.Random(20261202)
    states: dict[str, RolloutState] = dict.fromkeys(FULL_IDS, ABSENT)
    found: list[str] = []
    tally: Counter[str] = Counter()
    for round_number in range(FULL_KILLS):
        journal, log = tmp_path / f"journal-{round_number}.jsonl", tmp_path / f"log-{round_number}"
        kill_at = rng.randint(1000, 5000)
        tally["kills"] += run_full_disk_child(directory, journal, log, kill_at, round_number)
        events = read_history(journal)
        _, ends = read_log(log)
        for i, event in enumerate(events):
            end = ends.get(i)
            if end is None or end == "ok":
                tally["acknowledged"] += end == "ok"
                continue
            if end != "raised ENOSPC OSError" or not isinstance(event.op, Record):
                found.append(f"kill {round_number}, attempt {i}: {event.op!r} ended {end!r}")
                continue
            tally["ENOSPC"] += 1
            then = [(events[j].op, ends.get(j)) for j in (i + 1, i + 2) if j < len(events)]
            if then and (not isinstance(then[0][0], Delete) or then[0][1] not in (None, "ok")):
                found.append(f"kill {round_number}: after ENOSPC at attempt {i} came {then[0]!r}")
            elif len(then) == 2 and (then[1][0] != event.op or then[1][1] not in (None, "ok")):
                found.append(f"kill {round_number}: the retry of attempt {i} was {then[1]!r}")
            elif len(then) == 2 and then[1][1] == "ok":
                tally["recovered"] += 1
        states, breaches = judge(directory, FULL_IDS, events, states)
        found += [f"kill {round_number} before call {kill_at}: {breach}" for breach in breaches]
    print(f"full tmpfs: {dict(sorted(tally.items()))}")
    assert found == []
    assert tally["kills"] == FULL_KILLS
    assert tally["ENOSPC"] > 0 and tally["recovered"] > 0
    assert tally["acknowledged"] > 10 * FULL_KILLS


@pytest.mark.slow
def test_the_campaigns_kill_storm_finds_no_violation() -> None:
    """``benchmarks/reliability_campaign.py kill``'s storm, 60 SIGKILLs of two writers at a time on one
    directory at random moments: every ID judged with a fresh handle, before and after ``check(fix=True)``."""
    storm = kill_storm(60, seed=1)
    print(storm)
    assert storm.violations == 0 and storm.notes == []
    assert storm.kills == 60 and storm.killed_mid_run > 0
    assert storm.checked == 60 * 3  # three IDs per writer, each judged as the kill left it
    assert storm.returned > storm.kills  # the calls that returned before their kill, each judged
