"""Tests of the linearizability checker (spec/concurrency/linearizability.py, R-CONC-1).

What they prove: the checker's per-ID steps are the model's; histories produced by the model under
concurrency are accepted; a wrong result is caught with a witness that is itself non-linearizable and
1-minimal; unreturned calls may or may not take effect; batches are judged per ID, not atomically; the
budget yields ``Unknown``; validation results and malformed removals are judged on their own.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from capture_ledger.spec.concurrency.history import Event, event_from_json, event_to_json
from capture_ledger.spec.concurrency.linearizability import (
    Ok,
    SubOperation,
    Unknown,
    Violation,
    check_history,
    decide,
    partition,
)
from capture_ledger.spec.core import model
from capture_ledger.spec.core.model import (
    Admit,
    Delete,
    HasRows,
    LedgerState,
    ReadManifest,
    Record,
    RecordFailure,
    Removal,
    Retire,
)
from capture_ledger.spec.core.rows import canonical_json
from capture_ledger.spec.kit import profile_settings
from hypothesis import given
from hypothesis import strategies as st

ROW = {"model_call_id": "m1"}
M1 = canonical_json(ROW)
M2 = canonical_json({"model_call_id": "m2"})
OK = model.Ok


def _ops(ids: list[str]) -> st.SearchStrategy[model.Operation]:
    rid = st.sampled_from([*ids, "bad/id"])
    call = st.sampled_from(["m1", "m2", ""])
    return st.one_of(
        st.builds(Record, rid, st.builds(lambda c, v: {"model_call_id": c, "v": v}, call, st.integers(0, 1))),
        st.builds(RecordFailure, rid, call, st.sampled_from(["x", "y"])),
        st.builds(Admit, rid, call),
        st.builds(ReadManifest, rid),
        st.builds(HasRows, rid),
        st.builds(Retire, st.lists(rid, max_size=3)),
        st.builds(Delete, st.lists(rid, max_size=3)),
        st.builds(Retire, st.just("a")),
    )


def _sequential(ops: list[model.Operation]) -> list[Event]:
    state = LedgerState()
    events = []
    for n, op in enumerate(ops):
        state, result = model.step(state, op)
        events.append(Event(client=n % 2, op=op, invoked=2 * n, returned=2 * n + 1, result=result))
    return events


def _concurrent(ops: list[model.Operation], seed: int, *, clients: int = 3) -> list[Event]:
    """Each call takes effect at a random instant of a random interval; clients call back to back."""
    rng = random.Random(seed)
    free = [0.0] * clients
    planned = []
    for n, op in enumerate(ops):
        client = n % clients
        invoked = free[client] + rng.random()
        duration = rng.random() * 6
        planned.append((invoked + rng.random() * duration, client, invoked, invoked + duration, op))
        free[client] = invoked + duration
    state = LedgerState()
    events = []
    for _, client, invoked, returned, op in sorted(planned, key=lambda p: p[0]):
        state, result = model.step(state, op)
        events.append(Event(client=client, op=op, invoked=invoked, returned=returned, result=result))
    return events


#: One rollout in each state: Absent, Live, Live (fenced), Retired.
STATES: tuple[model.RolloutState, ...] = (
    model.ABSENT,
    model.Live((model.RecordEntry("m1", M1),)),
    model.Live((model.RecordEntry("m1", M1), model.FailureEntry("m2", "x")), fenced=True),
    model.RETIRED,
)


def _disagreements(
    before: LedgerState, op: model.Operation, parts: dict[str, list[SubOperation]]
) -> list[str]:
    """Where the checker's sub-operations of ``op``, composed per ID, depart from ``model.step``."""
    after, result = model.step(before, op)
    if isinstance(result, model.Err) and result.kind in model.VALIDATION_ERRORS:
        return [] if parts == {} else [f"{op!r} fails validation but has sub-operations"]  # R-BATCH-2
    found = [] if sorted(parts) == sorted(model.rollout_ids_of(op)) else [f"{op!r}: IDs {sorted(parts)}"]  # type: ignore[arg-type]
    for rollout_id, subs in parts.items():
        state, observed = before.get(rollout_id), []
        for sub in subs:
            state, got = sub.apply(state)
            observed.append(got)
        if state != after.get(rollout_id):
            found.append(f"{op!r} takes {rollout_id} to {state!r}, the model to {after.get(rollout_id)!r}")
        expected = result
        if isinstance(result, model.Ok) and isinstance(result.value, Removal):
            expected = OK(rollout_id in result.value.removed)  # a batch: removed or not, per ID
        if observed[0] != expected:
            found.append(f"{op!r} on {rollout_id} gives {observed[0]!r}, the model {expected!r}")
    return found


