"""What commutes on one rollout ID, for the linearizability search (SPEC.md R-CONC-1, R-WRITE-2..7,
R-READ-1..2).

The model's Live state is an ordered tuple of entries, so ``N`` writes that no read has ordered yet make
``N!`` states. Only a ``manifest`` ever observes that order (records among records, failures among
failures); every other call sees whether the rollout has rows, whether it is fenced, and, for a write,
whether a row of its own key is there. So the search keeps a Live state *symbolically* (``Rows``):

* ``items``: what is ordered already, in order: an ``Entry`` whose place is fixed (seen by a read, written
  onto an empty rollout, or written by a call whose key, the record's model call ID or the failure itself,
  another call of the partition also writes), or a closed *loose block*: a bitmask of the sub-operations
  whose rows are there in an order not fixed yet;
* ``open``: the loose block still growing (a bitmask);
* ``fenced``, as the model's (R-STATE-2).

A *simple* write (its key written by no other call of the partition) on a Live rollout only sets its bit in
``open``: no scan, and the state after two simple writes is the same in either order, so the memo of the
search meets it once. A loose block stands for every order of its rows that real time allows (a row whose
write returned before another's was invoked comes first): a read matches when its manifest lists the
fixed items in place and each loose block's rows contiguously, in an order real time allows; the read then
fixes that order. That this is exact (the symbolic search says linearizable exactly when the search on the
model's ordered tuples does): a loose block's rows have keys no other call touches, and the calls between
them see only whether the rollout has rows and is fenced, so any order of the block that respects real
time is the order of some valid linearization of the same calls (``docs/concurrency.md`` gives the
argument; ``tests/spec/concurrency/test_commute.py`` checks it against the plain search on generated and
mutated histories).

Every result still comes from the model: a call other than a simple write or a read is applied, through its
``rollout_transition``, to a concrete Live state built from the symbolic one (cached on it); a read to the
concrete state in the order it observed, when that order is allowed; a simple write's result is the
model's on an empty Live state (a simple key is never present).

Not guaranteed: anything about a partition other than the one ``Commuting`` was built for (bit positions
are its sub-operations).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from capture_ledger.spec.concurrency.history import results_match
from capture_ledger.spec.core.model import (
    ABSENT,
    Entry,
    Live,
    ManifestValue,
    Ok,
    ReadManifest,
    Record,
    RecordEntry,
    RecordFailure,
    RolloutState,
)

if TYPE_CHECKING:
    from capture_ledger.spec.concurrency._search import SubOperation

__all__ = ["Commuting", "Rows", "Symbolic", "core"]

Item = Entry | int  # a fixed entry, or a closed loose block (a bitmask of sub-operations)


class Rows:
    """A Live rollout, symbolically (see the module docstring); its hash is computed once."""

    __slots__ = ("_concrete", "_hash", "fenced", "items", "items_hash", "maybe", "open")

    def __init__(
        self,
        items: tuple[Item, ...],
        open_: int,
        fenced: bool,
        items_hash: int | None = None,
        maybe: int = 0,
    ) -> None:
        self.items = items
        self.open = open_
        self.fenced = fenced
        self.maybe = maybe
        self.items_hash = hash(items) if items_hash is None else items_hash
        self._hash = hash((self.items_hash, open_, fenced, maybe))
        self._concrete: Live | None = None

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (
            isinstance(other, Rows)
            and self._hash == other._hash
            and self.open == other.open
            and self.fenced == other.fenced
            and self.maybe == other.maybe
            and self.items == other.items
        )

    def __repr__(self) -> str:
        maybe = f", maybe={self.maybe:#x}" if self.maybe else ""
        return f"Rows(items={self.items!r}, open={self.open:#x}, fenced={self.fenced!r}{maybe})"


#: A rollout's state in the search: the model's ``Absent`` or ``Retired``, or ``Rows``.
Symbolic = RolloutState | Rows


def core(state: Symbolic) -> Symbolic:
    """``state`` without the rows that may be gone (``Rows.maybe``): what is certain of it. Two states with
    the same core differ only in which rows may be gone, and the one whose such rows include the other's
    stands for every concrete state the other does."""
    if not isinstance(state, Rows) or not state.maybe:
        return state
    return Rows(state.items, state.open & ~state.maybe, state.fenced, state.items_hash)


def _bits(mask: int) -> list[int]:
    found = []
    while mask:
        low = mask & -mask
        found.append(low.bit_length() - 1)
        mask ^= low
    return found


class Commuting:
    """One partition's sub-operations, with what commutes among them, and the symbolic step."""

    def __init__(self, ops: Sequence[SubOperation]) -> None:
        self.ops = ops
        n = len(ops)
        self.invoked = [op.invoked for op in ops]
        self.returned = [op.returned for op in ops]
        self.entry: list[Entry | None] = [None] * n
        keys: dict[object, int] = {}
        for i, op in enumerate(ops):
            if isinstance(op.op, Record | RecordFailure):
                made, _ = op.apply(ABSENT)
                if isinstance(made, Live) and made.entries:
                    entry = made.entries[-1]
                    self.entry[i] = entry
                    key = ("r", entry.model_call_id) if isinstance(entry, RecordEntry) else ("f", entry)
                    keys[key] = keys.get(key, 0) + 1
        self.read = [isinstance(op.op, ReadManifest) for op in ops]
        self.simple = [False] * n
        self.by_record: dict[str, int] = {}  # canonical row -> its simple writer
        self.by_failure: dict[tuple[str, str], int] = {}
        for i, written in enumerate(self.entry):
            if written is None:
                continue
            entry = written
            key = ("r", entry.model_call_id) if isinstance(entry, RecordEntry) else ("f", entry)
            if keys[key] != 1 or not all(self._appends(i, fenced) for fenced in (False, True)):
                continue
            self.simple[i] = True
            if isinstance(entry, RecordEntry):
                self.by_record[entry.canonical] = i
            else:
                self.by_failure[(entry.model_call_id, entry.reason)] = i
        self.lazy = self._lazy()
        self.lazy_mask = sum(1 << i for i in range(n) if self.lazy[i])

    def impossible(self) -> int | None:
        """A returned read that lists a row no call of the partition writes (wrong in every state the
        partition can reach, so the partition is not linearizable), or ``None``."""
        records = {e.canonical for e in self.entry if isinstance(e, RecordEntry)}
        failures = {
            (e.model_call_id, e.reason)
            for e in self.entry
            if e is not None and not isinstance(e, RecordEntry)
        }
        for i, op in enumerate(self.ops):
            observed = op.observed
            if self.read[i] and isinstance(observed, Ok) and isinstance(observed.value, ManifestValue):
                value = observed.value
                if not records.issuperset(value.records) or not failures.issuperset(value.failures):
                    return i
        return None

    def _appends(self, i: int, fenced: bool) -> bool:
        """Whether the model appends sub-operation ``i``'s row to a Live rollout with a result that matches
        what was observed (on an empty one: a simple key is never present)."""
        op = self.ops[i]
        after, result = op.apply(Live((), fenced))
        matches = op.observed is None or results_match(result, op.observed)
        return (
            matches
            and isinstance(after, Live)
            and after.entries == (self.entry[i],)
            and after.fenced == fenced
        )

    def _lazy(self) -> list[bool]:
        """The simple writes whose place among the calls on a Live rollout only a read, a removal or their
        return decides: those that overlap in time no write that is not simple (whose row's place is fixed,
        so the order of the two is observable). The search takes such a write on a Live rollout as late
        as it can (just before a read that shows its row, or at its return), or lets it vanish before a
        removal that cleared the rows while it could have taken effect; never earlier."""
        n = len(self.ops)
        blockers = sorted(
            (self.invoked[i], self.returned[i])
            for i in range(n)
            if self.entry[i] is not None and not self.simple[i]
        )
        starts = [start for start, _ in blockers]
        reach: list[float] = []  # the latest return among the blockers invoked so far
        for _, end in blockers:
            reach.append(max(end, reach[-1]) if reach else end)
        lazy = [False] * n
        for i in range(n):
            if not self.simple[i]:
                continue
            # Blockers invoked at or before this write returned; does any of them return at or after it
            # was invoked (touching intervals are concurrent)?
            low, high = 0, len(starts)
            while low < high:
                middle = (low + high) // 2
                if starts[middle] <= self.returned[i]:
                    low = middle + 1
                else:
                    high = middle
            lazy[i] = low == 0 or reach[low - 1] < self.invoked[i]
        return lazy

    # ------------------------------------------------------------------------------------ states
    def rows_of(self, state: Live) -> Rows:
        """A concrete Live state as a symbolic one (every entry fixed)."""
        return Rows(tuple(state.entries), 0, state.fenced)

    def _by_time(self, mask: int) -> list[int]:
        return sorted(_bits(mask), key=lambda i: (self.invoked[i], i))

    def concrete(self, state: Symbolic) -> RolloutState:
        """One concrete state the symbolic one stands for (loose rows in order of invocation, which real
        time allows)."""
        if not isinstance(state, Rows):
            return state
        if state._concrete is None:
            entries: list[Entry] = []
            for item in (*state.items, state.open):
                if isinstance(item, int):
                    present = item & ~state.maybe  # a row that may be gone is left out
                    entries.extend(self.entry[i] for i in self._by_time(present))  # type: ignore[misc]
                else:
                    entries.append(item)
            state._concrete = Live(tuple(entries), state.fenced)
        return state._concrete

    def _in_time(self, order: list[int]) -> bool:
        """Whether real time allows ``order``: no call placed after one that returned before it began."""
        latest = -math.inf
        for i in order:
            if latest > self.returned[i]:
                return False
            latest = max(latest, self.invoked[i])
        return True

    def _as_read(self, state: Rows, manifest: ManifestValue) -> tuple[Entry, ...] | None:
        """The concrete entries in the order ``manifest`` lists them, if ``state`` allows that order.

        A loose block's rows are the longest run of the manifest's rows written by its members (each
        simple row has one writer, in one block): every member not in ``state.maybe`` must be in it; a
        member that may be gone is there or not, as the manifest says (the read settles it)."""
        records, failures = manifest.records, manifest.failures
        by_record, by_failure = self.by_record, self.by_failure
        r = f = 0
        out_r: list[Entry] = []
        out_f: list[Entry] = []
        for item in (*state.items, state.open):
            if not isinstance(item, int):
                if isinstance(item, RecordEntry):
                    if r >= len(records) or records[r] != item.canonical:
                        return None
                    out_r.append(item)
                    r += 1
                else:
                    if f >= len(failures) or failures[f] != (item.model_call_id, item.reason):
                        return None
                    out_f.append(item)
                    f += 1
                continue
            if not item:
                continue
            seen = 0
            seen_r: list[int] = []
            while r < len(records):
                writer = by_record.get(records[r], -1)
                if writer < 0 or not (item >> writer) & 1:
                    break
                if (seen >> writer) & 1:
                    return None  # listed twice
                seen |= 1 << writer
                seen_r.append(writer)
                r += 1
            seen_f: list[int] = []
            while f < len(failures):
                writer = by_failure.get(failures[f], -1)
                if writer < 0 or not (item >> writer) & 1:
                    break
                if (seen >> writer) & 1:
                    return None
                seen |= 1 << writer
                seen_f.append(writer)
                f += 1
            if item & ~state.maybe & ~seen:  # a row that must be there is not listed with its block
                return None
            if not (self._in_time(seen_r) and self._in_time(seen_f)):
                return None
            out_r.extend(self.entry[i] for i in seen_r)  # type: ignore[misc]
            out_f.extend(self.entry[i] for i in seen_f)  # type: ignore[misc]
        if r != len(records) or f != len(failures):
            return None
        return (*out_r, *out_f)

    def shown(self, i: int) -> int:
        """The simple writers whose rows read ``i`` observed (a bitmask; 0 for any other call)."""
        observed = self.ops[i].observed
        if not self.read[i] or not isinstance(observed, Ok) or not isinstance(observed.value, ManifestValue):
            return 0
        mask = 0
        for canonical in observed.value.records:
            writer = self.by_record.get(canonical)
            if writer is not None:
                mask |= 1 << writer
        for failure in observed.value.failures:
            writer = self.by_failure.get(failure)
            if writer is not None:
                mask |= 1 << writer
        return mask

    # -------------------------------------------------------------------------------------- step
    def step(self, i: int, state: Symbolic) -> tuple[Symbolic, bool]:
        """Sub-operation ``i`` on ``state``: the state after and whether its result matches the observed
        one (always, for a call not checked)."""
        op = self.ops[i]
        observed = op.observed
        if not isinstance(state, Rows):
            after, result = op.apply(state)
            matches = observed is None or results_match(result, observed)
            return (self.rows_of(after) if isinstance(after, Live) else after), matches
        if self.simple[i]:
            return Rows(state.items, state.open | (1 << i), state.fenced, state.items_hash, state.maybe), True
        if self.read[i]:
            value = observed.value if isinstance(observed, Ok) else None
            ordered = self._as_read(state, value) if isinstance(value, ManifestValue) else None
            concrete = self.concrete(state) if ordered is None else Live(ordered, state.fenced)
            after, result = op.apply(concrete)
            matches = observed is None or results_match(result, observed)
            if observed is None or not matches or ordered is None:
                return state, matches
            return Rows(ordered, 0, state.fenced), True
        concrete = self.concrete(state)
        assert isinstance(concrete, Live)
        after, result = op.apply(concrete)
        matches = observed is None or results_match(result, observed)
        if not isinstance(after, Live):
            return after, matches
        if after.entries is concrete.entries or after.entries == concrete.entries:
            if after.fenced == state.fenced:
                return state, matches
            return Rows(state.items, state.open, after.fenced, state.items_hash, state.maybe), matches
        # A write whose key another call also writes appended its row: its place is fixed, after the
        # loose block (which closes).
        assert len(after.entries) == len(concrete.entries) + 1, (op, state, after)
        closed: tuple[Item, ...] = ()
        if state.open & (state.open - 1) or state.open & state.maybe:
            closed = (state.open,)
        elif state.open:  # a block of one row that is there is a fixed row
            only = self.entry[state.open.bit_length() - 1]
            assert only is not None
            closed = (only,)
        return Rows((*state.items, *closed, after.entries[-1]), 0, after.fenced, None, state.maybe), matches

    def maybe_write(self, i: int, state: Rows) -> Rows:
        """Simple write ``i`` on a Live rollout, *there or not*: it either took effect just before a removal
        that cleared its row, or at its return, in the loose block still open. Nothing but a read tells
        the two apart (its key is its own; ``has_rows``, ``admit``, a fence and the other writes see only
        whether the rollout is Live and fenced, which it is either way), so the read that next lists the
        rollout's rows settles it (``_as_read``), and a removal drops it with the rest."""
        bit = 1 << i
        return Rows(state.items, state.open | bit, state.fenced, state.items_hash, state.maybe | bit)
