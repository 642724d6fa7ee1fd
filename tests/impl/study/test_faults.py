"""Injected faults: any seam call may fail with EIO or ENOSPC (R-CRASH-4, STYLE "never
swallow OSError").

A Hypothesis state machine drives a real ``FileLineageStore`` whose seam is a ``FaultyFileSystem``. Each
step draws an operation and, usually, one fault: the n-th call of some seam call fails with EIO or ENOSPC,
before, after or (for a write) halfway through its effect. Then:

- an injected fault is never swallowed: the operation raises that ``OSError``;
- after a failed operation every ID it names is, as read back by a fresh handle, in its pre-state, its
  post-state or a state on its own path (the contract at a crash, R-CRASH-4), and nothing else changed;
- retrying the same operation without faults succeeds and converges: both the faulted handle and a fresh
  one read exactly the model's state.
"""

from __future__ import annotations

import errno
import shutil
import tempfile
from pathlib import Path

import pytest
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import FileSystem, OsFileSystem
from capture_ledger.impl.study import FAULTABLE_CALLS, FaultyFileSystem, InjectedFaultError
from capture_ledger.impl.study.crash import StoreConfig, observe_directory
from capture_ledger.spec.core.model import (
    RETIRED,
    Delete,
    LedgerState,
    Operation,
    Record,
    RecordFailure,
    Retire,
    step,
)
from capture_ledger.spec.crash.contract import Span, allowed_states, touches
from capture_ledger.spec.kit import load_profile
from capture_ledger.spec.kit.crash import Fault, run_operation
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

load_profile()

IDS = ("r0", "r1", "r2")
STRIPES = 4

ids = st.sampled_from(IDS)
batches = st.lists(ids, min_size=1, max_size=3, unique=True)
operations = st.one_of(
    st.builds(lambda r, c: Record(r, {"model_call_id": c}), ids, st.sampled_from(["a", "b", "c"])),
    st.builds(lambda r, c: RecordFailure(r, c, "timeout"), ids, st.sampled_from(["a", "d"])),
    st.builds(Retire, batches),
    st.builds(Delete, batches),
)
faults = st.one_of(
    st.none(),
    st.tuples(
        st.sampled_from(FAULTABLE_CALLS),
        st.integers(1, 3),
        st.builds(
            Fault,
            st.sampled_from([errno.EIO, errno.ENOSPC]),
            st.sampled_from(["before", "after", "partial"]),
        ),
    ),
)


class Planned:
    """Fail the ``occurrence``-th call named ``call`` once."""

    def __init__(self, call: str, occurrence: int, fault: Fault) -> None:
        self.call, self.occurrence, self.fault = call, occurrence, fault
        self.seen = 0

    def __call__(self, call: str, name: str) -> Fault | None:
        if call != self.call:
            return None
        self.seen += 1
        return self.fault if self.seen == self.occurrence else None