@given(st.sampled_from(STATES), st.sampled_from(STATES), _ops(["a", "b"]))
@profile_settings()
def test_the_checkers_per_id_steps_are_the_models(
    a: model.RolloutState, b: model.RolloutState, op: model.Operation
) -> None:
    # The checker judges each ID with the sub-operations ``partition`` makes (``model.rollout_transition``,
    # and a retire's two points); composed, they take each ID where ``model.step`` does, with its result.
    before = LedgerState.of({"a": a, "b": b})
    _, result = model.step(before, op)
    parts, invalid = partition([Event(client=0, op=op, invoked=0, returned=1, result=result)])
    assert invalid is None
    assert _disagreements(before, op, parts) == []


def test_a_per_id_step_that_departs_from_the_model_is_told_apart() -> None:
    # The comparison can fail: a sub-operation that forgets a write, or one for an ID the batch lacks.
    op = Record("a", ROW)
    parts, _ = partition([Event(client=0, op=op, invoked=0, returned=1, result=OK(None))])
    forgetful = {"a": [parts["a"][0]._replace(apply=lambda state: (state, OK(None)))]}
    assert _disagreements(LedgerState(), op, forgetful) == [
        f"{op!r} takes a to Absent(), the model to {model.Live((model.RecordEntry('m1', M1),))!r}"
    ]
    retire = Retire(["a"])
    parts, _ = partition([Event(client=0, op=retire, invoked=0, returned=1, result=OK(Removal((), ("a",))))])
    assert _disagreements(LedgerState(), retire, {**parts, "b": parts["a"]}) != []


@given(st.lists(_ops(["a", "b"]), max_size=25))
@profile_settings()
def test_sequential_model_histories_are_linearizable(ops: list[model.Operation]) -> None:
    assert check_history(_sequential(ops)) == Ok()


@given(st.lists(_ops(["a", "b"]), max_size=25), st.integers(0, 10**6))
@profile_settings()
def test_concurrent_model_histories_are_linearizable(ops: list[model.Operation], seed: int) -> None:
    assert check_history(_concurrent(ops, seed)) == Ok()


FORGED = model.ManifestValue((canonical_json({"model_call_id": "forged"}),))


def _other_result(op: model.Operation, result: model.Result) -> model.Result:
    """A result of the right type for ``op`` that differs from ``result`` (so the search must judge it)."""
    if isinstance(op, HasRows):
        return OK(not result.value) if isinstance(result, model.Ok) else OK(False)
    if isinstance(op, ReadManifest):
        return OK(FORGED)  # a row no call wrote
    if isinstance(op, Admit):
        return OK("forged/key") if isinstance(result, model.Ok) else OK(None)
    if isinstance(result, model.Err):
        return OK(None) if isinstance(op, Record | RecordFailure) else OK(Removal((), ()))
    return model.Err(model.ErrorKind.ROLLOUT_RETIRED)


