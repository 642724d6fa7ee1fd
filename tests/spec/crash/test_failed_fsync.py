"""A failed fsync in the persistence models (``FsyncFailed``; spec/crash/_failed.py, SPEC.md §Decisions
"After a failed fsync"): the sectors it covered may be lost even after a later fsync succeeds, until they
are written again and synced, or cut away.

Each test can fail: the first two if the models treat a failed fsync as a no-op (a later fsync would then
make the row durable), the others if the poison outlives the write and sync that cure it, or is cured too
early (by a write without a sync after it).
"""

from __future__ import annotations

import pytest
from capture_ledger.spec.crash.durability import (
    MODELS,
    Baseline,
    Create,
    Effect,
    Fsync,
    FsyncFailed,
    SyncDir,
    Syncfs,
    Truncate,
    Write,
    describe_effect,
    space,
)

ROW = b'{"model_call_id":"a"}\n'
OTHER = b'{"model_call_id":"b"}\n'


def _contents(model: str, effects: list[Effect], baseline: Baseline | None = None) -> set[bytes | None]:
    found: set[bytes | None] = set()
    for image in space(model, baseline or Baseline(), effects):
        found.add(image.as_dict().get("log"))
    return found


@pytest.mark.parametrize("model", list(MODELS))
def test_a_row_whose_fsync_failed_may_be_lost_after_a_later_fsync_succeeds(model: str) -> None:
    effects: list[Effect] = [Create("log", 1), Write(1, ROW, 0), FsyncFailed(1), Fsync(1), SyncDir()]
    found = _contents(model, effects)
    assert ROW in found
    assert bytes(len(ROW)) in found  # the size reached the disk, the page did not


@pytest.mark.parametrize("model", list(MODELS))
def test_an_append_after_a_durable_row_loses_only_its_own_bytes(model: str) -> None:
    baseline = Baseline(files=(("log", 1, ROW),))
    effects: list[Effect] = [Write(1, OTHER, len(ROW)), FsyncFailed(1), Syncfs()]
    found = _contents(model, effects, baseline)
    assert found == {ROW + OTHER, ROW + bytes(len(OTHER))}


@pytest.mark.parametrize("model", list(MODELS))
def test_cutting_the_line_away_and_writing_it_anew_cures_it(model: str) -> None:
    """R-STORE-13's undo: truncate back, write again, fsync: only that write's own fsync counts."""
    baseline = Baseline(files=(("log", 1, ROW),))
    effects: list[Effect] = [
        Write(1, OTHER, len(ROW)),
        FsyncFailed(1),
        Truncate(1, len(ROW)),
        Write(1, OTHER, len(ROW)),
        Fsync(1),
    ]
    assert _contents(model, effects, baseline) == {ROW + OTHER}


@pytest.mark.parametrize("model", list(MODELS))
def test_a_new_file_cut_to_nothing_and_rewritten_is_cured(model: str) -> None:
    effects: list[Effect] = [
        Create("log", 1),
        Write(1, ROW, 0),
        FsyncFailed(1),
        Truncate(1, 0),
        Write(1, ROW, 0),
        Fsync(1),
        SyncDir(),
    ]
    assert _contents(model, effects) == {ROW}


def test_a_write_again_without_a_sync_after_it_cures_nothing() -> None:
    """The sector is dirty again, but until a sync succeeds its bytes on disk are still the lost ones (the
    new bytes in it go to the disk with the whole sector, or not at all)."""
    baseline = Baseline(files=(("log", 1, ROW),))
    effects: list[Effect] = [Write(1, OTHER, len(ROW)), FsyncFailed(1), Fsync(1), Write(1, b"x\n")]
    found = _contents("journaled", effects, baseline)
    assert ROW + bytes(len(OTHER)) in found and ROW + bytes(len(OTHER) + 2) in found
    assert _contents("journaled", [*effects, Fsync(1)], baseline) == {ROW + OTHER + b"x\n"}


def test_bytes_synced_before_the_failure_are_never_lost() -> None:
    baseline = Baseline(files=(("log", 1, ROW),))
    effects: list[Effect] = [Write(1, OTHER, len(ROW)), FsyncFailed(1), Fsync(1)]
    for model in MODELS:
        assert all(c is not None and c.startswith(ROW) for c in _contents(model, effects, baseline))


def test_a_failed_fsync_is_shown_on_timelines() -> None:
    assert describe_effect(FsyncFailed(3), {3: "r1.lineage.jsonl"}) == (
        "fsync r1.lineage.jsonl FAILED (its pages may be lost)"
    )
