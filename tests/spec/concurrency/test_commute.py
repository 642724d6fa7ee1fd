"""The search that knows what commutes agrees with the plain search (spec/concurrency/_commute.py,
_search.py; R-CONC-1).

What they prove: on every generated history (calls on one or two rollout IDs, heavily overlapping, with
simple and repeated model call IDs, reads, removals, unreturned calls), and on the same history with one
result changed as a bug would change it (a manifest reordered or missing a row, a flipped answer), the
checker's ``decide`` and ``reference_decide`` (porcupine's search on the model's ordered states) give the
same verdict. And the counts: the reduced search takes a number of steps that grows with the writers, not
with their orders; the witness's explaining bound yields an unshrunk witness that says so.
"""

from __future__ import annotations

import dataclasses
import random
from unittest import mock

from capture_ledger.spec.concurrency import _search
from capture_ledger.spec.concurrency.history import Event
from capture_ledger.spec.concurrency.linearizability import (
    Ok,
    Unknown,
    Violation,
    check_history,
    decide,
    reference_decide,
)
from capture_ledger.spec.core import model
from capture_ledger.spec.core.model import (
    Admit,
    Delete,
    HasRows,
    LedgerState,
    ManifestValue,
    ReadManifest,
    Record,
    RecordFailure,
    Removal,
    Retire,
)
from capture_ledger.spec.kit import profile_settings
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

OK = model.Ok

#: Examples of the agreement property (the ``ci`` profile's 60 are too few for a search this subtle).
AGREEMENT_EXAMPLES = 1500
#: Examples of the agreement property on removals among many writes (the plain search is slow on them).
REMOVAL_EXAMPLES = 500


