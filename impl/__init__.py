"""The production side: the file store, its effects seam, the HTTP control plane, and the explorers.

Names are loaded on first use, so ``from capture_ledger.impl import FileLineageStore`` does not import
FastAPI, and a model server pays only for what it uses. ``__all__`` is pinned by ``tests/test_exports.py``.
Concept modules (``store``, ``ordering``, ``fs``, ``server``, ``client``, ``crash``, ``interleave``, ...)
are importable directly too.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capture_ledger.impl.client import (
        AsyncRolloutControlClient,
        ControlPlaneError,
        ControlPlaneTimeoutError,
        ControlPlaneUnavailableError,
        RequestRejectedError,
        RetryPolicy,
        RolloutControlClient,
        ServerError,
        UnauthorizedError,
        UnexpectedResponseError,
    )
    from capture_ledger.impl.consistency import Finding, check, read_snapshot
    from capture_ledger.impl.fs import FileSystem, OsFileSystem
    from capture_ledger.impl.lines import CorruptLedgerError
    from capture_ledger.impl.metrics import LedgerMetrics
    from capture_ledger.impl.ordering import FenceSync, StoreVariant
    from capture_ledger.impl.server import create_app
    from capture_ledger.impl.store import (
        FileLineageStore,
        OperationCounts,
        StoreStatistics,
        open_file_store,
    )

_LOCATIONS = {
    "FileLineageStore": "store",
    "StoreStatistics": "store",
    "OperationCounts": "store",
    "open_file_store": "store",
    "StoreVariant": "ordering",
    "FenceSync": "ordering",
    "Finding": "consistency",
    "check": "consistency",
    "read_snapshot": "consistency",
    "FileSystem": "fs",
    "OsFileSystem": "fs",
    "CorruptLedgerError": "lines",
    "create_app": "server",
    "LedgerMetrics": "metrics",
    "RolloutControlClient": "client",
    "AsyncRolloutControlClient": "client",
    "ControlPlaneError": "client",
    "ControlPlaneTimeoutError": "client",
    "ControlPlaneUnavailableError": "client",
    "RequestRejectedError": "client",
    "RetryPolicy": "client",
    "ServerError": "client",
    "UnauthorizedError": "client",
    "UnexpectedResponseError": "client",
}

__all__ = [
    "AsyncRolloutControlClient",
    "ControlPlaneError",
    "ControlPlaneTimeoutError",
    "ControlPlaneUnavailableError",
    "CorruptLedgerError",
    "FenceSync",
    "FileLineageStore",
    "FileSystem",
    "Finding",
    "LedgerMetrics",
    "OperationCounts",
    "OsFileSystem",
    "RequestRejectedError",
    "RetryPolicy",
    "RolloutControlClient",
    "ServerError",
    "StoreStatistics",
    "StoreVariant",
    "UnauthorizedError",
    "UnexpectedResponseError",
    "check",
    "create_app",
    "open_file_store",
    "read_snapshot",
]


def __getattr__(name: str) -> Any:
    module = _LOCATIONS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
