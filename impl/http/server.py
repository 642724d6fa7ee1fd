"""The HTTP control plane: FastAPI routes that read manifests, retire and delete (SPEC.md R-HTTP-1..3).

``create_app(ledger, auth_token=...)`` serves any ``CaptureLedger`` (sync or async methods) under
``/training-token-capture/control`` (the paths are in ``capture_ledger.impl.http._routes``):

- ``GET  /rollouts/{rollout_id}/manifest`` -> 200 manifest; 400 invalid ID; 410 retired (R-READ-3).
- ``POST /rollouts/retire`` and ``POST /rollouts/delete`` with ``{"rollout_ids": [...]}`` -> 200
  ``{"removed", "absent"}``; 422 for a malformed body (not UTF-8 JSON, not an object, unknown field, not
  a list of strings, empty, more than ``MAX_LEDGER_BATCH`` IDs); 400 for an invalid ID, nothing changed
  (R-BATCH-2); 413 for a body larger than ``MAX_BODY_BYTES``, before more is read (R-HTTP-6).
- ``GET  /metrics`` (Prometheus text, ``capture_ledger.impl.http._metrics``) and ``GET /openapi.json``.

Outside the prefix, ``GET /openapi.json`` (the same document) and ``GET /docs`` (its Swagger UI page, whose
scripts a browser loads from the jsDelivr CDN) need no token: the document is the same for every server and
holds no ledger data, and a browser opening ``/docs`` cannot send a bearer token. Every other request, on
every path, needs ``Authorization: Bearer <token>``, compared in constant time; anything else is 401 before
the request reaches a route (R-HTTP-2), with ``Connection: close`` so that the server never reads the rest
of a stranger's body. The OpenAPI document declares every rule the server enforces:
the rollout ID's pattern (anchored) and length on the path parameter and on the batch items, 1 to
``MAX_LEDGER_BATCH`` items, and every status; the rule itself is still checked by ``validate_rollout_id``
(a 400, never FastAPI's 422), and the document only states it. Every error body, 4xx and 5xx, has the
``ErrorBody`` shape, 404, 405 and a ledger's ``OSError`` (500) included; an exception no handler knows is a
500 in that shape with ``Connection: close`` (R-HTTP-7). Bodies are strict UTF-8 JSON (``json_body``).
Ledger calls run in a worker thread, or are awaited when the ledger's methods are coroutines, so a slow
fsync never blocks the event loop. Errors map by class to one status each (``STATUS_BY_ERROR``), and a
``TypeError`` or ``ValueError`` from the ledger is a 400: bad input never produces a 500 (R-HTTP-3).

Not guaranteed: atomicity of a batch across IDs (R-CONC-1: a request that fails in the store part-way,
with an ``OSError``, may have retired some IDs; resend it); anything about other workers' caches (each
worker process serves its own handle on the shared directory); TLS (bind to loopback or put a proxy in
front).
"""

from __future__ import annotations

import errno
import hmac
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from capture_ledger.impl.http._auth import validate_bearer_token
from capture_ledger.impl.http._body_limit import MAX_BODY_BYTES, BodyLimit, too_large_body
from capture_ledger.impl.http._json_body import StrictJsonBody
from capture_ledger.impl.http._metrics import CONTENT_TYPE, LedgerMetrics
from capture_ledger.impl.http._responses import JsonAnswer, error_answer
from capture_ledger.impl.http._routes import (
    MANIFEST_ROUTE,
    METRICS_ROUTE,
    OPENAPI_ROUTE,
    PREFIX,
    REMOVAL_ROUTES,
)
from capture_ledger.impl.store import CorruptLedgerError
from capture_ledger.spec.core.errors import (
    CaptureLedgerError,
    ConflictingRecordError,
    InvalidRolloutIdError,
    RolloutRetiredError,
)
from capture_ledger.spec.core.ids import (
    MAX_LEDGER_BATCH,
    MAX_ROLLOUT_ID_LENGTH,
    ROLLOUT_ID_PATTERN,
    validate_rollout_id,
    validate_rollout_ids,
)
from fastapi import FastAPI, Path, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, StrictStr
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "PREFIX",
    "PUBLIC_DOCUMENT_PATHS",
    "ROLLOUT_ID_SCHEMA",
    "STATUS_BY_ERROR",
    "ErrorBody",
    "ManifestBody",
    "RemovalBody",
    "RemovalRequest",
    "create_app",
]

#: The rollout-ID rule of R-ID-1 as JSON Schema, for the OpenAPI document: the routes still validate with
#: ``validate_rollout_id`` (400 ``InvalidRolloutIdError``), never through FastAPI (which would answer 422).
#: JSON Schema patterns are searched, not matched whole, hence the explicit ``^...$``.
ROLLOUT_ID_SCHEMA: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_ROLLOUT_ID_LENGTH,
    "pattern": f"^{ROLLOUT_ID_PATTERN.pattern}$",
}

