"""Rollout-ID rules and batch validation (SPEC.md R-ID-1..3, R-BATCH-1..3).

A rollout ID names files in the lineage directory, so the rules are strict: 1 to
``MAX_ROLLOUT_ID_LENGTH`` characters matching ``[A-Za-z0-9][A-Za-z0-9._-]*`` (ASCII only, no leading dot
or dash, no slash). The upstream validator has no length limit, so an ID it accepts can still fail at the
file system with a name too long; ours fails validation instead (SPEC.md §Decisions).

These functions are pure and total: CrossHair checks their contracts (``capture_ledger.spec.core.contracts``).
Not guaranteed: that an ID valid here is unused, or that the directory holding it exists.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from capture_ledger.spec.core.errors import InvalidRolloutIdError

__all__ = [
    "MAX_LEDGER_BATCH",
    "MAX_ROLLOUT_ID_LENGTH",
    "ROLLOUT_ID_PATTERN",
    "staging_key",
    "validate_rollout_id",
    "validate_rollout_ids",
]

#: Longest rollout ID (R-ID-1). ``<id>.lineage.retired`` then stays far below NAME_MAX (255).
MAX_ROLLOUT_ID_LENGTH = 200
#: Most IDs in one HTTP request (R-HTTP-4); clients split longer lists. Ledgers take any batch size.
MAX_LEDGER_BATCH = 4096
#: The character rule of R-ID-1, to be used with ``fullmatch``.
ROLLOUT_ID_PATTERN: re.Pattern[str] = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def validate_rollout_id(rollout_id: object) -> str:
    """Return ``rollout_id`` if it is a valid rollout ID (R-ID-1).

    Args:
        rollout_id: the candidate; anything that is not a ``str`` is invalid.

    Returns:
        The same string.

    Raises:
        InvalidRolloutIdError: not a string, empty, longer than ``MAX_ROLLOUT_ID_LENGTH``, or breaking the
            character rule.
    """
    if not isinstance(rollout_id, str):
        raise InvalidRolloutIdError(rollout_id, f"expected a str, got {type(rollout_id).__name__}")
    if not rollout_id:
        raise InvalidRolloutIdError(rollout_id, "empty")
    if len(rollout_id) > MAX_ROLLOUT_ID_LENGTH:
        raise InvalidRolloutIdError(
            rollout_id, f"{len(rollout_id)} characters, more than {MAX_ROLLOUT_ID_LENGTH}"
        )
    if ROLLOUT_ID_PATTERN.fullmatch(rollout_id) is None:
        raise InvalidRolloutIdError(rollout_id, "disallowed character or leading '.', '-' or '_'")
    return rollout_id


def validate_rollout_ids(rollout_ids: object) -> list[str]:
    """Validate a whole batch and de-duplicate it in first-seen order (R-BATCH-1..3).

    Args:
        rollout_ids: a sequence (list or tuple) of rollout IDs.

    Returns:
        The distinct IDs in the order of their first appearance.

    Raises:
        TypeError: ``rollout_ids`` is a bare ``str`` (a string is a sequence of one-character IDs), bytes,
            or not a sequence at all.
        InvalidRolloutIdError: any element is invalid; raised before the caller changes anything.
    """
    if isinstance(rollout_ids, str | bytes | bytearray):
        raise TypeError(
            f"rollout_ids must be a list of rollout IDs, not a bare {type(rollout_ids).__name__}; "
            "wrap a single ID in a list"
        )
    if not isinstance(rollout_ids, Sequence):
        raise TypeError(
            f"rollout_ids must be a list or tuple of rollout IDs, got {type(rollout_ids).__name__}"
        )
    seen: dict[str, None] = {}
    for rollout_id in rollout_ids:
        seen[validate_rollout_id(rollout_id)] = None
    return list(seen)


def staging_key(rollout_id: str, model_call_id: str) -> str:
    """The key under which a model call's tokens are staged (R-ADMIT-1): ``rollout_id/model_call_id``."""
    return f"{rollout_id}/{model_call_id}"
