"""The persistence models against the real kernel: ext4 crash states from a block-write log (R-CRASH-1..4,
R-STATE-3, R-STORE-8, R-STORE-11; SPEC.md §Crash; docs/crash.md §The kernel study).

Needs root, ``/dev/fuse``, loop devices, e2fsprogs and the ``kernel`` extra (pyfuse3): without them the
module is skipped, naming what is missing — and in CI (``CI=true``) it fails instead. The budget: the CI
workloads on all three file-system configurations, every prefix and up to 16 seeded subsets per epoch.

What it shows: every crash state the kernel produced lies inside the matching persistence model (and the
model as it stood before, without lost blocks, did not contain them: the finding that changed it) but in
the pinned ``FINDINGS`` (none now: a deleted ledger that came back whole without a journal is inside the
fixed model, and the store's rename of a fsynced temporary keeps it from happening); the default protocol
keeps R-CRASH-1..4 on journaled ext4; on ext4 without a journal it breaks R-CRASH-2 as the model study
predicts, the ``fence_sync`` option keeps retires durable, and a row across a lost block
makes a ledger unreadable (an expected finding against the store); the threaded workloads run on handles of
the configuration, so group commit off and combined removals are the stores the model study records (their
directory syncs, and the broken combiners caught); a store that raises or hangs on a
recovered image is a verdict; a failed run leaves no mount, loop device or daemon behind.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.impl.cli.main import main
from capture_ledger.impl.store import Ordering
from capture_ledger.impl.store.fs import FileStat, FileSystem
from capture_ledger.impl.study.crash import CONFIGS, StoreConfig, record
from capture_ledger.impl.study.kernel import (
    CI_WORKLOADS,
    DEFAULT_FILESYSTEMS,
    FILESYSTEMS,
    KERNEL_WORKLOADS,
    KernelSetupError,
    KernelStudy,
    kernel_cell,
    kernel_study,
    leftovers,
    missing,
    record_on_kernel,
    strict,
    workspace,
)
from capture_ledger.spec.core.model import HasRows, Record
from capture_ledger.spec.crash.durability import NoJournalExt4, SyncDir
from capture_ledger.spec.kit.crash import Invoke, Recording, Return, Workload

#: The slow tier (``pytest -m slow``, run by .ci/run): the kernel study mounts real ext4 images.
pytestmark = pytest.mark.slow

MISSING = missing()
if MISSING:
    if strict():
        pytest.fail(f"the kernel crash study cannot run in CI: it needs {'; '.join(MISSING)}", pytrace=False)
    pytest.skip(f"the kernel crash study needs {'; '.join(MISSING)}", allow_module_level=True)

#: The cells whose kernel states lie outside their model (pinned FINDINGS, never hidden). None now: the one
#: there was (without a journal, a crash during a re-record brought the deleted ledger back whole under its
#: re-created name) is in the ext4-nojournal model since (a name whose inode was never synced may name a
#: removed file, whole), and the store no longer lets it happen (a new ledger is fsynced under a temporary
#: name before its rename; test_kernel_filesystems.py shows both). A cell listed here whose states all lie
#: inside fails the test, as does a cell not listed with one outside (docs/crash.md §The kernel study).
FINDINGS: frozenset[tuple[str, str]] = frozenset()

#: The clauses the default protocol breaks per file system over the CI workloads (pinned).
EXPECTED = {
    ("ext4-ordered", "default"): frozenset(),
    ("ext4-journal", "default"): frozenset(),
    # R-CRASH-2/4: a fence's entry persisted without its inode (fence_sync="directory"). R-CRASH-3 no more:
    # a new ledger is renamed into place fsynced, so a deleted one never comes back under its name.
    ("ext4-nojournal", "default"): frozenset({"R-CRASH-2", "R-CRASH-4"}),
}


@pytest.fixture(scope="module")
def ci_study() -> KernelStudy:
    return kernel_study(workloads=CI_WORKLOADS, configs=["default"])


def test_every_kernel_state_lies_inside_its_model_but_the_findings(ci_study: KernelStudy) -> None:
    """A kernel state outside the matching model makes the model unsound: outside the pinned ``FINDINGS``
    none is, and none is unknown (every model space was enumerated); in each finding's cell some are. The
    model-only classes (looseness) are counted."""
    assert {c.fs for c in ci_study.cells} == set(DEFAULT_FILESYSTEMS)
    for cell in ci_study.cells:
        assert cell.states > 0 and cell.unrecoverable == 0, cell
        assert cell.unknown[cell.model] == 0, (cell.fs, cell.workload)
        if (cell.fs, cell.workload) in FINDINGS:
            assert cell.outside[cell.model] > 0, (cell.fs, cell.workload)
        else:
            assert cell.outside[cell.model] == 0, (cell.fs, cell.workload, cell.findings)
        assert cell.inside[cell.model] + cell.outside[cell.model] == cell.states
        assert cell.model_only[cell.model] >= 0
    found = [c for c in ci_study.cells if (c.fs, c.workload) in FINDINGS]
    assert {(c.fs, c.workload) for c in found} == FINDINGS  # every pinned finding's cell was run
    assert ci_study.outside() == sum(c.outside[c.model] for c in found)


def test_journaled_ext4_stays_inside_weakest_posix_too(ci_study: KernelStudy) -> None:
    """weakest-posix is the outer bound of the journaled configurations."""
    for cell in ci_study.cells:
        if cell.model == "journaled":
            assert cell.outside["weakest-posix"] == 0 and cell.garbage == 0, (cell.fs, cell.workload)


def test_the_default_protocol_on_the_real_kernel(ci_study: KernelStudy) -> None:
    """R-CRASH-1..4 hold on ext4 with a journal; without one, the model study's R-CRASH-2 counterexample
    (a returned retire whose fence entry persisted without its inode) happens on the real kernel. A row
    across a lost block (NULs, then the row's end) is crash residue (R-STORE-11): the rollout keeps its
    acknowledged rows, where before that rule it could not be read at all (R-STATE-3, R-STORE-8)."""
    assert ci_study.verdicts() == EXPECTED
    straddle = next(c for c in ci_study.cells if c.fs == "ext4-nojournal" and c.workload == "record-straddle")
    assert straddle.garbage > 0 and not straddle.clauses  # the kernel did leave NULs; none broke a clause
    overlap = next(c for c in ci_study.cells if c.fs == "ext4-nojournal" and c.workload == "retire-overlap")
    assert "R-CRASH-2" in overlap.clauses
    # journaled configurations clean; the command fails (exit 1) only for the states outside a model
    assert ci_study.acceptable() == (ci_study.outside() == 0)


def test_ext4_without_a_journal_leaves_bytes_never_written(ci_study: KernelStudy) -> None:
    """The finding that changed the ext4-nojournal model: files at their new size holding NUL bytes. The
    model as it stood (no lost blocks, ``block_size=0``) does not allow them: it was unsound."""
    cells = [c for c in ci_study.cells if c.fs == "ext4-nojournal"]
    assert sum(c.garbage for c in cells) > 0
    with workspace() as root:
        cell = kernel_cell(
            KERNEL_WORKLOADS["record-new"],
            StoreConfig(),
            FILESYSTEMS["ext4-nojournal"],
            root,
            models=[NoJournalExt4(name="before", block_size=0)],
        )
    assert cell.outside["before"] > 0 and cell.garbage > 0
    assert cell.findings and "lost" in cell.findings[0].timeline


class _InPlaceOrdering(Ordering):
    """Creation as it was before the rename: the ledger written in place under its own name, its
    incarnation line fsynced first (the store that let the kernel bring a deleted ledger back)."""

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


def test_a_ledger_written_in_place_comes_back_as_the_deleted_one_but_not_a_renamed_one(
    ci_study: KernelStudy,
) -> None:
    """The finding that changed the ext4-nojournal model a second time, and the store. A delete returned,
    the ID was re-recorded, and a crash during that record's first fsync kept the new directory entry but
    not the new inode: the entry names the reused inode number, still the deleted ledger's on disk, and the
    deleted ledger is back whole, size and rows (R-CRASH-3). The model as it stood (``reused_inodes=False``)
    did not allow it; the fixed one does. The store now writes a new ledger under a temporary name, fsyncs
    it and only then renames it into place: the kernel never brings the deleted ledger back (the CI cell
    below), and the fixed model finds no broken clause either."""
    before = NoJournalExt4(name="before", reused_inodes=False)
    with workspace() as root:
        cell = kernel_cell(
            KERNEL_WORKLOADS["retire-delete-reuse"],
            _InPlaceConfig(),
            FILESYSTEMS["ext4-nojournal"],
            root,
            models=[NoJournalExt4(), before],
        )
    assert "R-CRASH-3" in cell.clauses
    assert cell.outside["before"] > 0 and cell.outside["ext4-nojournal"] == 0
    example = next(b for b in cell.broken if b.clause == "R-CRASH-3").violation
    assert "model_call_id='a'" in example.observed  # the deleted incarnation's row
    assert any("Delete" in r for r in example.returned)
    (finding,) = [f for f in cell.findings if f.model == "before"]
    assert "Delete(rollout_ids=['r1'])" in finding.timeline and "KEPT" in finding.timeline
    renamed = next(
        c for c in ci_study.cells if c.fs == "ext4-nojournal" and c.workload == "retire-delete-reuse"
    )
    assert "R-CRASH-3" not in renamed.clauses and renamed.outside["ext4-nojournal"] == 0


def test_the_json_summary(ci_study: KernelStudy) -> None:
    summary = ci_study.summary("ext4-nojournal")
    pinned = {"fs", "workloads", "crash_states", "broken", "outside_model", "model_only", "seconds"}
    assert set(summary) >= pinned
    outside: Any = summary["outside_model"]
    assert summary["workloads"] == len(CI_WORKLOADS)
    assert {("ext4-nojournal", o["workload"]) for o in outside} <= FINDINGS
    assert bool(outside) == any(fs == "ext4-nojournal" for fs, _ in FINDINGS)
    broken: Any = summary["broken"]
    assert {b["clause"] for b in broken} == EXPECTED["ext4-nojournal", "default"]
    assert all(b["timeline"] and b["workload"] in CI_WORKLOADS for b in broken)


def test_fence_sync_keeps_retires_durable_without_a_journal() -> None:
    """The README's advice for unjournaled file systems, on the real kernel: with ``fence_sync`` no
    returned retire is lost."""
    result = kernel_study(
        file_systems=["ext4-nojournal"],
        workloads=["retire-live", "retire-overlap"],
        configs=["fence_sync=syncfs", "fence_sync=file"],
    )
    assert all(not c.clauses and c.outside[c.model] == 0 for c in result.cells), result.table()


# ------------------------------------------------------------------------- the store's switches, threaded
def _syncs(recording: Recording) -> int:
    return sum(1 for e in recording.trace if isinstance(e, SyncDir))


def _shared_returns(recording: Recording) -> int:
    """How many operations returned right after another one on the same sync (a batch served at once)."""
    events = [e for e in recording.trace if not isinstance(e, Invoke)]
    return sum(1 for a, b in itertools.pairwise(events) if isinstance(a, Return) and isinstance(b, Return))


@pytest.mark.parametrize("workload", ["retires-share-syncs", "removals-share-syncs"])
def test_the_kernel_recorder_runs_threads_on_handles_of_the_configuration(
    tmp_path: Path, workload: str
) -> None:
    """A workload with ``threads`` runs on three handles of the configuration, under the gathering
    schedule, on the mounted image as in the model study: every thread issues effects, every trace length is
    marked once and in order, and the directory syncs are the model study's for each configuration —
    group commit off issues more than the default (R-STORE-9) and combining no more (the path before ran the
    operations one after another on one handle: 6 and 5 syncs whatever the configuration)."""
    fs = FILESYSTEMS["ext4-ordered"]
    syncs: dict[str, int] = {}
    for label in ("default", "group_commit=off", "combine=on"):
        model = record(KERNEL_WORKLOADS[workload], CONFIGS[label], tmp_path / label.replace("=", "-"))
        with workspace() as root:
            recorded = record_on_kernel(KERNEL_WORKLOADS[workload], CONFIGS[label], fs, root / "run")
        kernel = recorded.recording
        assert set(kernel.threads) == {"t0-op", "t1-op", "t2-op"}
        assert [n for _, n in recorded.marks] == list(range(len(kernel.trace) + 1))
        assert (_syncs(kernel), kernel.paused) == (_syncs(model), model.paused), label
        syncs[label] = _syncs(kernel)
    pinned = {
        "retires-share-syncs": {"default": 4, "group_commit=off": 6, "combine=on": 4},
        "removals-share-syncs": {"default": 4, "group_commit=off": 5, "combine=on": 4},
    }
    assert syncs == pinned[workload]
    # The path before, one operation after another on one handle, is what the counts reject.
    one_after_another = replace(KERNEL_WORKLOADS[workload], threads=())
    sequential = record(one_after_another, CONFIGS["combine=on"], tmp_path / "sequential")
    assert _syncs(sequential) == syncs["group_commit=off"] > syncs["combine=on"]


def test_combined_removals_on_the_real_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    """``crash --kernel --config combine=on``: the three retires are combined — two of them return on one
    batch's syncs, which no handle of the default or of group commit off does — every kernel state lies
    inside the journaled model and no clause breaks (R-CRASH-2, R-STORE-4, R-STORE-9). The broken
    combiners, which act only when removals are combined, are caught on the real kernel too: a returned
    retire comes back Live (R-CRASH-2)."""
    fs = FILESYSTEMS["ext4-ordered"]
    workload = KERNEL_WORKLOADS["retires-share-syncs"]
    shared = {}
    for label in ("default", "group_commit=off", "combine=on"):
        with workspace() as root:
            shared[label] = _shared_returns(
                record_on_kernel(workload, CONFIGS[label], fs, root / "run").recording
            )
    assert shared == {"default": 0, "group_commit=off": 0, "combine=on": 1}
    command = ["crash", "--kernel", "--fs", "ext4-ordered", "--config", "combine=on"]
    code = main([*command, "--workload", "retires-share-syncs", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["crash_states"] > 0 and summary["model"] == "journaled"
    assert summary["inside_model"] == summary["crash_states"]
    assert summary["broken"] == [] and summary["outside_model"] == []
    for broken in ("no await_combined_batch", "no results_after_syncs"):
        with workspace() as root:
            cell = kernel_cell(workload, CONFIGS[broken], fs, root)
        assert cell.clauses == {"R-CRASH-2"} and cell.outside[cell.model] == 0, broken


# ----------------------------------------------------------------------------------- robustness
class _Refuses:
    """A store under study that raises when opened on a recovered image."""

    def __init__(self, directory: Path, fs: object) -> None:
        raise RuntimeError("refuses to open")


def test_a_store_that_raises_on_a_recovered_image_is_a_verdict() -> None:
    with workspace() as root:
        workload, fs = KERNEL_WORKLOADS["record-new"], FILESYSTEMS["ext4-ordered"]
        cell = kernel_cell(workload, StoreConfig(), fs, root, open_store=_Refuses)
    assert cell.clauses == {"R-STATE-3"} and "refuses to open" in cell.broken[0].violation.observed


def test_a_store_that_hangs_on_a_recovered_image_is_a_verdict() -> None:
    """The hung reader keeps its mount; the study goes on with a fresh one, and nothing is left once the
    reader lets go."""
    release = threading.Event()

    def hangs(directory: Path, fs: object) -> object:
        release.wait()
        raise RuntimeError("released")

    with workspace() as root:
        try:
            cell = kernel_cell(
                KERNEL_WORKLOADS["retire-overlap"],
                StoreConfig(),
                FILESYSTEMS["ext4-ordered"],
                root,
                open_store=hangs,
                read_budget=0.2,
            )
        finally:
            release.set()
        assert cell.clauses == {"R-STATE-3"}
        assert "did not answer" in cell.broken[0].violation.observed
        assert cell.states > 1  # it went on after the first hang
        deadline = time.monotonic() + 10
        while leftovers(root) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leftovers(root) == []


@pytest.fixture
def scratch() -> Iterator[Path]:
    with workspace() as root:
        yield root
        assert leftovers(root) == []


def test_a_failed_run_leaves_nothing_behind(scratch: Path) -> None:
    """The workload's setup raises with the image mounted, the loop device attached and the daemon up."""
    setup = (Record("r1", {"model_call_id": "a"}), HasRows("r1"))
    broken = Workload(name="broken-setup", setup=setup, ops=())
    with pytest.raises(TypeError, match="not a write"):
        record_on_kernel(broken, StoreConfig(), FILESYSTEMS["ext4-ordered"], scratch / "run")
    assert leftovers(scratch) == []


def test_a_daemon_that_cannot_start_is_reported(scratch: Path) -> None:
    from capture_ledger.impl.study.kernel import fuse_daemon

    with (
        pytest.raises(KernelSetupError, match="daemon exited"),
        fuse_daemon(scratch / "fuse", scratch / "log", scratch / "no-such-image"),
    ):
        pass  # pragma: no cover


def test_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["crash", "--kernel", "--fs", "ext4-journal", "--workload", "record-new", "--json"])
    out = capsys.readouterr()
    summary = json.loads(out.out)
    assert code == 0 and summary["fs"] == "ext4-journal" and summary["crash_states"] > 0
    assert summary["broken"] == [] and summary["outside_model"] == []
    assert "ext4-journal / default / record-new" in out.err  # progress on standard error
