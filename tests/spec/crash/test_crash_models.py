"""The persistence models and the crash contract of ``spec.durability`` (R-CRASH-1..4; SPEC.md §Crash;
docs/architecture.md §Facts).

Pure: hand-made effect traces with the images each model must (and must not) allow, a Hypothesis property
that the models nest (journaled ⊆ weakest-posix ⊆ ext4-nojournal), and the contract's allowed states.
"""

from __future__ import annotations

from capture_ledger.spec.core.model import (
    ABSENT,
    RETIRED,
    Delete,
    Live,
    Record,
    RecordEntry,
    Retire,
)
from capture_ledger.spec.crash.contract import Span, allowed_states, broken_clauses
from capture_ledger.spec.crash.durability import (
    MODELS,
    Baseline,
    Create,
    DiskImage,
    Effect,
    Fsync,
    Journaled,
    Mkdir,
    NoJournalExt4,
    Rename,
    SyncDir,
    Syncfs,
    Truncate,
    Unlink,
    WeakestPosix,
    Write,
    space,
)
from capture_ledger.spec.kit import load_profile
from hypothesis import given
from hypothesis import strategies as st

load_profile()

LEDGER, FENCE = "r.lineage.jsonl", "r.lineage.retired"
LINE = b'{"record":{"model_call_id":"a"}}\n'


def images(model: str, baseline: Baseline, effects: list[Effect]) -> set[DiskImage]:
    return set(space(model, baseline, effects))


def names(found: set[DiskImage]) -> set[tuple[str, ...]]:
    return {tuple(n for n, _ in image.files) for image in found}


def test_retire_trace_under_each_model() -> None:
    """Fence, sync, unlink, sync: the unsynced tail may be lost; ext4 may also lose the synced fence."""
    base = Baseline(files=((LEDGER, 1, LINE),))
    effects: list[Effect] = [Create(FENCE, 2), SyncDir(), Unlink(LEDGER, 1)]
    assert names(images("journaled", base, effects)) == {(LEDGER, FENCE), (FENCE,)}
    assert names(images("weakest-posix", base, effects)) == {(LEDGER, FENCE), (FENCE,)}
    # docs/architecture.md §Facts: the entry persisted, its inode did not: the fence may vanish while the
    # unlink stays.
    assert names(images("ext4-nojournal", base, effects)) == {(LEDGER, FENCE), (FENCE,), (LEDGER,), ()}
    fsynced: list[Effect] = [Create(FENCE, 2), Fsync(2), SyncDir(), Unlink(LEDGER, 1)]
    assert names(images("ext4-nojournal", base, fsynced)) == {(LEDGER, FENCE), (FENCE,)}
    assert names(images("ext4-nojournal", base, [Create(FENCE, 2), Syncfs(), Unlink(LEDGER, 1)])) == {
        (LEDGER, FENCE),
        (FENCE,),
    }


def test_journaled_keeps_order_weak_models_do_not() -> None:
    """Unsynced create then unlink: journaled keeps a prefix; the weak models keep any combination."""
    base = Baseline(files=((LEDGER, 1, LINE),))
    effects: list[Effect] = [Create(FENCE, 2), Unlink(LEDGER, 1)]
    assert names(images("journaled", base, effects)) == {(LEDGER,), (LEDGER, FENCE), (FENCE,)}
    assert names(images("weakest-posix", base, effects)) == {(LEDGER,), (LEDGER, FENCE), (FENCE,), ()}


def test_unsynced_append_persists_as_any_prefix() -> None:
    """The synced length is kept; an unsynced append may be torn (the reader's classes of prefixes)."""
    base = Baseline(files=((LEDGER, 1, LINE),))
    found = {image.as_dict()[LEDGER] for image in images("journaled", base, [Write(1, LINE)])}
    assert found == {LINE, LINE + LINE[:1], LINE + LINE[:-1], LINE + LINE}
    assert {image.as_dict()[LEDGER] for image in images("journaled", base, [Write(1, LINE), Fsync(1)])} == {
        LINE + LINE
    }


