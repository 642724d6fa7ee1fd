"""Process crashes for real: SIGKILL in the middle of writes, retires and deletes.

A forked child process runs a seeded loop of ``record``, ``retire`` and ``delete`` on a real
``FileLineageStore`` and, around every call, appends to an acknowledgement log (fsynced): an ``invoke``
line before the call and a ``return`` line after it returned. The parent kills it with SIGKILL at a
seeded random moment, many times over one directory, and after each kill reopens the directory with a
fresh store and checks:

- the contract (R-CRASH-1..4): each ID is in a state ``allowed_states`` permits, given the state read after
  the previous kill, the operations the child reported as returned (durable) and the one in flight;
- the public API reads what the files hold (R-STATE-3);
- ``check()`` reports nothing but what a crash may leave (torn last lines, interrupted retires, R-STORE-8).

A second test kills deterministically: a retire, before each of its seam calls in turn (the child kills
itself from ``FaultyFileSystem``'s plan hook), on a fresh copy of one directory each time; the production
store keeps the contract at every point, and the variant that unlinks before fencing is caught.

A killed process keeps the kernel's page cache, so this tests the store's own ordering and recovery (torn
tails, fenced ledgers left by an interrupted retire, resuming on them), not the disk's persistence model;
``crash`` explores that.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem
from capture_ledger.impl.store.ordering import StoreVariant
from capture_ledger.impl.study.crash import StoreConfig, observe_directory
from capture_ledger.impl.study.faults import FaultyFileSystem
from capture_ledger.spec.core.model import ABSENT, Delete, Operation, Record, Retire, RolloutState
from capture_ledger.spec.crash.contract import Span, allowed_states, broken_clauses

KILLS = 30
IDS = tuple(f"r{i}" for i in range(5))


def child_loop(directory: Path, log_path: Path, seed: int, ready: int) -> None:
    """The killed process: a seeded loop of store operations, each acknowledged in an fsynced log."""
    rng = random.Random(seed)
    store = FileLineageStore(directory)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def note(entry: dict[str, Any]) -> None:
        os.write(log, (json.dumps(entry) + "\n").encode())
        os.fsync(log)

    os.write(ready, b"r")
    for n in range(1_000_000):
        roll = rng.random()
        op: dict[str, Any]
        if roll < 0.6:
            op = {"kind": "record", "id": rng.choice(IDS), "call": f"s{seed}-c{n}"}
        else:
            op = {"kind": "retire" if roll < 0.8 else "delete", "ids": rng.sample(IDS, rng.randint(1, 3))}
        note({"n": n, "phase": "invoke", "op": op})
        result: object = None
        if op["kind"] == "record":
            store.record(op["id"], {"model_call_id": op["call"], "n": n})
        elif op["kind"] == "retire":
            result = store.retire(op["ids"])
        else:
            result = store.delete(op["ids"])
        note({"n": n, "phase": "return", "result": result})


def spawn(directory: Path, log_path: Path, seed: int) -> int:
    """Fork a child running ``child_loop`` (a real process; forked so it starts in milliseconds)."""
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns; SIGKILL ends it
        code = 0
        try:
            os.close(ready_read)
            child_loop(directory, log_path, seed, ready_write)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(ready_write)
    assert os.read(ready_read, 1) == b"r"
    os.close(ready_read)
    return pid


def operation(entry: dict[str, Any]) -> Operation:
    if entry["kind"] == "record":
        call = entry["call"]
        n = int(call.rsplit("-c", 1)[1])
        return Record(entry["id"], {"model_call_id": call, "n": n})
    if entry["kind"] == "retire":
        return Retire(list(entry["ids"]))
    return Delete(list(entry["ids"]))


def read_log(path: Path) -> list[Span]:
    """The round's operations: every invoked one, returned or not (a torn last log line is ignored)."""
    spans: list[tuple[Operation, bool]] = []
    for line in path.read_bytes().split(b"\n"):
        if not line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # the kill tore the log's last line
        if entry["phase"] == "invoke":
            spans.append((operation(entry["op"]), False))
        else:
            spans[-1] = (spans[-1][0], True)
    return [Span(op, done, frozenset(range(i))) for i, (op, done) in enumerate(spans)]