#: One status per error class, most specific first (R-HTTP-3; the client maps them back, R-HTTP-5). A
#: corrupt ledger is the server's data fault, not the caller's mistake: a 500, counted and retried as one.
STATUS_BY_ERROR: tuple[tuple[type[Exception], int], ...] = (
    (RolloutRetiredError, 410),
    (InvalidRolloutIdError, 400),
    (ConflictingRecordError, 409),
    (CorruptLedgerError, 500),
    (CaptureLedgerError, 400),
)

logger = logging.getLogger("capture_ledger.impl.http.server")


#: The summary of each removal route in the OpenAPI document.
_REMOVAL_SUMMARIES = {
    "retire": "Retire rollouts: remove their ledgers and fence late writes",
    "delete": "Delete rollouts: remove their ledgers and fences",
}


class RemovalRequest(BaseModel):
    """The body of ``retire`` and ``delete``: a list of 1 to ``MAX_LEDGER_BATCH`` rollout IDs."""

    model_config = ConfigDict(extra="forbid")
    rollout_ids: Annotated[
        list[StrictStr],
        Field(min_length=1, max_length=MAX_LEDGER_BATCH, json_schema_extra={"items": ROLLOUT_ID_SCHEMA}),
    ]


class RemovalBody(BaseModel):
    """Which IDs had ledger rows (``removed``) and which did not (``absent``), in first-seen order."""

    removed: list[str]
    absent: list[str]


class FailureBody(BaseModel):
    """A failed model call."""

    model_call_id: str
    reason: str


class ManifestBody(BaseModel):
    """A rollout's rows in append order; empty lists for a rollout the server never saw."""

    rollout_id: str
    records: list[dict[str, Any]]
    failures: list[FailureBody]


class ErrorBody(BaseModel):
    """Every error answer, 4xx and 5xx: a sentence, the error's class name, the rollout ID if any."""

    detail: Any
    error: str
    rollout_id: str | None = None


def _responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    described = {
        400: "An invalid rollout ID (or another input the ledger refused); nothing was changed.",
        401: "Missing or wrong bearer token.",
        409: "The ledger refused the call because of the rollout's state.",
        410: "The rollout is retired: its ledger is gone, not empty.",
        413: f"The body is larger than {MAX_BODY_BYTES} bytes, more than the largest batch needs; "
        "answered before the rest is read, and the connection is closed.",
        408: "The request's body did not arrive in time; the connection is closed.",
        415: "A charset other than UTF-8 was declared; the connection is closed.",
        422: "A malformed body: not UTF-8 JSON (a byte-order mark, UTF-16, a key repeated in one object, "
        "nesting too deep), not an object, an unknown field, not a list of strings, "
        f"an empty list, or more than {MAX_LEDGER_BATCH} IDs.",
        500: "The server failed (an OSError of the store, a corrupt ledger); retire and delete may be "
        "resent.",
        503: "Too many open connections to this worker; retry after a pause.",
    }
    return {status: {"model": ErrorBody, "description": described[status]} for status in statuses}


def _status_of(error: BaseException) -> int:
    for kind, status in STATUS_BY_ERROR:
        if isinstance(error, kind):
            return status
    return 400


def _error_response(status: int, error: BaseException, detail: Any = None) -> JsonAnswer:
    # error_answer renders a lone surrogate in the detail (an invalid ID may hold one) as its escape:
    # Starlette's JSONResponse raised UnicodeEncodeError there and turned this 400 into a 500 (R-HTTP-3).
    rollout_id = getattr(error, "rollout_id", None)
    return error_answer(
        status, type(error).__name__, str(error) if detail is None else detail, rollout_id=rollout_id
    )


def _os_error_detail(error: OSError) -> str:
    # The errno and its meaning, not the message: that may name paths of the server's file system.
    name = errno.errorcode.get(error.errno or 0, str(error.errno))
    return f"the ledger failed: {name} ({error.strerror or 'no reason given'}); the call may be resent"


