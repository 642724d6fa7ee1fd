"""Deliberately wrong contracts: CrossHair must find a counterexample to each
(tests/spec/core/test_crosshair.py).

They show that ``crosshair check``, with the budget ``tools/crosshair-check`` gives it, has teeth on both
kinds of contract in ``capture_ledger.spec.core.contracts``: one on ``step`` with inputs drawn from small
pools,
one on the ID rule with symbolic strings. Each misstates one requirement; nothing else imports this module.
"""

from __future__ import annotations

from capture_ledger.spec.core.contracts import batch_of, first_seen, state_of
from capture_ledger.spec.core.errors import InvalidRolloutIdError
from capture_ledger.spec.core.ids import validate_rollout_id
from capture_ledger.spec.core.model import Ok, Removal, Retire, step

__all__ = ["ids_may_start_with_any_allowed_character", "retire_reports_every_id_removed"]

# Names that only the PEP 316 conditions in docstrings use: CrossHair evaluates them in this module.
_CONDITION_NAMES = (first_seen,)
_ALLOWED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"


def retire_reports_every_id_removed(k0: int, k1: int, k2: int, picks: list[int]) -> Removal:
    """WRONG (R-RETIRE-2): claims retire reports every ID of the batch as ``removed``; Absent and Retired
    IDs are reported ``absent``.

    pre: len(picks) <= 4
    post: list(__return__.removed) == first_seen(batch_of(picks))
    """
    _, result = step(state_of(k0, k1, k2), Retire(batch_of(picks)))
    assert isinstance(result, Ok) and isinstance(result.value, Removal)
    return result.value


def ids_may_start_with_any_allowed_character(candidate: str) -> bool:
    """WRONG (R-ID-1): claims an ID may start with ``.``, ``_`` or ``-``.

    pre: len(candidate) <= 4
    post: __return__ == (len(candidate) >= 1 and all(c in _ALLOWED for c in candidate))
    """
    try:
        validate_rollout_id(candidate)
    except InvalidRolloutIdError:
        return False
    return True
