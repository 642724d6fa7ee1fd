"""What a fresh handle of a ledger read from one crash image (R-STATE-3, R-STORE-8; SPEC.md §Crash).

Every reader (our store's image observer, the child process that reads a traced target's images, the
kernel study's mounted images) turns what it read into an ``Observation``; the judgement
(``judgement.judge``) reads only this.

Not guaranteed: anything about how the reading was made (each reader says).
"""

from __future__ import annotations

from dataclasses import dataclass

from capture_ledger.spec.core.model import RolloutState

__all__ = ["Observation"]


@dataclass(kw_only=True, frozen=True, slots=True)
class Observation:
    """What a fresh store read from one image: per-ID state from the files, API mismatches, check findings.

    ``unreadable`` says why the image could not be read at all (the files do not map to states, the store
    under study raised when opened, or did not answer within the budget); ``states`` is then empty and
    ``culprit`` names the rollout whose files could not be read, when known.
    """

    states: tuple[tuple[str, RolloutState], ...]
    mismatches: tuple[str, ...]
    findings: tuple[str, ...]
    unreadable: str | None = None
    culprit: str | None = None

    def state(self, rollout_id: str) -> RolloutState:
        """The state read from the files for ``rollout_id``.

        Raises:
            KeyError: the image was ``unreadable``.
        """
        return dict(self.states)[rollout_id]
