"""The crash explorer on the real store and the ordering study (R-CRASH-1..4; docs/crash.md).

The recording seam sees the protocol's effects in the order ``ordering`` issues them (R-STORE-3..5); the
small study (every sync and ordering step switched off in turn, on real files, under all three models)
finds exactly the pinned matrix: the default protocol clean under journaled and weakest-POSIX, each ablated
step caught under at least one model, and the ``fence_sync`` options clean even under ext4-nojournal.
``capture-ledger crash --report`` writes the report with well-formed SVG pictures.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
from capture_ledger.impl.cli.main import main
from capture_ledger.impl.store import Ordering
from capture_ledger.impl.store.fs import FileStat, FileSystem
from capture_ledger.impl.study import StoreVariant
from capture_ledger.impl.study.crash import EXPECTED, SMALL, STEPS, StoreConfig, Study, explore, record, study
from capture_ledger.impl.study.kernel import KERNEL_WORKLOADS
from capture_ledger.spec import Ok, Unknown, Violation
from capture_ledger.spec.crash.durability import Create, NoJournalExt4, Rename, SyncDir, describe_effect
from capture_ledger.spec.kit.crash import WORKLOADS, Invoke, Return


@pytest.fixture(scope="module")
def small_study() -> Study:
    return study()


def effects_of(workload: str, tmp_path: Path, config: StoreConfig | None = None) -> list[str]:
    recording = record(WORKLOADS[workload], config or StoreConfig(), tmp_path)
    return [
        describe_effect(e, recording.inode_names)
        for e in recording.trace
        if not isinstance(e, Invoke | Return)
    ]


def test_recorded_effects_follow_the_protocol(tmp_path: Path) -> None:
    """R-STORE-3: a new ledger is written whole under its temporary (R-STORE-14: incarnation line and row,
    31 + 52 bytes), fsynced, renamed into place, then the directory synced; R-STORE-4: fences, sync,
    unlink, sync."""
    assert effects_of("record-new", tmp_path / "a") == [
        "create .r1.lineage.jsonl.new",
        "write .r1.lineage.jsonl.new +83",
        "fsync .r1.lineage.jsonl.new",
        "rename .r1.lineage.jsonl.new -> r1.lineage.jsonl",
        "sync dir",
    ]
    assert effects_of("retire-live", tmp_path / "b") == [
        "create r1.lineage.retired",
        "create r2.lineage.retired",
        "sync dir",
        "unlink r1.lineage.jsonl",
        "sync dir",
    ]
    assert effects_of("retire-live", tmp_path / "c", StoreConfig(fence_sync="file")) == [
        "create r1.lineage.retired",
        "fsync r1.lineage.retired",
        "create r2.lineage.retired",
        "fsync r2.lineage.retired",
        "sync dir",
        "unlink r1.lineage.jsonl",
        "sync dir",
    ]
    recording = record(WORKLOADS["record-new"], StoreConfig(), tmp_path / "e")
    renames = [e for e in recording.trace if isinstance(e, Rename)]
    creates = [e for e in recording.trace if isinstance(e, Create)]
    assert [(r.old, r.new, r.replaced) for r in renames] == [
        (".r1.lineage.jsonl.new", "r1.lineage.jsonl", None)
    ]
    assert renames[0].inode == creates[0].inode  # the file the ledger's name reaches is the one fsynced
    assert effects_of("record-torn", tmp_path / "d")[:2] == [
        "truncate r1.lineage.jsonl to 83",  # the incarnation line and one sealed row
        "write r1.lineage.jsonl +52",
    ]


def test_schedules_reach_their_pause_points(tmp_path: Path) -> None:
    """The concurrent workloads really interleave: the paused operation parks where the study says."""
    unshared = StoreConfig(label="group_commit=off", group_commit=False)
    for name in ("retire-overlap", "retire-delete-reuse"):
        recording = record(WORKLOADS[name], unshared, tmp_path / name)
        assert recording.paused is True
        invokes = [e.op for e in recording.trace if isinstance(e, Invoke)]
        returns = [e.op for e in recording.trace if isinstance(e, Return)]
        assert invokes[0] == 0 and returns[-1] == 0  # op 0 spans every other operation
    # The overlapping retire is parked before its directory sync: its fence is written, the other retire
    # then finds it and writes none, and only then does the first sync.
    overlap = effects_of("retire-overlap", tmp_path / "again", unshared)
    assert overlap == ["create r1.lineage.retired", "sync dir", "sync dir"]


def test_with_group_commit_a_retire_waits_for_a_sync_that_began_after_it_asked(tmp_path: Path) -> None:
    """R-STORE-9: the second retire asks for its sync while the first one's is running (parked), so that
    sync cannot serve it: the pause cannot hold, and it returns only after a second sync."""
    recording = record(WORKLOADS["retire-overlap"], StoreConfig(), tmp_path)
    assert recording.paused is False
    shown = [
        ("return", e.op) if isinstance(e, Return) else describe_effect(e, recording.inode_names)
        for e in recording.trace
        if not isinstance(e, Invoke)
    ]
    assert shown == ["create r1.lineage.retired", "sync dir", ("return", 0), "sync dir", ("return", 1)]


@pytest.mark.parametrize("name", ["retires-share-syncs", "removals-share-syncs"])
def test_group_commit_shares_syncs_and_keeps_every_clause(tmp_path: Path, name: str) -> None:
    """R-STORE-9: removals on three handles of one process issue fewer syncs with group commit than
    without, and their crash states break nothing under the journaled and weakest-POSIX models."""
    syncs: dict[bool, int] = {}
    for shared in (True, False):
        config = StoreConfig(label=f"group_commit={shared}", group_commit=shared)
        recording = record(WORKLOADS[name], config, tmp_path / str(shared))
        assert recording.paused is shared  # some call returned on another's sync only when shared
        syncs[shared] = sum(1 for e in recording.trace if isinstance(e, SyncDir))
        for model in ("journaled", "weakest-posix"):
            assert explore(recording, model).verdict == "ok", (name, shared, model)
    assert syncs[True] < syncs[False]


def test_a_removal_that_does_not_wait_for_its_shared_sync_is_caught(tmp_path: Path) -> None:
    """The broken group commit (``await_shared_sync`` off): a retire that finds another's sync running
    goes on and returns before any sync covered it; a crash then brings its ID back Live (R-CRASH-2)."""
    config = StoreConfig(label="no await_shared_sync", variant=StoreVariant(await_shared_sync=False))
    recording = record(WORKLOADS["retires-share-syncs"], config, tmp_path)
    result = explore(recording, "journaled")
    assert "R-CRASH-2" in result.clauses


def test_a_pause_the_store_cannot_keep_is_reported_not_waited_for(tmp_path: Path) -> None:
    """Without the directory sync after the fences, the retire never makes the call it parks at: it runs
    to its end first, and the recording says the schedule did not hold (the scheduler knows it at once)."""
    config = StoreConfig(label="no sync", variant=StoreVariant(sync_after_fences=False))
    recording = record(WORKLOADS["retire-overlap"], config, tmp_path)
    assert recording.paused is False
    returns = [e.op for e in recording.trace if isinstance(e, Return)]
    assert returns == [0, 1]  # sequential: the paused retire returned first


def test_small_study_matches_the_pinned_matrix(small_study: Study) -> None:
    """The study's acceptance, pinned (STYLE: pin the search space; broken variants must be caught)."""
    assert small_study.configs == SMALL
    assert small_study.matrix() == EXPECTED
    assert small_study.verdict("default", "journaled") == "ok"
    assert small_study.verdict("default", "weakest-posix") == "ok"
    for option in ("fence_sync=file", "fence_sync=syncfs"):
        assert not any(small_study.clauses(option, m) for m in ("journaled", "weakest-posix"))
    assert all(small_study.verdict("fence_sync=file", m) == "ok" for m in ("journaled", "weakest-posix"))
    # fence_sync=syncfs syncs a retire's fences with syncfs, never a directory sync: retire-retry-eio's
    # fault (the first sync_dir) never strikes, and the study says so instead of "ok".
    assert small_study.verdict("fence_sync=syncfs", "journaled") == "unknown"
    assert [(c, w) for c, w, _ in small_study.not_exercised()] == [
        ("fence_sync=syncfs", "retire-retry-eio"),
        ("no sync_after_fences", "retire-retry-eio"),
    ]
    for option in ("fence_sync=file", "fence_sync=syncfs"):
        # Without a journal, only a re-used ID's ledger holding a block of its removed one breaks a
        # clause (spec/crash/durability.py): no fence sync can help that.
        assert small_study.clauses(option, "ext4-nojournal") <= {"R-CRASH-3"}
    for step in STEPS:
        assert any(small_study.clauses(f"no {step}", m) for m in small_study.models), step
    images, distinct, _ = small_study.totals()
    assert images > 1500 and 0 < distinct < images  # observations are shared across models and points


