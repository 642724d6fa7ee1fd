"""The traced child: open the target on the workspace and run a crash workload's operations between invoke
and return marks (SPEC.md §Crash, R-CRASH-1..4; docs/crash-target.md §The driver).

``python -m capture_ledger.spec.kit.crash.strace._driver PLAN.json`` reads a ``plan.RunPlan``, imports the
target's factory (the working directory first on ``sys.path``, as ``capture-ledger verify`` does) and calls it
with the workspace (and the plan's keyword options). Before and after each operation it writes a mark to a
descriptor on ``/dev/null`` opened once with ``O_CLOEXEC`` — ``CL-INVOKE <i> <label>`` and ``CL-RETURN <i>
ok|raised <outcome>`` — one ``write`` each, which strace shows in order with the thread's file calls; the
parser turns them into ``Invoke``/``Return``. A method that returns an awaitable is awaited on the calling
thread's own event loop, so sync and async ledgers both run. Each thread of a plan with ``groups`` (or a
parked operation) gets its own handle, opened on the main thread before any operation starts; the handles are
closed at the end (``close``, awaited if need be, when the ledger has one). A *coroutine ledger* (its factory
returned an awaitable, or a protocol method of its handle is a coroutine function: the ledger's shape, never
its name) runs a plan's ``groups`` as tasks of one event loop on the main thread instead, one task per group
and handle, all started together: its handles may share loop-bound state (an ``asyncio.Lock``), on which
several threads' loops deadlock, and its concurrency is its tasks' interleaving at their awaits; every
group's marks then come from that one thread, in the order the tasks ran. A handle with a method named
``SCHEDULED_THREAD`` (``capture_ledger_thread``: only our own store as the cross-check schedules it,
``factories.ScheduledStore``) is given its thread's operations as ``(operation, perform)`` pairs and runs them
itself, each ``perform`` writing the marks around the call, so that the marks fall inside the turns of its
scheduler; any other ledger's threads run their operations as the OS interleaves them.

A parked operation (``plan.Parked``): the others' thread first makes the planned number of calls of the
parking syscall on ``/dev/null`` (strace counts per thread, and holds the last of those), then the parked
operation starts on its own thread; once that thread has sat in a tracing stop for ``_STOPPED`` seconds
(``/proc/self/task/<tid>/stat``: strace is holding it at the planned call), the others run; the parked one
finishes when strace lets it go.

The result file holds ``{"error": str | null, "outcomes": [...]}``; exit status 3 when the factory could not
be imported or called (the error says why).

Not guaranteed: that a parked thread is seen stopped at the planned call rather than at another call held
as long (the recorder checks the trace afterwards); a parked operation of a coroutine ledger runs on a
thread and loop of its own, as any ledger's, so a coroutine ledger whose parked and other operations meet on
loop-bound state may hang there until strace's timeout; a coroutine ledger's groups overlap only where its
coroutines await (a blocking call inside one holds every group).
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from capture_ledger.spec.concurrency.history import apply_operation
from capture_ledger.spec.core.protocol import OPERATIONS
from capture_ledger.spec.kit._targets import load_target
from capture_ledger.spec.kit.crash.strace._plan import Parked, RunPlan

__all__ = ["SCHEDULED_THREAD", "coroutine_ledger", "main"]

#: The method by which a handle runs its thread's operations itself (the cross-check's scheduled store).
SCHEDULED_THREAD = "capture_ledger_thread"

#: How long a parked thread must sit in a tracing stop before the others run.
_STOPPED = 0.1
_LIMIT = 4096


class _Marks:
    """The ``/dev/null`` descriptor the marks are written to."""

    def __init__(self) -> None:
        self.fd = os.open("/dev/null", os.O_WRONLY | os.O_CLOEXEC)

    def write(self, kind: str, text: str) -> None:
        os.write(self.fd, f"CL-{kind} {text}"[:_LIMIT].encode("utf-8", "replace"))


class _Loop:
    """A thread's own event loop, made on first need."""

    def __init__(self) -> None:
        self.runner: asyncio.Runner | None = None

    def settle(self, value: Any) -> Any:
        if not inspect.isawaitable(value):
            return value

        async def wait() -> Any:
            return await value

        return self.run(wait())

    def run(self, coroutine: Any) -> Any:
        """Run ``coroutine`` to its end on this loop."""
        if self.runner is None:
            self.runner = asyncio.Runner()
        return self.runner.run(coroutine)

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()


