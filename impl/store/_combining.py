"""Combining removals: concurrent one-call retires (or deletes) of one process run as one batch (SPEC.md
R-STORE-4, R-STORE-5, R-STORE-9, R-CONC-1; docs/group-commit.md §Combining).

Flat combining, per process and per directory (keyed by the directory's device and inode, as
``_syncs.shared_syncs``), one ``RemovalQueue`` per kind (``"retire"``, ``"delete"``; a batch holds one kind):

1. a caller's validated, de-duplicated IDs are **enqueued** as a request (its IDs, a slot for its result or
   its error);
2. if no batch of that kind is running, the caller becomes the **combiner**: it takes every pending request
   (its own included), runs **one** removal batch (``RemovalOrdering.retire`` / ``.delete``, phases and
   syncs unchanged) over the union of their IDs in queue order, hands each request its own result, and
   returns. A lone caller runs exactly today's path on its own IDs: no wait, no added system call;
3. otherwise the caller **waits**, through the seam's ``await_sync(queue, ticket)`` (the ticket numbers
   its request), until the batch that took its request has *completed* (all its phases and syncs), or
   until no batch is running while its request is the first pending one: then it combines.

Results: each caller's ``removed``/``absent`` hold its own IDs only, in its order (the linearization
"requests in queue order", which R-CONC-1 allows: a batch is not atomic across IDs). An ID asked for by two
requests of one batch: for a delete the first (in queue order) gets the real result and a later one
``absent`` (what a delete right after the first returns); for a retire every request gets the batch's
result (their fence point and completion are the batch's; "a later retire gets ``absent``" is not
linearizable when a delete comes between the batch's phases: the step model's
``combine-retires-vs-delete``). If the batch raises, every request in it raises
``OSError`` (the combiner the original error; the others ``the combined removal failed: ...``) and none
returns success; removals are idempotent, so callers retry as for any store ``OSError``.

Never early: no caller returns before the batch holding its IDs completed, so every sync that covers them
(R-STORE-4, R-STORE-5) finished first. The study's broken variants (``RemovalOrdering.combining``) let a
waiter return once its request was taken (``await_combined_batch``), hand results out when phase 1 ends
(``results_after_syncs``), or give a later retire request ``absent`` (``same_retire_result``).

Re-entry: a removal asked for from inside this thread's own running batch (a seam hook that calls a store
back) runs on its own, uncombined. After ``fork`` every queue starts idle (the child has one thread).

Not guaranteed: combining across processes (each has its own queues; the stripe locks still exclude them),
fairness, or any bound on a batch's size.
"""

from __future__ import annotations

import errno
import os
import threading
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from capture_ledger.impl.store._removals import CombiningSteps, RemovalOutcome
from capture_ledger.impl.store.fs import FileSystem

__all__ = ["Combiners", "RemovalKind", "RemovalQueue", "RunBatch", "shared_combiners"]

#: The two kinds of removal a queue combines.
RemovalKind = Literal["retire", "delete"]
#: Runs one removal batch over IDs; the second argument, when given, is called with each ID's "had rows"
#: as soon as phase 1 knows them (only the study's broken variant asks for that).
RunBatch = Callable[[Sequence[str], Callable[[Mapping[str, bool]], None] | None], RemovalOutcome]


_PRODUCTION = CombiningSteps()


@dataclass(slots=True, eq=False)
class _Request:
    ids: Sequence[str]
    ticket: int
    woken: threading.Event = field(default_factory=threading.Event)  # done, or its turn to combine
    batch: int = 0  # the batch that took it (0: still pending)
    result: RemovalOutcome | None = None
    error: OSError | None = None
    on_taken: bool = False  # BROKEN (``await_combined_batch`` off): its caller returns once it is taken
    shared: bool = False  # its batch held other requests too
    done: bool = False


