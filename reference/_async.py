"""Any ledger behind coroutine methods, as NeMo Gym's are (SPEC.md §Conformance, R-KIT-5).

``AsyncLedger`` delegates each method of the ``CaptureLedger`` protocol to a synchronous ledger and is
correct when that ledger is: ``capture_ledger.reference.mutants`` wraps the reference in it (which must
pass the kit) and a mutant (which must fail it, and does only if the kit awaits every method). It is
imported from there.

Not guaranteed: concurrency of its own. Each coroutine runs the wrapped call to completion without
yielding, so it is as thread-safe as the wrapped ledger and never overlaps two calls on one event loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from capture_ledger.spec import Manifest, RolloutRemoval

__all__ = ["AsyncLedger"]


class AsyncLedger:
    """A ledger whose methods are coroutines (as NeMo Gym's are), delegating to a synchronous one.

    Correct when the wrapped ledger is; the kit must await every method (R-KIT-5).
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        """``record``, awaited."""
        self._inner.record(rollout_id, row)

    async def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        """``record_failure``, awaited."""
        self._inner.record_failure(rollout_id, model_call_id, reason)

    async def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        """``admit``, awaited."""
        key: str | None = self._inner.admit(rollout_id, model_call_id)
        return key

    async def manifest(self, rollout_id: str) -> Manifest:
        """``manifest``, awaited."""
        manifest: Manifest = self._inner.manifest(rollout_id)
        return manifest

    async def has_rows(self, rollout_id: str) -> bool:
        """``has_rows``, awaited."""
        return bool(self._inner.has_rows(rollout_id))

    async def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """``retire``, awaited."""
        removal: RolloutRemoval = self._inner.retire(rollout_ids)
        return removal

    async def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """``delete``, awaited."""
        removal: RolloutRemoval = self._inner.delete(rollout_ids)
        return removal
