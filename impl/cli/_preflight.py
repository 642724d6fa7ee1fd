"""One way to fail: a target whose factory raises at the very first open is "cannot open the target",
for ``verify``, ``stress``, ``crash --target`` and ``check`` alike (docs/verdicts.md §One way to fail).

``open_once(target, options)`` loads the ``module:callable`` (a ``TargetError`` when it cannot be loaded),
opens one handle with it on a fresh scratch directory, before any operation and before any layer runs,
and closes it. When the factory raises (anything, a ``BaseException`` too), that is a ``UsageError``: the
dispatcher prints one line on standard error, ``capture-ledger COMMAND: cannot open target 'T': its
factory raised RuntimeError: ...``, and exits 2. A factory that opened once and raises later (on a second
handle, a reopened workspace, in a worker process) stays a verdict of the layer that met it (R-KIT-7).

A coroutine factory, and a coroutine ``close``, are awaited. The open is bounded by the kit's per-call
budget (``call_budget``, R-KIT-8): a factory that does not return within it is left to the layers, which
report the hang as their verdict; the preflight's thread is a daemon left behind. ``close`` is called
when the handle has one; what it does is not judged here (the kit judges it).

Not guaranteed: the wording of the message.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from capture_ledger.impl.cli._options import UsageError

__all__ = ["open_once"]


async def _settle(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _open_and_close(factory: Any, workspace: Path) -> None:
    handle = await _settle(factory(workspace))
    close = getattr(handle, "close", None)
    if callable(close):
        with contextlib.suppress(BaseException):  # close is the kit's to judge, not the preflight's
            await _settle(close())


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def open_once(target: str, options: dict[str, Any] | None = None) -> None:
    """Load ``target`` and open one handle with it on a scratch directory (see the module docstring).

    Args:
        target: ``module:callable``.
        options: keyword arguments for the factory.

    Raises:
        TargetError: the target cannot be loaded.
        UsageError: the factory raised when opening the first handle.
    """
    from capture_ledger.spec.kit import bind_options, call_budget, load_target

    factory = bind_options(load_target(target), dict(options or {}))
    raised: list[BaseException] = []
    workspace = Path(tempfile.mkdtemp(prefix="capture-ledger-preflight-"))

    def run() -> None:
        try:
            asyncio.run(_open_and_close(factory, workspace))
        except BaseException as error:
            raised.append(error)

    worker = threading.Thread(target=run, name="capture-ledger-preflight", daemon=True)
    worker.start()
    try:
        budget = call_budget()
    except ValueError as error:  # a malformed $CAPTURE_LEDGER_CALL_BUDGET: a usage mistake, exit 2
        raise UsageError(str(error)) from None
    worker.join(None if budget == float("inf") else budget)
    if worker.is_alive():
        return  # a hang: the layers report it (R-KIT-8); the scratch directory stays with the thread
    shutil.rmtree(workspace, ignore_errors=True)
    if raised:
        raise UsageError(f"cannot open target {target!r}: its factory raised {_one_line(raised[0])}")