class RemovalQueue:
    """The pending removals of one kind on one directory in this process, and the batch running now.

    Implements ``fs.SyncWait``; a ticket names one request (numbered in queue order), and
    ``ready(ticket)`` says whether its caller can go on: its request was served (its batch completed), or
    no batch is running and it is the first pending request (it combines next). Each waiter sleeps on its
    own request's event, so a completed batch wakes each of its callers once and the next combiner alone.
    Thread-safe; ``ready`` reads without the lock (a flag, a dict and a list looked up, each atomic), so
    the scheduler may ask while every thread is parked.
    """

    __slots__ = (
        "__weakref__",
        "_combiner",
        "_live",
        "_mutex",
        "_pending",
        "_tickets",
        "batches",
        "completed",
        "joined",
        "kind",
        "requests",
        "running",
        "started",
    )

    def __init__(self, kind: RemovalKind) -> None:
        self.kind: RemovalKind = kind
        self._reset()

    def _reset(self) -> None:
        self._mutex = threading.Lock()
        self._pending: list[_Request] = []
        self._live: dict[int, _Request] = {}  # ticket -> request not yet returned
        self._tickets = 0
        self._combiner: int | None = None
        #: Batches started and completed; batch ``n`` is the ``n``-th started; one runs at a time.
        self.started = 0
        self.completed = 0
        self.running = False
        #: Batches run, requests served by them, and requests that returned on another caller's batch.
        self.batches = 0
        self.requests = 0
        self.joined = 0

    def __repr__(self) -> str:
        return f"{self.kind} queue"

    def ready(self, ticket: int) -> bool:
        """Whether the caller of request ``ticket`` can go on: it was served, or it combines next."""
        request = self._live.get(ticket)
        if request is None or request.done or (request.on_taken and request.batch):
            return True
        pending = self._pending
        return not self.running and bool(pending) and pending[0] is request

    def wait_for(self, ticket: int) -> None:
        """Block until ``ready(ticket)`` (``OsFileSystem.await_sync``)."""
        request = self._live.get(ticket)
        while request is not None and not self.ready(ticket):
            request.woken.wait()
            with self._mutex:
                if not self.ready(ticket):
                    request.woken.clear()

    def submit(
        self, fs: FileSystem, ids: Sequence[str], run: RunBatch, steps: CombiningSteps = _PRODUCTION
    ) -> tuple[RemovalOutcome, bool]:
        """Remove ``ids`` (validated, distinct) combined with the other pending requests of this kind.

        Args:
            fs: the caller's seam: a waiter waits through it (``await_sync``).
            ids: the caller's IDs.
            run: runs one batch through the caller's store (used only if this caller combines).
            steps: the ordering's ``combining()`` (production: every step on).

        Returns:
            The caller's own outcome, and whether this caller ran the batch (its effects counted by it).

        Raises:
            OSError: the batch holding the request failed.
        """
        if self._combiner == threading.get_ident():
            return run(ids, None), True  # re-entry from inside this thread's own batch: uncombined
        with self._mutex:
            self._tickets += 1
            request = _Request(ids, self._tickets, on_taken=not steps.await_combined_batch)
            self._live[request.ticket] = request
            self._pending.append(request)
            if not self.running:
                return self._combine(request, run, steps), True
        try:
            while True:
                fs.await_sync(self, request.ticket)
                if request.done or (request.on_taken and request.batch):
                    break
                with self._mutex:
                    if request.done or (request.on_taken and request.batch):
                        break
                    if not self.running and self._pending and self._pending[0] is request:
                        return self._combine(request, run, steps), True
                    request.woken.clear()
        except BaseException:
            # The wait itself raised (an interrupt, an injected fault): a request no batch took leaves the
            # queue, and if no batch runs the next one is woken to combine, or nobody would ever wake it.
            with self._mutex:
                if request.batch == 0 and request in self._pending:
                    self._pending.remove(request)
                if not self.running and self._pending:
                    self._pending[0].woken.set()
            raise
        finally:
            self._live.pop(request.ticket, None)
        if not request.done:  # BROKEN (``await_combined_batch`` off): taken is not done
            return RemovalOutcome([], list(ids)), False
        if request.error is not None:
            raise OSError(
                request.error.errno, f"the combined {self.kind} failed: {request.error}"
            ) from request.error
        assert request.result is not None
        if request.shared:
            with self._mutex:
                self.joined += 1
        return request.result, False

    def _combine(self, mine: _Request, run: RunBatch, steps: CombiningSteps) -> RemovalOutcome:
        # Called with the mutex held, no batch running and ``mine`` pending; returns with the mutex held.
        taken, self._pending = self._pending, []
        self.running = True
        self.started += 1
        ticket = self.started
        for request in taken:
            request.batch = ticket
            if request.on_taken:
                request.woken.set()
        union = list(dict.fromkeys(rid for request in taken for rid in request.ids))
        same = steps.same_retire_result and self.kind == "retire"
        self._combiner = threading.get_ident()
        self._mutex.release()
        failure: BaseException | None = None
        outcome: RemovalOutcome | None = None

        def early(had_rows: Mapping[str, bool]) -> None:
            with self._mutex:
                _hand_out(taken, had_rows, same=same)

        try:
            outcome = run(union, None if steps.results_after_syncs else early)
        except BaseException as error:
            failure = error
            raise
        finally:
            self._mutex.acquire()
            self._combiner = None
            self.running = False
            self.completed = ticket
            self.batches += 1
            self.requests += len(taken)
            self._live.pop(mine.ticket, None)
            if failure is not None:
                shared_error = (
                    failure
                    if isinstance(failure, OSError)
                    else OSError(errno.EIO, f"the batch was interrupted: {failure!r}")
                )
                for request in taken:
                    if not request.done:
                        request.error, request.done = shared_error, True
                        request.woken.set()
            elif outcome is not None:
                had = dict.fromkeys(union, False)
                had.update(dict.fromkeys(outcome.removed, True))
                _hand_out(taken, had, same=same)
            if self._pending:
                self._pending[0].woken.set()  # its turn: it combines the next batch
        assert outcome is not None and mine.result is not None
        own = mine.result
        return RemovalOutcome(own.removed, own.absent, outcome.fences_written, outcome.unlinked)

    def counts(self) -> tuple[int, int, int]:
        """``(batches run, requests they served, requests that returned on another caller's batch)``."""
        return self.batches, self.requests, self.joined


