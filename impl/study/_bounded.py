"""Calls into the code under study with a time budget: a hang becomes an outcome (docs/verdicts.md).

The checkers that study a store (the crash explorer, the interleaving scheduler) call code that may be
broken in any way: it may raise anything, or never return. ``BoundedCaller.call(fn)`` runs ``fn`` on a
daemon thread of the caller's own and waits at most ``budget`` seconds for it; the answer is
``Returned(value)``, ``Raised(error)`` or ``Hung(budget)``, never an exception of ``fn``'s and never a wait
longer than the budget. It is the conformance kit's ``CallRunner`` (``spec/kit/_calls.py``: one worker
thread serves call after call) with one difference: after a hang the caller starts a new worker and goes
on, since a study judges many independent images or schedules, each with its own store.

Not guaranteed: that a thread which hung ever ends (Python cannot stop a thread). It is a daemon, so it
does not keep the interpreter alive, but whatever it holds (descriptors, locks, a directory it works in)
stays held, so a caller must stop sharing those with it. Nor that a call lasting about as long as the
budget is classified the same way twice: budgets are wall-clock and meant to be generous (seconds, far
above any healthy call), and what depends on them is a verdict, never a count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from capture_ledger.spec.kit import CallHung, CallRunner

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
        self._runner = CallRunner(budget, name=name)

    def call(self, fn: Callable[[], T]) -> Outcome[T]:
        """Run ``fn`` and wait for it at most ``budget`` seconds.

        Returns:
            ``Returned`` with its value, ``Raised`` with its exception, or ``Hung``.
        """
        try:
            return Returned(self._runner.run(self.name, fn))
        except CallHung:
            self.hangs += 1
            self._runner = CallRunner(self.budget, name=self.name)  # the hung worker is abandoned
            return Hung(self.budget)
        except Exception as error:
            return Raised(error)

    def close(self) -> None:
        """Let the worker thread end (after the call it is running, if any)."""
        self._runner.close()