def test_each_cell_is_one_of_the_three_results(small_study: Study) -> None:
    """The one result shape (spec.core.verdicts): a clean cell is ``Ok`` naming the clauses judged, a broken
    one a ``Violation`` of a clause it breaks, its counterexample the cell's shortest; the exit status of
    ``capture-ledger crash`` follows the default protocol's journaled cell."""
    clean = small_study.result("default", "journaled")
    assert isinstance(clean, Ok)
    assert clean.checked == ("R-CRASH-1", "R-CRASH-2", "R-CRASH-3", "R-CRASH-4", "R-STATE-3")
    broken = small_study.result("default", "ext4-nojournal")
    shortest = small_study.shortest("default", "ext4-nojournal")
    assert isinstance(broken, Violation) and shortest is not None
    assert broken.requirement == "R-CRASH-2" and broken.counterexample == shortest.render()
    assert broken.witness == shortest
    for step in STEPS:
        found = [small_study.result(f"no {step}", m) for m in small_study.models]
        assert any(isinstance(v, Violation) and v.requirement.startswith("R-") for v in found), step
    assert small_study.exit_code("journaled", ("default",)) == 0
    assert small_study.exit_code("ext4-nojournal", ("default",)) == 1


#: The search space of the default store, pinned per workload: crash points (effects + 1), and the images
#: judged under journaled, weakest-posix and ext4-nojournal (STYLE: pin the search space). Under
#: ext4-nojournal a lost block reads as zeros or, for a new block, as a removed file's bytes, and an entry
#: whose inode was never synced may name a removed file, whole: images the kernel study showed
#: (docs/crash.md §The kernel study). A new ledger's creation is five effects (its temporary's create,
#: write and fsync, the rename, the directory sync; R-STORE-3). Every model also lets the temporary come
#: back after the rename (btrfs's log tree) and an unsynced new block read as zeros (ext4 data=ordered):
#: the workloads that create a ledger judge more images (record-new was 14, 15, 16; delete-reuse 17, 18,
#: 22; retire-delete-reuse 23, 25, 36; removals-share-syncs 32, 47, 285), the others as many as before.
DEFAULT_SPACE = {
    "record-new": (6, 17, 19, 19),
    "retire-live": (6, 10, 11, 38),
    "retire-overlap": (4, 5, 5, 7),
    "retire-retry-eio": (3, 4, 4, 5),
    "delete-reuse": (8, 20, 22, 25),
    "retire-delete-reuse": (11, 26, 29, 39),
    "retires-share-syncs": (11, 21, 27, 738),
    "removals-share-syncs": (13, 37, 55, 315),
}


