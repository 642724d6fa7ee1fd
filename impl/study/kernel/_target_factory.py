"""A ledger factory that marks the block log around each operation of any ledger, for the kernel study of a
traced target (SPEC.md §Crash, R-CRASH-1..4; docs/crash-target.md §On the real kernel).

``open_marked(workspace, target=..., options=..., control=...)`` runs inside the traced driver child
(``spec.kit.crash.strace``'s, which imports it by name as it imports any target). The first handle a
process opens first makes the workspace durable (``syncfs``: the baseline the models start from is the
disk's) and writes ``START`` to the block-log daemon's control file; then it opens the real target's
handle through its factory and returns a ``MarkedLedger`` around it. Each protocol method of the proxy
writes ``I <tid> <n>`` to the control file when it is entered and ``R <tid> <n>`` when its call (awaited,
for a coroutine method) has finished, ``n`` counting the calls on that thread; when the last handle of the
process is closed, ``END``. The control file lies outside the workspace, so strace's parser gives its writes
no effect; ``syncfs`` is one ``Syncfs`` effect before the first operation (everything is durable there
already).

Not guaranteed: anything about a ledger that calls its own protocol methods on the proxy (only the driver
holds it), or one whose ``close`` the driver never reaches (then no ``END``: the recorder refuses the run).
"""

from __future__ import annotations

import ctypes
import inspect
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from capture_ledger.spec.kit import load_target

__all__ = ["FACTORY", "PROTOCOL", "MarkControl", "MarkedLedger", "open_marked"]

#: The ``module:callable`` of ``open_marked``, as the driver imports it.
FACTORY = "capture_ledger.impl.study.kernel._target_factory:open_marked"
#: The methods the proxy marks around.
PROTOCOL = ("record", "record_failure", "admit", "manifest", "has_rows", "retire", "delete")


class MarkControl:
    """The block-log daemon's control file (any file: the marks are its writes), opened once per process;
    per-thread call counters; open handles."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        self.lock = threading.Lock()
        self.calls: dict[int, int] = {}
        self.open = 0

    def mark(self, text: str) -> None:
        os.write(self.fd, f"MARK {text}".encode())

    def next_call(self) -> tuple[int, int]:
        tid = threading.get_native_id()
        with self.lock:
            number = self.calls.get(tid, 0)
            self.calls[tid] = number + 1
        return tid, number


_control: MarkControl | None = None


def _start(workspace: Path, control: str) -> MarkControl:
    global _control  # noqa: PLW0603 - one control file per driver process
    if _control is None:
        fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if ctypes.CDLL(None, use_errno=True).syncfs(fd) != 0:
                raise OSError(ctypes.get_errno(), f"syncfs {workspace}")
        finally:
            os.close(fd)
        _control = MarkControl(control)
        _control.mark("START")
    return _control


class MarkedLedger:
    """The target's handle behind a proxy that marks the block log around every protocol call."""

    def __init__(self, inner: Any, control: MarkControl) -> None:
        self._inner = inner
        self._control = control
        self._closed = False

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name not in PROTOCOL or not callable(value):
            return value
        return self._marked(value)

    def _marked(self, method: Callable[..., Any]) -> Callable[..., Any]:
        control = self._control
        if inspect.iscoroutinefunction(method):
            # Stays a coroutine function, so that the driver, which tells a coroutine ledger by its
            # methods' shape, runs it on one event loop as it would the target's own handle.
            async def call_async(*args: Any, **kwargs: Any) -> Any:
                tid, number = control.next_call()
                control.mark(f"I {tid} {number}")
                try:
                    return await method(*args, **kwargs)
                finally:
                    control.mark(f"R {tid} {number}")

            return call_async

        def call(*args: Any, **kwargs: Any) -> Any:
            tid, number = control.next_call()
            control.mark(f"I {tid} {number}")
            try:
                value = method(*args, **kwargs)
            except BaseException:
                control.mark(f"R {tid} {number}")
                raise
            if not inspect.isawaitable(value):
                control.mark(f"R {tid} {number}")
                return value

            async def settle() -> Any:
                try:
                    return await value
                finally:
                    control.mark(f"R {tid} {number}")

            return settle()

        return call

    def close(self) -> Any:
        """Close the target's handle (when it has ``close``); ``END`` after the process's last one."""
        if self._closed:
            return None
        self._closed = True
        close = getattr(self._inner, "close", None)
        try:
            value = close() if callable(close) else None
        except BaseException:
            self._closed_one()
            raise
        if not inspect.isawaitable(value):
            self._closed_one()
            return value

        async def settle() -> Any:
            try:
                return await value
            finally:
                self._closed_one()

        return settle()

    def _closed_one(self) -> None:
        control = self._control
        with control.lock:
            control.open -= 1
            last = control.open == 0
        if last:
            control.mark("END")


def open_marked(workspace: Path, *, target: str, control: str, options: dict[str, Any] | None = None) -> Any:
    """Open ``target``'s handle on ``workspace`` behind a ``MarkedLedger`` (see the module docstring).

    Args:
        workspace: the directory the driver gives every handle.
        target: the real ledger's ``module:callable``.
        control: the block-log daemon's control file.
        options: keyword options for the real factory.

    Returns:
        The proxy, or an awaitable of it when the real factory returns an awaitable.
    """
    marks = _start(Path(workspace), control)
    factory = load_target(target)
    with marks.lock:
        marks.open += 1
    opened = factory(Path(workspace), **(options or {}))
    if not inspect.isawaitable(opened):
        return MarkedLedger(opened, marks)

    async def settle() -> MarkedLedger:
        return MarkedLedger(await opened, marks)

    return settle()
