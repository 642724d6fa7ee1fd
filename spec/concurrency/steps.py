"""The step-level model of the file store's concurrent protocol: its state and atomic steps (SPEC.md §Store;
R-STORE-1..7, R-CONC-1..3).

Where ``model`` makes each call one atomic step, this model splits the calls of ``FileLineageStore`` into
the atomic steps the store takes on one directory: acquire and release a lock stripe, look up a ledger or a
fence, create a fence, append a row (creating the ledger), unlink, sync. Several *clients* run programs
(sequences of calls) on *handles*; each handle keeps a cache of the ledgers it has read, as the store does
(R-STORE-7). This module holds the atomic steps (``Stepper``) on the abstract directory and registers
(``State``, defined in the private ``_state`` module); it re-exports the state and the vocabulary the steps
use (guards, calls, configurations, defined in ``_config``), so every name is imported from here.
``spec/concurrency/_programs.py`` holds each call as a program of those steps and
``programs.successor(config, guards, state, client)``, the one step a client can take next, so an explorer
interleaves clients by choosing who moves.

Every guard of the protocol is a switch in ``Guards`` (all on by default), so that each can be shown
necessary: ``recheck_fence`` (retire's phase 2 re-checks the fence under the lock, R-STORE-4),
``fence_before_unlink`` (every fence of a batch created before any ledger is unlinked; off, a retire
unlinks first and fences afterwards), ``fence_lookup_on_write`` (a write to a rollout with no rows looks
for the fence, R-WRITE-6), ``admit_checks_fence`` (R-ADMIT-2), ``cache_coherence`` (a handle
revalidates its cached view of a ledger, by generation, before serving or extending it; off, it trusts the
cache: it serves the cached rows of a removed ledger and appends to the ledger it still believes exists,
whose row then lands in an unlinked file), ``read_lock`` (``manifest`` reads under the stripe lock, as
``impl/store/file_store.py`` does; off, a read can fall between a delete's two unlinks) and
``await_shared_sync`` (with group commit, a removal that finds another client's sync running waits for a
sync that began after it asked; off, it counts on the running one and goes on, R-STORE-9);
with combined removals, ``await_combined_batch`` (a waiter returns only once the batch that took its
request completed; off, as soon as it was taken), ``results_after_syncs`` (the combiner hands out the
results after the batch's last sync; off, after phase 1) and ``same_retire_result`` (a later retire request
of an ID in the batch gets the batch's result; off, ``absent``).

**Combined removals** (``Config.combine``; ``spec/concurrency/_combining.py``): a removal enqueues its
request, then either becomes the *combiner* of its kind (takes every pending request and runs one batch
over the union of their IDs, with exactly the steps above) or waits for the batch that took it; the
combiner hands each request its own result (for a delete, the first request in queue order asking an ID
gets the real result and a later one ``absent``; for a retire, every request gets the batch's). Ghost
``uncovered`` and ``early``: no caller returns before the batch covering its IDs finished its syncs.

**Group commit** (``Config.group_commit``, R-STORE-9): the removals' syncs go through one shared *sync
register* (``State.sync_started``, ``sync_finished``, ``sync_leader``; handles are of one process). A
removal asks for a sync in the step that ends its phase (taking the *ticket* ``sync_started + 1``, as the
store does right after its last unlock); if none is running it *leads*: the sync starts at once and a later
step completes it; otherwise it *follows*: it is blocked until its ticket's sync finished (then one step
goes on) or until none is running (then one step starts it, and it leads). Without group commit every
sync is one step of its own caller, as before.

Ghost state, which no step reads, records what the checkers need: each call's invocation (as the number of
calls returned before it) and result, the order of returns, whether a returned retire still holds for an
ID (R-CONC-2), which rows an older retire must not remove (R-CONC-3), and every sync point a removal
passed before a sync that began after it asked had finished (R-STORE-9).

Not modelled: crashes and what syncs make durable (the sync steps are here as ordering points only; the
durability model is a separate concern), the row contents beyond their model call ID, conflicting rows,
failures, and torn lines. ``admit`` is one fence lookup and takes no lock, as in the store.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from capture_ledger.spec.concurrency._config import (
    GUARD_NAMES,
    AdmitCall,
    Call,
    Client,
    Config,
    DeleteCall,
    Guards,
    ManifestCall,
    RecordCall,
    RetireCall,
    describe,
    operation_of,
)
from capture_ledger.spec.concurrency._state import (
    CallRecord,
    Ledger,
    Local,
    Row,
    State,
    initial_state,
    is_done,
)
from capture_ledger.spec.core import model

__all__ = [
    "GUARD_NAMES",
    "AdmitCall",
    "Call",
    "Client",
    "Config",
    "DeleteCall",
    "Guards",
    "Ledger",
    "ManifestCall",
    "RecordCall",
    "RetireCall",
    "Row",
    "State",
    "Stepper",
    "initial_state",
    "is_done",
    "operation_of",
]


# --------------------------------------------------------------------------------------------- steps
_T = TypeVar("_T")


def _put(values: tuple[_T, ...], index: int, value: _T) -> tuple[_T, ...]:
    return (*values[:index], value, *values[index + 1 :])


class Stepper:
    """Builds one client's next step: a description and the next state.

    The programs (``spec/concurrency/_programs.py``) take a step by calling these atomic operations on the
    state as it
    stands before the step (plus the step's pending changes), then ``build`` returns the step.
    """

    def __init__(self, config: Config, guards: Guards, state: State, client: int) -> None:
        self.config, self.guards, self.state, self.client = config, guards, state, client
        self.local = state.locals[client]
        self.call = config.clients[client].calls[self.local.call]
        self.handle = config.clients[client].handle
        self.changes: dict[str, object] = {}

    # --- helpers over the pending state
    def get(self, name: str) -> object:
        """The state's field ``name`` with this step's pending change, if any."""
        return self.changes.get(name, getattr(self.state, name))

    def pos(self, rollout_id: str) -> int:
        """The ID's position in ``Config.ids``."""
        return self.config.ids.index(rollout_id)

    def ledger(self, rollout_id: str) -> Ledger | None:
        """The ID's ledger file in the directory (not through the cache), or ``None``."""
        return self.get("ledgers")[self.pos(rollout_id)]  # type: ignore[index,no-any-return]

    def set_ledger(self, rollout_id: str, ledger: Ledger | None) -> None:
        """Replace or remove the ID's ledger file."""
        self.changes["ledgers"] = _put(self.get("ledgers"), self.pos(rollout_id), ledger)  # type: ignore[arg-type]

    def fence(self, rollout_id: str) -> bool:
        """Whether the ID's fence exists."""
        return self.get("fences")[self.pos(rollout_id)]  # type: ignore[index,no-any-return]

    def set_fence(self, rollout_id: str, present: bool) -> None:
        """Create or unlink the ID's fence."""
        self.changes["fences"] = _put(self.get("fences"), self.pos(rollout_id), present)  # type: ignore[arg-type]

    def set_generation(self, rollout_id: str, generation: int) -> None:
        """Set how many ledger files (inodes) of the ID have been created so far."""
        self.changes["generations"] = _put(self.state.generations, self.pos(rollout_id), generation)

    def set_cache(self, rollout_id: str, view: Ledger | None) -> None:
        """Set this handle's cached view of the ID's ledger (R-STORE-7)."""
        caches: tuple[tuple[Ledger | None, ...], ...] = self.get("caches")  # type: ignore[assignment]
        self.changes["caches"] = _put(
            caches, self.handle, _put(caches[self.handle], self.pos(rollout_id), view)
        )

    def lock(self, rollout_id: str) -> bool:
        """Take the ID's lock stripe; ``False`` (and no change) when another client holds it."""
        locks: tuple[int, ...] = self.get("locks")  # type: ignore[assignment]
        stripe = self.config.stripe(rollout_id)
        if locks[stripe] != -1:
            return False
        self.changes["locks"] = _put(locks, stripe, self.client)
        return True

    def unlock(self, rollout_id: str) -> None:
        """Release the ID's lock stripe."""
        self.changes["locks"] = _put(self.get("locks"), self.config.stripe(rollout_id), -1)  # type: ignore[arg-type]

    def look_up(self, rollout_id: str) -> Ledger | None:
        """Read the ledger through this handle's cache (R-STORE-7)."""
        cached = self.state.caches[self.handle][self.pos(rollout_id)]
        if not self.guards.cache_coherence and cached is not None:
            return cached  # trusts a view that another handle may have made stale
        actual = self.ledger(rollout_id)
        self.set_cache(rollout_id, actual)
        return actual

    def unlink_ledger(self, rollout_id: str) -> bool:
        """Unlink the ID's ledger and drop it from this handle's cache; whether there was one."""
        gone = self.ledger(rollout_id)
        if gone is None:
            return False
        for row in gone.rows:
            if (self.client, self.local.call, rollout_id) in row.protected:  # R-CONC-3
                broken: tuple[str, ...] = self.get("broken")  # type: ignore[assignment]
                self.changes["broken"] = (
                    *broken,
                    f"client {self.client}'s retire removed row {row.call!r} of {rollout_id!r}, "
                    "written after a delete that began after this retire",
                )
        self.set_ledger(rollout_id, None)
        self.set_cache(rollout_id, None)  # drop its cached rows (R-STORE-7)
        return True

    def request_sync(self, pc: str, **registers: Any) -> str:
        """Ask for a sync (group commit) and go to ``pc``, the sync point, setting ``registers``: take the
        ticket ``started + 1`` and, when no sync is running, start it (lead). Without group commit only go
        to ``pc``. Returns the text added to the step's description."""
        if not self.config.group_commit:
            self.go(pc, **registers)
            return ""
        ticket = self.state.sync_started + 1
        self.go(pc, ticket=ticket, **registers)
        if self.state.sync_leader == -1:
            self.changes["sync_started"] = ticket
            self.changes["sync_leader"] = self.client
            return f"; start sync {ticket}"
        return f"; wait for sync {ticket}"

    def at_sync_point(self) -> tuple[bool, str] | None:
        """This client's step at its sync point: ``(passed, text)``, or ``None`` while it must wait.

        Without group commit the sync is one step (``passed``). With it: the leader completes its sync
        (``passed``); a follower whose sync finished goes on (``passed``); a follower that finds none
        running starts it and leads (not yet passed); otherwise it waits, unless ``await_shared_sync`` is
        off: then it counts on the running sync and goes on. Passing before its sync finished is recorded
        in the ghost ``unsynced``.
        """
        if not self.config.group_commit:
            return True, "fsync directory"
        ticket, state = self.local.ticket, self.state
        if state.sync_leader == self.client:
            self.changes["sync_finished"] = ticket
            self.changes["sync_leader"] = -1
            return True, f"fsync directory (sync {ticket})"
        if state.sync_finished >= ticket:
            return True, f"sync {ticket} finished: go on"
        if state.sync_leader == -1:
            self.changes["sync_started"] = ticket
            self.changes["sync_leader"] = self.client
            return False, f"no sync running: start sync {ticket}"
        if self.guards.await_shared_sync:
            return None
        self.changes["unsynced"] = (
            *state.unsynced,
            f"client {self.client} ({describe(self.call)}) went on before sync {ticket} finished "
            f"(sync {state.sync_started} was running, {state.sync_finished} finished)",
        )
        return True, f"count on running sync {state.sync_started}: go on"

    def go(self, pc: str, **registers: Any) -> None:
        """Move this client's program counter to ``pc``, setting ``registers``."""
        current = self.changes.get("local", self.local)
        assert isinstance(current, Local)
        self.changes["local"] = dataclasses.replace(current, pc=pc, **registers)

    def running(self, kind: type[RetireCall] | type[DeleteCall]) -> list[tuple[int, Call]]:
        """The other clients in the middle of a call of ``kind``, with that call."""
        found: list[tuple[int, Call]] = []
        for other, local in enumerate(self.state.locals):
            if other == self.client or local.pc == "start" or is_done(self.config, self.state, other):
                continue
            call = self.config.clients[other].calls[local.call]
            if isinstance(call, kind):
                found.append((other, call))
        return found

    def finish(self, result: model.Result) -> None:
        """Return from the current call (ghost: its result, the return order, R-CONC-2)."""
        every: tuple[tuple[CallRecord, ...], ...] = self.get("calls")  # type: ignore[assignment]
        calls = every[self.client]
        done = (calls[-1][0], self.state.returns, result)
        self.changes["calls"] = _put(every, self.client, (*calls[:-1], done))
        self.changes["returns"] = self.state.returns + 1
        self.changes["local"] = Local(call=self.local.call + 1)
        uncovered: frozenset[tuple[int, int]] = self.get("uncovered")  # type: ignore[assignment]
        if (self.client, self.local.call) in uncovered:  # combining: its batch has not finished its syncs
            early: tuple[str, ...] = self.get("early")  # type: ignore[assignment]
            self.changes["early"] = (
                *early,
                f"client {self.client} ({describe(self.call)}) returned before the batch that took its "
                "request finished its syncs",
            )
        if isinstance(self.call, RetireCall):
            # Retired until a delete is invoked. A delete concurrent with this retire (invoked since it
            # began, or still running) may be ordered after it, so then nothing is claimed.
            deleting = {i for _, call in self.running(DeleteCall) for i in call.rollout_ids}  # type: ignore[union-attr]
            retired: frozenset[str] = self.get("retired")  # type: ignore[assignment]
            settled = {
                i
                for i in self.call.rollout_ids
                if i not in deleting and self.state.deletes[self.pos(i)] == self.local.deletes[self.pos(i)]
            }
            self.changes["retired"] = retired | settled
        if isinstance(self.call, DeleteCall):
            # Writes invoked from now on are protected from the retires older than this delete.
            under = list(self.state.deleted_under)
            for rollout_id in self.call.rollout_ids:
                under[self.pos(rollout_id)] |= {p for p in self.local.protect if p[2] == rollout_id}
            self.changes["deleted_under"] = tuple(under)

    def invoke(self) -> None:
        """The call's first step (ghost: its invocation)."""
        calls = self.state.calls[self.client]
        self.changes["calls"] = _put(self.state.calls, self.client, (*calls, (self.state.returns, -1, None)))
        protect: frozenset[tuple[int, int, str]] = frozenset()
        if isinstance(self.call, RetireCall):
            # With combining, a delete's effect may come long after its invocation (its enqueue): a delete
            # running now is concurrent with this retire and may be ordered after it, so it counts as invoked
            # since. (Without, a delete's first step locks its first ID; no configuration deletes several.)
            deleting = [
                i
                for _, call in (self.running(DeleteCall) if self.config.combine else [])
                for i in call.rollout_ids  # type: ignore[union-attr]
            ]
            deletes = tuple(
                count - deleting.count(rid)
                for count, rid in zip(self.state.deletes, self.config.ids, strict=True)
            )
            self.changes["local"] = dataclasses.replace(self.local, deletes=deletes)
            return
        if isinstance(self.call, DeleteCall):
            self.changes["retired"] = self.state.retired - set(self.call.rollout_ids)
            self.changes["deletes"] = tuple(
                count + (rid in self.call.rollout_ids)
                for count, rid in zip(self.state.deletes, self.config.ids, strict=True)
            )
            # Older than this delete, per ID (R-CONC-1): the retires running now whose phase 1 has
            # already noted that ID's ledger. A retire that reaches the ID later acts after the delete.
            protect = frozenset(
                (other, self.state.locals[other].call, rid)
                for other, _ in self.running(RetireCall)
                for rid in self.state.locals[other].had
                if rid in self.call.rollout_ids
            )
        if isinstance(self.call, RecordCall):
            protect = self.state.deleted_under[self.pos(self.call.rollout_id)]
        self.changes["local"] = dataclasses.replace(self.local, protect=protect)

    def build(self, text: str) -> tuple[str, State]:
        """The step: its description and the state with the pending changes applied."""
        local = self.changes.pop("local", self.local)
        changes = {k: v for k, v in self.changes.items() if k != "calls"}
        state = dataclasses.replace(
            self.state,
            locals=_put(self.state.locals, self.client, local),  # type: ignore[arg-type]
            calls=self.changes.get("calls", self.state.calls),  # type: ignore[arg-type]
            **changes,  # type: ignore[arg-type]
        )
        return f"client {self.client} ({describe(self.call)}) {text}", state
