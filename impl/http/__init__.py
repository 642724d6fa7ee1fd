"""The HTTP control plane (SPEC.md §HTTP, R-HTTP-1..5): the FastAPI routes (``server``), the worker processes
(``serving``), the bearer-token rule (``auth``), metrics, and the sync and async clients with their shared
batching (``client``, ``batching``). Imports ``spec.core`` and ``impl.store``; never the study tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capture_ledger._lazy import lazy_attributes

if TYPE_CHECKING:
    from capture_ledger.impl.http._auth import TOKEN_ENV, validate_bearer_token
    from capture_ledger.impl.http._batching import batch_limit, check_removal, merge_removals, plan_removal
    from capture_ledger.impl.http._body_limit import MAX_BODY_BYTES
    from capture_ledger.impl.http._limits import (
        LIMITS_ENV,
        GuardedHttpToolsProtocol,
        ServerLimits,
        guarded_protocol,
        limits_from_environment,
    )
    from capture_ledger.impl.http._metrics import BUCKETS, LedgerMetrics, statistics_fields
    from capture_ledger.impl.http._routes import (
        METRICS_ROUTE,
        OPENAPI_ROUTE,
        PREFIX,
        REMOVAL_ROUTES,
        manifest_route,
    )
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
    from capture_ledger.impl.http.serving import ServeOptions, listening_socket

#: Public names and the private module each is loaded from on first use.
_LAZY = {
    "TOKEN_ENV": "capture_ledger.impl.http._auth",
    "validate_bearer_token": "capture_ledger.impl.http._auth",
    "batch_limit": "capture_ledger.impl.http._batching",
    "check_removal": "capture_ledger.impl.http._batching",
    "merge_removals": "capture_ledger.impl.http._batching",
    "plan_removal": "capture_ledger.impl.http._batching",
    "MAX_BODY_BYTES": "capture_ledger.impl.http._body_limit",
    "GuardedHttpToolsProtocol": "capture_ledger.impl.http._limits",
    "LIMITS_ENV": "capture_ledger.impl.http._limits",
    "ServerLimits": "capture_ledger.impl.http._limits",
    "limits_from_environment": "capture_ledger.impl.http._limits",
    "guarded_protocol": "capture_ledger.impl.http._limits",
    "BUCKETS": "capture_ledger.impl.http._metrics",
    "LedgerMetrics": "capture_ledger.impl.http._metrics",
    "statistics_fields": "capture_ledger.impl.http._metrics",
    "METRICS_ROUTE": "capture_ledger.impl.http._routes",
    "OPENAPI_ROUTE": "capture_ledger.impl.http._routes",
    "PREFIX": "capture_ledger.impl.http._routes",
    "REMOVAL_ROUTES": "capture_ledger.impl.http._routes",
    "manifest_route": "capture_ledger.impl.http._routes",
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
    "create_app": "capture_ledger.impl.http.server",
    "ServeOptions": "capture_ledger.impl.http.serving",
    "listening_socket": "capture_ledger.impl.http.serving",
}

__all__ = [
    "BUCKETS",
    "LIMITS_ENV",
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
    "GuardedHttpToolsProtocol",
    "LedgerMetrics",
    "RequestRejectedError",
    "RetryPolicy",
    "RolloutControlClient",
    "ServeOptions",
    "ServerError",
    "ServerLimits",
    "UnauthorizedError",
    "UnexpectedResponseError",
    "batch_limit",
    "check_removal",
    "create_app",
    "guarded_protocol",
    "limits_from_environment",
    "listening_socket",
    "manifest_route",
    "merge_removals",
    "plan_removal",
    "statistics_fields",
    "validate_bearer_token",
]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