class FaultMachine(RuleBasedStateMachine):
    #: Faults injected over a whole run, for the test's own coverage check.
    injected_total = 0

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="capture-ledger-faults-"))
        self.inner = OsFileSystem(self.directory, stripes=STRIPES)
        self.faulty = FaultyFileSystem(self.inner)
        self.store = FileLineageStore(self.directory, fs=self.faulty)
        self.model = LedgerState()
        self.failed = 0

    def read(self) -> dict[str, object]:
        observation = observe_directory(self.directory, IDS, config=StoreConfig(stripes=STRIPES))
        assert observation.mismatches == ()
        assert observation.findings == ()  # only what a crash may leave (R-STORE-8)
        return dict(observation.states)

    @rule(op=operations, fault=faults)
    def operate(self, op: Operation, fault: tuple[str, int, Fault] | None) -> None:
        before = self.faulty.injected
        self.faulty.plan = Planned(*fault) if fault is not None else None
        try:
            run_operation(self.store, op)
        except InjectedFaultError as error:
            assert self.faulty.injected == before + 1 and error.errno in (errno.EIO, errno.ENOSPC)
            self.failed += 1
            FaultMachine.injected_total += 1
            self.faulty.plan = None
            states = self.read()
            for rollout_id in IDS:
                if touches(op, rollout_id):
                    allowed = allowed_states(
                        [Span(op=op, returned=False)], rollout_id, initial=self.model.get(rollout_id)
                    )
                    assert states[rollout_id] in allowed, (op, fault, rollout_id, states[rollout_id])
                else:
                    assert states[rollout_id] == self.model.get(rollout_id), (op, fault, rollout_id)
            run_operation(self.store, op)  # the retry, without faults, must succeed
        else:
            assert self.faulty.injected == before, f"{fault} was injected but {op!r} returned"
        finally:
            self.faulty.plan = None
        self.model, _ = step(self.model, op)

    @invariant()
    def converged(self) -> None:
        """Both a fresh handle and the faulted one read the model's state."""
        assert self.read() == {rid: self.model.get(rid) for rid in IDS}
        for rollout_id in IDS:
            expected = self.model.get(rollout_id)
            admitted = self.store.admit(rollout_id, "probe") is not None
            assert admitted == (expected != RETIRED), (rollout_id, expected)  # R-ADMIT-2

    def teardown(self) -> None:
        self.store.close()
        self.inner.close_all()
        shutil.rmtree(self.directory, ignore_errors=True)


def test_faults_surface_and_retries_converge() -> None:
    FaultMachine.injected_total = 0
    run_state_machine_as_test(FaultMachine)
    assert FaultMachine.injected_total >= 20  # the faults really fired (a count, not a time)


def test_fault_moments(tmp_path: Path) -> None:
    """``before`` changes nothing, ``after`` takes effect then raises, ``partial`` writes half a write."""
    inner = OsFileSystem(tmp_path, stripes=1)
    plans = {
        "before": Planned("create_file", 1, Fault(errno.ENOSPC, "before")),
        "after": Planned("create_file", 1, Fault(errno.EIO, "after")),
    }
    for when, plan in plans.items():
        faulty = FaultyFileSystem(inner, plan=plan)
        try:
            faulty.create_file(f"{when}.lineage.retired")
        except InjectedFaultError as error:
            assert error.call == "create_file" and error.errno in (errno.EIO, errno.ENOSPC)
        else:
            raise AssertionError("not injected")
    assert inner.stat("before.lineage.retired") is None
    assert inner.stat("after.lineage.retired") is not None
    faulty = FaultyFileSystem(inner, plan=Planned("write", 1, Fault(errno.ENOSPC, "partial")))
    fd = faulty.open_append("r.lineage.jsonl", create=True)
    assert fd is not None
    with pytest.raises(InjectedFaultError):
        faulty.write(fd, b"0123456789\n")
    faulty.close(fd)
    got = inner.read("r.lineage.jsonl", 0)
    assert got is not None and got[1] == b"01234"
    assert faulty.injected == 1
    inner.close_all()


def test_every_seam_call_can_be_failed() -> None:
    """No call of the seam is declared unable to fail: every method of ``FileSystem`` is in
    ``FAULTABLE_CALLS`` (a removal counter's ``pwrite`` failing with ENOSPC is how retire and delete once
    broke on a full disk, unseen because the injector said that call never fails)."""
    methods = {
        name for name, value in vars(FileSystem).items() if callable(value) and not name.startswith("_")
    }
    assert methods == set(FAULTABLE_CALLS)


# ------------------------------------------------------------------ every call of every operation, in turn
_A = {"model_call_id": "a"}
_B = {"model_call_id": "b"}
#: (name, setup operations, whether a second handle runs the setup, the operation under faults)
SCENARIOS: tuple[tuple[str, tuple[Operation, ...], bool, Operation], ...] = (
    ("record-new-ledger", (), False, Record("r0", _A)),
    ("record-live", (Record("r0", _A),), False, Record("r0", _B)),
    ("re-record-of-another-handle", (Record("r0", _A),), True, Record("r0", _A)),
    ("record-failure", (Record("r0", _A),), False, RecordFailure("r0", "a", "timeout")),
    ("late-write", (Record("r0", _A), Retire(("r0",))), False, Record("r0", _B)),
    ("retire", (Record("r0", _A),), True, Retire(("r0", "r1"))),
    ("delete", (Record("r0", _A), Record("r1", _A), Retire(("r1",))), False, Delete(("r0", "r1", "r2"))),
)


