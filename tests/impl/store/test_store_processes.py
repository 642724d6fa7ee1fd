"""``FileLineageStore`` shared by real processes (SPEC.md R-STORE-2, R-CONC-1..3, R-WRITE-4).

- Processes started with different ``PYTHONHASHSEED`` agree on every rollout's lock stripe (R-STORE-2).
- Stripe locks exclude other processes and other threads: a read-modify-write of a shared file under the
  lock loses no increment (the property itself, not a proxy).
- Several writer processes record into one directory while another process retires and deletes: no
  ledger of a retired rollout ever exists again after its retire returned (R-CONC-2), a write that started
  after that retire returned is never acknowledged as appended, and every acknowledged write to a rollout
  nobody removed is in its manifest, in each writer's order.

The processes are plain ``python`` children running a script. The racing test moves them through phases
over pipes: each process does a fixed number of operations per phase, and a phase starts when every
process has answered the one before, so every assertion is on what each process observed, not on time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.spec.core.errors import RolloutRetiredError

PYTHON = sys.executable
IDS = [f"roll-{i:03d}.a" for i in range(200)]


def _run(script: str, *args: str, seed: str = "0", stdin: bool = False) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    # Silence the discarded-write warnings: a writer logs hundreds of them, and an undrained stderr pipe
    # would fill and block it. Errors still reach stderr through the traceback.
    code = "import logging; logging.getLogger('capture_ledger').setLevel(logging.ERROR)\n"
    return subprocess.Popen(
        [PYTHON, "-c", code + textwrap.dedent(script), *args],
        env=env,
        stdin=subprocess.PIPE if stdin else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen[str], timeout: float = 60) -> str:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return out or ""


SLOTS = """
import json, sys
from capture_ledger.impl.store import rollout_slot
ids = json.loads(sys.argv[1])
print(json.dumps({"slots": [rollout_slot(i, 64) for i in ids], "hash": [hash(i) % 64 for i in ids]}))
"""


def test_processes_with_different_hash_seeds_agree_on_stripes() -> None:
    outputs = [json.loads(_finish(_run(SLOTS, json.dumps(IDS), seed=seed))) for seed in ("0", "1", "12345")]
    assert outputs[0]["slots"] == outputs[1]["slots"] == outputs[2]["slots"]
    # The check has teeth: Python's own hash() disagrees between these processes.
    assert outputs[0]["hash"] != outputs[1]["hash"]


COUNTER = """
import sys, threading
from capture_ledger.impl.store.fs import OsFileSystem
directory, rounds = sys.argv[1], int(sys.argv[2])
fs = OsFileSystem(directory, stripes=2)
def bump():
    for _ in range(rounds):
        fs.lock(1)
        try:
            got = fs.read("counter", 0)
            value = int(got[1] or b"0") if got else 0
            fd = fs.open_append("counter", create=True)
            fs.truncate(fd, 0)
            fs.write(fd, str(value + 1).encode())
            fs.close(fd)
        finally:
            fs.unlock(1)
threads = [threading.Thread(target=bump) for _ in range(2)]
for t in threads: t.start()
for t in threads: t.join()
"""


def test_stripe_locks_exclude_processes_and_threads(tmp_path: Path) -> None:
    rounds = 150
    children = [_run(COUNTER, str(tmp_path), str(rounds), seed=str(n)) for n in range(3)]
    for child in children:
        _finish(child)
    assert (tmp_path / "counter").read_text() == str(3 * 2 * rounds)


WRITER = """
import json, sys, time
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.study import StoreVariant
directory, writer, variant = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
ordering = StoreVariant(**variant).ordering()
store = FileLineageStore(directory, stripes=8, cache_rollouts=16, ordering=ordering)
n = 0
for line in sys.stdin:  # one phase per line: {"writes": k, "ids": [...]}; the answer is one line
    phase = json.loads(line)
    acks, discarded = [], []
    for i in range(phase["writes"]):
        rollout_id = phase["ids"][i % len(phase["ids"])]
        call = f"{writer}-{n}"
        n += 1
        before = store.statistics().late_writes_discarded
        start = time.monotonic()
        store.record(rollout_id, {"model_call_id": call, "staging_key": f"{rollout_id}/{call}"})
        end = time.monotonic()
        late = store.statistics().late_writes_discarded > before
        (discarded if late else acks).append([rollout_id, call, start, end])
    print(json.dumps({"acks": acks, "discarded": discarded}), flush=True)
