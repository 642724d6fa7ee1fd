"""The step-level model's state: the abstract directory, the locks, the handles' caches, each client's
registers, the combiner queues, and the ghost state the checkers read (SPEC.md §Store, §Concurrency;
R-STORE-7, R-STORE-9, R-CONC-2..3).

Frozen values, so an explorer hashes states and expands each once. ``initial_state`` is an empty directory
with free locks and cold caches. The public names are re-exported by ``spec.concurrency.steps``, which is
where to import them from; the atomic steps that change a ``State`` are ``steps.Stepper``'s.

Not guaranteed here: that a state is reachable, or anything about durability (no state says what a crash
would keep), row contents beyond the model call ID, failures or torn lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from capture_ledger.spec.concurrency._config import Config
from capture_ledger.spec.core import model

__all__ = ["CallRecord", "Ledger", "Local", "Row", "State", "initial_state", "is_done"]


# --------------------------------------------------------------------------------------------- state
@dataclass(frozen=True, slots=True)
class Row:
    """A row in a ledger; ``protected`` names the retire clients that must not remove it (ghost, R-CONC-3)."""

    call: str
    protected: frozenset[tuple[int, int, str]] = frozenset()  # (client, call, ID) of each such retire


@dataclass(frozen=True, slots=True)
class Ledger:
    """A ledger file: its generation (a new file, a new inode) and its rows."""

    generation: int
    rows: tuple[Row, ...]


@dataclass(kw_only=True, frozen=True, slots=True)
class Local:
    """A client's registers within its current call."""

    call: int = 0
    pc: str = "start"
    index: int = 0  # position in the batch
    view: Ledger | None = None  # the ledger as this call last saw it
    had: tuple[str, ...] = ()  # retire: IDs with a ledger in phase 1; delete: IDs removed
    flag: bool = False  # record: created a ledger; retire: unlinked something
    result: model.Result | None = None
    deletes: tuple[int, ...] = ()  # retire: per ID, deletes invoked before it (ghost, R-CONC-2)
    protect: frozenset[tuple[int, int, str]] = (
        frozenset()
    )  # record: retires it must survive (ghost, R-CONC-3)
    ticket: int = 0  # group commit: the number of the sync this call waits for
    batch: tuple[str, ...] = ()  # combining, the combiner: the union of its batch's requests' IDs
    members: tuple[tuple[int, int], ...] = ()  # combining, the combiner: the requests it took (client, call)


CallRecord = tuple[int, int, model.Result | None]


@dataclass(kw_only=True, frozen=True, slots=True)
class State:
    """The directory, the locks, the handles' caches, the clients' registers, and the ghost state."""

    ledgers: tuple[Ledger | None, ...]  # per ID (position in ``Config.ids``)
    fences: tuple[bool, ...]
    generations: tuple[int, ...]  # ledgers created so far, per ID
    locks: tuple[int, ...]  # per stripe: the client holding it, or -1
    caches: tuple[tuple[Ledger | None, ...], ...]  # per handle, per ID: the cached view, or None
    locals: tuple[Local, ...]
    # Ghost: per client, per call so far: (calls returned before its invocation, its place in the order of
    # returns or -1, its result). That is all of the history a linearizability check needs.
    calls: tuple[tuple[CallRecord, ...], ...]
    returns: int = 0
    retired: frozenset[str] = frozenset()  # a retire returned and no delete was invoked since (R-CONC-2)
    deleted_under: tuple[
        frozenset[tuple[int, int, str]], ...
    ] = ()  # per ID: retires older than a returned delete
    deletes: tuple[int, ...] = ()  # per ID: deletes invoked so far
    broken: tuple[str, ...] = field(default=())  # R-CONC-3 breaches, as sentences
    # Group commit's register (R-STORE-9): syncs started and finished, and the client running one (or -1).
    sync_started: int = 0
    sync_finished: int = 0
    sync_leader: int = -1
    unsynced: tuple[str, ...] = ()  # ghost: sync points passed before their sync finished, as sentences
    # Combining, per kind (0 retire, 1 delete): the pending requests (their clients, in queue order), the
    # client running a batch (or -1), the batches started; per client, the result a combiner handed it.
    queues: tuple[tuple[int, ...], ...] = ((), ())
    combiners: tuple[int, ...] = (-1, -1)
    batches: tuple[int, ...] = (0, 0)
    handed: tuple[model.Result | None, ...] = ()
    # Ghost (combining): the requests (client, call) that a batch took and has not finished syncing, and the
    # returns made before that, as sentences.
    uncovered: frozenset[tuple[int, int]] = frozenset()
    early: tuple[str, ...] = ()


def initial_state(config: Config) -> State:
    """Empty directory, free locks, cold caches, every client before its first call."""
    n, clients = len(config.ids), len(config.clients)
    stripes = max(config.stripes, default=n - 1) + 1
    return State(
        ledgers=(None,) * n,
        fences=(False,) * n,
        generations=(0,) * n,
        locks=(-1,) * stripes,
        caches=((None,) * n,) * config.handles,
        locals=(Local(),) * clients,
        calls=((),) * clients,
        deleted_under=(frozenset(),) * n,
        deletes=(0,) * n,
        handed=(None,) * clients,
    )


def is_done(config: Config, state: State, client: int) -> bool:
    """Whether a client has made all its calls."""
    return state.locals[client].call >= len(config.clients[client].calls)