@given(st.lists(_ops(["a", "b"]), min_size=1, max_size=20), st.data())
@profile_settings()
def test_a_wrong_result_in_a_sequential_history_is_caught_with_a_minimal_witness(
    ops: list[model.Operation], data: st.DataObject
) -> None:
    events = _sequential(ops)
    index = data.draw(st.integers(0, len(events) - 1))
    original = events[index].result
    assert original is not None
    events[index] = dataclasses.replace(events[index], result=_other_result(events[index].op, original))
    verdict = check_history(events)
    assert isinstance(verdict, Violation), verdict
    # The witness is a sub-history, non-linearizable, with a culprit whose removal makes it linearizable;
    # every other event is needed (without it, linearizable) or needed for the rest to be consistent.
    assert all(event in events for event in verdict.witness.events)
    witness = list(verdict.witness.events)
    assert isinstance(check_history(witness), Violation)
    if verdict.witness.rollout_id is None:
        return
    culprits = [e for e in witness if check_history([x for x in witness if x is not e]) == Ok()]
    assert culprits, verdict
    for event in witness:
        rest = [x for x in witness if x is not event]
        assert check_history(rest) == Ok() or any(
            isinstance(check_history([x for x in rest if x is not c]), Violation) for c in culprits
        ), (event, verdict)


def test_a_stale_read_after_a_returned_retire_is_a_violation() -> None:
    events = [
        Event(client=0, op=Record("a", ROW), invoked=0, returned=1, result=OK(None)),
        Event(client=1, op=Retire(["a"]), invoked=2, returned=3, result=OK(Removal(("a",), ()))),
        Event(
            client=0, op=HasRows("a"), invoked=4, returned=5, result=OK(True)
        ),  # the retire returned before: must be an error
    ]
    verdict = check_history(events)
    assert isinstance(verdict, Violation)
    assert verdict.requirement == "R-CONC-1"
    assert verdict.witness.rollout_id == "a"
    assert events[2] in verdict.witness.events
    assert "retire" in verdict.witness.explanation.lower()
    # Overlapping the retire, the same read is fine.
    assert check_history([*events[:2], dataclasses.replace(events[2], invoked=2.5)]) == Ok()


def test_a_late_write_that_recreates_a_retired_rollout_is_a_violation() -> None:
    events = [
        Event(client=0, op=Record("a", ROW), invoked=0, returned=1, result=OK(None)),
        Event(client=1, op=Retire(["a"]), invoked=2, returned=3, result=OK(Removal(("a",), ()))),
        Event(
            client=2, op=Record("a", {"model_call_id": "m2"}), invoked=4, returned=5, result=OK(None)
        ),  # discarded: fine
        Event(
            client=0, op=ReadManifest("a"), invoked=6, returned=7, result=OK(model.ManifestValue((M2,)))
        ),  # not fine
    ]
    verdict = check_history(events)
    assert isinstance(verdict, Violation)
    assert events[3] in verdict.witness.events


def test_batches_are_per_id_linearizable_not_atomic() -> None:
    # R-CONC-1: while retire([a, b]) runs, a reader may see a retired and b still live.
    retired = model.Err(model.ErrorKind.ROLLOUT_RETIRED)
    events = [
        Event(client=0, op=Record("a", ROW), invoked=0, returned=1, result=OK(None)),
        Event(client=0, op=Record("b", ROW), invoked=0, returned=1, result=OK(None)),
        Event(client=1, op=Retire(["a", "b"]), invoked=2, returned=10, result=OK(Removal(("a", "b"), ()))),
        Event(client=2, op=HasRows("a"), invoked=3, returned=4, result=retired),
        Event(client=2, op=HasRows("b"), invoked=5, returned=6, result=OK(True)),
    ]
    assert check_history(events) == Ok()
    parts, invalid = partition(events)
    assert invalid is None
    assert sorted(parts) == ["a", "b"]
    assert [op.label for op in parts["a"]][1:3] == [
        "Retire(rollout_ids=['a', 'b']) on 'a' (fence)",
        "Retire(rollout_ids=['a', 'b']) on 'a' (complete)",
    ]


