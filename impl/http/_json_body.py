"""Request bodies are strict UTF-8 JSON objects without repeated keys (SPEC.md R-HTTP-3).

``StrictJsonBody`` is ASGI middleware between the body cap (``body_limit``) and the routes. For every
request that carries a body it reads the body whole (at most ``MAX_BODY_BYTES``: the cap runs first) and
refuses, before any route or ledger sees it:

- a ``Content-Type`` whose ``charset`` is anything but ``utf-8``: 415 ``UnsupportedMediaType``;
- bytes that are not UTF-8, a UTF-8 byte-order mark, UTF-16 or UTF-32 (Python's ``json.loads`` on bytes
  guesses those encodings, and FastAPI accepted them), JSON that does not parse, or nesting deeper than
  ``MAX_DEPTH``: 422 ``RequestValidationError`` (a malformed body, R-HTTP-3);
- an object that names one key twice: 422 as well. ``json`` keeps the last one, so
  ``{"rollout_ids": [".."], "rollout_ids": ["live-a"]}`` retired ``live-a`` while a proxy or a log that
  keeps the first saw only ``..``.

Then the same bytes go on to the app. A lone surrogate written as a ``\\ud800`` escape is valid JSON and
reaches the route, which refuses it as an invalid rollout ID (400, R-HTTP-3); the raw bytes ``ED A0 80``
are not UTF-8 and are refused here (422). Not guaranteed: any check of the bodies of other methods (a
``GET`` route never reads its body); the body is parsed twice (here and by the route), which costs about
10 ms for the largest body the cap allows.
"""

from __future__ import annotations

import json
from typing import Any

from capture_ledger.impl.http._responses import error_answer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["MAX_DEPTH", "StrictJsonBody", "problem"]

#: The deepest nesting of arrays and objects a body may have (a removal request needs 2).
MAX_DEPTH = 64


class _RepeatedKeyError(ValueError):
    pass


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _RepeatedKeyError(key)
        seen[key] = value
    return seen


def _depth_exceeds(text: str, limit: int) -> bool:
    """Whether brackets outside strings nest deeper than ``limit`` (checked before parsing: no recursion)."""
    depth = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


def problem(body: bytes) -> str | None:
    """Why ``body`` is not a strict UTF-8 JSON document, or ``None`` when it is one."""
    if body.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
        return "the body starts with a byte-order mark: send UTF-8 without one"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"the body is not UTF-8 (byte {error.start})"
    if "\x00" in text:
        return "the body holds a NUL character (UTF-16 or UTF-32?): send UTF-8"
    if _depth_exceeds(text, MAX_DEPTH):
        return f"the body nests deeper than {MAX_DEPTH} levels"
    try:
        json.loads(text, object_pairs_hook=_no_repeats)
    except _RepeatedKeyError as error:
        return f"the body repeats the key {str(error)!r} in one object"
    except ValueError as error:
        return f"the body is not JSON: {error}"
    return None


def _charset(scope: Scope) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == b"content-type":
            for parameter in bytes(value).decode("latin-1").split(";")[1:]:
                name, _, given = parameter.strip().partition("=")
                if name.strip().lower() == "charset":
                    return given.strip().strip('"').lower()
    return None


def _has_body(scope: Scope) -> bool:
    for key, value in scope.get("headers", ()):
        name = key.lower()
        if name == b"transfer-encoding" or (
            name == b"content-length" and bytes(value).strip() not in (b"0",)
        ):
            return True
    return False


#: Methods whose body a route reads; any other method's body is never read (``body_limit`` closes).
_WITH_BODY = frozenset({"POST", "PUT", "PATCH"})


class StrictJsonBody:
    """ASGI middleware: 415 for a charset other than UTF-8, 422 for a body that is not strict UTF-8 JSON."""

    def __init__(self, app: ASGIApp) -> None:
        """Wrap ``app``."""
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in _WITH_BODY or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        charset = _charset(scope)
        if charset is not None and charset not in ("utf-8", "utf8"):
            detail = f"charset={charset} is not supported: send application/json in UTF-8"
            # Nothing of the body read: close rather than let the server drain it.
            await error_answer(415, "UnsupportedMediaType", detail, close=True)(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()  # the body cap's counting receive: at most the cap
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        why = problem(body)
        if why is not None:
            problems = [{"loc": ["body"], "msg": why, "type": "json_invalid"}]
            await error_answer(422, "RequestValidationError", problems)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: a disconnect, when it comes

        await self.app(scope, replay, send)
