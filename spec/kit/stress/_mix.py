"""Operation mixes for stress runs: scenes of colliding calls on few rollout IDs (SPEC.md R-CONC-1..3,
R-KIT-12).

A round of a stress run is a list of *scenes*. In a scene every client (a thread, or an asyncio task) gets
one or two operations, all on one *hot* rollout ID (and, for batches, one or two more), and the clients
start the scene together (a barrier), so that the calls of a scene overlap. A round opens with one scene
of every kind, in a drawn order, so that every round runs every race; the rest are drawn, with these
weights, from the races that matter:

- ``late_write`` (3): two scenes on ``LATE_IDS`` IDs of the scene's own (Absent, unfenced: on a shared
  ID an earlier scene has often retired, every write is discarded at its first look and the race cannot
  run): one client makes a call and then retires the IDs one after the other while the others write them;
  then every client reads two of them or asks for their admission, after the retires returned (R-CONC-2:
  no write re-creates a retired ledger);
- ``reuse`` (2): one client deletes the hot ID and then records on it again, while the others write, admit
  or retire it (R-CONC-3: a write after a delete is not removed by an older retire);
- ``read_during_retire`` (2): one client retires while the others read it (``manifest``, ``has_rows``) or
  ask for admission (R-STATE-2: the fenced state reads as Live and refuses admission);
- ``shared_batches`` (2): two clients retire or delete batches that share IDs (one with a duplicate ID)
  while the others write to those IDs (R-CONC-1: per-ID linearizable, not atomic across IDs);
- ``duplicates`` (2): on an ID of the scene's own, every client makes the same ``DUPLICATES`` calls in
  the same order: the same row, the same failure, or, when ``conflicts`` is on, rows of one model call that
  differ (R-WRITE-3, R-WRITE-7: one row, or one winner); each position a race of its own;
- ``retire_vs_reuse`` (3): three scenes in a row on a hot ID of the scene's own: every client writes it;
  then one client retires a batch that starts with it and goes on with every shared ID and ``SPARE_IDS``
  IDs of its own (so its fence of the hot ID comes first and its unlink long after) while another writes
  an ID of its own (so that the retire takes the hot ID first), then reads, deletes, writes and reads the
  hot ID again, and the rest write shared IDs; then every client writes and reads it, which tells a
  fenced ID from an Absent one (R-CONC-3: a retire whose fence came before the delete must not remove
  the new write);
- ``handoff`` (2): three scenes: one client retires the hot ID while the others write it; then a client half
  the clients away (in another process, with ``--processes``, on another handle otherwise) deletes it while
  the others read it; then every client asks for its admission (R-ADMIT-1, R-KIT-4: a removal made through
  one handle is seen by every other, in every process);
- ``scatter`` (1): each client any operation on any ID.

Operations the ledger lacks (``operations``) are replaced by a read of the same ID (a write when it cannot
read), so a
partial ledger (NeMo Gym 0.7.0's, with no ``retire``, ``delete`` or ``admit``) is stressed on what it has.
Rows are ``{"model_call_id": "m<k>", "n": <k>}``, model call IDs of records and failures never shared, so
that only ``conflicts`` makes rows of one call differ.

What the seed reproduces: the mix (``draw_round(settings, seed, round)`` is a pure function of its
arguments); never the interleaving, which the OS and the event loop pick.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from capture_ledger.spec.concurrency.history import METHOD_NAMES
from capture_ledger.spec.core.model import (
    Admit,
    Delete,
    HasRows,
    Operation,
    ReadManifest,
    Record,
    RecordFailure,
    Retire,
    rollout_ids_of,
)
from capture_ledger.spec.core.protocol import OPERATIONS

__all__ = ["SCENE_WEIGHTS", "MixSettings", "Scene", "draw_round", "rollout_ids", "round_ids"]

#: One scene: the operations of each client, in order.
Scene = tuple[tuple[Operation, ...], ...]

#: IDs of its own that a ``retire_vs_reuse`` retire fences after the hot ID and the others: its window
#: between the hot ID's fence and its unlink, in which a delete and a new write of the hot ID must fall.
SPARE_IDS = 6

#: Fresh IDs a ``late_write`` scene retires one after the other while the other clients write them.
LATE_IDS = 3

#: Calls of one model call each client makes, in the same order, in a ``duplicates`` scene: each a race.
DUPLICATES = 3

#: The scene kinds and their weights (see the module docstring).
SCENE_WEIGHTS: dict[str, int] = {
    "late_write": 3,
    "reuse": 2,
    "read_during_retire": 2,
    "shared_batches": 2,
    "duplicates": 2,
    "retire_vs_reuse": 3,
    "handoff": 2,
    "scatter": 1,
}


@dataclass(frozen=True, slots=True)
class MixSettings:
    """What a round's mix looks like.

    Attributes:
        clients: the clients of the round (threads or tasks, over every process).
        ops: at least this many calls per round (whole scenes are drawn).
        ids: how many rollout IDs the calls share (few, so that they collide).
        operations: the protocol methods to call (the ledger's).
        conflicts: also draw rows of one model call that differ (a ``ConflictingRecordError`` each).
    """

    clients: int = 4
    ops: int = 120
    ids: int = 3
    operations: tuple[str, ...] = OPERATIONS
    conflicts: bool = True

    def __post_init__(self) -> None:
        if self.clients < 1 or self.ops < 1 or self.ids < 1:
            raise ValueError("clients, ops and ids must be at least 1")
        unknown = set(self.operations) - set(OPERATIONS)
        if unknown or not self.operations:
            raise ValueError(f"operations must be among {', '.join(OPERATIONS)}, not {sorted(unknown)}")


def rollout_ids(count: int) -> tuple[str, ...]:
    """The rollout IDs of a run: ``r0``, ``r1``, ..."""
    return tuple(f"r{i}" for i in range(count))


def round_ids(scenes: list[Scene]) -> list[str]:
    """Every rollout ID the scenes name, in first-seen order (what a read-back after a kill reads)."""
    seen: dict[str, None] = {}
    for scene in scenes:
        for column in scene:
            for op in column:
                ids = rollout_ids_of(op)
                if isinstance(ids, list):
                    seen.update(dict.fromkeys(ids))
    return list(seen)


class _Drawer:
    """Draws one round's scenes; remembers rows so that duplicates repeat them exactly."""

    def __init__(self, settings: MixSettings, rng: random.Random) -> None:
        self.settings = settings
        self.rng = rng
        self.ids = rollout_ids(settings.ids)
        self.has = set(settings.operations)
        self.calls = 0
        self._kinds: dict[int, float] = {}

    def _fresh(self, prefix: str) -> str:
        self.calls += 1
        return f"{prefix}{self.calls}"

    def record(self, rid: str) -> Operation:
        call = self._fresh("m")
        return Record(rid, {"model_call_id": call, "n": self.calls})

    def failure(self, rid: str) -> Operation:
        return RecordFailure(rid, self._fresh("f"), "timeout")

    def write(self, rid: str) -> Operation:
        return self.record(rid) if self.rng.random() < 0.7 else self.failure(rid)

    def read(self, rid: str) -> Operation:
        return ReadManifest(rid) if self.rng.random() < 0.6 else HasRows(rid)

    def batch(self, hot: str) -> list[str]:
        others = [i for i in self.ids if i != hot]
        chosen = [hot, *self.rng.sample(others, self.rng.randint(0, min(2, len(others))))]
        self.rng.shuffle(chosen)
        if self.rng.random() < 0.2:
            chosen.append(self.rng.choice(chosen))  # a duplicate ID in the batch (R-BATCH-3)
        return chosen

    def build(self, kind: str, rid: str) -> Operation:
        """An operation of method ``kind`` on ``rid`` (a batch around it for a removal)."""
        if kind == "record":
            return self.record(rid)
        if kind == "record_failure":
            return self.failure(rid)
        if kind == "admit":
            return Admit(rid, self._fresh("a"))
        if kind == "manifest":
            return ReadManifest(rid)
        if kind == "has_rows":
            return HasRows(rid)
        if kind == "retire":
            return Retire(self.batch(rid))
        return Delete(self.batch(rid))

    def any_op(self, rid: str) -> Operation:
        return self.build(self.rng.choice(self.settings.operations), rid)

    def available(self, op: Operation, rid: str) -> Operation:
        """``op``, or a read of ``rid`` (a write when the ledger cannot read) when it lacks ``op``'s method.

        A read rather than a write: without removals rows pile up, and a manifest read pins the order of the
        concurrent writes before it, which keeps the checker's search small.
        """
        if METHOD_NAMES[type(op)] in self.has:
            return op
        for names in (("manifest", "has_rows"), ("record", "record_failure")):
            plain = [name for name in names if name in self.has]
            if plain:
                return self.build(self.rng.choice(plain), rid)
        return self.build(self.rng.choice(self.settings.operations), rid)

    def scene(self, kind: str) -> list[list[Operation]]:
        n, rng = self.settings.clients, self.rng
        hot = rng.choice(self.ids)
        if kind == "duplicates":  # an ID of its own, never fenced: on a Retired one every copy is discarded
            hot = f"q{self.calls + 1}d"
        lead = rng.randrange(n)
        columns: list[list[Operation]] = [[] for _ in range(n)]
        for client in range(n):
            column = columns[client]
            if kind == "reuse":
                if client == lead:
                    column += [Delete([hot]), self.write(hot)]
                else:
                    column.append(rng.choice([self.write(hot), Admit(hot, self._fresh("a")), Retire([hot])]))
                    column.append(self.read(hot))
            elif kind == "read_during_retire":
                if client == lead:
                    column.append(Retire(self.batch(hot)))
                else:
                    column += [rng.choice([self.read(hot), Admit(hot, self._fresh("a"))]), self.read(hot)]
            elif kind == "shared_batches":
                if client in (lead, (lead + 1) % n):
                    removal = Retire if rng.random() < 0.6 else Delete
                    column.append(removal(self.batch(hot)))
                else:
                    column += [self.write(hot), self.write(rng.choice(self.ids))]
            elif kind == "duplicates":
                column += [self._duplicate(hot, client, k) for k in range(DUPLICATES)]
            else:
                column.append(self.any_op(rng.choice(self.ids)))
        return [[self.available(op, hot) for op in column] for column in columns]

    def retire_vs_reuse(self) -> list[list[list[Operation]]]:
        """The three scenes of ``retire_vs_reuse`` (see the module docstring)."""
        n, rng = self.settings.clients, self.rng
        self.calls += 1
        # A hot ID of this scene alone, Live after the first scene whatever earlier scenes did (a shared ID
        # may be fenced, and then the retire has no log to unlink and the race cannot run).
        hot = f"q{self.calls}h"
        retirer = rng.randrange(n)
        reuser = (retirer + 1) % n
        others = list(self.ids)
        # The hot ID first, then every shared ID and IDs of this scene alone: the retire fences them all
        # before it unlinks the hot ID's log, so the window for a delete and a new write is wide.
        batch = [hot, *others, *(f"q{self.calls}x{k}" for k in range(SPARE_IDS))]
        first = [[self.write(hot)] for _ in range(n)]
        second: list[list[Operation]] = []
        for client in range(n):
            if client == retirer:
                second.append([Retire(batch)])
            elif client == reuser and n > 1:
                # A write of an ID of its own first (a sync, in most ledgers) lets the retire take the hot
                # ID's lock before the delete asks for it: measured, a delete right after a read started
                # before the retire in 16 of 19 scenes, and the race never ran.
                own = f"q{self.calls}w"
                second.append(
                    [self.write(own), HasRows(hot), Delete([hot]), self.record(hot), ReadManifest(hot)]
                )
            else:
                second.append([self.write(rng.choice(others) if others else hot)])
        # Then every client writes and reads the hot ID: a retire that took effect (fenced) discards the
        # writes, an Absent ID keeps them, so the two states the retire may have left are told apart.
        third = [[self.write(hot), self.read(hot)] for _ in range(n)]
        return [
            [[self.available(op, hot) for op in column] for column in scene]
            for scene in (first, second, third)
        ]

    def handoff(self) -> list[list[list[Operation]]]:
        """The three scenes of ``handoff`` (see the module docstring)."""
        n, rng = self.settings.clients, self.rng
        hot = rng.choice(self.ids)
        retirer = rng.randrange(n)
        deleter = (retirer + max(1, n // 2)) % n
        first = [[Retire([hot])] if c == retirer else [self.write(hot)] for c in range(n)]
        second = [[Delete([hot])] if c == deleter and n > 1 else [self.read(hot)] for c in range(n)]
        third: list[list[Operation]] = [[Admit(hot, self._fresh("a"))] for _ in range(n)]
        return [
            [[self.available(op, hot) for op in column] for column in scene]
            for scene in (first, second, third)
        ]

    def late_write(self) -> list[list[list[Operation]]]:
        """The two scenes of ``late_write`` (see the module docstring)."""
        n, rng = self.settings.clients, self.rng
        self.calls += 1
        # IDs of this scene alone, Absent and unfenced: a shared ID is often Retired by an earlier scene,
        # and then every write is discarded at its first look and the race cannot run.
        hot = [f"q{self.calls}l{k}" for k in range(LATE_IDS)]
        retirer = rng.randrange(n)
        first: list[list[Operation]] = []
        for client in range(n):
            if client == retirer:
                # A call first, so that the retires land among the writes rather than before them all (on
                # one event loop, a task that starts first runs first); then one retire per hot ID, each a
                # chance to fall between a write's look for the fence and its append.
                delay = self.write(f"q{self.calls}o") if rng.random() < 0.5 else self.read(hot[0])
                first.append([delay, *(Retire([h]) for h in hot)])
            else:
                shift = rng.randrange(LATE_IDS)
                first.append([self.write(hot[(shift + k) % LATE_IDS]) for k in range(LATE_IDS)])
        # Then every client reads two of the hot IDs, or asks for their admission: the retires have
        # returned, so a ledger a late write re-created is seen as such (R-CONC-2), not only by a later
        # removal's report.
        second = [
            [
                rng.choice([self.read(h), Admit(h, self._fresh("a"))])
                for h in (hot[client % LATE_IDS], hot[(client + 1) % LATE_IDS])
            ]
            for client in range(n)
        ]
        return [
            [[self.available(op, hot[0]) for op in column] for column in scene] for scene in (first, second)
        ]

    def _duplicate(self, hot: str, client: int, k: int) -> Operation:
        # The same call for every client: the drawer's counter is not advanced per client, and the choice
        # of record or failure is drawn once per position ``k``, the same for every client.
        base = self.calls + 1 + k
        if client == 0:
            self._kinds[k] = self.rng.random()
        draw = self._kinds.get(k, 0.0)
        if "record_failure" in self.has and (draw < 0.5 or "record" not in self.has):
            return RecordFailure(hot, f"f{base}", "timeout")
        differs = self.settings.conflicts and draw < 0.75 and client % 2 == 1
        return Record(hot, {"model_call_id": f"m{base}", "n": base + (1 if differs else 0)})


def draw_round(settings: MixSettings, seed: int, round_number: int) -> list[Scene]:
    """The scenes of one round: a pure function of the settings, the seed and the round.

    Args:
        settings: the clients, calls per round, IDs, operations and conflicts.
        seed: the run's seed.
        round_number: the round (each round draws its own scenes).

    Returns:
        The scenes, each one tuple of operations per client, at least ``settings.ops`` calls in all.
    """
    rng = random.Random(f"capture-ledger-stress:{seed}:{round_number}")
    drawer = _Drawer(settings, rng)
    kinds, weights = list(SCENE_WEIGHTS), list(SCENE_WEIGHTS.values())
    scenes: list[Scene] = []
    total = 0
    # Every kind once, in a drawn order, then by weight: each round exercises every race it can.
    first = rng.sample(kinds, len(kinds))
    while total < settings.ops or first:
        kind = first.pop() if first else rng.choices(kinds, weights)[0]
        if kind == "retire_vs_reuse":
            drawn = drawer.retire_vs_reuse()
        elif kind == "late_write":
            drawn = drawer.late_write()
        elif kind == "handoff":
            drawn = drawer.handoff()
        else:
            drawn = [drawer.scene(kind)]
        if kind == "duplicates":
            drawer.calls += DUPLICATES
        for columns in drawn:
            scenes.append(tuple(tuple(column) for column in columns))
            total += sum(len(column) for column in columns)
    return scenes