def _describe(value: object) -> str:
    return repr(value).replace("\n", " ")[:1000]


def _returned(marks: _Marks, index: int, value: object, outcomes: list[Any]) -> None:
    marks.write("RETURN", f"{index} ok {_describe(value)}")
    outcomes[index] = {"returned": _describe(value)}


def _raised(marks: _Marks, index: int, error: Exception, outcomes: list[Any]) -> None:
    marks.write("RETURN", f"{index} raised {type(error).__name__}: {error}")
    outcomes[index] = {"raised": f"{type(error).__name__}: {error}"}


def _run(plan: RunPlan, marks: _Marks, index: int, ledger: Any, *, loop: _Loop, outcomes: list[Any]) -> None:
    op = plan.ops[index]
    marks.write("INVOKE", f"{index} {_describe(op)}")
    try:
        value = loop.settle(apply_operation(ledger, op))
    except Exception as error:
        _raised(marks, index, error, outcomes)
    else:
        _returned(marks, index, value, outcomes)


async def _run_task(plan: RunPlan, marks: _Marks, index: int, ledger: Any, outcomes: list[Any]) -> None:
    """``_run`` as a task of the one shared loop: the marks and the call in one step, then the await."""
    op = plan.ops[index]
    marks.write("INVOKE", f"{index} {_describe(op)}")
    try:
        value = apply_operation(ledger, op)
        if inspect.isawaitable(value):
            value = await value
    except Exception as error:
        _raised(marks, index, error, outcomes)
    else:
        _returned(marks, index, value, outcomes)


def coroutine_ledger(handles: Sequence[Any], *, awaited: bool = False) -> bool:
    """Whether the ledger is a coroutine ledger by its shape: its factory returned an awaitable
    (``awaited``), or a protocol method of one of ``handles`` is a coroutine function."""
    if awaited:
        return True
    for handle in handles:
        for name in OPERATIONS:
            try:
                method = getattr(handle, name, None)
            except Exception:  # the handle's __getattr__ raised: no such method to call
                continue
            if inspect.iscoroutinefunction(method):
                return True
    return False


def _consume(syscall: str, count: int, fd: int) -> None:
    """Make ``count`` calls of ``syscall`` on ``fd`` (``/dev/null``): strace counts them for this thread."""
    libc = ctypes.CDLL(None, use_errno=True)
    for _ in range(count):
        if syscall == "flock":
            libc.flock(fd, 8)  # LOCK_UN: nothing to release
        elif syscall == "fcntl":
            libc.fcntl(fd, 1)  # F_GETFD
        else:
            getattr(libc, syscall)(fd)  # fsync, fdatasync (EINVAL on /dev/null), syncfs


