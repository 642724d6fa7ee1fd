"""A coroutine ledger's threaded crash workloads run on one shared event loop (SPEC.md §Crash, R-CRASH-1..4,
R-KIT-5; docs/crash-target.md §How it works).

The strace driver runs a workload's ``threads`` groups as tasks of one loop when the ledger is a coroutine
ledger by its shape (an awaitable from its factory, or a coroutine protocol method), never by its name: on
a loop per thread, handles sharing an ``asyncio.Lock`` deadlock (the lock binds to the first loop that
waits on it, and a release from another thread never wakes that loop), so the traced run hung until
strace's timeout. ``HeldLock`` below makes the deadlock certain (its lock is held across a 50 ms sleep):
the driver test fails by its timeout on a loop per thread. The traced tests show the example async ledger's
two threaded workloads recorded, every operation returned, the tasks' calls overlapping on one thread.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from capture_ledger.spec import RolloutRemoval
from capture_ledger.spec.core.model import Retire
from capture_ledger.spec.kit.crash import WORKLOADS, Invoke, Return
from capture_ledger.spec.kit.crash.strace import (
    RunPlan,
    Target,
    coroutine_ledger,
    record_target,
    tracing_problem,
)

ROOT = Path(__file__).resolve().parents[3]
ASYNC = "examples.async_ledger:open_ledger"

_LOCKS: dict[str, asyncio.Lock] = {}


class HeldLock:
    """A coroutine ledger opened by a plain factory: ``retire`` holds a lock its workspace's handles share
    across a 50 ms sleep, and logs ``start``/``end`` lines to ``events`` in the workspace."""

    def __init__(self, workspace: Path) -> None:
        self.events = workspace / "events"
        self.lock = _LOCKS.setdefault(str(workspace), asyncio.Lock())

    async def retire(self, rollout_ids: list[str]) -> RolloutRemoval:
        with self.events.open("a") as log:
            log.write(f"start {rollout_ids[0]}\n")
        async with self.lock:
            await asyncio.sleep(0.05)
        with self.events.open("a") as log:
            log.write(f"end {rollout_ids[0]}\n")
        return {"removed": [], "absent": list(rollout_ids)}


def open_held(workspace: Path) -> HeldLock:
    """``HeldLock``'s factory (not a coroutine: the methods' shape decides)."""
    return HeldLock(workspace)


class NamedAsync:
    """A plain ledger whose name says ``Async``: its shape, not its name, decides."""

    def retire(self, rollout_ids: list[str]) -> RolloutRemoval:
        return {"removed": [], "absent": list(rollout_ids)}


def test_the_ledgers_shape_decides_never_its_name() -> None:
    assert coroutine_ledger([HeldLock(Path("/nonexistent"))])
    assert not coroutine_ledger([NamedAsync()])
    assert coroutine_ledger([NamedAsync()], awaited=True)  # its factory returned an awaitable


def test_a_coroutine_ledgers_groups_share_one_loop_and_overlap(tmp_path: Path) -> None:
    """Three groups on handles sharing one lock finish (on a loop per thread: a hang, the timeout), and
    each group starts before the first ends: the tasks interleave at their awaits."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    plan = RunPlan(
        target=f"tests.spec.kit.test_crash_async:{open_held.__name__}",
        workspace=str(workspace),
        ops=(Retire(["r1"]), Retire(["r2"]), Retire(["r3"])),
        result=str(tmp_path / "result.json"),
        groups=((0,), (1,), (2,)),
    ).write(tmp_path / "plan.json")
    driver = "capture_ledger.spec.kit.crash.strace._driver"
    done = subprocess.run(
        [sys.executable, "-m", driver, str(plan)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    events = (workspace / "events").read_text().split()
    lines = [" ".join(events[i : i + 2]) for i in range(0, len(events), 2)]
    assert sorted(lines) == sorted(f"{kind} r{i}" for kind in ("start", "end") for i in (1, 2, 3))
    assert lines[:3] == ["start r1", "start r2", "start r3"], lines


@pytest.mark.parametrize("name", ["retires-share-syncs", "removals-share-syncs"])
def test_the_async_examples_threaded_workloads_are_recorded_on_one_thread(name: str, tmp_path: Path) -> None:
    """Recorded under strace: every operation returned, all on one thread, the second invoked before the
    first returned (before: the traced run hung until strace's 300 s timeout)."""
    if (problem := tracing_problem()) is not None:
        pytest.skip(problem)
    workload = WORKLOADS[name]
    recording = record_target(Target(target=ASYNC, cwd=ROOT), workload, tmp_path)
    invokes = [(i, e) for i, e in enumerate(recording.trace) if isinstance(e, Invoke)]
    returns = {e.op: i for i, e in enumerate(recording.trace) if isinstance(e, Return)}
    assert sorted(e.op for _, e in invokes) == list(range(len(workload.ops)))
    assert sorted(returns) == list(range(len(workload.ops)))
    assert not any(e.raised for e in recording.trace if isinstance(e, Return))
    assert len({e.thread for _, e in invokes}) == 1  # one loop, one thread
    first = next(i for i, e in invokes if e.op != 0)
    assert first < returns[0], recording.trace  # another group's call began before op 0 returned
