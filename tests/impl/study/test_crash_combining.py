"""The crash study with combined removals (impl/store/_combining.py; R-CRASH-2, R-STORE-4, R-STORE-9).

The workloads with concurrent one-ID removals (``retires-share-syncs``, ``removals-share-syncs``) recorded
with ``combine=on`` (removals combined into batches) keep exactly the clauses of the default protocol under
every model, with no more directory syncs; the two broken combiners (a waiter that returns once its request
was taken, results handed out when phase 1 ends) are caught (R-CRASH-2: a retired ID comes back Live).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from capture_ledger.impl.study.crash import CONFIGS, EXPECTED, explore, record
from capture_ledger.spec.crash.durability import SyncDir
from capture_ledger.spec.kit.crash import WORKLOADS

MODELS = ("journaled", "weakest-posix", "ext4-nojournal")
CONCURRENT = ("retires-share-syncs", "removals-share-syncs")


@pytest.mark.parametrize("name", CONCURRENT)
def test_combining_keeps_the_clauses_of_the_default(tmp_path: Path, name: str) -> None:
    syncs: dict[str, int] = {}
    clauses: dict[str, dict[str, frozenset[str]]] = {}
    for label in ("default", "combine=on"):
        config = CONFIGS[label]
        recording = record(WORKLOADS[name], config, tmp_path / label.replace("=", "-"))
        syncs[label] = sum(1 for e in recording.trace if isinstance(e, SyncDir))
        clauses[label] = {m: frozenset(explore(recording, m).clauses) for m in MODELS}
    assert getattr(CONFIGS["combine=on"], "combine_removals", False) is True
    assert clauses["combine=on"] == clauses["default"]
    assert clauses["combine=on"]["journaled"] == frozenset()
    assert clauses["combine=on"]["weakest-posix"] == frozenset()
    assert syncs["combine=on"] <= syncs["default"]


@pytest.mark.parametrize("broken", ["await_combined_batch", "results_after_syncs"])
def test_a_combiner_that_serves_early_is_caught(tmp_path: Path, broken: str) -> None:
    config = CONFIGS[f"no {broken}"]
    assert getattr(config, "combine_removals", False) is True
    recording = record(WORKLOADS["retires-share-syncs"], config, tmp_path)
    result = explore(recording, "journaled")
    assert result.verdict == "violation"
    assert "R-CRASH-2" in result.clauses
    assert EXPECTED[f"no {broken}"]["journaled"] == frozenset({"R-CRASH-2"})


def test_the_same_retire_result_switch_changes_no_durable_effect(tmp_path: Path) -> None:
    """``same_retire_result`` is about results, not crashes (studied by the scheduler): off, the crash
    study finds what the default finds."""
    recording = record(WORKLOADS["retires-share-syncs"], CONFIGS["no same_retire_result"], tmp_path)
    assert explore(recording, "journaled").verdict == "ok"