def _stopped(tid: int) -> bool:
    """Whether thread ``tid`` of this process sits in a tracing stop."""
    try:
        stat = Path(f"/proc/self/task/{tid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] in ("t", "T")


def _thread(target: Callable[[], None], name: str) -> threading.Thread:
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def _run_parked(
    plan: RunPlan, parked: Parked, marks: _Marks, open_handle: Callable[[], Any], outcomes: list[Any]
) -> list[Any]:
    others = [i for i in range(len(plan.ops)) if i != parked.op]
    handles = [open_handle(), open_handle()]
    consumed, go = threading.Event(), threading.Event()
    tids: dict[str, int] = {}

    def run_parked() -> None:
        tids["parked"] = threading.get_native_id()
        loop = _Loop()
        _run(plan, marks, parked.op, handles[0], loop=loop, outcomes=outcomes)
        loop.close()

    def run_others() -> None:
        if not parked.reference:
            _consume(parked.syscall, parked.count, marks.fd)
        consumed.set()
        go.wait()
        loop = _Loop()
        for index in others:
            _run(plan, marks, index, handles[1], loop=loop, outcomes=outcomes)
        loop.close()

    other = _thread(run_others, "others")
    consumed.wait()
    first = _thread(run_parked, "parked")
    if parked.reference:
        first.join()
    else:
        deadline = time.monotonic() + parked.delay * 3 + 5
        since: float | None = None
        while first.is_alive() and time.monotonic() < deadline:
            tid = tids.get("parked")
            now = time.monotonic()
            if tid is not None and _stopped(tid):
                since = since or now
                if now - since >= _STOPPED:
                    break
            else:
                since = None
            time.sleep(0.005)
    go.set()
    other.join()
    first.join()
    return handles


def _run_tasks(
    plan: RunPlan, marks: _Marks, handles: Sequence[Any], loop: _Loop, outcomes: list[Any]
) -> None:
    """A coroutine ledger's groups: one task per group and handle on ``loop``, started together."""

    async def group(indices: tuple[int, ...], ledger: Any) -> None:
        for index in indices:
            await _run_task(plan, marks, index, ledger, outcomes)

    async def every_group() -> None:
        await asyncio.gather(*(group(g, h) for g, h in zip(plan.groups, handles, strict=True)))

    loop.run(every_group())


def _run_groups(plan: RunPlan, marks: _Marks, handles: Sequence[Any], outcomes: list[Any]) -> None:
    barrier = threading.Barrier(len(plan.groups))

    def body(group: tuple[int, ...], ledger: Any) -> Callable[[], None]:
        def run() -> None:
            loop = _Loop()

            def perform(index: int) -> Callable[[], object]:
                return lambda: _run(plan, marks, index, ledger, loop=loop, outcomes=outcomes)

            steps = [(plan.ops[index], perform(index)) for index in group]
            barrier.wait()
            scheduled = getattr(ledger, SCHEDULED_THREAD, None)
            if callable(scheduled):
                scheduled(steps)
            else:
                for _, step in steps:
                    step()
            loop.close()

        return run

    threads = [
        _thread(body(g, h), f"group-{i}") for i, (g, h) in enumerate(zip(plan.groups, handles, strict=True))
    ]
    for thread in threads:
        thread.join()


def main(argv: list[str] | None = None) -> int:
    """Run the plan named by the one argument; the exit status (0, or 3 when the target cannot be opened)."""
    plan = RunPlan.from_json(Path((argv or sys.argv[1:])[0]).read_text(encoding="utf-8"))
    outcomes: list[Any] = [None] * len(plan.ops)
    result: dict[str, Any] = {"error": None, "outcomes": outcomes}
    marks = _Marks()
    loop = _Loop()
    try:
        factory = load_target(plan.target)
        awaited: list[bool] = []

        def open_handle() -> Any:
            opened = factory(Path(plan.workspace), **plan.options)
            awaited.append(inspect.isawaitable(opened))
            return loop.settle(opened)

        if plan.parked is not None:
            handles = _run_parked(plan, plan.parked, marks, open_handle, outcomes)
        elif plan.groups:
            handles = [open_handle() for _ in plan.groups]
            if coroutine_ledger(handles, awaited=any(awaited)):
                _run_tasks(plan, marks, handles, loop, outcomes)
            else:
                _run_groups(plan, marks, handles, outcomes)
        else:
            handles = [open_handle()]
            for index in range(len(plan.ops)):
                _run(plan, marks, index, handles[0], loop=loop, outcomes=outcomes)
    except Exception as error:
        result["error"] = f"{type(error).__name__}: {error}"
        Path(plan.result).write_text(json.dumps(result), encoding="utf-8")
        return 3
    for handle in handles:
        close = getattr(handle, "close", None)
        if callable(close):
            try:
                loop.settle(close())
            except Exception as error:  # a ledger that cannot close: noted, the run stands
                result.setdefault("close", []).append(f"{type(error).__name__}: {error}")
    loop.close()
    Path(plan.result).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
