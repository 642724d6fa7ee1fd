"""The client call programs of the step-level model: each call as a sequence of atomic steps (SPEC.md §Store;
R-STORE-3..5, R-STORE-9, R-WRITE-3..6, R-ADMIT-2, R-READ-1..3, R-RETIRE-1..2, R-DELETE-1..2, R-CONC-1..3).

``spec/concurrency/steps.py`` holds the state and the atomic steps (``Stepper``); this module holds the
programs that string them together, one per call of ``FileLineageStore``: ``record`` (lock, read through
the cache, maybe look up the fence, append, fsync, maybe sync the directory, unlock), ``retire`` in two
phases (R-STORE-4, or with ``Guards.fence_before_unlink`` off the naive order), ``delete`` (R-STORE-5),
``admit`` (one fence lookup, no lock) and ``manifest`` (under the lock unless ``Guards.read_lock`` is
off). With ``Config.combine`` a removal first enqueues its request and either runs the batch of every
pending request as their combiner (the same steps over the union of their IDs) or waits for the batch
that took it (``spec/concurrency/_combining.py``). Each removal's sync is a *sync point*
(``Stepper.request_sync`` and ``Stepper.at_sync_point``): one step of its own, or with
``Config.group_commit`` a shared sync it leads or waits for (R-STORE-9).
``successor(config, guards, state, client)`` is the one step a client can take next (or ``None`` when it
is blocked on a lock, on a shared sync or on its combined batch, or finished), so an explorer interleaves
clients by choosing who moves.

Not guaranteed: that ``impl/store/file_store.py`` follows these programs -- they model the order of its
system calls and are checked against the sequential model (tests/spec/concurrency/test_steps_model.py) and
by the explorer; the real store is held to the same histories by the scheduler (docs/interleavings.md).
Nor anything about crashes, failures, conflicting rows or torn lines (see ``steps``).
"""

from __future__ import annotations

from collections.abc import Callable

from capture_ledger.spec.concurrency import _combining
from capture_ledger.spec.concurrency.steps import (
    AdmitCall,
    Config,
    DeleteCall,
    Guards,
    Ledger,
    ManifestCall,
    RecordCall,
    RetireCall,
    Row,
    State,
    Stepper,
    is_done,
)
from capture_ledger.spec.core import model
from capture_ledger.spec.core.ids import staging_key
from capture_ledger.spec.core.rows import canonical_json

__all__ = ["successor"]


def successor(config: Config, guards: Guards, state: State, client: int) -> tuple[str, State] | None:
    """The next step of ``client``: its description and the state after it, or ``None`` if it cannot move.

    Args:
        config: the configuration.
        guards: which guards the protocol keeps.
        state: the current state.
        client: the client's index in ``config.clients``.

    Returns:
        ``(description, next state)``; ``None`` when the client is finished, waits for a lock or for a
        shared sync, or (a concurrent client) waits for the setup clients to finish.
    """
    if is_done(config, state, client):
        return None
    earlier = range(client) if client < config.setup else range(config.setup)
    if any(not is_done(config, state, other) for other in earlier):
        return None
    s = Stepper(config, guards, state, client)
    if s.local.pc == "start":
        s.invoke()
    text = _run(s)
    return None if text is None else s.build(text)


def _lock(s: Stepper, rid: str, then: str) -> str | None:
    """Take ``rid``'s lock stripe and go to ``then``; ``None`` (blocked) while another client holds it."""
    if not s.lock(rid):
        return None
    s.go(then)
    return f"lock stripe of {rid}"


def _create_fence(s: Stepper, rid: str, then: str) -> str:
    """Create ``rid``'s fence unless it exists (R-STORE-4), then go to ``then``."""
    if s.fence(rid):
        s.go(then)
        return f"look up fence of {rid}: present"
    s.set_fence(rid, True)
    s.go(then)
    return f"create fence of {rid}"


def _sync_point(s: Stepper, passed: Callable[[], None]) -> str | None:
    """A removal's step at its sync point (``Stepper.at_sync_point``): ``None`` while it waits; once the
    sync is passed, ``passed()`` moves the client on."""
    step = s.at_sync_point()
    if step is None:
        return None
    if step[0]:
        passed()
    return step[1]


def _manifest(rows: tuple[Row, ...]) -> model.Result:
    return model.Ok(model.ManifestValue(tuple(canonical_json({"model_call_id": r.call}) for r in rows)))


