"""The HTTP control plane (SPEC.md §HTTP, R-HTTP-1..5): the FastAPI routes (``server``), the worker processes
(``serving``), the bearer-token rule (``auth``), metrics, and the sync and async clients with their shared
batching (``client``, ``batching``). Imports ``spec.core`` and ``impl.store``; never the study tools.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from capture_ledger.impl.http.auth import TOKEN_ENV, validate_bearer_token
    from capture_ledger.impl.http.batching import batch_limit, check_removal, merge_removals, plan_removal
    from capture_ledger.impl.http.body_limit import MAX_BODY_BYTES
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
    from capture_ledger.impl.http.metrics import BUCKETS, LedgerMetrics, statistics_fields
    from capture_ledger.impl.http.routes import (
        METRICS_ROUTE,
        OPENAPI_ROUTE,
        PREFIX,
        REMOVAL_ROUTES,
        manifest_route,
    )
    from capture_ledger.impl.http.server import create_app
    from capture_ledger.impl.http.serving import ServeOptions, listening_socket

#: Public names and the module each is loaded from on first use.
_LAZY = {
    "TOKEN_ENV": "capture_ledger.impl.http.auth",
    "validate_bearer_token": "capture_ledger.impl.http.auth",
    "batch_limit": "capture_ledger.impl.http.batching",
    "check_removal": "capture_ledger.impl.http.batching",
    "merge_removals": "capture_ledger.impl.http.batching",
    "plan_removal": "capture_ledger.impl.http.batching",
    "MAX_BODY_BYTES": "capture_ledger.impl.http.body_limit",
    "AsyncRolloutControlClient": "capture_ledger.impl.http.client",
    "ControlPlaneError": "capture_ledger.impl.http.client",
    "ControlPlaneTimeoutError": "capture_ledger.impl.http.client",
    "ControlPlaneUnavailableError": "capture_ledger.impl.http.client",
    "RequestRejectedError": "capture_ledger.impl.http.client",
    "RetryPolicy": "capture_ledger.impl.http.client",
    "RolloutControlClient": "capture_ledger.impl.http.client",
    "ServerError": "capture_ledger.impl.http.client",
    "UnauthorizedError": "capture_ledger.impl.http.client",
    "UnexpectedResponseError": "capture_ledger.impl.http.client",
    "BUCKETS": "capture_ledger.impl.http.metrics",
    "LedgerMetrics": "capture_ledger.impl.http.metrics",
    "statistics_fields": "capture_ledger.impl.http.metrics",
    "METRICS_ROUTE": "capture_ledger.impl.http.routes",
    "OPENAPI_ROUTE": "capture_ledger.impl.http.routes",
    "PREFIX": "capture_ledger.impl.http.routes",
    "REMOVAL_ROUTES": "capture_ledger.impl.http.routes",
    "manifest_route": "capture_ledger.impl.http.routes",
    "create_app": "capture_ledger.impl.http.server",
    "ServeOptions": "capture_ledger.impl.http.serving",
    "listening_socket": "capture_ledger.impl.http.serving",
}

__all__ = [
    "BUCKETS",
    "MAX_BODY_BYTES",
    "METRICS_ROUTE",
    "OPENAPI_ROUTE",
    "PREFIX",
    "REMOVAL_ROUTES",
    "TOKEN_ENV",
    "AsyncRolloutControlClient",
    "ControlPlaneError",
    "ControlPlaneTimeoutError",
    "ControlPlaneUnavailableError",
    "LedgerMetrics",
    "RequestRejectedError",
    "RetryPolicy",
    "RolloutControlClient",
    "ServeOptions",
    "ServerError",
    "UnauthorizedError",
    "UnexpectedResponseError",
    "batch_limit",
    "check_removal",
    "create_app",
    "listening_socket",
    "manifest_route",
    "merge_removals",
    "plan_removal",
    "statistics_fields",
    "validate_bearer_token",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
