"""Calls into the code under study with a time budget: a hang becomes an outcome (docs/verdicts.md).

The checkers that study a store (the crash explorer, the interleaving scheduler) call code that may be
broken in any way: it may raise anything, or never return. ``BoundedCaller.call(fn)`` runs ``fn`` on a
daemon thread of the caller's own and waits at most ``budget`` seconds for it; the answer is
``Returned(value)``, ``Raised(error)`` or ``Hung(budget)``, never an exception of ``fn``'s and never a wait
longer than the budget. One thread serves call after call (handing a call to it costs tens of
microseconds, starting a thread per call costs ten times more); after a hang a new one is started.

Not guaranteed: that a thread which hung ever ends (Python cannot stop a thread). It is a daemon, so it
does not keep the interpreter alive, but whatever it holds (descriptors, locks, a directory it works in)
stays held, so a caller must stop sharing those with it. Nor that a call lasting about as long as the
budget is classified the same way twice: budgets are wall-clock and meant to be generous (seconds, far
above any healthy call), and what depends on them is a verdict, never a count.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["BoundedCaller", "Hung", "Outcome", "Raised", "Returned"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Returned(Generic[T]):
    """The call returned ``value``."""

    value: T


@dataclass(frozen=True, slots=True)
class Raised:
    """The call raised ``error`` (``KeyboardInterrupt`` and ``SystemExit`` are not caught)."""

    error: Exception

    def describe(self) -> str:
        """``TypeName: message``."""
        return f"{type(self.error).__name__}: {self.error}"


@dataclass(frozen=True, slots=True)
class Hung:
    """The call had not returned after ``budget`` seconds; its thread was left behind."""

    budget: float


#: What ``BoundedCaller.call`` answers.
Outcome = Returned[T] | Raised | Hung

_Request = tuple[Callable[[], object], "queue.SimpleQueue[Returned[object] | Raised]"]


def _serve(requests: queue.SimpleQueue[_Request | None]) -> None:
    while (request := requests.get()) is not None:
        call, reply = request
        try:
            reply.put(Returned(call()))
        except Exception as error:
            reply.put(Raised(error))


class BoundedCaller:
    """Runs calls one at a time on a daemon thread, each within ``budget`` seconds (module docstring).

    Args:
        budget: seconds to wait for each call.
        name: the worker thread's name (shown in stack dumps of a hung call).

    ``hangs`` counts the calls that did not return in time.
    """

    def __init__(self, budget: float, *, name: str = "bounded-call") -> None:
        self.budget = budget
        self.name = name
        self.hangs = 0
        self._requests: queue.SimpleQueue[_Request | None] | None = None

    def call(self, fn: Callable[[], T]) -> Outcome[T]:
        """Run ``fn`` and wait for it at most ``budget`` seconds.

        Returns:
            ``Returned`` with its value, ``Raised`` with its exception, or ``Hung``.
        """
        if self._requests is None:
            self._requests = queue.SimpleQueue()
            worker = threading.Thread(target=_serve, args=(self._requests,), name=self.name, daemon=True)
            worker.start()
        reply: queue.SimpleQueue[Returned[object] | Raised] = queue.SimpleQueue()
        self._requests.put((fn, reply))
        try:
            answer = reply.get(timeout=self.budget)
        except queue.Empty:
            self.hangs += 1
            self._requests.put(None)  # the abandoned thread ends if the call ever returns
            self._requests = None
            return Hung(self.budget)
        return answer  # type: ignore[return-value]  # Returned[object] holds fn's T

    def close(self) -> None:
        """Let the worker thread end (after the call it is running, if any)."""
        if self._requests is not None:
            self._requests.put(None)
            self._requests = None