def test_truncate_is_undone_until_synced() -> None:
    """A torn tail cut before an append may come back unless the file is synced (R-STORE-6)."""
    torn = LINE + b'{"rec'
    base = Baseline(files=((LEDGER, 1, torn),))
    effects: list[Effect] = [Truncate(1, len(LINE)), Write(1, LINE)]
    found = {image.as_dict()[LEDGER] for image in images("weakest-posix", base, effects)}
    assert torn in found and LINE + LINE in found and LINE in found
    synced = {image.as_dict()[LEDGER] for image in images("weakest-posix", base, [*effects, Fsync(1)])}
    assert synced == {LINE + LINE}


def test_space_indexing_and_sampling_are_deterministic() -> None:
    base = Baseline(files=tuple((f"r{i}.lineage.jsonl", i + 1, LINE) for i in range(6)))
    effects: list[Effect] = [Unlink(f"r{i}.lineage.jsonl", i + 1) for i in range(6)]
    image_space = space("weakest-posix", base, effects)
    assert image_space.size == 2**6
    assert len(set(image_space)) == 64
    assert image_space.sample(10, seed=3) == image_space.sample(10, seed=3)
    assert len(set(image_space.sample(10, seed=3))) == 10


_NAMES = ("a", "b", "d/c")  # d: a directory of the baseline (operations on two directories)
_BASE = Baseline(directories=(("d", 1),))


@st.composite
def traces(draw: st.DrawFn) -> list[Effect]:
    """Random effect traces over two names, consistent with a real directory's history."""
    entries: dict[str, int] = {}
    inodes = 10
    effects: list[Effect] = []
    for _ in range(draw(st.integers(0, 7))):
        kind = draw(
            st.sampled_from(["create", "unlink", "write", "fsync", "syncdir", "syncfs", "truncate", "rename"])
        )
        name = draw(st.sampled_from(_NAMES))
        if kind == "create" and name not in entries:
            inodes += 1
            entries[name] = inodes
            effects.append(Create(name, inodes))
        elif kind == "rename" and name in entries:
            target = draw(st.sampled_from([n for n in _NAMES if n != name]))
            replaced = entries.pop(target, None)
            entries[target] = entries.pop(name)
            effects.append(Rename(name, target, entries[target], replaced))
        elif kind == "unlink" and name in entries:
            effects.append(Unlink(name, entries.pop(name)))
        elif kind == "write" and name in entries:
            effects.append(Write(entries[name], draw(st.sampled_from([b"x\n", b"yz\n"]))))
        elif kind == "truncate" and name in entries:
            effects.append(Truncate(entries[name], 0))
        elif kind == "fsync" and name in entries:
            effects.append(Fsync(entries[name]))
        elif kind == "syncdir":
            effects.append(SyncDir(draw(st.sampled_from(["", "d"]))))
        elif kind == "syncfs":
            effects.append(Syncfs())
    return effects


@given(traces())
def test_models_nest(effects: list[Effect]) -> None:
    """Each model allows at least what the stronger one does; the no-crash image is always allowed. Tiny
    blocks (2 bytes) make every line span blocks, so zeroed blocks inside complete lines are exercised."""
    journaled = images("journaled", _BASE, effects)
    weak = images("weakest-posix", _BASE, effects)
    ext4 = images("ext4-nojournal", _BASE, effects)
    assert journaled <= weak <= ext4
    before = set(NoJournalExt4(block_size=0).space(_BASE, effects))
    tiny = set(NoJournalExt4(block_size=2).space(_BASE, effects))
    assert journaled <= tiny  # the journaled models' zeroed tails (4 KiB) are tiny blocks' lost ones too
    old_weak = set(WeakestPosix(block_size=0).space(_BASE, effects))
    assert set(Journaled(block_size=0).space(_BASE, effects)) <= old_weak <= before <= ext4 and before <= tiny
    final: dict[str, bytes] = {}
    entries: dict[int, str] = {}
    for effect in effects:
        if isinstance(effect, Create):
            final[effect.name] = b""
            entries[effect.inode] = effect.name
        elif isinstance(effect, Unlink):
            final.pop(effect.name)
        elif isinstance(effect, Rename):
            final[effect.new] = final.pop(effect.old)
            entries[effect.inode] = effect.new
        elif isinstance(effect, Write) and entries[effect.inode] in final:
            final[entries[effect.inode]] += effect.data
        elif isinstance(effect, Truncate) and entries[effect.inode] in final:
            final[entries[effect.inode]] = final[entries[effect.inode]][: effect.size]
    assert DiskImage.of(final, ["d"]) in journaled


