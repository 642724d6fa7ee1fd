"""``FileLineageStore`` shared by real processes (SPEC.md R-STORE-2, R-CONC-1..3, R-WRITE-4).

- Processes started with different ``PYTHONHASHSEED`` agree on every rollout's lock stripe (R-STORE-2).
- Stripe locks exclude other processes and other threads: a read-modify-write of a shared file under the
  lock loses no increment (the property itself, not a proxy).
- Several writer processes record into one directory while another process retires and deletes: no
  ledger of a retired rollout ever exists again after its retire returned (R-CONC-2), a write that started
  after that retire returned is never acknowledged as appended, and every acknowledged write to a rollout
  nobody removed is in its manifest, in each writer's order.

Each test runs a few seconds; the processes are plain ``python`` children running a script.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.spec.core.errors import RolloutRetiredError

PYTHON = sys.executable
IDS = [f"roll-{i:03d}.a" for i in range(200)]


def _run(script: str, *args: str, seed: str = "0") -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    # Silence the discarded-write warnings: a writer logs thousands of them, and an undrained stderr pipe
    # would fill and block it. Errors still reach stderr through the traceback.
    code = "import logging; logging.getLogger('capture_ledger').setLevel(logging.ERROR)\n"
    return subprocess.Popen(
        [PYTHON, "-c", code + textwrap.dedent(script), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(process: subprocess.Popen[str], timeout: float = 60) -> str:
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return out


SLOTS = """
import json, sys
from capture_ledger.impl.store.locks import rollout_slot
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
directory, writer, stop, ids = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
store = FileLineageStore(directory, stripes=8, cache_rollouts=16)
acks = []
n = 0
import os
while not os.path.exists(stop):
    rollout_id = ids[n % len(ids)]
    call = f"{writer}-{n}"
    before = store.statistics().late_writes_discarded
    start = time.monotonic()
    store.record(rollout_id, {"model_call_id": call, "staging_key": f"{rollout_id}/{call}"})
    end = time.monotonic()
    if store.statistics().late_writes_discarded == before:
        acks.append([rollout_id, call, start, end])
        if len(acks) == 10:
            open(stop + "." + writer, "w").close()  # ready: the remover waits for every writer
    n += 1
store.close()
print(json.dumps(acks))
"""

REMOVER = """
import json, os, sys, time
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.spec.core.errors import RolloutRetiredError
directory, stop, retired, deleted = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
store = FileLineageStore(directory, stripes=8)
violations = []
writers = json.loads(sys.argv[5])
while not all(os.path.exists(stop + "." + w) for w in writers):  # every writer has made progress
    time.sleep(0.01)
store.retire(retired + deleted)
retired_at = time.monotonic()
def watch(ids, seconds):
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for rollout_id in ids:
            if os.path.exists(os.path.join(directory, rollout_id + ".lineage.jsonl")):
                violations.append(["ledger re-created", rollout_id, time.monotonic()])
            try:
                store.has_rows(rollout_id)
                violations.append(["reads as not retired", rollout_id, time.monotonic()])
            except RolloutRetiredError:
                pass
watch(retired + deleted, 0.8)
delete_started = time.monotonic()
store.delete(deleted)
deleted_at = time.monotonic()
watch(retired, 0.8)
open(stop, "w").close()
print(json.dumps({
    "retired_at": retired_at, "delete_started": delete_started, "deleted_at": deleted_at,
    "violations": violations,
}))
"""


def test_writers_racing_retire_and_delete_never_recreate_a_retired_ledger(tmp_path: Path) -> None:
    directory = tmp_path / "lineage"
    stop = str(tmp_path / "stop")
    retired, deleted, kept = IDS[0:6], IDS[6:12], IDS[12:18]
    everything = json.dumps(retired + deleted + kept)
    writers = [_run(WRITER, str(directory), f"w{n}", stop, everything, seed=str(n)) for n in range(3)]
    names = json.dumps([f"w{n}" for n in range(3)])
    remover = _run(REMOVER, str(directory), stop, json.dumps(retired), json.dumps(deleted), names, seed="9")
    report = json.loads(_finish(remover))
    acks = [ack for writer in writers for ack in json.loads(_finish(writer))]

    assert report["violations"] == []  # R-CONC-2, seen from another process while writers ran
    late = [a for a in acks if a[0] in retired and a[2] > report["retired_at"]]
    late += [
        a for a in acks if a[0] in deleted and report["retired_at"] < a[2] and a[3] < report["delete_started"]
    ]
    assert late == []  # R-WRITE-4: a write that started after the retire returned was discarded
    assert len(acks) > 30, "the writers barely ran; the race was not exercised"

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
    for rollout_id in deleted:  # R-DELETE-3: re-created after the delete by new writes, and only by them
        present = {r["model_call_id"] for r in fresh.manifest(rollout_id)["records"]}
        mine = [a for a in acks if a[0] == rollout_id]
        assert present <= {a[1] for a in mine if a[3] > report["retired_at"]}
        assert {a[1] for a in mine if a[2] > report["deleted_at"]} <= present
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
