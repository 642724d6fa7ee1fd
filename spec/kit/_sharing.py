"""Whether handles of a ledger share its state: between two handles of one process, and across processes
(what ``check_target`` asks before it runs the kit with several handles and ``stress`` on processes).

Each probe runs in child processes on one fresh workspace: a handle records one row, another reads
``has_rows``. Coroutine factories and methods are awaited; handles are closed when they have ``close``.
Not guaranteed: that a ledger which shares one row shares everything (the kit and ``stress`` judge that).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

__all__ = ["shares_across_processes", "shares_between_handles"]

_PROBE = """
import asyncio, inspect, json, sys
from pathlib import Path
from capture_ledger.spec.kit import bind_options, load_target
mode, target, options, workspace = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), Path(sys.argv[4])
async def main():
    async def done(value):
        return await value if inspect.isawaitable(value) else value
    factory = bind_options(load_target(target), options)
    ledger = await done(factory(workspace))
    other = await done(factory(workspace)) if mode == "handles" else ledger
    if mode != "read":
        await done(ledger.record("capture-ledger-probe", {"model_call_id": "probe"}))
    answer = True if mode == "record" else bool(await done(other.has_rows("capture-ledger-probe")))
    for handle in {id(ledger): ledger, id(other): other}.values():
        close = getattr(handle, "close", None)
        if callable(close):
            await done(close())
    return answer
print(json.dumps(asyncio.run(main())))
"""


def _probe(modes: Sequence[str], target: str, options: dict[str, Any] | None) -> tuple[bool, str]:
    """Run the probe's ``modes`` in child processes, one after the other, on one fresh workspace."""
    with tempfile.TemporaryDirectory(prefix="capture-ledger-probe-") as where:
        answers = []
        for mode in modes:
            child = subprocess.run(
                [sys.executable, "-c", _PROBE, mode, target, json.dumps(options or {}), where],
                capture_output=True,
                text=True,
                check=False,
                timeout=120,
            )
            if child.returncode != 0:
                last = (child.stderr.strip().splitlines() or ["no output"])[-1]
                if "AttributeError" in last and ("record" in last or "has_rows" in last):
                    return False, "the ledger has no record or no has_rows to probe sharing with"
                return False, f"a handle in a child process could not {mode}: {last}"
            answers.append(child.stdout.strip().splitlines()[-1:])
    return answers[-1] == ["true"], ""


def shares_between_handles(target: str, options: dict[str, Any] | None = None) -> tuple[bool, str]:
    """Whether a row recorded through one handle is seen by a second handle on the same workspace, in one
    process (the kit's multi-handle runs and R-KIT-4 need it).

    Returns:
        ``(True, "")``, or ``(False, why)``.
    """
    shared, why = _probe(["handles"], target, options)
    if shared or why:
        return shared, why
    return False, "a second handle on one workspace does not see a row recorded through the first"


def shares_across_processes(target: str, options: dict[str, Any] | None = None) -> tuple[bool, str]:
    """Whether a row recorded through a handle in one process is seen by a handle in another process.

    Two child processes, one after the other, open a handle each on one fresh workspace: the first
    records a row, the second asks ``has_rows``. Coroutine factories and methods are awaited.

    Args:
        target: the ``module:callable`` factory.
        options: its keyword arguments.

    Returns:
        ``(True, "")``, or ``(False, why)``: the ledger lacks ``record`` or ``has_rows``, a child could not
        open or call it (its last line of error), or the second handle does not see the row (state held in
        memory, per process).
    """
    shared, why = _probe(["record", "read"], target, options)
    if shared or why:
        return shared, why
    return False, "a handle in another process does not see a row recorded in one (state held in memory)"