def test_unsynced_blocks_may_read_as_zeros_without_a_journal() -> None:
    """Real ext4 without a journal left a new ledger at its full size holding NUL bytes (the inode reached
    the disk, the data block did not; docs/crash.md §The kernel study): ext4-nojournal allows it, the
    journaled models and the model as it stood before (block_size=0) do not."""
    effects: list[Effect] = [Create(LEDGER, 1), Write(1, LINE), SyncDir()]
    zeros = DiskImage.of({LEDGER: bytes(len(LINE))})
    assert zeros in images("ext4-nojournal", Baseline(), effects)
    assert zeros not in set(NoJournalExt4(block_size=0).space(Baseline(), effects))
    for model in (Journaled(block_size=0), WeakestPosix(block_size=0)):  # as they stood before
        assert not any(b"\0" in d for i in model.space(Baseline(), effects) for _, d in i.files), model
    synced: list[Effect] = [*effects, Fsync(1)]
    assert images("ext4-nojournal", Baseline(), synced) == {DiskImage.of({LEDGER: LINE})}


def test_a_row_across_a_lost_block_reads_as_a_corrupt_line() -> None:
    """A row spanning a block boundary whose first block was lost reads as NULs then the row's end: a
    complete line that is not a row. The model knows the block size; with 4 KiB blocks nothing spans."""
    rows = b"".join(b'{"record":{"model_call_id":"c%02d","value":1}}\n' % i for i in range(22))
    row = b'{"record":{"model_call_id":"c22","value":1}}\n'
    assert len(rows) == 990 and len(row) == 45
    base = Baseline(files=((LEDGER, 1, rows),))
    effects: list[Effect] = [Write(1, row)]
    corrupt = DiskImage.of({LEDGER: rows + bytes(1024 - 990) + row[1024 - 990 :]})
    assert corrupt in set(NoJournalExt4(block_size=1024).space(base, effects))
    assert corrupt not in images("ext4-nojournal", base, effects)  # 4 KiB blocks: no boundary inside
    tails = {i.as_dict()[LEDGER] for i in images("ext4-nojournal", base, effects)}
    assert rows + bytes(len(row)) in tails  # the whole row lost: a torn tail of NULs


def test_a_new_block_may_read_as_a_removed_files_bytes_without_a_journal() -> None:
    """The kernel study saw a re-created ledger come back holding the rows of the ledger a delete removed:
    its new block was the old one's, and only the inode reached the disk. ext4-nojournal allows it, for
    bytes removed in the trace and before it (``Baseline.freed``); the journaled models do not."""
    old = b'{"record":{"model_call_id":"a","value":1}}\n'
    new = b'{"record":{"model_call_id":"b","value":1}}\n'
    effects: list[Effect] = [Unlink(LEDGER, 1), SyncDir(), Create(LEDGER, 2), Write(2, new)]
    stale = DiskImage.of({LEDGER: old})
    assert stale in images("ext4-nojournal", Baseline(files=((LEDGER, 1, old),)), effects)
    assert stale not in images("weakest-posix", Baseline(files=((LEDGER, 1, old),)), effects)
    before: list[Effect] = [Create(LEDGER, 2), Write(2, new)]
    assert stale not in images("ext4-nojournal", Baseline(), before)
    assert stale in images("ext4-nojournal", Baseline(freed=(old,)), before)


