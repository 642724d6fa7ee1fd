"""The servers of a simulation: real ``capture-ledger serve`` processes on loopback, and what their lineage
directories hold (R-HTTP-1, R-STORE-2).

``Cluster`` starts one ``ServerProcess`` per server (in parallel; each with its own node-local directory,
``workers`` worker processes and the fake inference route of ``impl.simulate``) and stops every
one of them when it is left, whatever happened: an error, a timeout or Ctrl-C. ``measure`` reads a
directory as the end-of-run check does: ledger files and their bytes, fence files, anything else.

Not guaranteed: a port free between runs (each server binds a port the kernel picks); that a server
killed with SIGKILL leaves no worker behind (``ServerProcess.stop`` ends the server with SIGTERM, then
SIGKILL, and uvicorn's supervisor stops its workers on SIGTERM).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

from capture_ledger.impl.http.serving import ServeOptions
from capture_ledger.impl.simulate._servers import ServerProcess
from capture_ledger.impl.store import FENCE_SUFFIX, LEDGER_SUFFIX
from capture_ledger.impl.store.file_store import DEFAULT_GROUP_COMMIT

__all__ = ["EXTEND", "Cluster", "DirectoryState", "Server", "measure"]

#: The ``--extend`` hook that adds the fake inference route to every worker.
EXTEND = "capture_ledger.impl.simulate._inference:extend"


@dataclass(kw_only=True, frozen=True, slots=True)
class DirectoryState:
    """What a lineage directory holds (lock files aside)."""

    ledgers: int
    ledger_bytes: int
    fences: int
    ledger_names: tuple[str, ...]


def measure(directory: Path) -> DirectoryState:
    """Count the ledgers, their bytes and the fences in ``directory``.

    Args:
        directory: a lineage directory.

    Returns:
        Its state now; a file that vanishes while it is read is not counted.
    """
    ledgers: list[str] = []
    ledger_bytes = 0
    fences = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith(LEDGER_SUFFIX):
                try:
                    ledger_bytes += entry.stat().st_size
                except FileNotFoundError:
                    continue
                ledgers.append(entry.name.removesuffix(LEDGER_SUFFIX))
            elif entry.name.endswith(FENCE_SUFFIX):
                fences += 1
    return DirectoryState(
        ledgers=len(ledgers), ledger_bytes=ledger_bytes, fences=fences, ledger_names=tuple(sorted(ledgers))
    )


@dataclass(kw_only=True, frozen=True, slots=True)
class Server:
    """A running server of the cluster."""

    url: str
    directory: Path
    workers: int
    pid: int


class Cluster:
    """``count`` servers under ``root`` (``root/server-0``, ...), started on entry, stopped on exit."""

    def __init__(
        self,
        root: Path,
        *,
        count: int,
        workers: int,
        token: str,
        group_commit: bool = DEFAULT_GROUP_COMMIT,
        combine_removals: bool | Literal["auto"] = "auto",
        ledger: str | None = None,
    ) -> None:
        """Describe the servers; entering the context starts them.

        Args:
            root: the folder under which each server gets its own lineage directory.
            count: how many servers.
            workers: worker processes per server.
            token: the bearer token of every server.
            group_commit: the file store's ``group_commit`` in every worker.
            combine_removals: the file store's ``combine_removals`` in every worker.
            ledger: ``module:callable`` opening another ledger in each worker (``serve --ledger``); by
                default the file store.
        """
        options = ServeOptions(group_commit=group_commit, combine_removals=combine_removals, extend=EXTEND)
        self._processes = [
            ServerProcess(root / f"server-{k}", token=token, workers=workers, options=options, ledger=ledger)
            for k in range(count)
        ]
        self.workers = workers
        self.servers: list[Server] = []

    def __enter__(self) -> Self:
        try:
            with ThreadPoolExecutor(len(self._processes)) as pool:
                for started in pool.map(ServerProcess.start, self._processes):
                    self.servers.append(
                        Server(
                            url=started.url,
                            directory=started.directory,
                            workers=self.workers,
                            pid=started.pid,
                        )
                    )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every server that runs (safe to call twice)."""
        errors: list[BaseException] = []
        for process in self._processes:
            try:
                process.stop(grace=10.0)
            except BaseException as error:  # stop the others first
                errors.append(error)
        if errors:
            raise errors[0]

    def logs(self) -> list[str]:
        """What each server wrote to its standard error."""
        return [process.log() for process in self._processes]

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
