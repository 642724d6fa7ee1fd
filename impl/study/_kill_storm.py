"""The kill storm: writers SIGKILLed at random moments, every ID judged after (R-CRASH-1..4, R-STORE-8).

Each round forks two writer processes on one directory (disjoint IDs, a fixed operation sequence each:
record, record_failure, retire, delete), kills both after a random pause, and reads every ID back with a
fresh handle: each must be in the state its *returned* calls leave, or the in-flight call's pre-, post- or
path state (R-CRASH-4). ``check()`` may report only what a crash leaves, and after ``check(fix=True)``
every ID must still be in a state the contract allows. A writer logs ``s <index>`` before each call and
``d <index>`` after it returned (or was refused: a conflict is a return too), unbuffered, so the log read
after the kill says which calls returned and which one was in flight.

Used by ``benchmarks/reliability_campaign.py kill`` and by a slow test. The kill moments come from the
clock (a pause of 2 to 60 ms), so which call a kill interrupts differs between runs; the seed fixes the
operations and the pauses. Not guaranteed: that any given run interrupts every kind of call.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from capture_ledger.impl.store import check
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.study.crash import StoreConfig, observe_directory
from capture_ledger.spec.core.model import (
    Delete,
    LedgerState,
    Operation,
    Record,
    RecordFailure,
    Retire,
    RolloutState,
    step,
)
from capture_ledger.spec.crash.contract import Span, allowed_states, touches
from capture_ledger.spec.kit.crash import run_operation

__all__ = ["CRASH_FINDINGS", "KillStormResult", "kill_storm"]

STRIPES = 8
#: What a SIGKILL may leave for ``check`` (R-STORE-8); anything else is a violation.
CRASH_FINDINGS = frozenset({"torn-tail", "interrupted-retire", "empty-ledger", "interrupted-create"})
#: Operations each writer is given per round.
_OPERATIONS = 40


@dataclass(kw_only=True, slots=True)
class KillStormResult:
    """What a storm did and found.

    ``kills``: SIGKILLs sent (two per round); ``killed_mid_run``: writers the signal ended (the others had
    run every operation first); ``returned``: calls that returned before their kill, each judged;
    ``checked``: IDs judged as left by the kill; ``fixed``: leftovers ``check(fix=True)`` repaired;
    ``violations``: IDs in a state the contract forbids, API reads that disagree with the files (R-STATE-3),
    ``check`` findings a crash cannot leave, and writers that failed on their own (must be 0); ``notes``:
    one line per violating ID.
    """

    kills: int = 0
    killed_mid_run: int = 0
    returned: int = 0
    checked: int = 0
    fixed: int = 0
    violations: int = 0
    notes: list[str] = field(default_factory=list)


def _operations(seed: int, ids: list[str], count: int) -> list[Operation]:
    rng = random.Random(seed)
    ops: list[Operation] = []
    for n in range(count):
        kind = rng.random()
        rollout_id = rng.choice(ids)
        if kind < 0.5:
            ops.append(Record(rollout_id, {"model_call_id": f"c{n % 7}", "n": n % 7}))
        elif kind < 0.6:
            ops.append(RecordFailure(rollout_id, f"c{n % 5}", "timeout"))
        elif kind < 0.8:
            ops.append(Retire(tuple(rng.sample(ids, rng.randint(1, len(ids))))))
        else:
            ops.append(Delete(tuple(rng.sample(ids, rng.randint(1, len(ids))))))
    return ops


def _writer(directory: Path, ops: list[Operation], log_fd: int) -> None:  # pragma: no cover - a child
    """In the forked child: run ``ops``, logging each start and return; never returns to the caller."""
    code = 0
    try:
        logging.getLogger("capture_ledger").setLevel(logging.ERROR)  # no warning per discarded late write
        with FileLineageStore(directory, stripes=STRIPES) as store:
            for index, op in enumerate(ops):
                os.write(log_fd, f"s {index}\n".encode())
                with contextlib.suppress(Exception):  # a refused call (a conflict) returned too: done
                    run_operation(store, op)
                os.write(log_fd, f"d {index}\n".encode())
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _logged(path: Path) -> tuple[int, int | None]:
    """(calls returned, index of the call in flight or None) from a writer's log."""
    done, started = -1, None
    for line in path.read_text().splitlines():
        kind, _, number = line.partition(" ")
        if not number.isdigit():
            continue  # a line cut by the kill
        if kind == "s":
            started = int(number)
        elif kind == "d":
            done = int(number)
    in_flight = started if started is not None and started > done else None
    return done + 1, in_flight


def kill_storm(kills: int, seed: int) -> KillStormResult:
    """Send ``kills`` SIGKILLs (rounded up to an even number: two writers a round) and judge every ID.

    Args:
        kills: how many writer processes to kill.
        seed: fixes the operations and the pauses before each round's kills.

    Returns:
        The counts; ``violations`` must be 0.
    """
    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="campaign-kill-"))
    directory = root / "lineage"
    FileLineageStore(directory, stripes=STRIPES).close()
    result = KillStormResult()
    rounds = (kills + 1) // 2
    try:
        for round_ in range(rounds):
            writers = []
            for w in range(2):
                ids = [f"k{round_}-{w}-{i}" for i in range(3)]
                ops = _operations(seed * 100_000 + round_ * 2 + w, ids, _OPERATIONS)
                log = root / f"log-{round_}-{w}"
                log_fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                pid = os.fork()
                if pid == 0:  # pragma: no cover - the child ends in _writer
                    _writer(directory, ops, log_fd)
                os.close(log_fd)
                writers.append((pid, ids, ops, log))
            time.sleep(rng.uniform(0.002, 0.06))
            for pid, *_ in writers:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                result.kills += 1
                if os.WIFSIGNALED(status):
                    result.killed_mid_run += 1
                elif os.WEXITSTATUS(status) != 0:
                    result.violations += 1
                    result.notes.append(f"VIOLATION round {round_}: a writer failed on its own")
            judged: list[tuple[str, frozenset[RolloutState]]] = []
            for _pid, ids, ops, log in writers:
                done, in_flight = _logged(log)
                result.returned += done
                model = LedgerState()
                for op in ops[:done]:
                    model, _ = step(model, op)
                for rollout_id in ids:
                    if in_flight is not None and touches(ops[in_flight], rollout_id):
                        allowed = allowed_states(
                            [Span(op=ops[in_flight], returned=False)],
                            rollout_id,
                            initial=model.get(rollout_id),
                        )
                    else:
                        allowed = frozenset({model.get(rollout_id)})
                    judged.append((rollout_id, allowed))
            findings = check(directory)
            result.violations += sum(f.kind not in CRASH_FINDINGS for f in findings)
            for label in ("as left", "after check(fix=True)"):
                if label != "as left":
                    result.fixed += sum(f.fixed for f in check(directory, fix=True))
                ids = [rollout_id for rollout_id, _ in judged]
                observation = observe_directory(directory, ids, config=StoreConfig(stripes=STRIPES))
                states = dict(observation.states)
                result.violations += len(observation.mismatches)
                for rollout_id, allowed in judged:
                    result.checked += label == "as left"
                    if states.get(rollout_id) not in allowed:
                        result.violations += 1
                        result.notes.append(
                            f"VIOLATION round {round_} {label}: {rollout_id} {states.get(rollout_id)}"
                        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return result