def _operation(draw: st.DrawFn) -> model.Operation:
    rid = draw(st.sampled_from(["a"] * 7 + ["b"]))
    call = draw(st.sampled_from([f"m{k}" for k in range(12)]))
    kind = draw(st.integers(0, 99))
    if kind < 38:
        return Record(rid, {"model_call_id": call, "v": draw(st.integers(0, 2)) // 2})
    if kind < 46:
        return RecordFailure(rid, call, draw(st.sampled_from(["x", "y"])))
    if kind < 70:
        return ReadManifest(rid)
    if kind < 78:
        return HasRows(rid)
    if kind < 84:
        return Admit(rid, call)
    if kind < 92:
        return Retire(draw(st.sampled_from([[rid], ["a", "b"]])))
    return Delete([rid])


@st.composite
def histories(draw: st.DrawFn) -> list[Event]:
    """A history the model produced: each call takes effect at an instant of its interval (or, unreturned,
    maybe never); intervals overlap heavily and touch (integer times)."""
    count = draw(st.integers(1, 12))
    burst = draw(st.integers(0, 4))  # writes of fresh rows one after another, some overlapping
    planned = []
    for n in range(count):
        op = Record("a", {"model_call_id": f"w{n}"}) if n < burst else _operation(draw)
        invoked = 3 * n + draw(st.integers(0, 2)) if n < burst else draw(st.integers(0, 24))
        returned = invoked + draw(st.integers(0, 8))
        point = draw(st.integers(invoked, returned))
        unreturned = draw(st.integers(0, 9)) == 0
        planned.append((point, n, op, invoked, returned, unreturned, draw(st.booleans())))
    state = LedgerState()
    events = []
    for _, n, op, invoked, returned, unreturned, took_effect in sorted(planned, key=lambda p: (p[0], p[1])):
        if unreturned:
            if took_effect:
                state, _ = model.step(state, op)
            events.append(Event(client=n, op=op, invoked=invoked))
            continue
        state, result = model.step(state, op)
        events.append(Event(client=n, op=op, invoked=invoked, returned=returned, result=result))
    return sorted(events, key=lambda e: e.client)


@st.composite
def removal_histories(draw: st.DrawFn) -> list[Event]:
    """A history the model produced where removals overlap many writes of fresh rows on one ID: whether
    each write was cleared by a removal is settled only by a later read (or never), the case the search
    keeps as rows that may be gone (``_commute.Rows.maybe``)."""
    writes = draw(st.integers(2, 6))
    first = draw(st.integers(2, 6))  # one removal at least, in the middle of the writes
    removals: list[model.Operation] = [Delete(["a"]), Retire(["a"])]
    removal = draw(st.sampled_from(removals))
    planned: list[tuple[int, model.Operation, int, int]] = [
        (0, removal, first, first + draw(st.integers(0, 3)))
    ]
    for n in range(1, writes + 1):  # long, mutually overlapping writes of rows of their own
        invoked = draw(st.integers(0, 8))
        planned.append(
            (n, Record("a", {"model_call_id": f"w{n}"}), invoked, invoked + draw(st.integers(2, 10)))
        )
    kinds = ["delete", "retire", "manifest", "manifest", "manifest", "has_rows", "record"]
    for n in range(writes + 1, writes + 1 + draw(st.integers(0, 4))):  # more removals, reads, a retry
        kind = draw(st.sampled_from(kinds))
        choices: dict[str, model.Operation] = {
            "delete": Delete(["a"]),
            "retire": Retire(["a"]),
            "manifest": ReadManifest("a"),
            "has_rows": HasRows("a"),
            "record": Record("a", {"model_call_id": f"w{draw(st.integers(1, writes))}"}),
        }
        op = choices[kind]
        invoked = draw(st.integers(0, 16))
        planned.append((n, op, invoked, invoked + draw(st.integers(0, 5))))
    if draw(st.booleans()):  # a read after everything, which settles what each removal cleared
        planned.append((len(planned), ReadManifest("a"), 20, 21))
    timed = []
    for n, op, invoked, returned in planned:
        point = draw(st.integers(invoked, returned))
        unreturned = draw(st.integers(0, 11)) == 0
        timed.append((point, n, op, invoked, returned, unreturned, draw(st.booleans())))
    state = LedgerState()
    events = []
    for _, n, op, invoked, returned, unreturned, took_effect in sorted(timed, key=lambda p: (p[0], p[1])):
        if unreturned:
            if took_effect:
                state, _ = model.step(state, op)
            events.append(Event(client=n, op=op, invoked=invoked))
            continue
        state, result = model.step(state, op)
        events.append(Event(client=n, op=op, invoked=invoked, returned=returned, result=result))
    return sorted(events, key=lambda e: e.client)


def _mutations(result: model.Result) -> list[model.Result]:
    """Results a bug could return instead of ``result``, of the right type."""
    if isinstance(result, model.Err):
        return [OK(None), OK(ManifestValue()), OK(False)]
    value = result.value
    if isinstance(value, ManifestValue):
        records, failures = list(value.records), list(value.failures)
        found: list[model.Result] = []
        for k in range(len(records) - 1):  # two rows swapped, as a store that appends out of order
            swapped = [*records[:k], records[k + 1], records[k], *records[k + 2 :]]
            found.append(OK(ManifestValue(tuple(swapped), value.failures)))
        if len(records) > 1:
            found.append(OK(ManifestValue(tuple(reversed(records)), value.failures)))
            found.append(OK(ManifestValue((*records[1:], records[0]), value.failures)))
        if len(failures) > 1:
            found.append(OK(ManifestValue(value.records, tuple(reversed(failures)))))
        if records:
            found.append(OK(ManifestValue(tuple(records[:-1]), value.failures)))
            found.append(OK(ManifestValue((*records, records[0]), value.failures)))  # a row listed twice
            found.append(OK(ManifestValue(tuple(records[1:]), value.failures)))
        if failures:
            found.append(OK(ManifestValue(value.records, tuple(failures[:-1]))))
        found.append(model.Err(model.ErrorKind.ROLLOUT_RETIRED))
        return found
    if isinstance(value, bool):
        return [OK(not value)]
    if isinstance(value, Removal):
        return [OK(Removal(value.absent, value.removed))]
    if isinstance(value, str):
        return [OK(None)]
    return [model.Err(model.ErrorKind.CONFLICTING_RECORD), model.Err(model.ErrorKind.ROLLOUT_RETIRED)]


def _kind(verdict: object) -> str:
    return type(verdict).__name__


@given(histories(), st.data())
@settings(profile_settings(), max_examples=AGREEMENT_EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
def test_the_reduced_search_agrees_with_the_plain_search(events: list[Event], data: st.DataObject) -> None:
    _agree(events, data)


@given(removal_histories(), st.data())
@settings(profile_settings(), max_examples=REMOVAL_EXAMPLES, suppress_health_check=[HealthCheck.too_slow])
def test_the_reduced_search_agrees_when_removals_overlap_many_writes(
    events: list[Event], data: st.DataObject
) -> None:
    _agree(events, data)


def _agree(events: list[Event], data: st.DataObject) -> None:
    # ``decide`` leaves partitions with few writes in flight to the plain search (``_search.judge``): here
    # every partition goes to the commuting search, which is what is checked.
    with mock.patch.object(_search, "CROWD", -1):
        _agree_searches(events, data)


def _agree_searches(events: list[Event], data: st.DataObject) -> None:
    # Unmutated: both say Ok (the model produced the history).
    assert _kind(decide(events)) == _kind(reference_decide(events)) == "Ok"
    # One result changed: whatever the plain search says, the reduced one says it too.
    returned = [i for i, e in enumerate(events) if e.result is not None]
    if not returned:
        return
    index = data.draw(st.sampled_from(returned))
    result = events[index].result
    assert result is not None
    mutated = list(events)
    mutated[index] = dataclasses.replace(events[index], result=data.draw(st.sampled_from(_mutations(result))))
    expected = reference_decide(mutated)
    event(f"mutated history: {_kind(expected)}")
    assert _kind(decide(mutated)) == _kind(expected), mutated


def _writers(writers: int, *, seed: int = 0, reads: int = 2, calls: int = 4) -> list[Event]:
    """``writers`` clients recording distinct rows on one ID, ``reads`` clients reading it, calls long and
    overlapping; results from the model at a random instant of each call."""
    rng = random.Random(seed)
    planned = []
    for client in range(writers + reads):
        free = rng.random()
        for k in range(calls):
            invoked = free + rng.random()
            returned = invoked + 4 + 4 * rng.random()
            op: model.Operation = (
                Record("a", {"model_call_id": f"c{client}k{k}"}) if client < writers else ReadManifest("a")
            )
            planned.append((invoked + rng.random() * (returned - invoked), client, op, invoked, returned))
            free = returned
    state = LedgerState()
    events = []
    for _, client, op, invoked, returned in sorted(planned, key=lambda p: p[0]):
        state, result = model.step(state, op)
        events.append(Event(client=client, op=op, invoked=invoked, returned=returned, result=result))
    return sorted(events, key=lambda e: e.invoked)


def _steps(events: list[Event], search: object = decide) -> int:
    """Search steps a decision takes (the least budget that decides)."""
    low, high = 1, 1 << 24
    while low < high:
        middle = (low + high) // 2
        if isinstance(search(events, budget=middle), Unknown):  # type: ignore[operator]
            low = middle + 1
        else:
            high = middle
    return low


def test_concurrent_writers_cost_steps_not_orders() -> None:
    # The plain search's steps grow with the orders of writes no read has fixed; the reduced search's with
    # the calls. Pinned counts (deterministic histories).
    assert [_steps(_writers(n)) for n in (4, 8, 12, 16, 32)] == [79, 342, 644, 429, 1384]
    assert _steps(_writers(4), reference_decide) == 12_833
    assert isinstance(reference_decide(_writers(6), budget=100_000), Unknown)


def test_a_forged_row_is_decided_before_any_search() -> None:
    events = _writers(32)
    last = max(i for i, e in enumerate(events) if isinstance(e.op, ReadManifest))
    result = events[last].result
    assert isinstance(result, model.Ok) and isinstance(result.value, ManifestValue)
    forged = ManifestValue((*result.value.records, '{"model_call_id":"forged"}'))
    events[last] = dataclasses.replace(events[last], result=OK(forged))
    assert isinstance(decide(events, budget=1), Violation)


def test_the_witness_is_explained_within_its_own_bound_or_given_unshrunk() -> None:
    rows = [
        Event(client=n, op=Record("a", {"model_call_id": f"m{n}"}), invoked=0, returned=10, result=OK(None))
        for n in range(6)
    ]
    late = Event(
        client=9, op=HasRows("a"), invoked=11, returned=12, result=OK(False)
    )  # every write returned before: must be True
    events = [*rows, late]
    full = check_history(events)
    assert isinstance(full, Violation) and full.witness.shrunk
    assert "shrunk=False" not in full.counterexample
    cut = check_history(events, explain_budget=3)
    assert isinstance(cut, Violation) and not cut.witness.shrunk
    assert cut.witness.events == tuple(events)
    assert "not shrunk: the bound of 3 search steps" in cut.witness.explanation
    assert cut.counterexample.splitlines()[0].endswith("shrunk=False, witness=[")
    # The verdict itself never waits on the witness: ``decide`` spends no explaining steps.
    assert isinstance(decide(events), Violation) and check_history(events[:-1]) == Ok()
