"""Rows in and out of the ledger, fast and byte for byte as the spec says (SPEC.md R-WRITE-1, R-WRITE-3,
R-STORE-1).

The spec defines a valid row (``spec.core.rows.validate_row``) and its canonical JSON
(``spec.core.rows.canonical_json``: ``json.dumps`` with sorted keys, no spaces, non-ASCII kept). This module
gives the store the same answers faster, with ``orjson`` where it provably writes the same bytes, and the
spec's own functions everywhere else:

- ``row_and_canonical(row)`` validates and encodes. The fast path takes a plain ``dict`` whose values are
  all of the exact JSON types, whose ``float``\\ s Python writes without an exponent (``1e-4 <= |x| < 1e16``,
  or zero: orjson writes ``1e-7`` where ``json`` writes ``1e-07``, and ``0.00001`` for ``1e-05``), and whose
  strings and integers ``orjson`` accepts (it refuses lone surrogates and integers beyond 64 bits, and
  nesting deeper than 255). Anything else (a ``Mapping`` that is not a ``dict``, a wrong type, a float
  with an exponent, an invalid row) goes to ``spec.core.rows``, which raises the spec's own errors.
- ``record_of_line(line)`` decodes a ``{"record":...}`` line: ``orjson.loads``, the same validation, and
  the line must be exactly ``{"record":`` + the row's canonical JSON + ``}``, as this store writes it;
  otherwise (a line written by something else, a big integer that ``orjson`` would read as a float) the
  spec's path (``json.loads``, ``validate_row``, ``canonical_json``) decides.
- ``parse_canonical(text)`` turns a canonical row back into a ``dict`` (``manifest``): ``orjson.loads``,
  accepted only when ``orjson`` writes the result back as exactly ``text`` (which rules out the silent
  int-to-float conversion), else ``json.loads``.

``tests/impl/store/test_store_canonical.py`` holds each function to the spec's with Hypothesis over every
kind of row.
Without ``orjson`` installed every call takes the spec's path. Not guaranteed: any speed; the bytes on
disk are the spec's in every case (one format).
"""

from __future__ import annotations

import json
from typing import Any

from capture_ledger.spec.core.rows import canonical_json, validate_row

try:  # a dependency of the package; imported defensively so that the store works without it
    import orjson
except ImportError:  # pragma: no cover - orjson is installed with the package
    orjson = None  # type: ignore[assignment]

__all__ = ["FAST", "parse_canonical", "record_of_line", "row_and_canonical"]

#: Whether ``orjson`` is available (every function falls back to the spec's path without it).
FAST = orjson is not None

_OPTIONS = orjson.OPT_SORT_KEYS if orjson is not None else 0
_RECORD_PREFIX = b'{"record":'


_SIMPLE = frozenset({str, int, bool, type(None)})


def _plain(row: dict[Any, Any]) -> bool:
    """Whether every key and value of ``row`` (recursively) is of a type the fast path writes as ``json``
    does. Nesting too deep for ``orjson`` makes it raise, which also sends the row to the spec's path."""
    simple = _SIMPLE
    stack: list[Any] = [row]
    while stack:
        container = stack.pop()
        if type(container) is dict:
            for key in container:
                if type(key) is not str:
                    return False
            values: Any = container.values()
        else:
            values = container
        for value in values:
            kind = type(value)
            if kind in simple:
                continue
            if kind is float:
                if value != 0.0 and not 1e-4 <= abs(value) < 1e16:
                    return False  # not finite, or written with an exponent: the spec's path
            elif kind is dict or kind is list:
                stack.append(value)
            else:
                return False
    return True


def _fast_canonical(row: dict[str, Any]) -> bytes | None:
    """The canonical JSON (UTF-8) of a plain, valid-looking row by ``orjson``, or ``None`` when it cannot
    say."""
    if orjson is None or not _plain(row):
        return None
    try:
        return orjson.dumps(row, option=_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: a lone surrogate, an integer beyond 64 bits, depth
        return None


def row_and_canonical(row: object) -> tuple[dict[str, Any], str, bytes | None]:
    """Validate ``row`` as ``spec.core.rows.validate_row`` does and return it with its canonical JSON.

    Args:
        row: what the caller passed to ``record``.

    Returns:
        The row as a plain ``dict``, its canonical JSON (equal to ``canonical_json(validate_row(row))``),
        and, from the fast path, the same text in UTF-8 (``None`` from the spec's path).

    Raises:
        TypeError, ValueError: exactly as ``validate_row`` raises them.
    """
    if type(row) is dict:
        call = row.get("model_call_id")
        key = row.get("staging_key")
        if type(call) is str and call and (key is None or type(key) is str):
            raw = _fast_canonical(row)
            if raw is not None:
                return row, raw.decode("utf-8"), raw
    plain = validate_row(row)
    return plain, canonical_json(plain), None


def record_of_line(line: bytes) -> tuple[dict[str, Any], str] | None:
    """The row of a ``{"record":<canonical row>}`` line and its canonical JSON, when the line is exactly
    what this store writes and the fast path can read it; ``None`` sends the caller to the spec's path.

    Args:
        line: one complete line without its newline.
    """
    if orjson is None or not line.startswith(_RECORD_PREFIX):
        return None
    try:
        value = orjson.loads(line)
    except (ValueError, TypeError):  # orjson.JSONDecodeError: invalid UTF-8 (a lone surrogate), syntax
        return None
    if type(value) is not dict or len(value) != 1 or type(row := value.get("record")) is not dict:
        return None
    call = row.get("model_call_id")
    key = row.get("staging_key")
    if not (type(call) is str and call and (key is None or type(key) is str)):
        return None
    encoded = _fast_canonical(row)
    if encoded is None or len(line) != len(encoded) + 11 or line[10:-1] != encoded or line[-1:] != b"}":
        return None  # not the canonical line of this row: let json decide
    return row, encoded.decode("utf-8")


def parse_canonical(text: str) -> dict[str, Any]:
    """The row whose canonical JSON is ``text``: ``json.loads(text)``, type for type.

    Raises:
        json.JSONDecodeError: ``text`` is not JSON (never for the canonical JSON of a row).
    """
    if orjson is not None:
        try:
            value = orjson.loads(text)
        except (ValueError, TypeError):
            value = None
        if type(value) is dict:
            try:
                same = orjson.dumps(value, option=_OPTIONS) == text.encode("utf-8")
            except (TypeError, UnicodeEncodeError):
                same = False
            if same:
                return value
    parsed: dict[str, Any] = json.loads(text)
    return parsed
