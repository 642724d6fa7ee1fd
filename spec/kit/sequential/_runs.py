"""What one run of the conformance kit has seen across its examples: counts, the handles it opened, and the
programs that failed (SPEC.md R-KIT-6, R-KIT-7, R-KIT-14; docs/kit.md §Whatever the ledger does).

A ``Counts`` is shared by every machine of one ``judge_ledger`` call (every example, every round):

* ``examples`` and ``steps``, for the verdict;
* the handles the factory opened, closed and could not close (it has no ``close``), and those still
  referenced somewhere (a weak reference, when the ledger's class allows one), so that a resource the
  ledger exhausted is reported with how many of its handles were open (``handles_note``);
* the program of each failing run, by its message (``failed``, ``program_of``), so that when Hypothesis
  finds the ledger behaving differently on a replay of the same program (its ``Flaky`` errors) the verdict
  still carries the program that failed first, as the machine ran it.

``logged`` is the rule decorator that writes each call into the machine's program as it runs, each argument
as Python source (``literal``), so that the program runs when pasted.

Not guaranteed: that a handle counted as referenced is the kit's doing (the ledger, or a traceback
Hypothesis keeps, may hold it); the descriptor count is read from ``/proc/self/fd`` and is absent where
there is no such directory.
"""

from __future__ import annotations

import functools
import math
import os
import resource
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from capture_ledger.spec.kit._calls import ResourceExhausted, error_text, exhausted

__all__ = ["Counts", "descriptors", "literal", "logged"]

_Rule = TypeVar("_Rule", bound=Callable[..., Any])
#: How many failing programs a run remembers (the latest ones); shrinking runs hundreds.
_KEPT = 256
_FD_DIR = Path("/proc/self/fd")


def descriptors() -> str:
    """The process's open descriptors and its soft limit, as words (``""`` where neither can be read)."""
    try:
        count = f"{len(os.listdir(_FD_DIR))} descriptors open in the process"
    except OSError:  # no /proc, or no descriptor left to list it with
        count = ""
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return count
    limit = "no limit" if soft == resource.RLIM_INFINITY else f"a soft limit of {soft}"
    return f"{count}, {limit}" if count else f"{limit} on descriptors"


@dataclass(slots=True)
class Counts:
    """What a run's machines did (shared by every example and round of one ``judge_ledger`` call).

    Attributes:
        examples: machines built.
        steps: rule calls run.
        opened: handles the factory returned.
        closed: handles whose ``close()`` returned.
        unclosable: handles dropped without a ``close`` to call.
    """

    examples: int = 0
    steps: int = 0
    opened: int = 0
    closed: int = 0
    unclosable: int = 0
    _alive: list[weakref.ref[Any]] = field(default_factory=list)
    _failures: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)

    def opened_one(self, ledger: object) -> None:
        """Count a handle the factory returned (and follow it weakly, when its class allows)."""
        self.opened += 1
        try:
            self._alive.append(weakref.ref(ledger))
        except TypeError:  # a class with __slots__ and no __weakref__: counted, not followed
            return
        if len(self._alive) > 64 and len(self._alive) > 2 * self.referenced():
            self._alive = [ref for ref in self._alive if ref() is not None]

    def referenced(self) -> int:
        """Handles the kit opened that are still referenced (among those it can follow)."""
        return sum(1 for ref in self._alive if ref() is not None)

    def handles_note(self, in_example: int) -> str:
        """How many handles were open, in words, for a verdict on an exhausted resource."""
        not_closed = self.opened - self.closed
        parts = [
            f"{in_example} handle(s) open in this example",
            f"{self.opened} opened in this run, {self.closed} closed by close()",
        ]
        if self.unclosable:
            parts.append(f"{self.unclosable} dropped without close() (the ledger has none)")
        parts.append(f"{not_closed} never closed, {self.referenced()} of them still referenced")
        found = descriptors()
        return "; ".join(parts + ([found] if found else []))

    def exhaustion(
        self, what: str, error: BaseException | None, program: list[str], in_example: int
    ) -> ResourceExhausted | None:
        """The ``ResourceExhausted`` to raise when ``error`` (raised by the call ``what``) says a resource
        ran out (``calls.exhausted``), with the program and how many handles were open; else ``None``."""
        resource = exhausted(error)
        if resource is None or error is None:
            return None
        stop = ResourceExhausted(what, resource, error_text(error))
        stop.program = tuple(program)
        stop.detail = self.handles_note(in_example)
        return stop

    def failed(self, requirement: str, message: str, program: tuple[str, ...]) -> None:
        """Remember the program of a failing run under its verdict's message."""
        self._failures.pop(message, None)
        self._failures[message] = (requirement, program)
        if len(self._failures) > _KEPT:
            del self._failures[next(iter(self._failures))]

    def program_of(self, message: str | None) -> tuple[str, str, tuple[str, ...]] | None:
        """``(requirement, message, program)`` of the latest failing run with ``message`` (any message when
        ``None``), or ``None`` when no run failed."""
        if message is not None and message in self._failures:
            requirement, program = self._failures[message]
            return requirement, message, program
        if message is None and self._failures:
            last = next(reversed(self._failures))
            return self._failures[last][0], last, self._failures[last][1]
        return None

    def forget_failures(self) -> None:
        """Start a new round: its flakiness is judged on its own runs."""
        self._failures.clear()


def literal(value: object) -> str:
    """``repr(value)`` as Python source that evaluates to it, for the values the kit's strategies draw:
    ``float('nan')`` and ``float('inf')`` where ``repr`` prints ``nan`` and ``inf``, inside lists, tuples
    and dicts too."""
    if type(value) is float and not math.isfinite(value):
        return f"float({str(value)!r})"
    if type(value) is list:
        return "[" + ", ".join(literal(item) for item in value) + "]"
    if type(value) is tuple:
        items = [literal(item) for item in value]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if type(value) is dict:
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def logged(function: _Rule) -> _Rule:
    """Note each call of a rule or invariant as a line of the program, for a counterexample that
    Hypothesis does not print (a hung call, R-KIT-8; an exhausted resource, R-KIT-7; a flaky run,
    R-KIT-14), and count the rules run."""
    invariant_check = function.__name__.startswith("every_")

    @functools.wraps(function)
    def wrapper(self: Any, **arguments: Any) -> Any:
        shown = ", ".join(f"{name}={literal(value)}" for name, value in arguments.items())
        self._steps.append(f"state.{function.__name__}({shown})")
        if not invariant_check:
            self._counts.steps += 1
        return function(self, **arguments)

    return wrapper  # type: ignore[return-value]
