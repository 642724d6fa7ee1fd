"""Running one round of a stress mix against handles of a ledger, every call recorded (SPEC.md R-CONC-1,
R-KIT-5, R-KIT-7, R-KIT-8, R-KIT-12).

``run_round`` opens ``handles`` handles on one workspace with the factory, then runs each client's
operations of every scene: on one thread per client for a synchronous ledger, or as one asyncio task per
client on one event loop when the factory or a method of the ledger is a coroutine function (R-KIT-5). The
clients of a scene start it together (a ``threading.Barrier`` or an ``asyncio.Barrier``), and client ``c``
calls handle ``c % handles``. Every call is stamped on entry and on return with one clock
(``time.monotonic_ns``, system-wide on one machine, so that the histories of several processes merge).

What a call did becomes a ``Call``: an ``Event`` whose result is the model's ``Result`` of the returned value
or exception (``history.observe``), or, when the ledger raised an exception no operation may raise or
returned a value of no operation's shape, an unreturned event (its effect is unknown) with the exception's
or value's text in ``raised``: the outcome the judge reports (R-KIT-7), never an error of the run. A call
still running after the per-call budget (``calls.call_budget``, R-KIT-8) ends the round: it is recorded
unreturned with ``hung`` set, the other clients stop after their current call, and the stuck thread is
abandoned (a daemon thread; it cannot be killed).

Not guaranteed: any interleaving (the OS and the event loop choose it); that an abandoned call stops; the
close of the handles (called when present, awaited when a coroutine, its errors ignored).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capture_ledger.spec.concurrency.history import Event, apply_operation, observe
from capture_ledger.spec.core.model import Operation
from capture_ledger.spec.core.protocol import OPERATIONS
from capture_ledger.spec.kit._calls import error_text
from capture_ledger.spec.kit.stress._mix import Scene

__all__ = ["Call", "Clock", "RoundRecord", "in_invocation_order", "monotonic", "run_round", "uses_coroutines"]

#: A clock shared by every client: nanoseconds, as a float.
Clock = Callable[[], float]


def monotonic() -> float:
    """``time.monotonic_ns()`` as a float: CLOCK_MONOTONIC, one clock for every process of the machine."""
    return float(time.monotonic_ns())


@dataclass(kw_only=True, frozen=True, slots=True)
class Call:
    """One recorded call.

    Attributes:
        event: the call as the linearizability checker reads it (unreturned when ``raised`` or ``hung``).
        raised: ``"Class: message"`` of an exception no operation may raise, or why the returned value fits
            no operation; empty otherwise.
        ended: when the call raised that exception (the clock's value), else ``None``.
        hung: the call had not returned within the per-call budget.
        handle: which handle made the call (``"<first client of its process>/<handle index>"``), or
            ``""`` when not known: two calls with one label went through one handle of one process.
    """

    event: Event
    raised: str = ""
    ended: float | None = None
    hung: bool = False
    handle: str = ""

    @property
    def finished(self) -> float | None:
        """When the call ended (it returned, or raised that exception); ``None`` if it never did."""
        return self.event.returned if self.event.returned is not None else self.ended


def in_invocation_order(calls: Iterable[Call]) -> list[Call]:
    """``calls`` in order of invocation (ties by client number)."""
    return sorted(calls, key=lambda call: (call.event.invoked, call.event.client))


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """What one round did: its calls (in order of invocation) and whether it was cut short.

    Attributes:
        calls: every call made, in order of invocation.
        setup: why the handles could not be opened (the factory raised, returned nothing, or hung), or
            ``None``.
    """

    calls: tuple[Call, ...]
    setup: str | None = None

    @property
    def hung(self) -> bool:
        """Whether a call hung."""
        return any(call.hung for call in self.calls)


def uses_coroutines(factory: Callable[..., Any], ledger: Any | None = None) -> bool:
    """Whether the factory or any protocol method of ``ledger`` is a coroutine function (R-KIT-5)."""
    if inspect.iscoroutinefunction(factory):
        return True
    if ledger is None:
        return False
    for name in OPERATIONS:
        try:
            method = getattr(ledger, name, None)
        except Exception:  # the ledger's __getattr__ raised
            continue
        if inspect.iscoroutinefunction(method):
            return True
    return False


class _Clients:
    """The state clients share with the watchdog: the calls made, the calls in flight, a stop flag."""

    def __init__(
        self,
        clock: Clock,
        client_base: int,
        observer: Callable[[Call], None] | None = None,
        between_scenes: Callable[[], bool] | None = None,
        handle_count: int = 1,
    ) -> None:
        self.handle_count = max(1, handle_count)
        self.clock = clock
        self.observer = observer
        self.between_scenes = between_scenes
        self.base = client_base
        self.lock = threading.Lock()
        self.calls: list[Call] = []
        self.current: dict[int, tuple[Operation, float]] = {}
        self.stop = threading.Event()
        self.ended = threading.Event()  # ``between_scenes`` said to end the round

    def meet(self) -> None:
        """Between scenes: ask ``between_scenes`` whether to go on."""
        if self.between_scenes is not None and not self.between_scenes():
            self.ended.set()

    def begin(self, client: int, op: Operation) -> float:
        invoked = self.clock()
        with self.lock:
            self.current[client] = (op, invoked)
        if self.observer is not None:
            begun = Event(client=self.base + client, op=op, invoked=invoked)
            call = Call(event=begun, handle=self.label(client))
            self.observer(call)
        return invoked

    def label(self, client: int) -> str:
        """The handle label of ``client``'s calls (``Call.handle``)."""
        return f"{self.base}/{client % self.handle_count}"

    def end(self, client: int, op: Operation, invoked: float, outcome: Any) -> None:
        returned = self.clock()
        number = self.base + client
        try:
            result = observe(op, outcome)
            event = Event(client=number, op=op, invoked=invoked, returned=returned, result=result)
            call = Call(event=event, handle=self.label(client))
        except Exception as problem:  # an exception no operation may raise, or a value of no shape
            text = error_text(outcome) if isinstance(outcome, BaseException) else str(problem)
            call = Call(
                event=Event(client=number, op=op, invoked=invoked),
                raised=text,
                ended=returned,
                handle=self.label(client),
            )
        with self.lock:
            self.current.pop(client, None)
            self.calls.append(call)
        if self.observer is not None:
            self.observer(call)

    def overdue(self, budget: float) -> bool:
        now = self.clock()
        with self.lock:
            return any(now - invoked > budget * 1e9 for _, invoked in self.current.values())

    def finish(self) -> tuple[Call, ...]:
        with self.lock:
            hung = [
                Call(event=Event(client=self.base + c, op=op, invoked=t), hung=True, handle=self.label(c))
                for c, (op, t) in self.current.items()
            ]
            calls = [*self.calls, *hung]
        return tuple(in_invocation_order(calls))


def _within(budget: float, job: Callable[[], Any]) -> tuple[str, Any]:
    """Run ``job`` on a daemon thread: ``("ok", value)``, ``("raised", text)`` or ``("hung", None)``."""
    box: list[tuple[str, Any]] = []

    def run() -> None:
        try:
            box.append(("ok", job()))
        except BaseException as error:  # the ledger's: any exception is its outcome
            box.append(("raised", error_text(error)))

    thread = threading.Thread(target=run, name="capture-ledger-stress-open", daemon=True)
    thread.start()
    thread.join(budget)
    return box[0] if box else ("hung", None)


def _close(ledger: Any) -> Any:
    close = getattr(ledger, "close", None)
    return close() if callable(close) else None


def _watch(
    clients: _Clients, threads: Sequence[threading.Thread], budget: float, abort: Callable[[], None]
) -> None:
    while any(thread.is_alive() for thread in threads):
        threads[0].join(0.02) if threads[0].is_alive() else time.sleep(0.02)
        if clients.overdue(budget):
            clients.stop.set()
            abort()
            for thread in threads:
                thread.join(min(budget, 1.0))
            return


def _run_threads(
    handles: Sequence[Any],
    scenes: Sequence[Scene],
    clients: _Clients,
    budget: float,
) -> None:
    count = len(scenes[0]) if scenes else 0
    barrier = threading.Barrier(count, action=clients.meet)

    def client(number: int) -> None:
        ledger = handles[number % len(handles)]
        for scene in scenes:
            if clients.stop.is_set():
                return
            try:
                barrier.wait(timeout=budget)
            except threading.BrokenBarrierError:
                return
            if clients.ended.is_set():
                return
            for op in scene[number]:
                invoked = clients.begin(number, op)
                try:
                    outcome: Any = apply_operation(ledger, op)
                except BaseException as error:  # the ledger's outcome, whatever its class
                    outcome = error
                clients.end(number, op, invoked, outcome)

    threads = [
        threading.Thread(target=client, args=(c,), name=f"capture-ledger-stress-{c}", daemon=True)
        for c in range(count)
    ]
    for thread in threads:
        thread.start()
    _watch(clients, threads, budget, barrier.abort)


def _run_tasks(
    factory: Callable[[Path], Any],
    workspace: Path,
    *,
    handle_count: int,
    scenes: Sequence[Scene],
    clients: _Clients,
    budget: float,
    opened: Sequence[Any] = (),
) -> str | None:
    count = len(scenes[0]) if scenes else 0
    setup: list[str] = []
    tasks: list[asyncio.Task[None]] = []
    loop_box: list[asyncio.AbstractEventLoop] = []

    async def open_one() -> Any:
        ledger = factory(workspace)
        return await ledger if inspect.isawaitable(ledger) else ledger

    async def main() -> None:
        loop_box.append(asyncio.get_running_loop())
        handles = list(opened)
        for _ in range(handle_count - len(handles)):
            try:
                handles.append(await asyncio.wait_for(open_one(), budget))
            except BaseException as error:  # the factory's outcome
                setup.append(f"the factory raised {error_text(error)}")
                return
        barrier = asyncio.Barrier(count)
        between = clients.between_scenes

        async def client(number: int) -> None:
            ledger = handles[number % len(handles)]
            for scene in scenes:
                if clients.stop.is_set():
                    return
                await barrier.wait()
                if between is not None:
                    if number == 0:
                        clients.meet()  # blocks the loop briefly: every client waits here anyway
                    await barrier.wait()
                    if clients.ended.is_set():
                        return
                for op in scene[number]:
                    invoked = clients.begin(number, op)
                    try:
                        outcome: Any = apply_operation(ledger, op)
                        if inspect.isawaitable(outcome):
                            outcome = await outcome
                    except BaseException as error:  # the ledger's outcome (a cancellation included)
                        outcome = error
                    clients.end(number, op, invoked, outcome)

        tasks.extend(asyncio.create_task(client(c)) for c in range(count))
        await asyncio.gather(*tasks, return_exceptions=True)
        for ledger in handles:
            try:
                closed = _close(ledger)
                if inspect.isawaitable(closed):
                    await closed
            except Exception:  # closing is not judged here
                pass

    def run() -> None:
        asyncio.run(main())

    thread = threading.Thread(target=run, name="capture-ledger-stress-loop", daemon=True)
    thread.start()

    def abort() -> None:
        if loop_box:
            for task in tasks:
                loop_box[0].call_soon_threadsafe(task.cancel)

    _watch(clients, [thread], budget, abort)
    return setup[0] if setup else None


def run_round(  # noqa: PLR0913 - one round's options, all keyword-only
    factory: Callable[[Path], Any],
    workspace: Path,
    scenes: Sequence[Scene],
    *,
    handles: int,
    budget: float,
    clock: Clock = monotonic,
    client_base: int = 0,
    asynchronous: bool | None = None,
    observer: Callable[[Call], None] | None = None,
    between_scenes: Callable[[], bool] | None = None,
) -> RoundRecord:
    """Run ``scenes`` against ``handles`` handles opened on ``workspace``, every call recorded.

    Args:
        factory: opens a handle on a workspace directory (a coroutine function is awaited).
        workspace: the directory, fresh for the round.
        scenes: the round's scenes (``mix.draw_round``), one column of operations per client.
        handles: handles to open; client ``c`` calls handle ``c % handles``.
        budget: seconds a call (or the factory) may take before the round ends as hung (R-KIT-8).
        clock: the shared clock.
        client_base: added to each client's number in the events (the clients of other processes).
        asynchronous: run as asyncio tasks; ``None`` decides by ``uses_coroutines``.
        observer: called with each call as it begins (unreturned) and as it ends (a journal, say).
        between_scenes: called once each time every client has reached the start of a scene, before
            any starts it (the processes of a stress run meet there too); ``False`` ends the round.

    Returns:
        The ``RoundRecord``; never raises for what the ledger does (R-KIT-7).
    """
    clients = _Clients(clock, client_base, observer, between_scenes, handle_count=handles)
    if asynchronous or (asynchronous is None and inspect.iscoroutinefunction(factory)):
        setup = _run_tasks(
            factory, workspace, handle_count=handles, scenes=scenes, clients=clients, budget=budget
        )
        return RoundRecord(clients.finish(), setup)
    opened: list[Any] = []
    for _ in range(handles):
        status, value = _within(budget, lambda: factory(workspace))
        if status != "ok":
            why = "did not return within the budget" if status == "hung" else f"raised {value}"
            return RoundRecord((), f"the factory {why}")
        opened.append(value)
    if asynchronous is None and uses_coroutines(factory, opened[0]):
        setup = _run_tasks(
            factory,
            workspace,
            handle_count=handles,
            scenes=scenes,
            clients=clients,
            budget=budget,
            opened=opened,
        )
        return RoundRecord(clients.finish(), setup)
    _run_threads(opened, scenes, clients, budget)
    if not clients.stop.is_set():
        for ledger in opened:
            _within(budget, functools.partial(_close, ledger))
    return RoundRecord(clients.finish())
