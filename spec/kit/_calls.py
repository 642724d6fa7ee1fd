"""How the conformance kit calls the ledger under study: on a worker thread, with a budget per call
(SPEC.md R-KIT-5, R-KIT-7, R-KIT-8).

Every piece of the ledger's code that the kit runs -- the factory, each method, awaiting a coroutine,
``close``, and taking apart what a call returned or raised -- runs on one worker thread per conformance
machine (``CallRunner``), so that:

* whatever the ledger does becomes an ``Outcome``, a plain value: a return value copied into exact
  built-in types (anything else becomes an ``Opaque`` stand-in), or the exception it raised, of any class,
  ``BaseException`` included, with its text, and the ``WARNING`` messages it logged. The kit then compares
  plain data with the model, and no ledger code (``__eq__``, ``__repr__``, ``__iter__``, a log record's
  arguments) runs in the kit's own frames, where its errors would be mistaken for the kit's;
* a call that does not finish within the budget raises ``CallHung``, which the kit reports as a failure
  with the program that led to it. It derives from ``BaseException`` so that Hypothesis stops at once
  rather than re-running the example to shrink it: each re-run would wait out the budget again and leave
  one more thread behind. The hung thread cannot be killed; it is a daemon thread, abandoned, and the
  runner makes no further call (the handles are not closed). So each kit run leaves at most one thread;
* one thread serves all of a machine's calls, so a ledger that must be used from the thread that opened
  it (an ``sqlite3`` connection, say) works, and coroutine methods run on one event loop owned by it;
* a ``KeyboardInterrupt`` from the user (Ctrl-C, delivered to the main thread) still stops the kit,
  while one raised by the ledger (on the worker) is the ledger's outcome like any other exception.

The budget: ``DEFAULT_CALL_BUDGET`` (30 s, about a thousand times the slowest call measured, a file store
retire with its directory syncs on a loaded machine) unless ``CAPTURE_LEDGER_CALL_BUDGET`` names another
number of seconds (``inf`` for none), or the caller passes ``call_budget``.

A resource the ledger exhausted (``exhausted``: ``MemoryError``, an ``OSError`` of ``EMFILE``, ``ENFILE``,
``ENOMEM``, ``ENOSPC`` or ``EDQUOT``, a thread that cannot be started, anywhere in an exception's chain of
causes) raises ``ResourceExhausted`` in the machine, a ``BaseException`` for the same reason as
``CallHung``: exhaustion builds up across examples, so a re-run of the program would not reproduce it and
shrinking would only make Hypothesis report the run as flaky.

Not guaranteed: that an abandoned call stops; it may still run, and log, after the kit has reported it.
Handing a call to the worker costs tens of microseconds.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import logging
import math
import os
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "CALL_BUDGET_ENV",
    "DEFAULT_CALL_BUDGET",
    "CallHung",
    "CallRunner",
    "Opaque",
    "Outcome",
    "ResourceExhausted",
    "call_budget",
    "error_text",
    "exhausted",
    "plain",
]

#: Seconds a call of the ledger may take before the kit reports it as hung.
DEFAULT_CALL_BUDGET = 30.0
#: The environment variable that overrides ``DEFAULT_CALL_BUDGET`` (seconds, or ``inf`` for no budget).
CALL_BUDGET_ENV = "CAPTURE_LEDGER_CALL_BUDGET"
#: How deep ``plain`` copies nested lists and dicts; deeper values become ``Opaque``.
_MAX_DEPTH = 64
_LOGGER = "capture_ledger"

T = TypeVar("T")


def call_budget(value: float | None = None) -> float:
    """The per-call budget in seconds: ``value``, else ``$CAPTURE_LEDGER_CALL_BUDGET``, else 30.

    Raises:
        ValueError: the budget is not a positive number (``inf`` is allowed: no budget).
    """
    if value is None:
        text = os.environ.get(CALL_BUDGET_ENV, "").strip()
        try:
            value = float(text) if text else DEFAULT_CALL_BUDGET
        except ValueError:
            raise ValueError(f"{CALL_BUDGET_ENV}={text!r} is not a number of seconds") from None
    if math.isnan(value) or value <= 0:
        raise ValueError(f"the call budget must be a positive number of seconds, not {value!r}")
    return value


class CallHung(BaseException):  # not an error of the kit: a verdict that stops the search
    """A call of the ledger under study did not finish within the budget.

    A ``BaseException``, so that Hypothesis does not catch it to shrink (see the module docstring).
    ``program`` is filled in by the conformance machine with the steps that led to the call.
    """

    def __init__(self, what: str, budget: float) -> None:
        super().__init__(f"{what} did not return within {budget:g} s")
        self.what = what
        self.budget = budget
        self.program: tuple[str, ...] = ()


class ResourceExhausted(BaseException):  # a verdict that stops the search, as CallHung does
    """A call of the ledger (or the kit after the ledger's calls) ran out of a resource of the process.

    ``what`` is the call, ``resource`` what ran out (``exhausted``'s words), ``error`` the exception's
    ``"Class: message"``; ``program`` (the steps that led to the call) and ``detail`` (how many handles
    were open) are filled in by the conformance machine.
    """

    def __init__(self, what: str, resource: str, error: str) -> None:
        super().__init__(f"{what} raised {error}: {resource} exhausted")
        self.what = what
        self.resource = resource
        self.error = error
        self.program: tuple[str, ...] = ()
        self.detail = ""


#: The ``errno`` values that mean a resource of the process or the machine ran out, and their words.
_EXHAUSTED_ERRNOS = {
    errno.EMFILE: "file descriptors of the process (EMFILE)",
    errno.ENFILE: "file descriptors of the system (ENFILE)",
    errno.ENOMEM: "memory (ENOMEM)",
    errno.ENOSPC: "space on the device (ENOSPC)",
    errno.EDQUOT: "disk quota (EDQUOT)",
}


def exhausted(error: BaseException | None) -> str | None:
    """What resource ``error`` (or an exception in its chain of causes and contexts) says ran out, else
    ``None``. Reads only the exceptions' classes, ``errno`` attributes and ``args``: no code of theirs."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen and len(seen) < 16:
        seen.add(id(error))
        if isinstance(error, MemoryError):
            return "memory (MemoryError)"
        number = error.errno if isinstance(error, OSError) else None
        if type(number) is int and number in _EXHAUSTED_ERRNOS:
            return _EXHAUSTED_ERRNOS[number]
        first = error.args[0] if isinstance(error, RuntimeError) and error.args else None
        if type(first) is str and first.startswith("can't start new thread"):
            return "threads (can't start new thread)"
        error = error.__cause__ or error.__context__
    return None


@dataclass(frozen=True, slots=True)
class Opaque:
    """A stand-in for a returned value that is not made of exact JSON-like built-in types."""

    type_name: str
    text: str

    def __repr__(self) -> str:
        return f"<{self.type_name}: {self.text}>"


@dataclass(kw_only=True, frozen=True, slots=True)
class Outcome:
    """What one call of the ledger did, as plain data.

    ``value`` is the return value after ``plain``; ``error`` the exception raised (``None`` if it
    returned), ``error_text`` its ``"Class: message"``; ``warnings`` the ``WARNING`` messages logged on
    ``capture_ledger`` during the call, or ``problem`` when a logged record cannot be formatted.
    """

    value: object = None
    error: BaseException | None = None
    error_text: str = ""
    warnings: tuple[str, ...] = ()
    problem: str | None = None


def error_text(error: BaseException) -> str:
    """``"Class: message"`` for an exception of the ledger's, even one whose ``__str__`` fails."""
    try:
        return f"{type(error).__name__}: {error}"
    except BaseException:  # the exception's own __str__ failed
        return f"{type(error).__name__} (whose message cannot be printed)"


def _text(value: object) -> str:
    try:
        return repr(value)[:300]
    except BaseException as error:  # the ledger's repr; any failure is described
        return f"<{type(value).__name__} whose repr raised {type(error).__name__}>"


def plain(value: object, depth: int = 0) -> object:
    """``value`` copied into exact ``None``, ``bool``, ``int``, ``float``, ``str``, ``list``, ``tuple`` and
    ``dict`` with ``str`` keys; anything else (a subclass too) becomes an ``Opaque`` naming it.

    Runs only ``type()`` checks and the built-in types' own iteration, so it calls no code of the value's.
    """
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if depth < _MAX_DEPTH:
        if kind is list or kind is tuple:
            return kind(plain(item, depth + 1) for item in value)  # type: ignore[attr-defined]
        if kind is dict and all(type(key) is str for key in value):  # type: ignore[attr-defined]
            return {key: plain(item, depth + 1) for key, item in value.items()}  # type: ignore[attr-defined]
    return Opaque(kind.__name__, _text(value))


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class CallRunner:
    """Runs the calls of one conformance machine on one worker thread, each within ``budget`` seconds.

    Args:
        budget: seconds per call (``math.inf``: wait for ever).
        name: the worker thread's name (shown in stack dumps of a hung call).
    """

    def __init__(self, budget: float, *, name: str = "capture-ledger-kit-call") -> None:
        self.budget = budget
        self.name = name
        self.hung: CallHung | None = None
        self._abandoned = False
        self._ready = threading.Lock()
        self._ready.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._job: Callable[[], Any] | None = None
        self._result: tuple[bool, Any] = (True, None)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.Runner | None = None  # used on the worker thread only

    @property
    def usable(self) -> bool:
        """Whether calls may still be made: no call hung, none was interrupted."""
        return not self._abandoned

    def run(self, what: str, job: Callable[[], T]) -> T:
        """Run ``job`` on the worker thread and return what it returns.

        Args:
            what: the call, for the message of ``CallHung``.
            job: kit code that calls the ledger and catches what the ledger raises.

        Raises:
            CallHung: ``job`` did not finish within the budget, or an earlier call hung.
            Exception: what ``job`` itself raised (an error of the kit), re-raised here.
        """
        if self.hung is not None:
            raise self.hung
        if self._abandoned:
            raise RuntimeError("the kit's calls were interrupted; this machine makes no more calls")
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
            self._thread.start()
        self._job = job
        self._ready.release()
        try:
            finished = self._done.acquire(timeout=-1 if math.isinf(self.budget) else self.budget)
        except BaseException:
            self._abandon()  # Ctrl-C while the worker runs: it is left to finish on its own
            raise
        if not finished:
            self._abandon()
            self.hung = CallHung(what, self.budget)
            raise self.hung
        ok, value = self._result
        if not ok:
            raise value
        result: T = value
        return result

    def await_value(self, value: Any) -> Any:
        """On the worker: ``value`` awaited on this runner's event loop if it is awaitable (R-KIT-5)."""
        if not inspect.isawaitable(value):
            return value
        if self._loop is None:
            self._loop = asyncio.Runner()

        async def wait() -> Any:
            return await value

        coroutine: Coroutine[Any, Any, Any] = wait()
        return self._loop.run(coroutine)

    def outcome(self, call: Callable[[], Any]) -> Outcome:
        """On the worker: run one ledger ``call`` (awaited), capturing its warnings, as an ``Outcome``."""
        handler = _Warnings()
        logger = logging.getLogger(_LOGGER)
        logger.addHandler(handler)
        try:
            try:
                value: Any = plain(self.await_value(call()))
                error: BaseException | None = None
            except BaseException as raised:  # every exception of the ledger is its outcome
                value, error = None, raised
        finally:
            logger.removeHandler(handler)
        messages: list[str] = []
        problem = None
        for record in handler.records:
            try:
                messages.append(str(record.getMessage()))
            except BaseException as failed:  # the ledger's format arguments
                problem = f"logged a warning that cannot be formatted ({type(failed).__name__}: {failed})"
        text = "" if error is None else error_text(error)
        return Outcome(value=value, error=error, error_text=text, warnings=tuple(messages), problem=problem)

    def close(self) -> None:
        """Close the event loop and end the worker thread, unless a call hung or was interrupted."""
        if self._thread is None or self._abandoned:
            return
        self.run("closing the kit's event loop", self._close_loop)
        self._job = None
        self._ready.release()  # with no job: the worker ends
        self._thread.join()
        self._thread = None

    def _abandon(self) -> None:
        # No job: once the worker is done with the call it is in (if ever), it ends.
        self._abandoned = True
        self._job = None
        self._ready.release()

    def _close_loop(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def _serve(self) -> None:
        while True:
            self._ready.acquire()
            job = self._job
            if job is None:
                return
            try:
                self._result = (True, job())
            except BaseException as error:  # handed to the caller's thread
                self._result = (False, error)
            self._done.release()