def test_a_re_created_name_may_come_back_as_the_removed_file_whole_without_a_journal() -> None:
    """The kernel study's finding (docs/crash.md §The kernel study): a ledger deleted and created anew came
    back whole, old rows and size, under its name: the entry persisted with the inode number the allocator
    reused, the new inode never reached the disk. ext4-nojournal allows it while the new inode is not
    synced; never once it is (an ``Fsync`` before the rename); the model as it stood
    (``reused_inodes=False``), the journaled models: never."""
    old = b'{"incarnation":"000000000000"}\n' + b'{"record":{"model_call_id":"a","value":1}} 0\n' * 100
    new = b'{"record":{"model_call_id":"b","value":1}}\n'
    base = Baseline(files=((LEDGER, 1, old),))
    whole = DiskImage.of({LEDGER: old})
    in_place: list[Effect] = [Unlink(LEDGER, 1), SyncDir(), Create(LEDGER, 2), Write(2, new), SyncDir()]
    assert whole in images("ext4-nojournal", base, in_place)
    assert whole not in set(space(NoJournalExt4(reused_inodes=False), base, in_place))
    assert whole not in images("weakest-posix", base, in_place)
    assert whole not in images("journaled", base, in_place)
    temporary = "." + LEDGER + ".new"
    renamed: list[Effect] = [
        Unlink(LEDGER, 1),
        SyncDir(),
        Create(temporary, 2),
        Write(2, new),
        Fsync(2),
        Rename(temporary, LEDGER, 2),
        SyncDir(),
    ]
    found = images("ext4-nojournal", base, renamed)
    # Synced whole: the ledger's name holds it; besides, its temporary may come back as a second name of
    # it (btrfs's log tree, test_a_renamed_fsynced_file_may_come_back_under_its_old_name).
    assert found == {DiskImage.of({LEDGER: new}), DiskImage.of({LEDGER: new, temporary: new})}
    assert images("ext4-nojournal", base, [*renamed, Syncfs()]) == {DiskImage.of({LEDGER: new})}
    # Before the temporary's fsync, the temporary may be anything, the removed file whole included; the
    # ledger's name is not there at all.
    early = images("ext4-nojournal", base, renamed[:4])
    assert DiskImage.of({temporary: old}) in early
    assert all(LEDGER not in dict(image.files) for image in early)
    # The block size of an image keeps the rule (the kernel study resizes the model per image).
    assert NoJournalExt4(reused_inodes=False).with_block_size(1024).reused_inodes is False
    assert NoJournalExt4(block_size=0).with_block_size(1024).block_size == 0


def live(*calls: str, fenced: bool = False) -> Live:
    return Live(tuple(RecordEntry(c, f'{{"model_call_id":"{c}"}}') for c in calls), fenced)


def test_allowed_states_follow_the_contract() -> None:
    """Returned operations are durable; one in flight leaves pre, post or its own path (R-CRASH-1..4)."""
    record = Record("r", {"model_call_id": "a"})
    done = Span(op=record, returned=True)
    assert allowed_states([done], "r") == {live("a")}
    assert allowed_states([done, Span(op=Retire(["r"]), returned=False, follows=frozenset({0}))], "r") == {
        live("a"),
        live("a", fenced=True),
        RETIRED,
    }
    assert allowed_states([done, Span(op=Retire(["r"]), returned=True, follows=frozenset({0}))], "r") == {
        RETIRED
    }
    fenced_delete = [
        done,
        Span(op=Retire(["r"]), returned=False, follows=frozenset({0})),
        Span(op=Delete(["r"]), returned=False),
    ]
    assert ABSENT in allowed_states(fenced_delete, "r")


def test_broken_clauses_name_the_promise() -> None:
    """Which clause a disallowed state breaks: the returned operation whose result was lost, or the one
    in flight that did something off its path."""
    record = Span(op=Record("r", {"model_call_id": "a"}), returned=True)
    assert broken_clauses([record], "r", ABSENT) == ("R-CRASH-1",)
    retired = [record, Span(op=Retire(["r"]), returned=True, follows=frozenset({0}))]
    assert broken_clauses(retired, "r", live("a", fenced=True)) == ("R-CRASH-2",)
    deleted = [*retired, Span(op=Delete(["r"]), returned=True, follows=frozenset({0, 1}))]
    assert broken_clauses(deleted, "r", RETIRED) == ("R-CRASH-3",)
    in_flight = [record, Span(op=Retire(["r"]), returned=False, follows=frozenset({0}))]
    assert broken_clauses(in_flight, "r", ABSENT) == ("R-CRASH-4",)


def test_models_are_named() -> None:
    assert list(MODELS) == ["journaled", "weakest-posix", "ext4-nojournal"]


TEMPORARY = "." + LEDGER + ".new"


def _renamed_then_retired() -> list[Effect]:
    """The store's new ledger (fsynced under its temporary, renamed into place, directory synced), then a
    retire (fence, sync, unlink, sync): btrfs's counterexample (docs/crash.md §The kernel study)."""
    return [
        Create(TEMPORARY, 1),
        Write(1, LINE),
        Fsync(1),
        Rename(TEMPORARY, LEDGER, 1),
        SyncDir(),
        Create(FENCE, 2),
        Fsync(2),
        SyncDir(),
        Unlink(LEDGER, 1),
        SyncDir(),
    ]


