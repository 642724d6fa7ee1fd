"""Benchmark of the linearizability checker: the search that knows what commutes against the plain search
(porcupine's, ``reference_decide``), side by side in one run, CPU time and wall, with the load average.

Goals: 16 concurrent writers with reads and removals on one ID judged in < 1 s median; 32 writers < 10 s;
100,000 calls over 1,000 IDs < 0.5 s; a violation decided and explained in < 5 s on every history of the
set; never ``Unknown`` below 12 writers.

*One-ID histories* (``writers``): ``W`` clients record rows of their own on one rollout ID, two clients
read it (``manifest``, ``has_rows``) and one removes it now and then (``delete``, sometimes ``retire``);
calls last 4 to 8 time units and start back to back, so about ``W`` writes are in flight at any instant.
Each is judged as it is and with one result changed three ways (a forged row, a row dropped from a
manifest, two rows of a manifest swapped).

*The long history* (``simulate``): ``--clients`` clients each run calls back to back; a call takes a
random time and takes effect at a random instant inside its interval; the results come from the
sequential model applied in the order of those instants, so the history is linearizable by
construction, and intervals of different clients overlap. Clients work on a sliding window of 12 hot IDs
(a rollout is written, read, admitted, retired and sometimes deleted while other clients still call it),
so most calls on one ID overlap with others on it. A few calls never return (``returned=None``).

Run: ``python benchmarks/bench_linearizability.py`` (``--quick`` for a short run; ``--old-budget`` bounds
the plain search, which gives up with ``Unknown`` past it).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import random
import statistics
import sys
import time

from capture_ledger.spec.concurrency.history import Event
from capture_ledger.spec.concurrency.linearizability import (
    Ok,
    Unknown,
    Verdict,
    Violation,
    check_history,
    decide,
    reference_decide,
)
from capture_ledger.spec.core import model
from capture_ledger.spec.core.rows import canonical_json


def _operation(rng: random.Random, ids: list[str]) -> model.Operation:
    rollout_id = rng.choice(ids)
    call = f"m{rng.randrange(6)}"
    kind = rng.random()
    if kind < 0.40:
        return model.Record(rollout_id, {"model_call_id": call, "staging_key": f"{rollout_id}/{call}"})
    if kind < 0.45:
        return model.RecordFailure(rollout_id, call, "timeout")
    if kind < 0.55:
        return model.Admit(rollout_id, call)
    if kind < 0.70:
        return model.ReadManifest(rollout_id)
    if kind < 0.78:
        return model.HasRows(rollout_id)
    if kind < 0.95:
        return model.Retire(rng.sample(ids, rng.randint(1, min(3, len(ids)))))
    if kind < 0.99:
        return model.Delete([rollout_id])
    return model.Record("not/valid", {"model_call_id": call})  # rejected by validation


def _replay(states: dict[str, model.RolloutState], op: model.Operation) -> model.Result:
    """``model.step`` on one state per ID (IDs never interact), so the replay stays linear in ``ops``."""
    ids = model.rollout_ids_of(op)
    if isinstance(ids, model.Err):
        return ids
    results = []
    for rollout_id in ids:
        states[rollout_id], result = model.step_rollout(states.get(rollout_id, model.ABSENT), rollout_id, op)
        results.append(result)
    if isinstance(op, model.Retire | model.Delete):
        removed = tuple(i for i, r in zip(ids, results, strict=True) if r == model.Ok(True))
        return model.Ok(model.Removal(removed, tuple(i for i in ids if i not in removed)))
    return results[0]


def simulate(ops: int, ids: int, *, clients: int = 16, window: int = 12, seed: int = 0) -> list[Event]:
    """A linearizable history of ``ops`` calls over ``ids`` rollout IDs (see the module docstring)."""
    rng = random.Random(seed)
    names = [f"r{i:05d}" for i in range(ids)]
    planned: list[tuple[float, int, float, float, model.Operation, bool]] = []
    free = [0.0] * clients
    for n in range(ops):
        client = n % clients
        invoked = free[client] + rng.random()
        duration = rng.expovariate(1 / 8)
        point = invoked + rng.random() * duration
        # The hot window slides over the IDs as time passes.
        start = min(int(invoked / (ops / clients * 8.5 / ids)) % ids, ids - 1)
        hot = [names[(start + k) % ids] for k in range(window)]
        pending = rng.random() < 0.001
        planned.append((point, client, invoked, invoked + duration, _operation(rng, hot), pending))
        free[client] = invoked + duration
    states: dict[str, model.RolloutState] = {}
    events: list[Event] = []
    for _point, client, invoked, returned, op, pending in sorted(planned, key=lambda p: p[0]):
        if pending and rng.random() < 0.5:
            events.append(Event(client=client, op=op, invoked=invoked))  # never returned, never took effect
            continue
        result = _replay(states, op)
        events.append(
            Event(
                client=client,
                op=op,
                invoked=invoked,
                returned=None if pending else returned,
                result=None if pending else result,
            )
        )
    events.sort(key=lambda e: e.invoked)
    return events


def corrupt(events: list[Event], *, seed: int = 1) -> tuple[list[Event], int]:
    """A copy where one manifest shows a row that no call ever wrote (the model forbids it in any order)."""
    rng = random.Random(seed)
    candidates = [
        i
        for i, e in enumerate(events)
        if isinstance(e.op, model.ReadManifest)
        and isinstance(e.result, model.Ok)
        and isinstance(e.result.value, model.ManifestValue)
    ]
    index = rng.choice(candidates)
    result = events[index].result
    assert isinstance(result, model.Ok) and isinstance(result.value, model.ManifestValue)
    manifest = result.value
    forged = dataclasses.replace(manifest, records=(*manifest.records, '{"model_call_id": "forged"}'))
    bad = list(events)
    bad[index] = dataclasses.replace(events[index], result=model.Ok(forged))
    return bad, index


def writers(count: int, *, seed: int = 0, calls: int = 6) -> list[Event]:
    """A linearizable one-ID history: ``count`` writers, two readers, one remover (module docstring)."""
    rng = random.Random(seed)
    planned: list[tuple[float, int, float, float, model.Operation]] = []
    for client in range(count + 3):
        free = rng.random() * 2 + (6 if client == count + 2 else 0)  # removals fall among the writes
        for k in range(calls):
            invoked = free + rng.random()
            returned = invoked + 4 + 4 * rng.random()
            op: model.Operation
            if client < count:
                op = model.Record("a", {"model_call_id": f"c{client}k{k}", "staging_key": f"a/c{client}k{k}"})
            elif client == count:
                op = model.ReadManifest("a")
            elif client == count + 1:
                op = model.HasRows("a")
            else:
                op = (
                    model.Delete(["a"])
                    if k % 3 == 2
                    else model.Retire(["a"])
                    if k % 6 == 5
                    else model.HasRows("a")
                )
            point = invoked + rng.random() * (returned - invoked)
            planned.append((point, client, invoked, returned, op))
            free = returned
    states: dict[str, model.RolloutState] = {}
    events = [
        Event(client=c, op=op, invoked=i, returned=r, result=_replay(states, op))
        for _, c, i, r, op in sorted(planned, key=lambda p: p[0])
    ]
    return sorted(events, key=lambda e: e.invoked)


def mutations(events: list[Event]) -> dict[str, list[Event]]:
    """The history with one manifest changed: a forged row, a dropped row, two rows swapped."""
    found: dict[str, list[Event]] = {}
    reads = [
        i
        for i, e in enumerate(events)
        if isinstance(e.result, model.Ok)
        and isinstance(e.result.value, model.ManifestValue)
        and len(e.result.value.records) >= 2
    ]
    if not reads:
        return found
    index = reads[len(reads) // 2]
    result = events[index].result
    assert isinstance(result, model.Ok) and isinstance(result.value, model.ManifestValue)
    records = result.value.records
    changed = {
        "forged row": (*records, canonical_json({"model_call_id": "forged"})),
        "dropped row": records[:-1],
        "swapped rows": (*records[:-2], records[-1], records[-2]),
    }
    for name, rows in changed.items():
        bad = list(events)
        bad[index] = dataclasses.replace(events[index], result=model.Ok(model.ManifestValue(rows)))
        found[name] = bad
    return found


def _timed(judge: object, events: list[Event], **kwargs: object) -> tuple[Verdict, float, float]:
    began, cpu = time.perf_counter(), time.process_time()
    verdict = judge(events, **kwargs)  # type: ignore[operator]
    return verdict, time.process_time() - cpu, time.perf_counter() - began


def _cell(verdict: Verdict, cpu: float, wall: float) -> str:
    kind = {Ok: "Ok", Violation: "Violation", Unknown: "Unknown"}[type(verdict)]
    return f"{kind:9} {cpu:7.3f} s CPU {wall:7.3f} s wall"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--ids", type=int, default=1_000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=5, help="one-ID histories per writer count (median)")
    parser.add_argument("--old-budget", type=int, default=1_000_000, help="search steps for the plain search")
    parser.add_argument("--new-budget", type=int, default=3_000_000, help="search steps for the new search")
    parser.add_argument("--quick", action="store_true", help="fewer, smaller histories")
    args = parser.parse_args(argv)
    counts = (4, 8, 12) if args.quick else (4, 8, 12, 16, 32)
    seeds = 1 if args.quick else args.seeds
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'history':44} | {'old (plain search)':38} | {'new (commuting search)':38}")
    print("-" * 126)
    failed = False
    for count in counts:
        new_cpu, new_wall, old_cpu, old_wall, kinds, old_kinds = [], [], [], [], set(), set()
        for seed in range(seeds):
            events = writers(count, seed=seed)
            old = _timed(reference_decide, events, budget=args.old_budget)
            new = _timed(decide, events)
            old_kinds.add(type(old[0]).__name__)
            old_cpu.append(old[1])
            old_wall.append(old[2])
            new_cpu.append(new[1])
            new_wall.append(new[2])
            kinds.add(type(new[0]).__name__)
            failed |= not isinstance(new[0], Ok)
        label = f"{count} writers + reads + removals, median of {seeds}"
        old_kind = "/".join(sorted(old_kinds))
        print(
            f"{label:44} | {statistics.median(old_cpu):7.3f} s CPU {statistics.median(old_wall):7.3f} s wall "
            f"{old_kind:9} | {statistics.median(new_cpu):7.3f} s CPU "
            f"{statistics.median(new_wall):7.3f} s wall {'/'.join(sorted(kinds))}"
        )
        for name, bad in mutations(writers(count, seed=0)).items():
            old = _timed(reference_decide, bad, budget=args.old_budget)
            new = _timed(check_history, bad, budget=args.new_budget, explain_budget=args.new_budget)
            failed |= name == "forged row" and not isinstance(new[0], Violation)
            witness = len(new[0].witness.events) if isinstance(new[0], Violation) else "-"
            print(
                f"{'  ' + name + ', decided and explained':44} | {_cell(*old):38} | {_cell(*new):38} "
                f"witness of {witness}"
            )
    ops = 20_000 if args.quick else args.ops
    events = simulate(ops, args.ids, clients=args.clients)
    per_id = {
        rid
        for e in events
        for rid in (getattr(e.op, "rollout_ids", None) or [getattr(e.op, "rollout_id", "")])
    }
    overlapping = sum(
        1
        for a, b in itertools.pairwise(events)
        if b.invoked < (a.returned if a.returned is not None else float("inf"))
    )
    label = f"{len(events):,} calls over {len(per_id) - 1:,} IDs"
    old, new = _timed(reference_decide, events), _timed(decide, events)
    failed |= not isinstance(new[0], Ok)
    print(f"{label:44} | {_cell(*old):38} | {_cell(*new):38}")
    bad, index = corrupt(events)
    old, new = _timed(reference_decide, bad), _timed(check_history, bad)
    failed |= not isinstance(new[0], Violation)
    print(
        f"{'  event ' + str(index) + ' forged, decided and explained':44} | {_cell(*old):38} | "
        f"{_cell(*new):38}"
    )
    print(f"({overlapping:,} consecutive calls overlapping in time)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
