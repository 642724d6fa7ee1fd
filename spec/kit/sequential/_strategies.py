"""Hypothesis strategies for rollout IDs, rows, batches and JSON values (used by the conformance kit and
the fuzzers; R-ID-1..2, R-WRITE-1).

Choices are ordered from simplest to most complex, because Hypothesis shrinks toward earlier choices
(the ShardStore paper's lesson): a counterexample then names ``'a'`` rather than a 200-character ID.
Invalid inputs are fixed lists of the cases SPEC.md names, each with a valid-Python ``repr`` except the
non-finite floats, which print as ``nan`` and ``inf``. ``json_values`` draws any JSON document, for
fuzzing bodies that must be refused.

Not guaranteed: the order or the distribution of examples (a test must not depend on which example comes
when; tests/impl/http/test_http_fuzz.py aims its own meta-test for that reason).
"""

from __future__ import annotations

import string
from typing import Any

from capture_ledger.spec.core.ids import MAX_ROLLOUT_ID_LENGTH
from hypothesis import strategies as st

__all__ = [
    "ID_FIRST_CHARACTERS",
    "ID_OTHER_CHARACTERS",
    "INVALID_ROLLOUT_IDS",
    "INVALID_ROWS",
    "invalid_rollout_id_strings",
    "invalid_rollout_ids",
    "invalid_rows",
    "json_values",
    "model_call_ids",
    "rollout_ids",
    "rows",
]

ID_FIRST_CHARACTERS = string.ascii_letters + string.digits
ID_OTHER_CHARACTERS = ID_FIRST_CHARACTERS + "._-"

#: Each breaks one clause of R-ID-1 (or R-ID-2: not a string).
INVALID_ROLLOUT_IDS: tuple[object, ...] = (
    "",
    ".hidden",
    "-a",
    "_a",
    "a/b",
    "../a",
    "a b",
    "a\n",
    "é",
    "a" * (MAX_ROLLOUT_ID_LENGTH + 1),
    None,
    7,
)

#: Each breaks one clause of R-WRITE-1.
INVALID_ROWS: tuple[object, ...] = (
    "not a row",
    {},
    {"model_call_id": ""},
    {"model_call_id": 1},
    {"model_call_id": "c0", "staging_key": 1},
    {"model_call_id": "c0", 1: "non-string key"},
    {"model_call_id": "c0", "value": (1, 2)},
    {"model_call_id": "c0", "value": float("nan")},
    {"model_call_id": "c0", "value": {"deep": float("inf")}},
    {"model_call_id": "c0", "value": b"bytes"},
)


def rollout_ids() -> st.SearchStrategy[str]:
    """Valid rollout IDs: a few short ones first, then any allowed characters, then the length limit."""
    tail = st.text(alphabet=ID_OTHER_CHARACTERS, max_size=12)
    longest = st.text(
        alphabet=ID_OTHER_CHARACTERS,
        min_size=MAX_ROLLOUT_ID_LENGTH - 1,
        max_size=MAX_ROLLOUT_ID_LENGTH - 1,
    )
    first = st.sampled_from(ID_FIRST_CHARACTERS)
    return st.one_of(
        st.sampled_from(["a", "b", "c"]),
        st.builds(str.__add__, first, tail),
        st.builds(str.__add__, first, longest),
    )


def invalid_rollout_ids() -> st.SearchStrategy[object]:
    """Values that are not valid rollout IDs."""
    return st.sampled_from(INVALID_ROLLOUT_IDS)


def invalid_rollout_id_strings() -> st.SearchStrategy[str]:
    """The strings among ``INVALID_ROLLOUT_IDS`` (R-ID-1), for where only a string fits: a URL path."""
    return st.sampled_from([i for i in INVALID_ROLLOUT_IDS if isinstance(i, str)])


def json_values(*, max_leaves: int = 6, infinities: bool = False) -> st.SearchStrategy[Any]:
    """Any JSON document: ``null``, booleans, integers, finite floats, short strings, and lists and objects
    of them, at most ``max_leaves`` scalars in all; with ``infinities``, also the floats that
    ``json.dumps`` writes as the non-JSON ``Infinity`` and ``-Infinity`` (for bodies a server must refuse)."""
    floats = st.floats(allow_nan=False, allow_infinity=infinities)
    scalars = st.none() | st.booleans() | st.integers() | floats
    return st.recursive(
        scalars | st.text(max_size=6),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
        max_leaves=max_leaves,
    )


def model_call_ids() -> st.SearchStrategy[str]:
    """A small pool, so identical and conflicting re-records are frequent."""
    return st.sampled_from(["m0", "m1", "m2"])


#: Values chosen to tell canonical JSON apart: ``1``, ``1.0`` and ``True`` are three different rows.
_VALUES: tuple[Any, ...] = (1, 1.0, True, None, "x", "ü", [1, "x"], {"k": [None]}, -0.5)


def rows() -> st.SearchStrategy[dict[str, Any]]:
    """Valid rows: a ``model_call_id`` from a small pool, maybe a staging key, maybe a value."""
    return st.fixed_dictionaries(
        {"model_call_id": model_call_ids()},
        optional={
            "staging_key": st.one_of(st.none(), st.sampled_from(["s0", "s1"])),
            "value": st.sampled_from(_VALUES),
        },
    )


def invalid_rows() -> st.SearchStrategy[object]:
    """Values that ``record`` must reject before changing anything."""
    return st.sampled_from(INVALID_ROWS)