def test_default_search_space_is_pinned(small_study: Study) -> None:
    found: dict[str, tuple[int, ...]] = {}
    for cell in small_study.cells:
        if cell.config == "default":
            points = {e.crash_points for e in cell.explorations}
            assert len(points) == 1
            found[cell.workload] = (points.pop(), *(e.images for e in cell.explorations))
    assert found == DEFAULT_SPACE


def test_default_is_unsafe_on_ext4_without_journal(small_study: Study) -> None:
    """docs/architecture.md §Facts: a directory sync persists the fence's entry, not its inode, so a
    returned retire can
    come back Absent (R-CRASH-2). Its shortest counterexample is two effects long."""
    example = small_study.shortest("default", "ext4-nojournal")
    assert example is not None
    assert example.effects[:2] == ("create r1.lineage.retired", "sync dir")
    assert example.observed == "Absent()" and example.allowed == ("Retired()",)
    assert example.clauses == ("R-CRASH-2",)


def test_recheck_guards_a_concurrent_reuse(small_study: Study) -> None:
    """Without the re-check, an older retire removes a ledger re-created after a delete (R-CONC-3)."""
    broken = [
        v
        for e in small_study.explorations()
        if e.config == "no recheck_fence" and e.model == "journaled"
        for v in e.examples
        if "R-CRASH-1" in v.clauses
    ]
    assert broken and all(v.workload == "retire-delete-reuse" for v in broken)