class _Counting:
    """A plan that fails nothing and notes every faultable call: the calls of one operation, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, call: str, name: str) -> Fault | None:
        self.calls.append(call)
        return None


class _Nth:
    """Fail the ``index``-th faultable call (0-based, any method) once."""

    def __init__(self, index: int, fault: Fault) -> None:
        self.index, self.fault, self.seen = index, fault, -1

    def __call__(self, call: str, name: str) -> Fault | None:
        self.seen += 1
        return self.fault if self.seen == self.index else None


def _run_scenario(
    directory: Path, setup: tuple[Operation, ...], other: bool, op: Operation, plan: object
) -> tuple[FileLineageStore, OsFileSystem, FaultyFileSystem, LedgerState]:
    model = LedgerState()
    if other:
        with FileLineageStore(directory, stripes=STRIPES) as writer:
            for setup_op in setup:
                run_operation(writer, setup_op)
    inner = OsFileSystem(directory, stripes=STRIPES)
    faulty = FaultyFileSystem(inner)
    store = FileLineageStore(directory, fs=faulty)
    if not other:
        for setup_op in setup:
            run_operation(store, setup_op)
    for setup_op in setup:
        model, _ = step(model, setup_op)
    faulty.plan = plan  # type: ignore[assignment]
    return store, inner, faulty, model


@pytest.mark.parametrize(("name", "setup", "other", "op"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_each_call_of_each_operation_may_fail(
    tmp_path: Path, name: str, setup: tuple[Operation, ...], other: bool, op: Operation
) -> None:
    """EIO and ENOSPC, before and after (and halfway through a write), at every seam call the operation
    makes, one at a time: the fault is raised, never swallowed; a fresh handle reads every ID in a state
    the crash contract allows; the retry without faults succeeds (or, for a re-record whose confirming
    fsync failed, is refused, R-STORE-13) and then everything reads as the model says."""
    counting = _Counting()
    store, inner, _, model = _run_scenario(tmp_path / "count", setup, other, op, counting)
    run_operation(store, op)
    store.close()
    inner.close_all()
    calls = counting.calls
    assert calls, name
    cases = 0
    for index, method in enumerate(calls):
        moments = ["before", "after"] + (["partial"] if method == "write" else [])
        for code in (errno.EIO, errno.ENOSPC):
            for when in moments:
                directory = tmp_path / f"{index}-{code}-{when}"
                store, inner, faulty, model = _run_scenario(
                    directory, setup, other, op, _Nth(index, Fault(code, when))
                )
                try:
                    with pytest.raises(InjectedFaultError):
                        run_operation(store, op)
                    faulty.plan = None
                    observation = observe_directory(directory, IDS, config=StoreConfig(stripes=STRIPES))
                    assert observation.mismatches == () and observation.findings == (), (index, method)
                    states = dict(observation.states)
                    for rollout_id in IDS:
                        initial = model.get(rollout_id)
                        allowed = (
                            allowed_states([Span(op=op, returned=False)], rollout_id, initial=initial)
                            if touches(op, rollout_id)
                            else {initial}
                        )
                        assert states[rollout_id] in allowed, (name, index, method, when, rollout_id)
                    try:
                        run_operation(store, op)  # the retry
                    except OSError as refused:
                        assert "refused" in str(refused), (name, index, method, when, refused)
                        assert method in ("fsync", "sync_dir") and isinstance(op, Record), (name, method)
                        continue
                    after, _ = step(model, op)
                    final = dict(
                        observe_directory(directory, IDS, config=StoreConfig(stripes=STRIPES)).states
                    )
                    assert final == {rid: after.get(rid) for rid in IDS}, (name, index, method, when)
                    cases += 1
                finally:
                    store.close()
                    inner.close_all()
    assert cases >= len(calls) * 2, (name, cases, calls)  # a count: most faults were retried to the model