def _hand_out(taken: Sequence[_Request], had_rows: Mapping[str, bool], *, same: bool) -> None:
    """Each request's own result (the linearization "requests in queue order"). For a retire (``same``)
    every request asking for an ID gets what the batch found: each request's fence point is the batch's
    fence and its completion the batch's, as two overlapping retires that both noted the ledger. For a
    delete the first request asking for an ID gets what the batch found and a later one ``absent`` (what
    a delete right after the first returns, both at the batch's unlink)."""
    claimed: set[str] = set()
    shared = len(taken) > 1
    for request in taken:
        if request.done:
            continue
        removed: list[str] = []
        absent: list[str] = []
        for rid in request.ids:
            if had_rows.get(rid, False) and (same or rid not in claimed):
                removed.append(rid)
            else:
                absent.append(rid)
            claimed.add(rid)
        request.result, request.shared, request.done = RemovalOutcome(removed, absent), shared, True
        request.woken.set()


class Combiners:
    """The two queues of one directory in this process: ``retire`` and ``delete``."""

    __slots__ = ("__weakref__", "delete", "retire")

    def __init__(self) -> None:
        self.retire = RemovalQueue("retire")
        self.delete = RemovalQueue("delete")
        _REGISTRY.live.add(self)

    def counts(self) -> tuple[int, int]:
        """``(batches run, requests that returned on another caller's batch)`` over both queues."""
        queues = (self.retire, self.delete)
        return sum(q.batches for q in queues), sum(q.joined for q in queues)


class _Registry:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_directory: weakref.WeakValueDictionary[tuple[int, int, Hashable], Combiners] = (
            weakref.WeakValueDictionary()
        )
        self.live: weakref.WeakSet[Combiners] = weakref.WeakSet()


_REGISTRY = _Registry()


def shared_combiners(directory: str | os.PathLike[str], settings: Hashable = ()) -> Combiners:
    """The queues of ``directory`` in this process, the same for every handle on it with the same
    ``settings`` (by device and inode; kept while a handle holds them). A request runs in its combiner's
    batch, through the combiner's seam and ordering, so handles whose seam or ordering differ (a study's
    recorder, ``fence_sync="file"`` beside ``"directory"``) must not share: the store passes them as
    ``settings``. A directory that cannot be looked up gets queues of its own."""
    try:
        st = os.stat(directory)
    except OSError:
        return Combiners()
    key = (st.st_dev, st.st_ino, settings)
    with _REGISTRY.lock:
        found = _REGISTRY.by_directory.get(key)
        if found is None:
            found = Combiners()
            _REGISTRY.by_directory[key] = found
        return found


def _after_fork() -> None:
    # The child has only the forking thread: a queue caught running would never settle.
    _REGISTRY.lock = threading.Lock()
    for combiners in list(_REGISTRY.live):
        combiners.retire._reset()
        combiners.delete._reset()


os.register_at_fork(after_in_child=_after_fork)