# ------------------------------------------------------------------------------------------ programs
def _run(s: Stepper) -> str | None:
    """Take the current call's next step on ``s``; the step's text, or ``None`` when blocked on a lock."""
    call = s.call
    if isinstance(call, RetireCall | DeleteCall) and s.config.combine and s.local.pc in ("start", "c.wait"):
        return _combining.request(s, call)  # enqueue, then take the pending requests or wait
    if isinstance(call, RecordCall):
        return _record(s, call)
    if isinstance(call, RetireCall):
        return _retire(s, call)
    if isinstance(call, DeleteCall):
        return _delete(s, call)
    if isinstance(call, AdmitCall):
        if s.guards.admit_checks_fence and s.fence(call.rollout_id):  # R-ADMIT-2
            s.finish(model.Ok(None))
            return f"look up fence of {call.rollout_id}: present, refuse"
        s.finish(model.Ok(staging_key(call.rollout_id, call.call)))
        return (
            f"look up fence of {call.rollout_id}: absent, admit" if s.guards.admit_checks_fence else "admit"
        )
    return _read(s, call)


def _read(s: Stepper, call: ManifestCall) -> str | None:
    rid, pc, locked = call.rollout_id, s.local.pc, s.guards.read_lock

    def answer(result: model.Result) -> None:
        if locked:
            s.go("unlock", result=result)
        else:
            s.finish(result)

    if pc == "start" and locked:
        return _lock(s, rid, "read")
    if pc in ("start", "read"):
        view = s.look_up(rid)
        if view is not None and view.rows:
            answer(_manifest(view.rows))  # R-READ-2
            return f"read ledger of {rid}: {len(view.rows)} row(s)"
        s.go("fence")
        return f"read ledger of {rid}: none"
    if pc == "fence":
        if s.fence(rid):
            answer(model.Err(model.ErrorKind.ROLLOUT_RETIRED))  # R-READ-3
            return f"look up fence of {rid}: present, RolloutRetiredError"
        answer(_manifest(()))  # R-READ-1
        return f"look up fence of {rid}: absent, empty manifest"
    s.unlock(rid)
    s.finish(s.local.result or model.Ok(None))
    return f"unlock stripe of {rid}"


def _record(s: Stepper, call: RecordCall) -> str | None:
    rid, pc = call.rollout_id, s.local.pc
    if pc == "start":
        return _lock(s, rid, "read")
    if pc == "read":
        view = s.look_up(rid)
        rows = view.rows if view is not None else ()
        if any(row.call == call.call for row in rows):
            s.go("unlock", view=view, result=model.Ok(None))  # R-WRITE-3: identical re-record
            return f"read ledger of {rid}: {call.call} already there"
        if not rows and s.guards.fence_lookup_on_write:
            s.go("fence", view=view)  # R-WRITE-6: only a rollout with no rows looks for the fence
        else:
            s.go("append", view=view)
        return (
            f"read ledger of {rid}: {len(rows)} row(s)" if view is not None else f"read ledger of {rid}: none"
        )
    if pc == "fence":
        if s.fence(rid):
            s.go("unlock", result=model.Ok(None))  # R-WRITE-4: discarded, no error
            return f"look up fence of {rid}: present, discard the row"
        s.go("append")
        return f"look up fence of {rid}: absent"
    if pc == "append":
        return _append(s, call)
    if pc == "fsync":
        s.go("dirsync" if s.local.flag else "unlock")
        return f"fsync ledger of {rid}"
    if pc == "dirsync":
        s.go("unlock")
        return "fsync directory"  # R-STORE-3: a new ledger's entry
    s.unlock(rid)
    s.finish(s.local.result or model.Ok(None))
    return f"unlock stripe of {rid}"


def _append(s: Stepper, call: RecordCall) -> str:
    rid, view = call.rollout_id, s.local.view
    row = Row(call.call, s.local.protect)
    actual = s.ledger(rid)
    if view is not None:
        if actual is not None and actual.generation == view.generation:
            s.set_ledger(rid, Ledger(actual.generation, (*actual.rows, row)))
            text = f"append {call.call} to ledger of {rid}"
        else:  # the file this handle had open was unlinked: the row goes nowhere anyone reads
            text = f"append {call.call} to unlinked ledger file of {rid} (generation {view.generation})"
        s.set_cache(rid, Ledger(view.generation, (*view.rows, row)))
        s.go("fsync", result=model.Ok(None))
        return text
    if actual is not None:  # O_APPEND|O_CREAT on a file that exists after all
        s.set_ledger(rid, Ledger(actual.generation, (*actual.rows, row)))
        s.set_cache(rid, Ledger(actual.generation, (*actual.rows, row)))
        s.go("fsync", result=model.Ok(None))
        return f"append {call.call} to ledger of {rid}"
    generation = s.state.generations[s.pos(rid)] + 1
    s.set_generation(rid, generation)
    s.set_ledger(rid, Ledger(generation, (row,)))
    s.set_cache(rid, Ledger(generation, (row,)))
    s.go("fsync", result=model.Ok(None), flag=True)
    return f"create ledger of {rid} with {call.call}"


