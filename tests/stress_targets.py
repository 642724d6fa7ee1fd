"""Ledgers for tests/spec/kit/test_stress.py that only a process kill shows broken (SPEC.md R-CRASH-1,
R-CRASH-4).

Loaded by ``capture-ledger stress`` worker processes as ``tests.stress_targets:open_slow_rewrite`` (from the
repository root). Not a catalogued bug: its slip (a log rewritten in place, truncated and then written)
is ``dir_log_rewritten_in_place``'s, with a sleep between the truncation and the write so that a timer's
SIGKILL lands in that window in a round or two, not one in thousands (with one client: with several on one
hot ID the killed call is mostly waiting for another's lock, and the kill finds no truncated log).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from capture_ledger.spec.core.rows import canonical_json

from examples.directory_ledger import LOG, DirectoryLedger, Log, write_all

__all__ = ["SlowRewrite", "open_slow_rewrite"]

#: The truncated log's window. Ten times the kill timer's largest delay (3 ms), so that a record killed
#: within that delay of its start is killed inside it, and so long that a timer fired late on a loaded
#: machine still lands inside some record's window: most of a round is spent in it.
_WINDOW = 0.03


class SlowRewrite(DirectoryLedger):
    """R-CRASH-1: each record truncates the log, waits ``_WINDOW`` (30 ms), then writes every row back: a
    process killed in between leaves the log empty, and rows that had returned are gone."""

    def _append(self, directory: Path, log: Log, content: dict[str, Any]) -> None:
        self._make_directory(directory)
        data = b"".join((canonical_json(row) + "\n").encode() for row in [*log.rows, content])
        fd = os.open(directory / LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            time.sleep(_WINDOW)
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if not log.rows:
            self._sync_new_log(directory)


def open_slow_rewrite(workspace: Path) -> SlowRewrite:
    """``SlowRewrite`` (R-CRASH-1)."""
    return SlowRewrite(workspace)