def test_sampling_reports_unknown_not_ok(tmp_path: Path) -> None:
    """A sampled space is never reported as proved: the verdict is unknown, with the full size reported."""
    recording = record(WORKLOADS["retire-batch"], StoreConfig(), tmp_path)
    result = explore(recording, "weakest-posix", budget=8, seed=1)
    assert result.sampled and result.verdict == "unknown"
    assert result.space > result.images
    assert isinstance(result.result, Unknown) and "sampled" in result.result.reason
    assert f"{result.images} of {result.space} images" in result.result.spent


def test_cli_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configs = ["--config", "default", "--config", "no sync_delete"]
    workloads = ["--workload", "delete-reuse", "--workload", "retire-live"]
    code = main(["crash", *configs, *workloads, "--report", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "images/s" in out and "| default |" in out
    report = (tmp_path / "report.md").read_text()
    assert "![matrix](matrix.svg)" in report and "R-CRASH-3" in report
    pictures = sorted(p.name for p in tmp_path.glob("*.svg"))
    assert "matrix.svg" in pictures and any(p.startswith("timeline-") for p in pictures)
    for picture in pictures:
        ET.parse(tmp_path / picture)  # well-formed SVG


def test_retried_record_after_failed_sync_is_durable(tmp_path: Path) -> None:
    """The first record's directory sync fails (EIO); the caller retries; the retry must be durable."""
    recording = record(WORKLOADS["record-retry-eio"], StoreConfig(), tmp_path)
    assert explore(recording, "journaled").verdict == "ok"


def test_file_fence_sync_covers_fences_it_did_not_write(tmp_path: Path) -> None:
    """Under ext4-nojournal a fence must be fsynced before the retire returns, whoever created it."""
    config = StoreConfig(label="file", fence_sync="file")
    recording = record(WORKLOADS["retire-retry-fsync-eio"], config, tmp_path)
    assert explore(recording, "ext4-nojournal").verdict == "ok"


def test_syncfs_covers_fences_it_did_not_write(tmp_path: Path) -> None:
    """``fence_sync='syncfs'`` flushes every fence, whoever created it: safe under ext4-nojournal."""
    config = StoreConfig(label="syncfs", fence_sync="syncfs")
    for name in ("retire-overlap", "retire-retry-eio", "retire-retry-fsync-eio"):
        recording = record(WORKLOADS[name], config, tmp_path / name)
        found = explore(recording, "ext4-nojournal")
        assert not found.violations, name
        # the retry workloads' faults are at a directory sync and a fence's fsync, which syncfs makes
        # none of: not exercised, and said so
        retried = name != "retire-overlap"
        assert found.verdict == ("unknown" if retried else "ok"), name
        assert bool(found.not_exercised) == retried, name


def test_a_deleted_ledgers_stale_block_is_residue_not_a_row(tmp_path: Path) -> None:
    """R-STORE-14: under ext4-nojournal a re-recorded ID's new ledger may read back a block of its deleted
    one (docs/crash.md §The kernel study). Every line is sealed with its ledger's incarnation, so such a
    block is crash residue and the deleted row never comes back (R-CRASH-3). The fsync of the new ledger's
    temporary before its rename is what keeps it the new ledger's: without the data fsyncs (``no
    fsync_appends``) the renamed name may name an inode never synced, which may read as the deleted
    ledger, whole, and its row returns."""
    safe = StoreConfig(label="fence_sync=file", fence_sync="file")
    for name in ("delete-reuse", "retire-delete-reuse"):
        found = explore(record(WORKLOADS[name], safe, tmp_path / name), "ext4-nojournal")
        assert found.verdict == "ok", name
    unsynced = StoreConfig(label="no fsync", variant=StoreVariant(fsync_appends=False), fence_sync="file")
    found = explore(record(WORKLOADS["delete-reuse"], unsynced, tmp_path / "unsynced"), "ext4-nojournal")
    assert any("R-CRASH-3" in v.clauses for v in found.examples)


def test_a_lost_first_block_leaves_crash_residue_not_an_unreadable_ledger(tmp_path: Path) -> None:
    """A finding of the kernel study (docs/crash.md §The kernel study): on ext4 without a journal a crash
    during the fsync of a row that spans a block boundary can keep the second block and lose the first,
    leaving a complete line of NULs and the row's end. The store reads it as crash residue (R-STORE-11):
    a torn tail, so the rollout keeps its acknowledged rows and the unacknowledged one is dropped, which
    R-CRASH-4 allows. Without that rule (the store before it) this fails: the rollout cannot be read at
    all (R-STATE-3, R-STORE-8). The journaled models never lose a block, and with 4 KiB blocks this
    ledger spans none."""
    recording = record(KERNEL_WORKLOADS["record-straddle"], StoreConfig(), tmp_path)
    assert explore(recording, NoJournalExt4(block_size=1024)).verdict == "ok"
    assert explore(recording, "ext4-nojournal").verdict == "ok"
    assert explore(recording, "journaled").verdict == "ok"


def test_each_sync_of_a_record_may_fail_and_the_retry_is_durable(tmp_path: Path) -> None:
    """R-STORE-13 through the seam: each sync of a creating record and of an append fails (EIO, after)
    in turn; the failed fsync's pages may be lost (``FsyncFailed``), and the store's retry writes the row
    anew, so every image of every model keeps the contract. The store without the data fsync is caught."""
    from capture_ledger.impl.study.crash import CONFIGS, record_each
    from capture_ledger.spec.crash.durability import MODELS, FsyncFailed

    for name in ("record-new-fsync-eio", "record-append-fsync-eio"):
        recordings = record_each(WORKLOADS[name], StoreConfig(), tmp_path / name)
        assert recordings[0].workload.name == f"{name}@1"
        assert all(r.injected == r.workload.faults for r in recordings)
        assert any(isinstance(e, FsyncFailed) for r in recordings for e in r.trace)
        for recording in recordings:
            for model in MODELS:
                assert explore(recording, model).verdict == "ok", (recording.workload.name, model)
    broken = record_each(WORKLOADS["record-append-fsync-eio"], CONFIGS["no fsync_appends"], tmp_path / "b")
    assert any(explore(r, "journaled").clauses for r in broken)


class _InPlaceOrdering(Ordering):
    """Creation as it was before the rename: the ledger written in place under its own name, its
    incarnation line fsynced first (a broken variant the fixed ext4-nojournal model must reject)."""

    __slots__ = ()

    def create_ledger(self, fs: FileSystem, name: str, line: bytes, *, incarnation: bytes) -> FileStat:
        fd = fs.open_append(name, create=True)
        assert fd is not None
        try:
            fs.write(fd, incarnation)
            self.sync_data(fs, fd)
            fs.write(fd, line)
            self.sync_data(fs, fd)
            stat = fs.fstat(fd)
        finally:
            fs.close(fd)
        self.sync_created(fs)
        return stat


@dataclass(frozen=True, slots=True, kw_only=True)
class _InPlaceConfig(StoreConfig):
    label: str = "in-place creation"

    def ordering(self) -> Ordering:
        return _InPlaceOrdering(fence_sync=self.fence_sync)


def test_a_ledger_written_in_place_can_come_back_as_the_deleted_one(tmp_path: Path) -> None:
    """The kernel study's finding, in the model (docs/crash.md §The kernel study): without a journal a
    name re-created over a deleted ledger comes back as that ledger, whole, when its new inode was never
    synced. The model as it stood (``reused_inodes=False``) allowed none of it; the fixed one does, and
    then a store writing the new ledger in place breaks R-CRASH-3 where the production store (temporary,
    fsync, rename) stays clean under all three models."""
    before = NoJournalExt4(name="before", reused_inodes=False)
    for name in ("delete-reuse", "retire-delete-reuse"):
        in_place = record(WORKLOADS[name], _InPlaceConfig(fence_sync="file"), tmp_path / f"{name}-a")
        assert "R-CRASH-3" in explore(in_place, "ext4-nojournal").clauses, name
        assert explore(in_place, before).verdict == "ok", name
        renamed = record(WORKLOADS[name], StoreConfig(fence_sync="file"), tmp_path / f"{name}-b")
        for model in ("journaled", "weakest-posix", "ext4-nojournal"):
            assert explore(renamed, model).verdict == "ok", (name, model)
