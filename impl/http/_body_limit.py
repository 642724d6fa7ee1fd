"""The request-body cap of the control plane: 413 before more than ``MAX_BODY_BYTES`` are read (R-HTTP-6).

``MAX_BODY_BYTES`` is computed from the spec's own limits: the largest valid body is a removal request of
``MAX_LEDGER_BATCH`` IDs of ``MAX_ROLLOUT_ID_LENGTH`` characters. Each ID costs its characters, two quotes,
a comma and whatever whitespace a JSON writer puts around it (newline and indentation); the object around
the list costs a few dozen bytes. Allowing 18 bytes per ID for quotes, comma and whitespace and 1 KiB for
the envelope gives ``4096 * (200 + 18) + 1024 = 893,952`` bytes. Measured sizes of the largest valid body:
831,505 bytes as httpx sends it (compact separators), 835,601 with ``json.dumps``'s default ``", "`` and
868,381 indented by 4 spaces; all fit (``tests/impl/http/test_http_body_limit.py``).

``BodyLimit`` is ASGI middleware (inside the bearer-token check, so a stranger gets 401 whatever the size):

- a ``Content-Length`` above the cap is answered 413 at once, nothing of the body read;
- a chunked (or lying) body is counted as the app reads it, and refused as soon as the count passes the
  cap: the app never sees more than the cap plus one of the server's read chunks;
- with ``timeout``, a body that has not arrived whole within that many seconds of the app's first read
  is answered 408 ``RequestTimeout`` (R-HTTP-7);
- every answer sent before the request body was read to its end says ``Connection: close``. Without it
  uvicorn reads the unread rest of the body after the response, however long, to keep the connection
  (measured: a 55 MB body behind a 401 was drained to its end, docs/http.md §Request size).

The 413 has the ``ErrorBody`` shape: ``{"detail", "error": "RequestTooLarge", "rollout_id": null}``.
Not guaranteed: support for bodies whose IDs are written with JSON ``\\u`` escapes (valid IDs never need
one; such a body may exceed the cap); a cap on headers (uvicorn's own limits apply).
"""

from __future__ import annotations

import asyncio

from capture_ledger.spec.core.ids import MAX_LEDGER_BATCH, MAX_ROLLOUT_ID_LENGTH
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["MAX_BODY_BYTES", "BodyLimit", "BodyTimeoutError", "BodyTooLargeError", "too_large_body"]

#: Bytes allowed per ID beyond its characters: two quotes, a comma, and up to 15 bytes of whitespace.
_PER_ID_SLACK = 18
#: Bytes allowed for the object around the list (``{"rollout_ids": [...]}`` and its whitespace).
_ENVELOPE = 1024
#: The largest request body the server reads: 893,952 bytes (see the module docstring).
MAX_BODY_BYTES = MAX_LEDGER_BATCH * (MAX_ROLLOUT_ID_LENGTH + _PER_ID_SLACK) + _ENVELOPE


def _detail(limit: int) -> str:
    return (
        f"the request body is larger than {limit} bytes, more than a batch of "
        f"{MAX_LEDGER_BATCH} rollout IDs of {MAX_ROLLOUT_ID_LENGTH} characters needs"
    )


def too_large_body(limit: int) -> dict[str, object]:
    """The ``ErrorBody`` of a 413."""
    return {"detail": _detail(limit), "error": "RequestTooLarge", "rollout_id": None}


class BodyTimeoutError(HTTPException):
    """Raised from the counting ``receive`` when the body has not arrived within the read timeout: 408.

    An ``HTTPException`` for the reason ``BodyTooLargeError`` is one; answered with ``Connection: close``
    (the rest of a slow body is never read, R-HTTP-7).
    """

    def __init__(self, timeout: float) -> None:
        super().__init__(
            status_code=408, detail=f"the request body did not arrive within {timeout:g} s", headers=_CLOSE
        )


class BodyTooLargeError(HTTPException):
    """Raised from the counting ``receive`` once the body passes the cap.

    An ``HTTPException`` on purpose: FastAPI turns any other exception raised while it reads the body into
    a 400 "There was an error parsing the body", but hands an ``HTTPException`` to its handler.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail=_detail(limit), headers=_CLOSE)


_CLOSE = {"Connection": "close"}


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


class BodyLimit:
    """ASGI middleware: 413 for a body over ``limit`` bytes, before the app reads more than ``limit``."""

    def __init__(self, app: ASGIApp, *, limit: int = MAX_BODY_BYTES, timeout: float | None = None) -> None:
        """Wrap ``app``.

        Args:
            app: the ASGI app.
            limit: the most body bytes a request may carry.
            timeout: seconds the whole body may take to arrive, from the app's first read (R-HTTP-7);
                ``None``: no limit.
        """
        self.app = app
        self.limit = limit
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > self.limit:
            await self.refuse(scope, receive, send)  # nothing read
            return
        has_body = (declared is not None and declared.strip() not in (b"", b"0")) or (
            _header(scope, b"transfer-encoding") is not None
        )
        received = 0
        finished = not has_body
        started = False

        deadline: float | None = None
        timeout = self.timeout

        async def counting_receive() -> Message:
            nonlocal received, finished, deadline
            if timeout is None or finished:
                message = await receive()
            else:
                now = asyncio.get_running_loop().time()
                deadline = now + timeout if deadline is None else deadline
                try:
                    message = await asyncio.wait_for(receive(), max(0.0, deadline - now))
                except TimeoutError:
                    raise BodyTimeoutError(timeout) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLargeError(self.limit)
                finished = finished or not message.get("more_body", False)
            return message

        async def closing_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if not finished:  # the rest of the body stays unread: close instead of draining it
                    headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != b"connection"]
                    message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        try:
            await self.app(scope, counting_receive, closing_send)
        except BodyTooLargeError:
            if started:  # pragma: no cover - our routes read the whole body before they answer
                raise
            await self.refuse(scope, receive, send)
        except BodyTimeoutError as error:
            if started:  # pragma: no cover - as above
                raise
            body = {"detail": error.detail, "error": "RequestTimeout", "rollout_id": None}
            await JSONResponse(body, status_code=408, headers=_CLOSE)(scope, receive, send)

    async def refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 413 in the ``ErrorBody`` shape and close the connection."""
        response = JSONResponse(too_large_body(self.limit), status_code=413, headers=_CLOSE)
        await response(scope, receive, send)
