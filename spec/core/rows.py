"""Ledger rows: validation and canonical form (SPEC.md R-WRITE-1..2, R-WRITE-7).

A row is a JSON object: string keys, JSON-native values (``str``, ``int``, finite ``float``, ``bool``,
``None``, ``list``, ``dict``; exact types, so a tuple or an ``IntEnum`` is refused rather than silently
converted), a non-empty string ``model_call_id`` and optionally ``staging_key`` as a string or null.
Two rows are identical when their canonical JSON is equal, so ``true`` differs from ``1`` and ``1`` from
``1.0`` (R-WRITE-3).

Pure functions; no I/O. Not guaranteed: any limit on a row's size (none is imposed).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "canonical_json",
    "row_staging_key",
    "validate_failure",
    "validate_model_call_id",
    "validate_row",
]

_SCALARS = (str, int, bool, type(None))


def _check_value(value: object, path: str) -> None:
    kind = type(value)
    if kind in _SCALARS:
        return
    if isinstance(value, float) and kind is float:
        if not math.isfinite(value):
            raise ValueError(f"row value at {path} is {value!r}; JSON has no NaN or infinity")
        return
    if isinstance(value, list) and kind is list:
        for index, item in enumerate(value):
            _check_value(item, f"{path}[{index}]")
        return
    if isinstance(value, dict) and kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError(f"row key {key!r} at {path} is not a str")
            _check_value(item, f"{path}.{key}")
        return
    raise TypeError(
        f"row value at {path} has type {kind.__name__}; use str, int, float, bool, None, list or dict"
    )


def validate_model_call_id(model_call_id: object, *, name: str = "model_call_id") -> str:
    """Return ``model_call_id`` if it is a non-empty string.

    Raises:
        TypeError: not a ``str``.
        ValueError: empty.
    """
    if type(model_call_id) is not str:
        raise TypeError(f"{name} must be a str, got {type(model_call_id).__name__}")
    if not model_call_id:
        raise ValueError(f"{name} must not be empty")
    return model_call_id


def validate_row(row: object) -> dict[str, Any]:
    """Check that ``row`` is a ledger row and return it as a plain ``dict`` (R-WRITE-1).

    Raises:
        TypeError: not a mapping, a non-string key, a value of a non-JSON type, or a ``model_call_id`` or
            ``staging_key`` of the wrong type.
        ValueError: a non-finite float, a missing or empty ``model_call_id``.
    """
    if not isinstance(row, Mapping):
        raise TypeError(f"a row must be a mapping (a JSON object), got {type(row).__name__}")
    plain = dict(row)
    _check_value(plain, "row")
    if "model_call_id" not in plain:
        raise ValueError("a row needs a 'model_call_id'")
    validate_model_call_id(plain["model_call_id"])
    key = plain.get("staging_key")
    if key is not None and type(key) is not str:
        raise TypeError(f"staging_key must be a str or None, got {type(key).__name__}")
    return plain


def validate_failure(model_call_id: object, reason: object) -> tuple[str, str]:
    """Check the arguments of ``record_failure`` (R-WRITE-7): two non-empty strings.

    Raises:
        TypeError: either is not a ``str``.
        ValueError: either is empty.
    """
    return validate_model_call_id(model_call_id), validate_model_call_id(reason, name="reason")


def canonical_json(row: Mapping[str, Any]) -> str:
    """The canonical JSON of a valid row: sorted keys, no spaces, non-ASCII kept (R-WRITE-3)."""
    return json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def row_staging_key(row: Mapping[str, Any]) -> str | None:
    """The row's ``staging_key`` when it has one, named by the discarded-write warning (R-WRITE-5)."""
    key = row.get("staging_key")
    return key if isinstance(key, str) else None
