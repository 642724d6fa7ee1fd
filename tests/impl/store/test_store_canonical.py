"""The store's fast row codec writes and reads exactly what the spec's does (SPEC.md R-WRITE-1, R-WRITE-3,
R-STORE-1; impl/store/canonical.py).

What they prove, with Hypothesis over rows of every JSON shape (any text, including lone surrogates and
control characters; integers far beyond 64 bits; every finite float, with the ones around the exponent
boundaries pinned as examples; nesting deeper than orjson allows; invalid values of every kind):

- ``row_and_canonical`` returns ``validate_row``'s row and ``canonical_json``'s text, byte for byte, or
  raises the very exception (type and message) ``validate_row`` raises: the bytes on disk stay one format;
- ``record_of_line`` reads a line this store wrote as the spec's decoder does, and any other line either
  the same way or not at all (the caller then takes the spec's path);
- ``parse_canonical`` returns what ``json.loads`` returns, type for type (``1`` and ``1.0``, ``-0.0``,
  big integers).

The comparisons fail for a codec that trusts orjson for every float or integer
(``test_the_checks_catch_a_codec_without_its_fallbacks``).
"""

from __future__ import annotations

import enum
import importlib.util
import json
import math
from typing import Any

import pytest
from capture_ledger.impl.store import (
    decode,
    encode,
    parse_canonical,
    record_of_line,
    row_and_canonical,
)
from capture_ledger.spec.core.model import RecordEntry
from capture_ledger.spec.core.rows import canonical_json, validate_row
from capture_ledger.spec.kit import profile_settings
from capture_ledger.spec.kit.sequential import INVALID_ROWS
from hypothesis import example, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("orjson") is None, reason="orjson is not installed: only the spec's path"
)

#: Floats on both sides of where ``repr`` switches to an exponent, and the extremes.
EDGE_FLOATS = (
    0.0,
    -0.0,
    1e-4,
    9.999999999999999e-05,
    0.00010000000000000002,
    1e-5,
    1.5e-05,
    1e16,
    9999999999999998.0,
    1.0000000000000002e16,
    123456789012345.67,
    5e-324,
    1.7976931348623157e308,
    -1e22,
    0.1,
    2.5,
)


class Color(enum.IntEnum):
    RED = 1


def _texts() -> st.SearchStrategy[str]:
    # Every code point, lone surrogates included (a row may hold one, R-WRITE-1), control characters too.
    return st.text(st.characters(codec=None, exclude_categories=()), max_size=8)


def _scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from(EDGE_FLOATS),
        _texts(),
    )


def _values() -> st.SearchStrategy[Any]:
    return st.recursive(
        _scalars(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_texts(), inner, max_size=3),
        max_leaves=8,
    )


def _rows() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda call, key, extra: {"model_call_id": call, **({"staging_key": key} if key else {}), **extra},
        st.text(min_size=1, max_size=6),
        st.one_of(st.none(), st.text(max_size=6)),
        st.dictionaries(_texts(), _values(), max_size=4),
    )


def _bad_rows() -> st.SearchStrategy[object]:
    bad_values = st.one_of(
        st.sampled_from([float("nan"), float("inf"), -float("inf"), (1, 2), Color.RED, b"x", {1, 2}]),
        st.builds(lambda k: {k: 1}, st.integers()),  # a non-string key, nested
    )
    return st.one_of(
        st.sampled_from(INVALID_ROWS),
        st.builds(lambda row, v: {**row, "bad": v}, _rows(), bad_values),
        st.builds(lambda row, v: {**row, "bad": [v]}, _rows(), bad_values),
        _values(),
    )


def _spec(row: object) -> tuple[Any, ...]:
    try:
        plain = validate_row(row)
    except (TypeError, ValueError) as error:
        return ("raised", type(error), str(error))
    return ("ok", plain, canonical_json(plain))


def _ours(row: object) -> tuple[Any, ...]:
    try:
        plain, text, raw = row_and_canonical(row)
    except (TypeError, ValueError) as error:
        return ("raised", type(error), str(error))
    assert raw is None or raw == text.encode("utf-8")
    return ("ok", plain, text)