def test_a_renamed_fsynced_file_may_come_back_under_its_old_name() -> None:
    """btrfs (Linux 6.18, ``crash --kernel --fs btrfs``, workload ``mixed``): a file fsynced under a name,
    renamed (directory synced) and then unlinked (directory synced) came back after a crash before the
    transaction commit under the name it had at the fsync, holding its bytes then: the log tree replays the
    name it logged. Every model allows it now (the old journaled model kept the synced rename); never its
    bytes short of that fsync, never after a ``Syncfs`` (the commit), never for a name a rename took from a
    file not fsynced under it, never over a name the image already has."""
    effects = _renamed_then_retired()
    ghost = DiskImage.of({TEMPORARY: LINE, FENCE: b""})
    for model in MODELS:
        assert ghost in images(model, Baseline(), effects), model
    assert ghost not in set(_OLD_JOURNALED.space(Baseline(), effects))
    short = DiskImage.of({TEMPORARY: b"", FENCE: b""})
    assert short not in images("journaled", Baseline(), effects)
    assert ghost not in images("journaled", Baseline(), [*effects, Syncfs()])
    unsynced = [e for e in effects if not (isinstance(e, Fsync) and e.inode == 1)]
    assert not any(
        TEMPORARY in i.as_dict() and FENCE in i.as_dict() for i in images("journaled", Baseline(), unsynced)
    )
    # the temporary re-created, synced: it names the new file
    taken = [*effects, Create(TEMPORARY, 3), SyncDir()]
    found = {
        i.as_dict().get(TEMPORARY) for i in images("journaled", Baseline(), taken) if FENCE in i.as_dict()
    }
    assert LINE not in found


def test_operations_on_different_directories_persist_in_either_order() -> None:
    """btrfs (``crash --target examples.directory_ledger:open_ledger --kernel --fs btrfs``, record-new): a
    lock file created in ``locks/`` (never synced), then a row log created in ``rollouts/r1/``, fsynced and
    its directory synced: the crash kept the row log and lost the earlier lock file (btrfs's fsync logs a
    file and its own directory, not earlier operations elsewhere). journaled now keeps, per directory, a
    prefix of its operations; the old model (one prefix of all) did not allow it. Within a directory the
    order stays: a later entry never without an earlier one of the same directory."""
    base = Baseline(directories=(("locks", 1), ("rollouts", 2)))
    rows = "rollouts/rows.jsonl"
    effects: list[Effect] = [
        Create("locks/01.lock", 3),
        Create(rows, 4),
        Write(4, LINE),
        Fsync(4),
        SyncDir("rollouts"),
    ]
    lost_lock = DiskImage.of({rows: LINE}, ["locks", "rollouts"])
    assert lost_lock in images("journaled", base, effects)
    assert lost_lock not in set(_OLD_JOURNALED.space(base, effects))
    assert lost_lock in images("weakest-posix", base, effects)
    one_dir: list[Effect] = [Create("locks/01.lock", 3), Create("locks/02.lock", 4), SyncDir("rollouts")]
    assert DiskImage.of({"locks/02.lock": b""}, ["locks", "rollouts"]) not in images(
        "journaled", base, one_dir
    )
    assert DiskImage.of({"locks/02.lock": b""}, ["locks", "rollouts"]) in images(
        "weakest-posix", base, one_dir
    )
    # A rename across two directories is one operation in both: kept in both or in neither.
    moved: list[Effect] = [
        Create("locks/x", 3),
        Rename("locks/x", "rollouts/x", 3),
        Create("rollouts/y", 4),
        SyncDir("rollouts"),
    ]
    both = images("journaled", base, moved)
    assert all("locks/x" not in i.as_dict() for i in both)  # the synced rename took it from locks/ too
    assert {tuple(sorted(i.as_dict())) for i in both} == {("rollouts/x", "rollouts/y")}


