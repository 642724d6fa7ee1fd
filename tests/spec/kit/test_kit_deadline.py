"""The kit has no deadline, whatever Hypothesis profile is active (SPEC.md R-KIT-8; docs/kit.md).

``check_ledger(open_ledger)`` without ``settings=`` runs under the active profile. Under Hypothesis's own
defaults that profile has a 200 ms deadline per example, which a correct but slow ledger (a real disk on a
loaded machine) exceeds; the kit bounds each call with its own budget instead, so the verdict must be the
ledger's, not ``DeadlineExceeded``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.reference import ReferenceLedger
from capture_ledger.reference.mutants import DuplicatesReportedTwice
from capture_ledger.spec import Manifest, RolloutRemoval, check_ledger
from capture_ledger.spec.kit import kit_settings
from hypothesis import settings

#: A profile with Hypothesis's defaults (its 200 ms deadline included) and few examples, to stay short;
#: derandomized, so that the four examples are the same in every run (with random ones, a CI run once drew
#: none that repeats an ID in a batch, and the broken ledger below passed).
DEFAULTS_PROFILE = "kit-test-hypothesis-defaults"
settings.register_profile(
    DEFAULTS_PROFILE, parent=settings.get_profile("default"), max_examples=4, derandomize=True
)


class SlowLedger:
    """The reference ledger, each write 0.25 s slow: past Hypothesis's default deadline in one call."""

    def __init__(self) -> None:
        self.inner = ReferenceLedger()

    def _slow(self) -> None:
        time.sleep(0.25)

    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        self._slow()
        self.inner.record(rollout_id, row)

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        self._slow()
        self.inner.record_failure(rollout_id, model_call_id, reason)

    def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        return self.inner.admit(rollout_id, model_call_id)

    def manifest(self, rollout_id: str) -> Manifest:
        return self.inner.manifest(rollout_id)

    def has_rows(self, rollout_id: str) -> bool:
        return self.inner.has_rows(rollout_id)

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        return self.inner.retire(rollout_ids)

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        return self.inner.delete(rollout_ids)


def open_slow(workspace: Path) -> SlowLedger:
    return SlowLedger()


class SlowToOpen(ReferenceLedger):
    """The reference ledger, 0.3 s to open: each example is past Hypothesis's default deadline before its
    first call."""

    def __init__(self) -> None:
        time.sleep(0.3)
        super().__init__()


class SlowToOpenAndBroken(DuplicatesReportedTwice):
    """0.3 s to open, and batches not de-duplicated (R-BATCH-3): the kit shrinks slow examples."""

    def __init__(self) -> None:
        time.sleep(0.3)
        super().__init__()


@pytest.fixture
def hypothesis_defaults() -> Iterator[None]:
    previous = settings._current_profile  # the suite's profile (tests/conftest.py), restored after
    settings.load_profile(DEFAULTS_PROFILE)
    try:
        yield
    finally:
        settings.load_profile(previous or "default")


def test_the_kit_runs_without_a_deadline_under_hypothesis_defaults(hypothesis_defaults: None) -> None:
    assert settings().deadline is not None  # the active profile does have a deadline
    assert kit_settings().deadline is None
    assert kit_settings().max_examples == 4  # the rest of the active profile is kept
    # A deadline in the caller's settings is dropped too: the per-call budget is the kit's bound.
    assert kit_settings(settings(max_examples=2, deadline=100)).deadline is None


@pytest.mark.slow  # each write sleeps 0.25 s (about 15 s); kit_settings' test above stays fast
def test_a_slow_ledger_gets_its_verdict_under_hypothesis_defaults(hypothesis_defaults: None) -> None:
    """Each write 0.25 s: past the default deadline in one call; the verdict is the ledger's (it conforms)."""
    check_ledger(open_slow)


def test_a_slow_constructor_gets_its_verdict_under_hypothesis_defaults(hypothesis_defaults: None) -> None:
    """Each example opens a handle in 0.3 s, past the 200 ms default deadline: the verdict is the ledger's."""
    verdict = check_ledger(lambda workspace: SlowToOpen())
    assert verdict.conforms and verdict.examples >= 4


@pytest.mark.slow  # shrinking runs a few hundred 0.3 s examples (about 90 s)
def test_a_slow_broken_ledger_is_shrunk_to_its_verdict_under_hypothesis_defaults(
    hypothesis_defaults: None,
) -> None:
    """Shrinking re-runs slow examples; no ``DeadlineExceeded`` and no ``Flaky`` either: R-BATCH-3."""
    with pytest.raises(AssertionError, match=r"broken: R-BATCH-3\n"):
        check_ledger(lambda workspace: SlowToOpenAndBroken())