def _retire(s: Stepper, call: RetireCall) -> str | None:
    """R-STORE-4, or with ``fence_before_unlink`` off: unlink every ledger first, then fence."""
    ids, local, pc = _batch(s, call), s.local, s.local.pc
    fence_first = s.guards.fence_before_unlink
    first = ids  # phase 1 visits every ID; phase 2 those that had a ledger (fence first) or all
    second = local.had if fence_first else ids
    if pc in ("start", "p1.lock"):
        return _lock(s, ids[local.index], "p1.ledger")
    rid = first[local.index] if pc.startswith("p1") else (second[local.index] if second else "")
    if pc == "p1.ledger":
        present = s.ledger(rid) is not None
        had = (*local.had, rid) if present else local.had
        if fence_first:
            ledger = s.ledger(rid)
            if ledger is not None:
                # Ghost (R-CONC-3): this retire begins on the ID after those writes, so it will remove
                # them itself; an older retire doing it first (its re-check cannot tell this fence from
                # its own) changes nothing anyone can observe. See docs/concurrency.md.
                s.set_ledger(rid, Ledger(ledger.generation, tuple(Row(r.call) for r in ledger.rows)))
            s.go("p1.fence", had=had)
            return f"look up ledger of {rid}: {'present' if present else 'absent'}"
        s.go("p1.unlock", had=had, flag=s.unlink_ledger(rid) or local.flag)
        return f"unlink ledger of {rid}" if present else f"look up ledger of {rid}: absent"
    if pc == "p1.fence":
        return _create_fence(s, rid, "p1.unlock")
    if pc == "p1.unlock":
        s.unlock(rid)
        if local.index + 1 < len(first):
            s.go("p1.lock", index=local.index + 1)
            return f"unlock stripe of {rid}"
        _combining.end_of_phase_1(s)
        return f"unlock stripe of {rid}" + s.request_sync("p1.sync", index=0)
    if pc == "p1.sync":
        # R-STORE-4: one directory sync per non-empty batch, even when no fence was written.
        return _sync_point(s, lambda: s.go("p2.lock", index=0) if second else _end_removal(s, call))
    if pc == "p2.lock":
        return _lock(s, rid, "p2.check" if s.guards.recheck_fence or not fence_first else "p2.unlink")
    if pc == "p2.check":
        if not fence_first:
            return _create_fence(s, rid, "p2.unlock")
        if not s.fence(rid):  # deleted (and maybe re-used) since phase 1: leave it alone (R-CONC-3)
            s.go("p2.unlock")
            return f"look up fence of {rid}: absent, skip"
        s.go("p2.unlink")
        return f"look up fence of {rid}: present"
    if pc == "p2.unlink":
        gone = s.unlink_ledger(rid)
        s.go("p2.unlock", flag=gone or local.flag)
        return f"unlink ledger of {rid}" if gone else f"unlink ledger of {rid}: already gone"
    if pc == "p2.unlock":
        s.unlock(rid)
        if local.index + 1 < len(second):
            s.go("p2.lock", index=local.index + 1)
        elif local.flag or not fence_first:
            return f"unlock stripe of {rid}" + s.request_sync("p2.sync")
        else:
            _end_removal(s, call)
        return f"unlock stripe of {rid}"
    # p2.sync: one more directory sync if anything was unlinked (or fenced)
    return _sync_point(s, lambda: _end_removal(s, call))


def _batch(s: Stepper, call: RetireCall | DeleteCall) -> tuple[str, ...]:
    """The IDs the removal's steps visit: its own, or with combining the union of its batch's requests."""
    return s.local.batch if s.config.combine else call.rollout_ids


def _end_removal(s: Stepper, call: RetireCall | DeleteCall) -> None:
    """Return what the removal removed (R-RETIRE-1..2, R-DELETE-1..2); a combiner hands every request of
    its batch its own result first."""
    if s.config.combine:
        _combining.complete(s, call)
        return
    had = s.local.had
    absent = tuple(i for i in call.rollout_ids if i not in had)
    s.finish(model.Ok(model.Removal(had, absent)))


def _delete(s: Stepper, call: DeleteCall) -> str | None:
    ids, local, pc = _batch(s, call), s.local, s.local.pc
    if pc == "sync":
        return _sync_point(s, lambda: _end_removal(s, call))
    rid = ids[local.index]
    if pc in ("start", "lock"):
        return _lock(s, rid, "ledger")
    if pc == "ledger":
        gone = s.unlink_ledger(rid)
        s.go("fence", had=(*local.had, rid) if gone else local.had)
        return f"unlink ledger of {rid}" if gone else f"unlink ledger of {rid}: absent"
    if pc == "fence":
        present = s.fence(rid)
        s.set_fence(rid, False)
        s.set_cache(rid, None)
        s.go("unlock")
        return f"unlink fence of {rid}" if present else f"unlink fence of {rid}: absent"
    s.unlock(rid)
    if local.index + 1 < len(ids):
        s.go("lock", index=local.index + 1)
        return f"unlock stripe of {rid}"
    _combining.end_of_phase_1(s)
    return f"unlock stripe of {rid}" + s.request_sync("sync", index=local.index + 1)