def test_sigkill_mid_operation_keeps_the_contract(tmp_path: Path) -> None:
    directory = tmp_path / "lineage"
    rng = random.Random(20261129)
    states: dict[str, RolloutState] = dict.fromkeys(IDS, ABSENT)
    in_flight = returned = 0
    for round_number in range(KILLS):
        log = tmp_path / f"acks-{round_number}.jsonl"
        pid = spawn(directory, log, round_number)
        time.sleep(rng.uniform(0.005, 0.2))  # a seeded random point in the loop
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL

        history = read_log(log) if log.exists() else []
        returned += sum(s.returned for s in history)
        in_flight += any(not s.returned for s in history)
        observation = observe_directory(directory, IDS, config=StoreConfig(stripes=64))
        assert observation.mismatches == ()
        assert observation.findings == ()  # only torn tails and interrupted retires (R-STORE-8)
        for rollout_id in IDS:
            observed = observation.state(rollout_id)
            allowed = allowed_states(history, rollout_id, initial=states[rollout_id])
            if observed not in allowed:
                clauses = broken_clauses(history, rollout_id, observed, initial=states[rollout_id])
                raise AssertionError(
                    f"kill {round_number}: {rollout_id} read {observed!r}, "
                    f"allowed {sorted(map(repr, allowed))}; breaks {clauses}; "
                    f"last operations {[repr(s.op) for s in history[-3:]]}"
                )
            states[rollout_id] = observed
    # The kills landed where they matter: many operations returned, and some kills hit one in flight.
    assert returned >= KILLS
    assert in_flight >= KILLS // 3


def kill_at(step: int, directory: Path, variant: StoreVariant) -> bool:
    """Fork a child that retires ``RETIRED_BATCH`` and SIGKILLs itself just before its ``step``-th seam
    call (through ``FaultyFileSystem``'s plan hook); whether it was killed (else it returned)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child ends by SIGKILL or os._exit
        code = 0
        try:
            calls = 0

            def plan(call: str, name: str) -> None:
                nonlocal calls
                calls += 1
                if calls == step:
                    os.kill(os.getpid(), signal.SIGKILL)

            inner = OsFileSystem(directory)
            store = FileLineageStore(directory, fs=FaultyFileSystem(inner, plan=plan), variant=variant)
            store.retire(list(RETIRED_BATCH))
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return True
    assert os.WEXITSTATUS(status) == 0
    return False


RETIRED_BATCH = ("r0", "r1", "r2")


def violations_at_every_call(tmp_path: Path, variant: StoreVariant) -> tuple[int, list[str]]:
    """Kill a retire at each of its seam calls in turn, on a fresh copy of the same directory; judge."""
    template = tmp_path / "template"
    with FileLineageStore(template) as store:
        store.record("r0", {"model_call_id": "a"})
        store.record("r1", {"model_call_id": "b"})
    initial = observe_directory(template, RETIRED_BATCH, config=StoreConfig(stripes=64))
    found: list[str] = []
    for step in range(1, 100):
        directory = tmp_path / f"kill-{step}"
        shutil.copytree(template, directory)
        killed = kill_at(step, directory, variant)
        observation = observe_directory(directory, RETIRED_BATCH, config=StoreConfig(stripes=64))
        assert observation.mismatches == () and observation.findings == ()
        history = [Span(Retire(list(RETIRED_BATCH)), not killed)]
        for rollout_id in RETIRED_BATCH:
            state = observation.state(rollout_id)
            if state not in allowed_states(history, rollout_id, initial=initial.state(rollout_id)):
                found.append(f"killed before call {step}: {rollout_id} read {state!r}")
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