def _same_types(a: Any, b: Any) -> bool:
    """Equal, and of the same type all the way down (``1 == 1.0 == True`` in Python, not in a row)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same_types(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same_types(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return math.copysign(1.0, a) == math.copysign(1.0, b) and a == b
    return bool(a == b)


@given(st.one_of(_rows(), _bad_rows()))
@example({"model_call_id": "m", "v": 2**64})
@example({"model_call_id": "m", "v": -(2**63) - 1})
@example({"model_call_id": "m", "v": "\ud800"})
@example({"model_call_id": "m", "\udfff": 1})
@example({"model_call_id": "m", "v": "\x00\x1f\x7f\u2028\U0001f600"})
@example({"model_call_id": "m", "v": 1e-05})
@example({"model_call_id": "m", "v": 1e16})
@example({"model_call_id": "m", "v": Color.RED})
@example({"model_call_id": "m", "v": (1,)})
@example({"model_call_id": "m", "😀": 1, "\uffff": 2, "é": 3, "z": 4})
@example(dict.fromkeys(["model_call_id", "b"], "m"))
@settings(profile_settings(), max_examples=max(500, profile_settings().max_examples))
def test_the_fast_encoder_writes_the_specs_bytes_or_raises_its_error(row: object) -> None:
    assert _ours(row) == _spec(row)


@pytest.mark.parametrize("value", EDGE_FLOATS)
def test_floats_around_the_exponent_boundaries_are_the_specs(value: float) -> None:
    row = {"model_call_id": "m", "v": value}
    assert _ours(row) == _spec(row)


def test_nesting_deeper_than_orjson_allows_is_the_specs() -> None:
    deep: Any = 1
    for _ in range(300):
        deep = [deep]
    row = {"model_call_id": "m", "v": deep}
    assert _ours(row) == _spec(row)


@given(_rows())
@profile_settings()
def test_a_line_the_store_wrote_reads_back_as_the_spec_reads_it(row: dict[str, Any]) -> None:
    plain = validate_row(row)
    entry = RecordEntry(plain["model_call_id"], canonical_json(plain))
    line = encode(entry)
    assert decode(line).entries == (entry,)
    fast = record_of_line(line[:-1])
    if fast is not None:
        assert fast[1] == entry.canonical and _same_types(fast[0], json.loads(entry.canonical))


@given(st.one_of(_values(), _rows(), _bad_rows()).map(lambda v: {"record": v}), st.booleans())
@example({"record": {"model_call_id": "m", "v": 123456789012345678901234567890}}, True)
@example({"record": {"model_call_id": "m", "v": 1e-05}}, True)
@profile_settings()
def test_any_line_is_read_as_the_spec_reads_it_or_left_to_it(value: Any, canonical_form: bool) -> None:
    try:
        text = json.dumps(value, sort_keys=canonical_form, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return
    line = text.encode("utf-8", "surrogatepass")
    fast = record_of_line(line)
    if fast is None:
        return
    spec = _spec(json.loads(line.decode("utf-8", "surrogatepass"))["record"])
    assert spec[0] == "ok" and fast[1] == spec[2] and _same_types(fast[0], spec[1])


@given(_rows())
@example({"model_call_id": "m", "v": 2**70, "w": -0.0, "x": 1.0, "y": 1, "z": 1e-05})
@profile_settings()
def test_a_canonical_row_parses_as_json_loads_parses_it(row: dict[str, Any]) -> None:
    text = canonical_json(validate_row(row))
    assert _same_types(parse_canonical(text), json.loads(text))


def test_the_checks_catch_a_codec_without_its_fallbacks() -> None:
    """The properties above can fail: a codec that trusts orjson for every float and integer (no range
    check, no round-trip check) breaks them on the pinned examples."""
    import orjson

    def trusting_encoder(row: dict[str, Any]) -> tuple[Any, ...]:
        return ("ok", row, orjson.dumps(row, option=orjson.OPT_SORT_KEYS).decode())

    def trusting_parser(text: str) -> dict[str, Any]:
        value: dict[str, Any] = orjson.loads(text)
        return value

    small = {"model_call_id": "m", "v": 1e-05}
    assert trusting_encoder(small) != _spec(small)
    assert _ours(small) == _spec(small)
    big = canonical_json({"model_call_id": "m", "v": 2**70})
    assert not _same_types(trusting_parser(big), json.loads(big))
    assert _same_types(parse_canonical(big), json.loads(big))