store.close()
"""

REMOVER = """
import json, os, sys, time
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.spec.core.errors import RolloutRetiredError
directory = sys.argv[1]
store = FileLineageStore(directory, stripes=8)
for line in sys.stdin:  # {"do": "retire"/"delete", "ids": [...]}, or {"do": "watch", "rounds": k, ...}
    phase = json.loads(line)
    answer = {"invoked": time.monotonic()}
    if phase["do"] == "retire":
        store.retire(phase["ids"])
    elif phase["do"] == "delete":
        store.delete(phase["ids"])
    else:
        checks, violations = 0, []
        for _ in range(phase["rounds"]):
            for rollout_id in phase["ids"]:
                checks += 1
                if os.path.exists(os.path.join(directory, rollout_id + ".lineage.jsonl")):
                    violations.append(["ledger re-created", rollout_id])
                try:
                    store.has_rows(rollout_id)
                    violations.append(["reads as not retired", rollout_id])
                except RolloutRetiredError:
                    pass
        answer.update(checks=checks, violations=violations)
    answer["returned"] = time.monotonic()
    print(json.dumps(answer), flush=True)
store.close()
"""

#: Writes per writer per phase, and read rounds of the remover's watches: fixed counts, not time windows.
WRITES = 60
ROUNDS = 20


def _phase(commands: dict[subprocess.Popen[str], dict[str, object]]) -> dict[subprocess.Popen[str], Any]:
    """Send each process its command for the phase (all before any answer is read), then collect every
    answer: the processes run the phase concurrently, and the next phase starts after all of them ended."""
    for process, command in commands.items():
        assert process.stdin is not None
        process.stdin.write(json.dumps(command) + "\n")
        process.stdin.flush()
    answers = {}
    for process in commands:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, process.stderr.read() if process.stderr else "no answer"
        answers[process] = json.loads(line)
    return answers


def test_writers_racing_retire_and_delete_never_recreate_a_retired_ledger(tmp_path: Path) -> None:
    _race(tmp_path, variant={})


def test_the_race_catches_writers_without_the_fence_lookup(tmp_path: Path) -> None:
    """The writers' store skips the write-side fence lookup: a write after the retire re-creates the ledger,
    and the remover, watching from its own process, sees it."""
    with pytest.raises(AssertionError, match="R-CONC-2"):
        _race(tmp_path, variant={"fence_lookup_on_write": False})


def _race(tmp_path: Path, *, variant: dict[str, bool]) -> None:
    """Three writer processes (their store switched by ``variant``, FOR STUDY ONLY) and one remover, moved
    through five phases together (each process does a fixed number of operations per phase): writes to
    everything; writes racing the retire; writes to retired IDs while the remover watches them; writes
    racing the delete; writes after it."""
    directory = tmp_path / "lineage"
    retired, deleted, kept = IDS[0:6], IDS[6:12], IDS[12:18]
    writers = [
        _run(WRITER, str(directory), f"w{n}", json.dumps(variant), seed=str(n), stdin=True) for n in range(3)
    ]
    remover = _run(REMOVER, str(directory), seed="9", stdin=True)
    everything = retired + deleted + kept
    writes = {"writes": WRITES, "ids": everything}
    try:
        warm = _phase(dict.fromkeys(writers, writes))
        race = _phase({**dict.fromkeys(writers, writes), remover: {"do": "retire", "ids": retired + deleted}})
        gone = {"writes": WRITES, "ids": retired + deleted}
        after = _phase(
            {**dict.fromkeys(writers, gone), remover: {"do": "watch", "ids": gone["ids"], "rounds": ROUNDS}}
        )
        again = {"writes": WRITES, "ids": deleted + kept}
        race_delete = _phase({**dict.fromkeys(writers, again), remover: {"do": "delete", "ids": deleted}})
        back = {"writes": WRITES, "ids": deleted + retired}
        reuse = _phase(
            {**dict.fromkeys(writers, back), remover: {"do": "watch", "ids": retired, "rounds": ROUNDS}}
        )
    finally:
        for process in [*writers, remover]:
            _finish(process)  # closes its stdin: the process ends its loop

    # Every process did its fixed share: 3 writers x 5 phases x WRITES writes, two watches of ROUNDS rounds.
    for phase in (warm, race, after, race_delete, reuse):
        assert all(len(phase[w]["acks"]) + len(phase[w]["discarded"]) == WRITES for w in writers)
    assert warm and all(not warm[w]["discarded"] for w in writers)  # nothing was retired yet
    assert after[remover]["checks"] == ROUNDS * 12 and reuse[remover]["checks"] == ROUNDS * 6
    # R-CONC-2, seen from another process while writers ran: no retired ledger came back.
    seen = after[remover]["violations"] + reuse[remover]["violations"]
    assert seen == [], f"R-CONC-2 broken, seen by the remover: {seen[:3]}"
    # R-WRITE-4: after the retire returned, every write to its IDs was discarded; while it ran, each write
    # that started after it returned was.
    assert all(not after[w]["acks"] and len(after[w]["discarded"]) == WRITES for w in writers)
    retired_at = race[remover]["returned"]
    assert [
        a for w in writers for a in race[w]["acks"] if a[0] in retired + deleted and a[2] > retired_at
    ] == []
    # R-DELETE-3: after the delete returned, writes to its IDs are accepted again; retired ones stay gone.
    assert all(a[0] in deleted for w in writers for a in reuse[w]["acks"])
    assert all(d[0] in retired for w in writers for d in reuse[w]["discarded"])
    assert all(len(reuse[w]["acks"]) == WRITES // 2 for w in writers)

    acks = [a for phase in (warm, race, after, race_delete, reuse) for w in writers for a in phase[w]["acks"]]
    fresh = FileLineageStore(directory, stripes=8)
    for rollout_id in retired:
        assert not (directory / f"{rollout_id}.lineage.jsonl").exists()
        with pytest.raises(RolloutRetiredError):
            fresh.has_rows(rollout_id)
    for rollout_id in kept:  # R-CRASH-1's live half: every acknowledged write is there, in order
        calls = [r["model_call_id"] for r in fresh.manifest(rollout_id)["records"]]
        for writer in ("w0", "w1", "w2"):
            acked = [a[1] for a in acks if a[0] == rollout_id and a[1].startswith(writer + "-")]
            assert [c for c in calls if c.startswith(writer + "-")] == acked
    deleted_at = race_delete[remover]["returned"]
    for rollout_id in deleted:  # re-created after the delete by new writes, and only by them
        present = {r["model_call_id"] for r in fresh.manifest(rollout_id)["records"]}
        mine = [a for a in acks if a[0] == rollout_id]
        assert present <= {a[1] for a in mine if a[3] > retired_at}
        assert {a[1] for a in mine if a[2] > deleted_at} <= present
        assert {a[1] for w in writers for a in reuse[w]["acks"] if a[0] == rollout_id} <= present
    fresh.close()


def test_threads_sharing_handles_lose_no_row(tmp_path: Path) -> None:
    import threading

    handles = [FileLineageStore(tmp_path, stripes=2, cache_rollouts=4) for _ in range(2)]
    ids = ["t0", "t1", "t2"]

    def work(worker: int) -> None:
        store = handles[worker % 2]
        for n in range(40):
            store.record(ids[n % 3], {"model_call_id": f"w{worker}-{n}"})
            if n % 10 == 9:
                store.manifest(ids[(n + worker) % 3])

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for rollout_id in ids:
        calls = [r["model_call_id"] for r in handles[0].manifest(rollout_id)["records"]]
        assert sorted(calls) == sorted(
            f"w{w}-{n}" for w in range(4) for n in range(40) if n % 3 == ids.index(rollout_id)
        )
        for worker in range(4):  # each thread's rows in its own order
            mine = [c for c in calls if c.startswith(f"w{worker}-")]
            assert mine == sorted(mine, key=lambda c: int(c.split("-")[1]))
    for store in handles:
        store.close()