def test_a_retire_in_flight_is_seen_as_fenced_live() -> None:
    # R-STATE-2: between its phases a retire leaves rows readable while admission is refused.
    events = [
        Event(client=0, op=Record("a", ROW), invoked=0, returned=1, result=OK(None)),
        Event(client=1, op=Retire(["a"]), invoked=2, returned=10, result=OK(Removal(("a",), ()))),
        Event(client=2, op=Admit("a", "m2"), invoked=3, returned=4, result=OK(None)),
        Event(client=2, op=ReadManifest("a"), invoked=5, returned=6, result=OK(model.ManifestValue((M1,)))),
    ]
    assert check_history(events) == Ok()
    # Once the retire returned, the rows must be gone.
    late = Event(
        client=2, op=ReadManifest("a"), invoked=11, returned=12, result=OK(model.ManifestValue((M1,)))
    )
    assert isinstance(check_history([*events, late]), Violation)


def test_a_write_after_a_delete_survives_an_older_retire() -> None:
    # R-CONC-3: retire's phase 2 leaves alone a rollout deleted (and re-used) since its phase 1.
    manifest_m2 = OK(model.ManifestValue((M2,)))
    events = [
        Event(client=0, op=Record("a", ROW), invoked=0, returned=1, result=OK(None)),
        Event(client=1, op=Retire(["a"]), invoked=2, returned=20, result=OK(Removal(("a",), ()))),
        Event(client=2, op=Delete(["a"]), invoked=3, returned=4, result=OK(Removal(("a",), ()))),
        Event(client=2, op=Record("a", {"model_call_id": "m2"}), invoked=5, returned=6, result=OK(None)),
        Event(client=2, op=ReadManifest("a"), invoked=21, returned=22, result=manifest_m2),
    ]
    assert check_history(events) == Ok()
    # Linearizability alone also accepts the retire taking effect after the new write (its interval
    # covers it): R-CONC-3 is stronger, and the explorer checks it as an invariant of the step model.
    retired = model.Err(model.ErrorKind.ROLLOUT_RETIRED)
    assert check_history([*events[:4], dataclasses.replace(events[4], result=retired)]) == Ok()
    # But not a rollout that is simply gone: no order leaves it Absent after the write.
    empty = OK(model.ManifestValue())
    assert isinstance(check_history([*events[:4], dataclasses.replace(events[4], result=empty)]), Violation)


def test_an_unreturned_call_may_or_may_not_take_effect() -> None:
    write = Event(client=0, op=Record("a", ROW), invoked=0)  # never returned
    seen = Event(client=1, op=HasRows("a"), invoked=1, returned=2, result=OK(True))
    unseen = Event(client=1, op=HasRows("a"), invoked=3, returned=4, result=OK(False))
    assert check_history([write, seen]) == Ok()
    assert check_history([write, unseen]) == Ok()
    # ... but not both: once seen it stays.
    assert isinstance(check_history([write, seen, unseen]), Violation)
    # And not before it was invoked.
    assert isinstance(check_history([dataclasses.replace(write, invoked=5), seen]), Violation)


def test_discards_compare_as_none_whichever_way_they_were_recorded() -> None:
    retire = Event(client=1, op=Retire(["a"]), invoked=0, returned=1, result=OK(Removal((), ("a",))))
    late = Record("a", {"model_call_id": "m1", "staging_key": "a/m1"})
    assert check_history([retire, Event(client=0, op=late, invoked=2, returned=3, result=OK(None))]) == Ok()
    assert (
        check_history(
            [retire, Event(client=0, op=late, invoked=2, returned=3, result=OK(model.Discarded("a", "a/m1")))]
        )
        == Ok()
    )


