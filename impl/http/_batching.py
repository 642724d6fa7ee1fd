"""Client-side batching of retire and delete (SPEC.md R-HTTP-4, R-BATCH-1..4).

The one implementation shared by ``RolloutControlClient`` and ``AsyncRolloutControlClient``: validate and
de-duplicate the whole list before anything is sent (R-BATCH-1..3), split it into requests of at most the
batch size (``MAX_LEDGER_BATCH`` read at call time unless the client was given a smaller size), and merge
the per-request results in order. Because the list is de-duplicated first, each ID travels in exactly one
request, so concatenating the ``removed`` and the ``absent`` lists of the requests in order gives each list
in first-seen order, as one call on the ledger would (R-BATCH-3).

Pure: no I/O. Not guaranteed: atomicity across requests. A batch split into several requests changes
state request by request (as a ledger changes state ID by ID, R-CONC-1); when a later request fails, the
earlier ones have taken effect, and resending the whole list is safe because both operations are
idempotent (R-RETIRE-4).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from capture_ledger.spec.core import ids as _ids
from capture_ledger.spec.core.ids import validate_rollout_ids
from capture_ledger.spec.core.protocol import RolloutRemoval

__all__ = ["RemovalPlan", "batch_limit", "check_removal", "merge_removals", "plan_removal"]


def batch_limit(batch_size: int | None = None) -> int:
    """The number of IDs per request: ``batch_size``, or ``MAX_LEDGER_BATCH`` as it is at call time.

    Args:
        batch_size: a client's own limit; ``None`` for the protocol's.

    Returns:
        A positive number no larger than ``MAX_LEDGER_BATCH`` (the server's limit, R-HTTP-4).

    Raises:
        ValueError: ``batch_size`` is below 1 or above ``MAX_LEDGER_BATCH``.
    """
    # Read through the module, not a name bound at import, so the limit is the one in force now.
    limit = _ids.MAX_LEDGER_BATCH
    if batch_size is None:
        return limit
    if not 1 <= batch_size <= limit:
        raise ValueError(f"batch_size must be between 1 and {limit}, got {batch_size}")
    return batch_size


@dataclass(frozen=True, slots=True)
class RemovalPlan:
    """The requests of one ``retire`` or ``delete`` call.

    Attributes:
        batches: the de-duplicated IDs split into requests, in first-seen order; empty for an empty list.
    """

    batches: tuple[tuple[str, ...], ...]


def merge_removals(results: Sequence[RolloutRemoval]) -> RolloutRemoval:
    """Merge the results of a plan's batches, given in the order of ``RemovalPlan.batches``.

    Args:
        results: one removal per batch, each already checked with ``check_removal``.

    Returns:
        One removal with each list in first-seen order (the batches are disjoint and in order).
    """
    merged: RolloutRemoval = {"removed": [], "absent": []}
    for result in results:
        merged["removed"].extend(result["removed"])
        merged["absent"].extend(result["absent"])
    return merged


def plan_removal(rollout_ids: object, *, batch_size: int | None = None) -> RemovalPlan:
    """Validate, de-duplicate and split a list of rollout IDs before anything is sent.

    Args:
        rollout_ids: a list or tuple of rollout IDs.
        batch_size: IDs per request; ``None`` for ``MAX_LEDGER_BATCH`` at call time.

    Returns:
        The plan; an empty list gives a plan with no batches (R-BATCH-4: nothing is sent).

    Raises:
        TypeError: ``rollout_ids`` is a bare string or not a sequence (R-BATCH-1).
        InvalidRolloutIdError: any ID is invalid; nothing is sent (R-BATCH-2).
        ValueError: ``batch_size`` is out of range.
    """
    limit = batch_limit(batch_size)
    distinct = validate_rollout_ids(rollout_ids)
    return RemovalPlan(tuple(tuple(distinct[i : i + limit]) for i in range(0, len(distinct), limit)))


def check_removal(batch: Sequence[str], payload: object) -> RolloutRemoval | str:
    """Check that a server's answer for ``batch`` is a removal that partitions it, in order.

    The answer must name each ID of ``batch`` exactly once, in ``removed`` or in ``absent``, name nothing
    else, and keep each list in the order the IDs were sent (R-BATCH-3).

    Args:
        batch: the distinct IDs sent in one request.
        payload: the decoded JSON body of the answer.

    Returns:
        The removal, or a sentence saying what is wrong with the answer.
    """
    if not isinstance(payload, Mapping) or set(payload) != {"removed", "absent"}:
        return f"expected an object with 'removed' and 'absent', got {payload!r:.200}"
    removed, absent = payload["removed"], payload["absent"]
    if not isinstance(removed, list) or not isinstance(absent, list):
        return "'removed' and 'absent' must be lists"
    named = removed + absent
    if not all(isinstance(rollout_id, str) for rollout_id in named):
        return "'removed' and 'absent' must hold strings"
    position = {rollout_id: index for index, rollout_id in enumerate(batch)}
    extra = [rollout_id for rollout_id in named if rollout_id not in position]
    if extra:
        return f"the answer names IDs that were not sent: {extra!r:.200}"
    repeated = [rollout_id for rollout_id, count in Counter(named).items() if count > 1]
    if repeated:
        return f"the answer names IDs more than once: {repeated!r:.200}"
    answered = set(named)
    missing = [rollout_id for rollout_id in batch if rollout_id not in answered]
    if missing:
        return f"the answer leaves out IDs that were sent: {missing!r:.200}"
    for name, part in (("removed", removed), ("absent", absent)):
        indexes = [position[rollout_id] for rollout_id in part]
        if indexes != sorted(indexes):
            return f"{name!r} is not in the order the IDs were sent"
    return {"removed": list(removed), "absent": list(absent)}
