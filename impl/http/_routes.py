"""Where the control routes live: the path prefix and each route's path under it (SPEC.md R-HTTP-1).

The one place the server (``server.py``), the clients (``client.py``) and the serving helpers
(``serving.py``) read the paths from. Plain strings, no imports: a client-only user does not load FastAPI,
Starlette or uvicorn by importing the clients.

Not guaranteed: paths outside ``PREFIX`` (the hosting model server owns them).
"""

from __future__ import annotations

from urllib.parse import quote

__all__ = [
    "MANIFEST_ROUTE",
    "METRICS_ROUTE",
    "OPENAPI_ROUTE",
    "PREFIX",
    "REMOVAL_ROUTES",
    "manifest_route",
]

#: Where the control routes live (the upstream model server's path).
PREFIX = "/training-token-capture/control"
#: ``GET``: a rollout's manifest; ``{rollout_id}`` is the path parameter.
MANIFEST_ROUTE = "/rollouts/{rollout_id}/manifest"
#: ``POST``: the two removals, by operation name.
REMOVAL_ROUTES: dict[str, str] = {"retire": "/rollouts/retire", "delete": "/rollouts/delete"}
#: ``GET``: Prometheus metrics of the answering worker.
METRICS_ROUTE = "/metrics"
#: ``GET``: the OpenAPI document.
OPENAPI_ROUTE = "/openapi.json"


def manifest_route(rollout_id: str) -> str:
    """The manifest route of ``rollout_id``, the ID percent-encoded as one path segment.

    Args:
        rollout_id: a rollout ID, already validated by the caller (R-ID-1).

    Returns:
        The path under ``PREFIX``, e.g. ``/rollouts/run7-a3/manifest``.
    """
    return MANIFEST_ROUTE.format(rollout_id=quote(rollout_id, safe=""))
