"""The control plane's JSON answers and its one error shape (SPEC.md R-HTTP-3, R-HTTP-5).

``JsonAnswer`` renders any JSON-native value: with ``orjson`` where it can (it refuses lone surrogates,
integers beyond 64 bits and nesting beyond 255 levels), else with ``json.dumps(ensure_ascii=True)``, which
writes a lone surrogate as its ``\\ud800`` escape. A row may hold one (R-WRITE-1), and an invalid rollout
ID echoed in an error may too: Starlette's own ``JSONResponse`` encodes to strict UTF-8 and raised
``UnicodeEncodeError`` there, turning a 400 into a 500.

``error_answer`` builds every error the server sends, 4xx and 5xx: ``{"detail", "error", "rollout_id"}``
(``ErrorBody`` in the OpenAPI document), ``Connection: close`` when the server is about to drop the
connection. Not guaranteed: that ``detail`` keeps its wording between versions (match on ``error``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

__all__ = ["JsonAnswer", "error_answer", "error_body", "render_json"]


def render_json(content: Any) -> bytes:
    """``content`` as UTF-8 JSON bytes, never raising for a lone surrogate (see the module docstring)."""
    try:
        return orjson.dumps(content)
    except TypeError:  # orjson.JSONEncodeError: surrogates, big integers, deep nesting
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


class JsonAnswer(Response):
    """A JSON response rendered by ``render_json``."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        """The body's bytes."""
        return render_json(content)


def error_body(error: str, detail: Any, rollout_id: object = None) -> dict[str, Any]:
    """The one error shape: what went wrong, the error's class name, the rollout ID when there is one."""
    return {
        "detail": detail,
        "error": error,
        "rollout_id": rollout_id if isinstance(rollout_id, str) else None,
    }


def error_answer(
    status: int,
    error: str,
    detail: Any,
    *,
    rollout_id: object = None,
    close: bool = False,
    headers: Mapping[str, str] | None = None,
) -> JsonAnswer:
    """An error answer in the one shape.

    Args:
        status: the HTTP status.
        error: the error's class name (the client maps it back, R-HTTP-5).
        detail: a sentence, or a list of problems for a malformed body.
        rollout_id: the rollout the error is about, if any.
        close: add ``Connection: close`` (the server drops the connection after this answer).
        headers: more headers (``Allow``, ``WWW-Authenticate``).
    """
    extra = dict(headers or {})
    if close:
        extra["Connection"] = "close"
    return JsonAnswer(error_body(error, detail, rollout_id), status_code=status, headers=extra)