class _ServerErrors:
    """ASGI middleware, outermost: any exception no handler answered becomes a 500 in the error shape with
    ``Connection: close`` (the server's state for this connection is unknown), logged once here.

    Without it Starlette answered ``text/plain`` "Internal Server Error" and uvicorn then dropped the
    connection without saying so, so the client's next request on it failed (R-HTTP-7).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watching_send(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watching_send)
        except Exception as error:
            if started:
                raise  # half an answer sent: only dropping the connection is left (uvicorn does)
            logger.exception("unhandled error answering %s %s", scope.get("method"), scope.get("path"))
            detail = f"the server failed: {type(error).__name__}"
            await error_answer(500, type(error).__name__, detail, close=True)(scope, receive, send)


class _LedgerRefusedError(Exception):
    """A ``TypeError`` or ``ValueError`` the ledger raised: the input's fault, so a 400 (R-HTTP-3)."""

    def __init__(self, error: TypeError | ValueError) -> None:
        super().__init__(str(error))
        self.error = error


#: The paths a ``GET`` may read without the token: the OpenAPI document and its HTML page (R-HTTP-2).
PUBLIC_DOCUMENT_PATHS: frozenset[str] = frozenset({OPENAPI_ROUTE, "/docs"})
_PUBLIC = PUBLIC_DOCUMENT_PATHS


