"""The production side: the file store, its effects seam, the HTTP control plane, and the explorers.

Names are loaded on first use, so ``from capture_ledger.impl import FileLineageStore`` does not import
FastAPI, and a model server pays only for what it uses. ``__all__`` is pinned by ``tests/test_exports.py``;
it names only what a model server uses. Concept modules (``store.ordering``, ``store.fs``, ``http.server``,
``http.client``, ...) are importable directly too, and so is what exists only to study the store
(``study``: the explorers, and the store variants of ``study.variants``), which no public name here leads to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capture_ledger._lazy import lazy_attributes

if TYPE_CHECKING:
    from capture_ledger.impl.http import LedgerMetrics
    from capture_ledger.impl.http.client import (
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
    from capture_ledger.impl.http.server import create_app
    from capture_ledger.impl.store import CorruptLedgerError, FenceSync, Finding, check, read_snapshot
    from capture_ledger.impl.store.file_store import (
        FileLineageStore,
        OperationCounts,
        StoreStatistics,
        open_file_store,
    )
    from capture_ledger.impl.store.fs import FileSystem, OsFileSystem

_LOCATIONS = {
    "FileLineageStore": "store",
    "StoreStatistics": "store",
    "OperationCounts": "store",
    "open_file_store": "store",
    "FenceSync": "store",
    "Finding": "store",
    "check": "store",
    "read_snapshot": "store",
    "FileSystem": "store",
    "OsFileSystem": "store",
    "CorruptLedgerError": "store",
    "create_app": "http",
    "LedgerMetrics": "http",
    "RolloutControlClient": "http",
    "AsyncRolloutControlClient": "http",
    "ControlPlaneError": "http",
    "ControlPlaneTimeoutError": "http",
    "ControlPlaneUnavailableError": "http",
    "RequestRejectedError": "http",
    "RetryPolicy": "http",
    "ServerError": "http",
    "UnauthorizedError": "http",
    "UnexpectedResponseError": "http",
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
    "UnauthorizedError",
    "UnexpectedResponseError",
    "check",
    "create_app",
    "open_file_store",
    "read_snapshot",
]


__getattr__, __dir__ = lazy_attributes(__name__, {n: f"{__name__}.{m}" for n, m in _LOCATIONS.items()})
