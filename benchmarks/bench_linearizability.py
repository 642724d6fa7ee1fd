"""Benchmark of the linearizability checker (goal: 100,000 operations over 1,000 IDs in < 10 s).

A history is simulated: ``--clients`` clients each run calls back to back; a call takes a random time and
takes effect at a random instant inside its interval; the results come from the sequential model applied
in the order of those instants, so the history is linearizable by construction, and intervals of different
clients overlap. Clients work on a sliding window of ``--window`` hot IDs (a rollout is written, read,
admitted, retired and sometimes deleted while other clients still call it), so most calls on one ID overlap
with others on it. A few calls never return (``returned=None``).

Printed side by side: generating the history (the model alone, the floor any checker pays to replay it),
checking it, and checking a copy with one result corrupted, which must be reported as a ``Violation``.

Run: ``python benchmarks/bench_linearizability.py`` (``--ops 100000 --ids 1000``).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import random
import sys
import time

from capture_ledger.spec.concurrency.history import Event
from capture_ledger.spec.concurrency.linearizability import Ok, Violation, check_history
from capture_ledger.spec.core import model


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


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--ids", type=int, default=1_000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    began, cpu = time.perf_counter(), time.process_time()
    events = simulate(args.ops, args.ids, clients=args.clients, seed=args.seed)
    generated, generated_cpu = time.perf_counter() - began, time.process_time() - cpu
    per_id: dict[str, list[Event]] = {}
    for event in events:
        for rollout_id in getattr(event.op, "rollout_ids", None) or [getattr(event.op, "rollout_id", "")]:
            if rollout_id != "not/valid":  # the calls rejected by validation touch no rollout
                per_id.setdefault(str(rollout_id), []).append(event)
    overlapping = sum(
        1
        for group in per_id.values()
        for a, b in itertools.pairwise(group)
        if b.invoked < (a.returned if a.returned is not None else float("inf"))
    )
    print(
        f"history: {len(events)} calls over {len(per_id)} IDs, {args.clients} clients, "
        f"{sum(e.returned is None for e in events)} never returned, "
        f"{overlapping} consecutive same-ID pairs overlapping in time"
    )
    print(f"generate (sequential model replay, the floor): {generated:7.3f} s  (CPU {generated_cpu:.3f} s)")

    began, cpu = time.perf_counter(), time.process_time()
    verdict = check_history(events)
    checked, checked_cpu = time.perf_counter() - began, time.process_time() - cpu
    print(
        f"check linearizable history:                    {checked:7.3f} s  (CPU {checked_cpu:.3f} s)  "
        f"{len(events) / checked:10,.0f} ops/s  ratio to floor {checked / generated:5.1f}x  -> {verdict!r}"
    )

    bad, index = corrupt(events)
    began = time.perf_counter()
    judged = check_history(bad)
    corrupted = time.perf_counter() - began
    witness = len(judged.witness.events) if isinstance(judged, Violation) else "-"
    print(
        f"check with event {index} corrupted:              {corrupted:7.3f} s  "
        f"-> {type(judged).__name__} (witness of {witness} events)"
    )
    if isinstance(judged, Violation):
        print(judged.counterexample)
    return 0 if isinstance(verdict, Ok) and isinstance(judged, Violation) else 1


if __name__ == "__main__":
    sys.exit(main())