def test_validation_results_and_malformed_removals_are_judged_alone() -> None:
    bad_id = Event(client=0, op=Record("a/b", ROW), invoked=0, returned=1, result=OK(None))
    verdict = check_history([bad_id])
    assert isinstance(verdict, Violation)
    assert verdict.witness.rollout_id is None
    assert verdict.witness.events == (bad_id,)
    rejected = Event(
        client=0, op=Retire("ab"), invoked=0, returned=1, result=model.Err(model.ErrorKind.TYPE_ERROR)
    )
    assert check_history([rejected]) == Ok()
    split_wrong = Event(
        client=0, op=Retire(["a", "b"]), invoked=0, returned=1, result=OK(Removal((), ("b",)))
    )
    assert isinstance(check_history([split_wrong]), Violation)
    raised = Event(
        client=0, op=Delete(["a"]), invoked=0, returned=1, result=model.Err(model.ErrorKind.ROLLOUT_RETIRED)
    )
    assert isinstance(check_history([raised]), Violation)


@pytest.mark.parametrize(
    ("event", "problem"),
    [
        (
            Event(client=0, op=HasRows("a"), invoked=2, returned=1, result=OK(False)),
            "returned before it was invoked",
        ),
        (
            Event(client=0, op=HasRows("a"), invoked=2, returned=None, result=OK(False)),
            "has a result but no return time",
        ),
        (
            Event(client=0, op=HasRows("a"), invoked=float("nan"), returned=3, result=OK(False)),
            "must be finite numbers",
        ),
        (
            Event(client=0, op=HasRows("a"), invoked=0, returned=float("inf"), result=OK(False)),
            "must be finite numbers",
        ),
        (
            Event(client=0, op=HasRows("a"), invoked="0", returned=1, result=OK(False)),  # type: ignore[arg-type]
            "must be finite numbers",
        ),
        (Event(client=0, op="has_rows a", invoked=0, returned=1, result=OK(False)), "is not an operation"),  # type: ignore[arg-type]
        (Event(client=0, op=HasRows("a"), invoked=0, returned=1, result={"ok": False}), "neither Ok nor Err"),  # type: ignore[arg-type]
        (
            Event(client=0, op=HasRows("a"), invoked=0, returned=1, result=model.Err("gone")),  # type: ignore[arg-type]
            "names no ErrorKind",
        ),
    ],
)
def test_a_malformed_history_is_refused_naming_the_event(event: Event, problem: str) -> None:
    # Not a recording of calls, so nothing to judge (R-KIT-9): a ValueError naming the event, before any
    # verdict on the well-formed events around it (the violation first in the list is not reported).
    wrong = Event(client=0, op=HasRows("b"), invoked=0, returned=1, result=OK(True))
    with pytest.raises(ValueError, match=f"event 1 is malformed: .*{problem}"):
        check_history([wrong, event])


@pytest.mark.parametrize(
    ("op", "value", "said"),
    [
        (HasRows("a"), 0, "returned 0, not a bool"),
        (Admit("a", "m1"), 7, "returned 7, not a staging key or None"),
        (Record("a", ROW), "done", "returned 'done', not None (a write returns None)"),
        (ReadManifest("a"), [], "returned [], not a manifest"),
    ],
)
def test_a_result_of_the_wrong_type_is_a_violation_of_its_own(
    op: model.Operation, value: object, said: str
) -> None:
    event = Event(client=0, op=op, invoked=0, returned=1, result=OK(value))
    verdict = check_history([event])
    assert isinstance(verdict, Violation)
    assert verdict.witness.rollout_id is None and verdict.witness.events == (event,)
    assert said in verdict.witness.explanation