def test_per_directory_order_with_directories_made_in_the_trace() -> None:
    """A synced directory is reachable: ``SyncDir("d")`` keeps ``d``'s own ``mkdir`` (and what the
    workspace held before it) although the workspace was never synced (ext4's and XFS's one log; btrfs logs
    a synced new directory's new ancestors), and the parent's later entries stay in order. Under the weak
    models the directory may still be lost, taking its synced entry with it."""
    effects: list[Effect] = [Mkdir("d", 1), Create("d/f", 2), SyncDir("d"), Create("g", 3)]
    found = {(tuple(sorted(i.as_dict())), i.directories) for i in images("journaled", Baseline(), effects)}
    assert found == {(("d/f",), ("d",)), (("d/f", "g"), ("d",))}, found
    assert ((), ()) not in found and (("g",), ()) not in found  # d synced, and never g without d
    weak = {(tuple(sorted(i.as_dict())), i.directories) for i in images("weakest-posix", Baseline(), effects)}
    assert ((), ()) in weak


#: The journaled model as it stood before the btrfs and ext4 data=ordered findings.
_OLD_JOURNALED = Journaled(name="journaled-before", directory_order=False, logged_names=False, block_size=0)


def test_journaled_is_the_default_instance() -> None:
    assert MODELS["journaled"] == Journaled()


def test_an_unsynced_new_block_may_read_as_zeros_with_a_journal() -> None:
    """ext4 ``data=ordered`` at 1 KiB blocks (``crash --target examples.directory_ledger:open_ledger --kernel
    --fs ext4-ordered``, ``removals-share-syncs``, seeds 2 and 5): a row log created, 56 bytes written, its
    fsync under way while other threads' syncs committed the journal; the crash kept the commit holding the
    file's size and (unwritten) extent, not the data block: the file reads as 56 NUL bytes. journaled and
    weakest-posix now allow the blocks a file did not hold at its last sync to read as zeros from one block
    boundary to the end; never a block it held (ordered mode wrote it), never zeros before bytes that read
    (no "NULs, then a row's end"), never after the fsync returned."""
    rows = "rows.jsonl"  # rollouts/r3/ in the example; its directory is not what this is about
    row = b'{"rollout_id":"r3","row":{"model_call_id":"b","value":1}}\n'[:55] + b"\n"
    assert len(row) == 56
    effects: list[Effect] = [Create(rows, 1), Write(1, row)]
    zeros = DiskImage.of({rows: bytes(56)})
    for model in (Journaled(block_size=1024), WeakestPosix(block_size=1024), NoJournalExt4(block_size=1024)):
        assert zeros in set(model.space(Baseline(), effects)), model
    assert zeros not in set(Journaled(block_size=0).space(Baseline(), effects))
    assert zeros not in set(Journaled(block_size=1024).space(Baseline(), [*effects, Fsync(1)]))
    # A block the last sync held is written in place: it keeps its synced bytes.
    first = b"x" * 1000 + b"\n"
    base = Baseline(files=((rows, 1, first),))
    grown = {i.as_dict()[rows] for i in Journaled(block_size=1024).space(base, [Write(1, row)])}
    assert all(content.startswith(first) for content in grown)
    assert first + bytes(1024 - len(first)) + row[1024 - len(first) :] not in grown  # no NULs, then an end
    assert first + row[: 1024 - len(first)] + bytes(len(first) + 56 - 1024) in grown  # the new block zero


def test_an_fsynced_file_may_persist_its_name_without_earlier_operations() -> None:
    """btrfs (``crash --target capture_ledger.adapters.gym:open_gym_file_store --kernel --fs btrfs``,
    record-new e2+[]): NeMo Gym's store creates ``r1.tokens.lock`` (never synced), then creates, writes and
    fsyncs ``r1.lineage.jsonl``; the crash, before the directory sync that followed, kept the ledger and
    lost the lock file created before it in the same directory (btrfs's fsync logs the file and its own
    name). Every model allows it now; the old journaled model (issue order) did not. A name an ``Unlink``
    dropped after the fsync stays gone once the unlink is kept."""
    lock, ledger = "r1.tokens.lock", "r1.lineage.jsonl"
    effects: list[Effect] = [Create(lock, 1), Create(ledger, 2), Write(2, LINE), Fsync(2)]
    without_lock = DiskImage.of({ledger: LINE})
    for model in MODELS:
        assert without_lock in images(model, Baseline(), effects), model
    assert without_lock not in set(_OLD_JOURNALED.space(Baseline(), effects))
    assert without_lock not in images("journaled", Baseline(), effects[:3])  # no fsync: issue order
    unlinked: list[Effect] = [*effects, Unlink(ledger, 2), SyncDir()]
    for model in MODELS:
        assert all(ledger not in i.as_dict() for i in images(model, Baseline(), unlinked)), model