class _BearerAuth:
    """ASGI middleware: 401 for any request without the right bearer token (R-HTTP-2).

    It runs before routing and body parsing, so a stranger learns nothing but the OpenAPI document, which
    every server of this version serves alike (``PUBLIC_DOCUMENT_PATHS``, ``GET`` only).
    """

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        self.app = app
        self._token = token.encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and not self._authorized(scope):
            await send({"type": "websocket.close", "code": 1008})  # policy violation
            return
        public = scope["type"] == "http" and scope["method"] == "GET" and scope["path"] in _PUBLIC
        if scope["type"] == "http" and not public and not self._authorized(scope):
            response = error_answer(
                401,
                "Unauthorized",
                "missing or wrong bearer token",
                # close: else uvicorn reads and drops the whole unread body, however long, to keep the
                # connection (measured: a 55 MB body after a 401 was read to its end, docs/http.md).
                close=True,
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        values = [value for name, value in scope.get("headers", ()) if name.lower() == b"authorization"]
        if len(values) != 1:
            return False
        # Exactly "Bearer", one space, the token: nothing around it, no second space (R-HTTP-2). A header
        # value's surrounding whitespace is the HTTP parser's to strip; anything inside is refused.
        scheme, space, credentials = bytes(values[0]).partition(b" ")
        # compare_digest on bytes: constant time in the token's length, and no TypeError on non-ASCII.
        return scheme.lower() == b"bearer" and space == b" " and hmac.compare_digest(credentials, self._token)


def create_app(
    ledger: Any,
    *,
    auth_token: str,
    metrics: LedgerMetrics | None = None,
    body_timeout: float | None = 30.0,
) -> FastAPI:
    """The control-plane app serving ``ledger``.

    Args:
        ledger: a ``CaptureLedger``; its methods may be coroutines.
        auth_token: the bearer token every request must carry (RFC 6750 token characters).
        metrics: the registry to report into; by default a new one. The hosting model server can write
            through ``app.state.metrics.instrument(ledger)`` so that ``record`` is timed too.
        body_timeout: seconds a request's whole body may take to arrive (408 after, R-HTTP-7); ``None``
            for no limit.

    Returns:
        The app; ``app.state.ledger`` and ``app.state.metrics`` hold what it serves.

    Raises:
        ValueError: ``auth_token`` is empty or not a valid bearer token (starting without one is refused).
    """
    try:
        validate_bearer_token(auth_token)
    except ValueError as error:
        raise ValueError(f"refusing to serve the control plane: {error}") from error
    metrics = metrics or LedgerMetrics(ledger)
    timed = metrics.instrument(ledger)
    app = FastAPI(
        title="capture-ledger control plane",
        version="1",
        description="Read manifests, retire and delete capture ledgers. Every route needs a bearer token.",
        openapi_url=None,  # served below: under the prefix behind the token, and at the root for anyone
        docs_url=None,
        redoc_url=None,
    )
    app.state.ledger = ledger
    app.state.metrics = metrics
    bearer = Security(HTTPBearer(auto_error=False, description="The server's bearer token."))

    async def call(name: str, *args: Any) -> Any:
        try:
            if inspect.iscoroutinefunction(getattr(ledger, name)):
                return await getattr(timed, name)(*args)
            result = await run_in_threadpool(getattr(timed, name), *args)
            return await result if inspect.isawaitable(result) else result
        except CaptureLedgerError:
            raise
        except (TypeError, ValueError) as error:
            raise _LedgerRefusedError(error) from error

    @app.get(
        PREFIX + MANIFEST_ROUTE,
        response_model=ManifestBody,
        responses=_responses(400, 401, 410, 500, 503),
        dependencies=[bearer],
        summary="Read a rollout's manifest",
        tags=["rollouts"],
    )
    async def read_manifest(
        rollout_id: Annotated[str, Path(json_schema_extra=ROLLOUT_ID_SCHEMA)],
    ) -> JsonAnswer:
        validate_rollout_id(rollout_id)  # before the ledger sees it (R-ID-1)
        return JsonAnswer(await call("manifest", rollout_id))

    def removal(operation: str) -> Callable[[RemovalRequest], Awaitable[JsonAnswer]]:
        async def remove(body: RemovalRequest) -> JsonAnswer:
            batch = validate_rollout_ids(body.rollout_ids)  # whole batch before any change (R-BATCH-2)
            result = await call(operation, batch)
            removed = {"removed": list(result["removed"]), "absent": list(result["absent"])}
            metrics.count_removal(operation, removed)
            return JsonAnswer(removed)

        return remove

    for operation, summary in _REMOVAL_SUMMARIES.items():
        app.post(
            PREFIX + REMOVAL_ROUTES[operation],
            response_model=RemovalBody,
            responses=_responses(400, 401, 408, 413, 415, 422, 500, 503),
            dependencies=[bearer],
            summary=summary,
            tags=["rollouts"],
            name=operation,
        )(removal(operation))

    @app.get(
        PREFIX + METRICS_ROUTE,
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE: {}}}, **_responses(401)},
        dependencies=[bearer],
        summary="Prometheus metrics of this worker",
        tags=["operations"],
    )
    async def read_metrics() -> Response:
        return Response(await run_in_threadpool(metrics.render), media_type=CONTENT_TYPE)

    @app.get(PREFIX + OPENAPI_ROUTE, include_in_schema=False)
    @app.get(OPENAPI_ROUTE, include_in_schema=False)  # public: PUBLIC_DOCUMENT_PATHS
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False)  # public: PUBLIC_DOCUMENT_PATHS
    async def swagger_page() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=OPENAPI_ROUTE, title=f"{app.title}: OpenAPI")

    async def on_ledger_error(request: Request, error: Exception) -> JsonAnswer:
        return _error_response(_status_of(error), error)

    async def on_os_error(request: Request, error: Exception) -> JsonAnswer:
        # A genuine server fault (R-HTTP-3): a 500 in the error shape, never swallowed, and the connection
        # kept: the request was read whole, so the next one on it is sound.
        assert isinstance(error, OSError)
        logger.error("the ledger failed answering %s %s: %r", request.method, request.url.path, error)
        return _error_response(500, error, _os_error_detail(error))

    async def on_refused(request: Request, error: Exception) -> JsonAnswer:
        assert isinstance(error, _LedgerRefusedError)
        return _error_response(400, error.error)

    async def on_invalid_body(request: Request, error: Exception) -> JsonAnswer:
        assert isinstance(error, RequestValidationError)
        # Echo where and why, never the input itself (it may be a 4096-ID list).
        problems = [
            {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
            for e in error.errors()
        ]
        return error_answer(422, "RequestValidationError", problems)

    async def on_http_error(request: Request, error: Exception) -> JsonAnswer:
        assert isinstance(error, StarletteHTTPException)
        headers = getattr(error, "headers", None)
        if error.status_code == 413:
            body = too_large_body(MAX_BODY_BYTES)
        elif error.status_code == 400 and error.__cause__ is not None:
            # FastAPI answers a body it cannot read (not UTF-8, nested too deep) with a bare 400 {"detail"}
            # raised from the cause: a malformed body like invalid JSON, so a 422 in the ErrorBody shape.
            problem = {"loc": ["body"], "msg": "the body is not UTF-8 JSON", "type": "json_invalid"}
            return error_answer(422, "RequestValidationError", [problem])
        else:  # 404, 405 (with its Allow header) and any other: the ErrorBody shape too
            body = {"detail": error.detail, "error": "HTTPException", "rollout_id": None}
        return JsonAnswer(body, status_code=error.status_code, headers=headers)

    for kind, _status in STATUS_BY_ERROR:
        app.add_exception_handler(kind, on_ledger_error)
    app.add_exception_handler(OSError, on_os_error)
    app.add_exception_handler(_LedgerRefusedError, on_refused)
    app.add_exception_handler(RequestValidationError, on_invalid_body)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    # Outermost last: unhandled errors, then the token, then the body's size and time, then its encoding.
    app.add_middleware(StrictJsonBody)  # strict UTF-8 JSON, no repeated keys (R-HTTP-3)
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES, timeout=body_timeout)  # after the token (R-HTTP-6)
    app.add_middleware(_BearerAuth, token=auth_token)  # a stranger gets 401, whatever the size
    app.add_middleware(_ServerErrors)  # outermost: every unhandled error a 500 in the one shape
    return app