def test_the_budget_yields_unknown_with_the_budget_spent() -> None:
    # Many concurrent writes: a search that must try orders (R-KIT-9).
    events = [
        Event(client=n, op=Record("a", {"model_call_id": f"m{n}"}), invoked=0, returned=100, result=OK(None))
        for n in range(12)
    ]
    events.append(
        Event(client=99, op=ReadManifest("a"), invoked=101, returned=102, result=OK(model.ManifestValue(())))
    )
    for budget in (1, 50, 500):
        assert check_history(events, budget=budget) == Unknown(spent=f"{budget} search steps")
        assert decide(events, budget=budget) == Unknown(spent=f"{budget} search steps")
    assert isinstance(check_history(events[:4] + events[-1:]), Violation)


def test_decide_is_the_verdict_without_the_shrunk_witness() -> None:
    # ``decide`` says the same as ``check_history``; its violation carries the failing rollout's events
    # whole (no explanation search, no shrinking), in the history's order.
    events = [
        Event(client=0, op=Record("a", ROW), invoked=0, returned=1, result=OK(None)),
        Event(client=0, op=Record("b", ROW), invoked=0, returned=1, result=OK(None)),
        Event(client=2, op=HasRows("b"), invoked=1.5, returned=1.8, result=OK(True)),
        Event(client=1, op=Retire(["a"]), invoked=2, returned=3, result=OK(Removal(("a",), ()))),
        Event(
            client=2, op=HasRows("a"), invoked=2.5, returned=2.8, result=OK(True)
        ),  # overlaps the retire: fine
        Event(
            client=0, op=HasRows("a"), invoked=4, returned=5, result=OK(True)
        ),  # after it returned: must be an error
    ]
    decided, checked = decide(events), check_history(events)
    assert isinstance(decided, Violation) and isinstance(checked, Violation)
    assert decided.requirement == checked.requirement == "R-CONC-1"
    assert decided.witness.rollout_id == checked.witness.rollout_id == "a"
    assert decided.witness.events == (events[0], events[3], events[4], events[5])
    assert checked.witness.events == (events[0], events[3], events[5])
    assert "longest partial linearization" in checked.witness.explanation
    assert "longest partial linearization" not in decided.witness.explanation
    # The counterexample is the witness as text: the explanation, then one runnable event a line.
    assert checked.counterexample.splitlines() == [
        f"Violation(rollout_id='a', explanation={checked.witness.explanation!r}, witness=[",
        *(f"    {event!r}," for event in checked.witness.events),
        "])",
    ]
    assert decide(events[:5]) == check_history(events[:5]) == Ok()
    bad = [Event(client=0, op=HasRows("a"), invoked=0, returned=1, result=OK(0))]
    assert decide(bad) == check_history(bad)


def test_histories_survive_json_lines() -> None:
    ops: list[model.Operation] = [
        Record("a", ROW),
        Admit("a", "m1"),
        Retire(["a", "b"]),
        Record("a", {"model_call_id": "m2", "staging_key": "a/m2"}),
        ReadManifest("a"),
        Delete(["a"]),
        RecordFailure("a", "m3", "timeout"),
        ReadManifest("a"),
    ]
    events = _concurrent(ops, 7)
    loaded = [event_from_json(event_to_json(e)) for e in events]
    assert check_history(loaded) == Ok()


def test_a_larger_concurrent_history_is_checked() -> None:
    rng = random.Random(5)
    ids = [f"r{i}" for i in range(20)]
    ops: list[model.Operation] = []
    for _ in range(2000):
        rid, call = rng.choice(ids), f"m{rng.randrange(4)}"
        choices: list[model.Operation] = [
            Record(rid, {"model_call_id": call}),
            HasRows(rid),
            ReadManifest(rid),
            Admit(rid, call),
            Retire([rid, rng.choice(ids)]),
            Delete([rid]),
        ]
        ops.append(rng.choice(choices))
    events = _concurrent(ops, 11, clients=8)
    assert check_history(events) == Ok()
    forged = next(i for i, e in enumerate(events) if isinstance(e.op, HasRows) and e.result == OK(False))
    events[forged] = dataclasses.replace(events[forged], result=OK("forged"))
    assert isinstance(check_history(events), Violation)
