"""Our own store as a target of the outside tracer: one factory per configuration of the crash study
(SPEC.md §Crash, R-STORE-9; docs/crash-target.md §The cross-check).

``open_store(workspace, config="default")`` opens ``FileLineageStore`` with the ordering, fence sync, group
commit and lock stripes of ``impl.study.crash.CONFIGS[config]`` — exactly the store the model study
records through its seam — so that tracing it from outside and recording it through the seam can be
compared configuration by configuration. Each configuration also has a factory of its own name,
``open_<label>`` with every run of characters other than letters and digits made one ``_``
(``open_default``, ``open_no_sync_after_fences``, ``open_fence_sync_file_no_sync_delete``), for
``capture-ledger crash --target capture_ledger.impl.study.crash.factories:open_no_sync_delete``; ``FACTORIES``
maps each such name to its configuration label.

``open_store(workspace, config=..., threads=N)`` (the cross-check's threaded workloads only) returns a
``ScheduledStore`` instead: the N handles the driver opens for a run share one ``OsFileSystem`` behind the
study's ``scheduling.SchedulingFileSystem``, and their threads run under a ``scheduling.Controller`` with
``scheduling.GatherSchedule`` — the machinery ``impl.study.crash.record`` uses — so the store's own seam
forces the order of system calls the seam recording has, and strace records that order. The driver hands
each thread's operations to ``ScheduledStore.capture_ledger_thread``, which parks at every invocation and
every seam call, as the study's ``scheduling.run_thread`` does. A run the controller cannot schedule (a
deadlock, a thread that stalls) ends the traced process with exit status 4 and the reason on standard
error, so the recorder reports it instead of judging a partial run.

Not guaranteed: anything beyond the study's configurations; a schedule for any ledger but ours (a
third-party target is never scheduled).
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem
from capture_ledger.impl.study.crash._configs import CONFIGS
from capture_ledger.impl.study.crash._recording import StoreConfig
from capture_ledger.impl.study.interleave import Controller, GatherSchedule, SchedulingFileSystem, run_thread
from capture_ledger.spec.core.model import Operation

__all__ = ["FACTORIES", "SCHEDULER_FAILED", "ScheduledStore", "factory_name", "open_store"]

#: The exit status of a traced process whose scheduled run could not be scheduled.
SCHEDULER_FAILED = 4
#: Seconds a scheduled thread may run without reaching a seam call (as in the seam study).
_TIMEOUT = 30.0


def factory_name(label: str) -> str:
    """The factory name of a configuration label (``no sync_delete`` → ``open_no_sync_delete``)."""
    return "open_" + re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_")


#: Each factory name and the configuration it opens.
FACTORIES: dict[str, str] = {factory_name(label): label for label in CONFIGS}


class _GatherRun:
    """What the handles of one scheduled run share: the file system, the controller, its thread."""

    def __init__(self, workspace: Path, config: StoreConfig, threads: int) -> None:
        self.config = config
        self.inner = OsFileSystem(workspace, stripes=config.stripes)
        self.controller = Controller(threads, GatherSchedule(), timeout=_TIMEOUT)
        self.seam = SchedulingFileSystem(self.inner, self.controller)
        self.opened = 0
        self.closed = 0
        self.started = False
        self.lock = threading.Lock()

    def start(self) -> None:
        """Start the controller's thread, once (when the first scheduled thread arrives)."""
        with self.lock:
            if self.started:
                return
            self.started = True
        threading.Thread(target=self._control, name="controller", daemon=True).start()

    def _control(self) -> None:
        try:
            self.controller.run(lambda: None)
        except BaseException as error:  # a run we cannot schedule is never judged: the process ends
            self.controller.abort()
            print(f"the scheduled run failed: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
            os._exit(SCHEDULER_FAILED)


_RUNS: dict[Path, _GatherRun] = {}
_RUNS_LOCK = threading.Lock()


class ScheduledStore(FileLineageStore):
    """A handle of one scheduled run: thread ``tid`` of its controller (the ``tid``-th handle opened)."""

    def __init__(self, workspace: Path, run: _GatherRun, tid: int) -> None:
        config = run.config
        super().__init__(
            workspace,
            fs=run.seam,
            ordering=config.ordering(),
            group_commit=config.group_commit,
            combine_removals=getattr(config, "combine_removals", False),
        )
        self._run = run
        self._tid = tid

    def capture_ledger_thread(self, steps: Sequence[tuple[Operation, Callable[[], object]]]) -> None:
        """Run this handle's thread of the schedule: each ``(operation, perform)`` once its turn comes, as
        the seam study's ``scheduling.run_thread`` (the driver's marks are written inside ``perform``).

        Args:
            steps: the thread's operations in order, each with the function that runs it.
        """
        self._run.start()
        run_thread(self._run.controller, self._tid, steps)

    def close(self) -> None:
        """Close this handle; the last one closed closes the shared file system."""
        super().close()
        with _RUNS_LOCK:
            run = self._run
            run.closed += 1
            if run.closed == run.opened:
                run.inner.close_all()
                for key in [k for k, v in _RUNS.items() if v is run]:
                    del _RUNS[key]


def _scheduled(workspace: Path, config: StoreConfig, threads: int) -> ScheduledStore:
    key = Path(workspace).resolve()
    with _RUNS_LOCK:
        run = _RUNS.get(key)
        if run is None:
            run = _RUNS[key] = _GatherRun(Path(workspace), config, threads)
        if run.opened >= threads:
            raise ValueError(f"a scheduled run of {threads} threads has {threads} handles already")
        tid = run.opened
        run.opened += 1
    return ScheduledStore(Path(workspace), run, tid)


def open_store(workspace: Path, *, config: str = "default", threads: int = 0) -> FileLineageStore:
    """A handle of the study's store configuration ``config`` on ``workspace``.

    Args:
        workspace: the lineage directory.
        config: a label of ``impl.study.crash.CONFIGS``.
        threads: 0 for a plain handle; N for one of the N handles of a run scheduled as the seam study
            schedules its threaded workloads (``GatherSchedule``; see the module docstring).

    Returns:
        The handle (a ``ScheduledStore`` when ``threads`` is given).

    Raises:
        KeyError: an unknown configuration label.
        ValueError: ``threads`` is negative, or more handles are opened than it says.
    """
    chosen = CONFIGS[config]
    if threads < 0:
        raise ValueError(f"threads must be 0 or more, not {threads}")
    if threads:
        return _scheduled(workspace, chosen, threads)
    return FileLineageStore(
        workspace,
        stripes=chosen.stripes,
        ordering=chosen.ordering(),
        group_commit=chosen.group_commit,
        combine_removals=getattr(chosen, "combine_removals", False),
    )


def __getattr__(name: str) -> Callable[[Path], FileLineageStore]:
    label = FACTORIES.get(name)
    if label is None:
        raise AttributeError(name)

    def factory(workspace: Path) -> FileLineageStore:
        return open_store(workspace, config=label)

    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = f"A handle of the study's store configuration {label!r} on ``workspace``."
    return factory
