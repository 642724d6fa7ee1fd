"""Our own store as a target of the outside tracer: one factory per configuration of the crash study
(SPEC.md §Crash; docs/crash-target.md §The cross-check).

``open_store(workspace, config="default")`` opens ``FileLineageStore`` with the ordering, fence sync, group
commit and lock stripes of ``impl.study.workloads.CONFIGS[config]`` — exactly the store the model study
records through its seam — so that tracing it from outside and recording it through the seam can be
compared configuration by configuration. Each configuration also has a factory of its own name,
``open_<label>`` with every run of characters other than letters and digits made one ``_``
(``open_default``, ``open_no_sync_after_fences``, ``open_fence_sync_file_no_sync_delete``), for
``capture-ledger crash --target capture_ledger.impl.outside.factories:open_no_sync_delete``; ``FACTORIES``
maps each such name to its configuration label.

Not guaranteed: anything beyond the study's configurations.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.study.workloads import CONFIGS

__all__ = ["FACTORIES", "factory_name", "open_store"]


def factory_name(label: str) -> str:
    """The factory name of a configuration label (``no sync_delete`` → ``open_no_sync_delete``)."""
    return "open_" + re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_")


#: Each factory name and the configuration it opens.
FACTORIES: dict[str, str] = {factory_name(label): label for label in CONFIGS}


def open_store(workspace: Path, *, config: str = "default") -> FileLineageStore:
    """A handle of the study's store configuration ``config`` on ``workspace``.

    Raises:
        KeyError: an unknown configuration label.
    """
    chosen = CONFIGS[config]
    return FileLineageStore(
        workspace, stripes=chosen.stripes, ordering=chosen.ordering(), group_commit=chosen.group_commit
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
