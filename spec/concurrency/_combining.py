"""Combined removals in the step-level model: the combiner queues, taking requests, handing out results
(SPEC.md R-STORE-4, R-STORE-5, R-STORE-9, R-CONC-1; docs/concurrency.md §Combined removals).

With ``Config.combine`` a ``retire`` or ``delete`` is a *request* on its kind's queue (``State.queues``,
one per kind: a batch holds one kind). Its program:

1. **enqueue** (its first step: the invocation, and the request appended to the queue);
2. at ``c.wait``, one of:

   * its request is still pending and no batch of its kind runs: it becomes the **combiner**
     (``State.combiners``): it takes every pending request, its own included, in queue order, and runs
     **one** batch over the union of their IDs with exactly the steps of a removal today
     (``_programs._retire`` / ``_delete`` over ``Local.batch``: the same locks, phases, syncs, and with
     ``Config.group_commit`` the same shared sync register); after the batch's last sync it hands every
     request its own result (``State.handed``) and returns;
   * its request is pending and a batch runs: blocked;
   * its request was taken: blocked until the combiner handed it its result (``await_combined_batch``;
     off, it returns at once, reporting every ID ``absent``);
   * it holds its result: it returns it (the store's ``await_sync`` on the combiner queue).

**Results** (linearized "requests in queue order"): each request's ``removed`` and ``absent`` hold its
own IDs in its order. For a **delete**, an ID the batch removed is ``removed`` for the first request (in
queue order) asking for it and ``absent`` for a later one: what a delete right after the first returns,
both at the batch's unlink. For a **retire**, every request asking for an ID gets the batch's result for
it (``removed`` if the batch noted a ledger in phase 1): each request's fence point is the batch's fence
and its completion the batch's completion, as two overlapping retires that both noted the ledger. The
rule "a later retire gets ``absent``" (``Guards.same_retire_result`` off) is *not* linearizable: it needs
the later request ordered after the first one's completion, and when a delete comes between the batch's
phases (the completion then finds the ID Absent and leaves it) the later retire would have to leave the
ID Retired (``combine-retires-vs-delete``, docs/concurrency.md). ``Guards.results_after_syncs`` off: the
combiner hands out the results when phase 1 ends, before the batch's syncs (the values are right; the
waiters return too early).

Ghost ``State.uncovered`` holds each taken request, as ``(client, call)``, until its batch finished its
syncs; ``Stepper.finish`` records in ``State.early`` a return made before that (the explorer's property
**R-STORE-9 no return before its batch synced**).

Any pending request may take when no batch runs (the store lets only the first pending one): the model
has more executions than the store, so a safety property that holds here holds for the store's order too.

Not modelled: validation (the model's batches are valid and de-duplicated), failures of a batch (every
request would get the batch's ``OSError``), and several directories or processes (one queue per kind).
"""

from __future__ import annotations

from typing import TypeVar

from capture_ledger.spec.concurrency.steps import Call, DeleteCall, RetireCall, Stepper
from capture_ledger.spec.core import model

__all__ = ["complete", "end_of_phase_1", "request"]

_T = TypeVar("_T")

#: The program counter at which a combiner begins its batch, per kind (0 retire, 1 delete).
_FIRST_STEP = ("p1.lock", "lock")


def _put(values: tuple[_T, ...], index: int, value: _T) -> tuple[_T, ...]:
    return (*values[:index], value, *values[index + 1 :])


def _kind(call: RetireCall | DeleteCall) -> int:
    return 0 if isinstance(call, RetireCall) else 1


def _ids(call: Call) -> tuple[str, ...]:
    assert isinstance(call, RetireCall | DeleteCall)
    return call.rollout_ids


def request(s: Stepper, call: RetireCall | DeleteCall) -> str | None:
    """A combined removal's step outside its batch (enqueue, take, wait, return); ``None`` when blocked."""
    kind, state = _kind(call), s.state
    if s.local.pc == "start":
        s.changes["queues"] = _put(state.queues, kind, (*state.queues[kind], s.client))
        s.go("c.wait")
        return "enqueue request"
    handed = state.handed[s.client]
    if handed is not None:
        s.changes["handed"] = _put(state.handed, s.client, None)
        s.finish(handed)
        return "its batch completed: return its result"
    queue = state.queues[kind]
    if s.client not in queue:  # taken by the running batch
        if s.guards.await_combined_batch:
            return None
        s.finish(model.Ok(model.Removal((), call.rollout_ids)))
        return "request taken: return at once"
    if state.combiners[kind] != -1:
        return None
    members = tuple((m, state.locals[m].call) for m in queue)
    union = tuple(dict.fromkeys(i for m, c in members for i in _ids(s.config.clients[m].calls[c])))
    number = state.batches[kind] + 1
    s.changes["queues"] = _put(state.queues, kind, ())
    s.changes["combiners"] = _put(state.combiners, kind, s.client)
    s.changes["batches"] = _put(state.batches, kind, number)
    s.changes["uncovered"] = state.uncovered | set(members)
    s.go(_FIRST_STEP[kind], index=0, batch=union, members=members, had=(), flag=False)
    clients = ", ".join(str(m) for m, _ in members)
    return f"take the requests of clients {clients}: batch {number} over [{', '.join(union)}]"


def _results(s: Stepper) -> dict[int, model.Result]:
    """Each member's result, by client: its own IDs, the removed ones to the first request asking."""
    removed_by_batch, claimed = set(s.local.had), set[str]()
    results: dict[int, model.Result] = {}
    for member, call in s.local.members:
        ids = _ids(s.config.clients[member].calls[call])
        removed = tuple(i for i in ids if i in removed_by_batch and i not in claimed)
        results[member] = model.Ok(model.Removal(removed, tuple(i for i in ids if i not in removed)))
        if isinstance(s.call, DeleteCall) or not s.guards.same_retire_result:
            claimed.update(ids)  # a later delete of the ID finds it Absent
    return results


def _hand_out(s: Stepper) -> None:
    """Give every other member its result."""
    handed = s.state.handed
    for member, result in _results(s).items():
        if member != s.client and (member, s.state.locals[member].call) in s.local.members:
            handed = _put(handed, member, result)  # (not to a member that returned early, ablated)
    s.changes["handed"] = handed


def end_of_phase_1(s: Stepper) -> None:
    """The combiner's last phase-1 step: with ``results_after_syncs`` off, hand out the results now."""
    if s.config.combine and not s.guards.results_after_syncs:
        _hand_out(s)


def complete(s: Stepper, call: RetireCall | DeleteCall) -> None:
    """The combiner's batch finished its syncs: hand out the results (unless done after phase 1), free the
    queue's batch, and return its own result."""
    own = _results(s)[s.client]
    if s.guards.results_after_syncs:
        _hand_out(s)
    s.changes["combiners"] = _put(s.state.combiners, _kind(call), -1)
    s.changes["uncovered"] = s.state.uncovered - set(s.local.members)
    s.finish(own)
