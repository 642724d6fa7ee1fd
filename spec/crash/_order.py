"""Which directory operations the journaled model may keep, and the names a file system's log may bring back
(SPEC.md §Crash; the rules are stated in ``spec.crash.durability``'s docstring; docs/crash.md §Persistence
models).

- ``kept_sets(state)``: the sets of directory operations ``journaled`` may keep. Operations on one
  directory persist in issue order; operations on different directories need not: a kept set holds, for
  each directory, a prefix of the operations on entries of it, including every synced one (and whatever
  an operation it keeps depends on). A rename whose two names lie in two directories is one operation in
  both: kept in both or in neither. A synced directory is reachable: the op that made it (and each of its
  ancestors) is kept, with what its directory held before (``Replay.anchored``). On a trace in one
  directory these are exactly its prefixes, shortest first (the order ``ImageSpace`` indexes, so seeded
  samples of such traces are unchanged).
- ``ghost_options(state, kept, present, options)``: the names a file had when it was fsynced, which may
  come back naming it whatever else the directory operations kept (btrfs replays the names its log tree
  logged at the fsync), until a ``Syncfs`` commits everything or an ``Unlink`` of the name drops it.

Pure. Not guaranteed: distinct sets (they are), or that the number of sets stays small: it is the product,
over the directories, of their unsynced operations plus one, less the combinations a cross-directory
rename forbids.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from capture_ledger.spec.crash._effects import parent_of
from capture_ledger.spec.crash._images import Content, Options
from capture_ledger.spec.crash._replay import Replay, unique

__all__ = ["entries_of", "flatten", "ghost_options", "kept_sets"]


def _directories(state: Replay) -> list[frozenset[str]]:
    return [frozenset(parent_of(name) for name, _ in op) for op in state.dir_ops]


def kept_sets(state: Replay) -> list[frozenset[int]]:
    """Every set of directory operations (indexes into ``state.dir_ops``) the journaled model may keep,
    smallest first (module docstring)."""
    dirs = _directories(state)
    bound: dict[str, int] = {}  # per directory, the last op it must keep
    for index, synced in enumerate(state.bindings_synced):
        if any(synced) or index in state.anchored:
            for directory in dirs[index]:
                bound[directory] = max(bound.get(directory, -1), index)
    required: set[int] = set()
    for index in reversed(range(len(state.dir_ops))):  # a kept op keeps what its directories hold before
        if any(index <= bound.get(d, -1) for d in dirs[index]):
            required.add(index)
            for directory in dirs[index]:
                bound[directory] = max(bound.get(directory, -1), index)
    free = [index for index in range(len(state.dir_ops)) if index not in required]
    found: list[frozenset[int]] = []
    # Depth first over the free ops, without recursion (a batch may leave hundreds unsynced): each entry is
    # the next free op to decide, the free ops kept so far, and the directories with an op left out (nothing
    # later on them may be kept).
    stack: list[tuple[int, tuple[int, ...], frozenset[str]]] = [(0, (), frozenset())]
    while stack:
        position, chosen, skipped = stack.pop()
        if position == len(free):
            found.append(frozenset(required.union(chosen)))
            continue
        index = free[position]
        stack.append((position + 1, chosen, skipped | dirs[index]))
        if not dirs[index] & skipped:
            stack.append((position + 1, (*chosen, index), skipped))
    return sorted(found, key=lambda s: (len(s), sorted(s)))


def entries_of(state: Replay, kept: frozenset[int]) -> dict[str, int]:
    """The namespace after the baseline and the ``kept`` directory operations, in issue order."""
    found = dict(state.baseline)
    for index, op in enumerate(state.dir_ops):
        if index in kept:
            for name, inode in op:
                if inode is None:
                    found.pop(name, None)
                else:
                    found[name] = inode
    return found


def ghost_options(
    state: Replay,
    kept: frozenset[int] | None,
    present: Mapping[str, int],
    options: Callable[[int], Sequence[Content]],
) -> dict[str, list[Sequence[Content]]]:
    """Per name a file system's log may bring back, the option lists it may hold besides its own: per file
    it may name, ``options(inode)`` (the file's contents as any entry of it may hold them: the log holds
    the inode as its last ``Fsync`` left it). A later ``Unlink`` of the name drops it from the log: one in
    ``kept`` (``None``: one a directory sync made durable). ``present``: the image's namespace; a logged name
    neither replaces a name it has nor gives a second name to a file it names (a rename stays atomic)."""
    found: dict[str, list[Sequence[Content]]] = {}
    named = set(present.values())
    for name, inode, unlinks in state.ghosts:
        if name in present or inode in named or inode in state.directories:
            continue
        if kept is None:
            if any(all(state.bindings_synced[op]) for op in unlinks):
                continue
        elif any(op in kept for op in unlinks):
            continue
        found.setdefault(name, []).append(options(inode))
    return found


def flatten(parts: list[Sequence[Content]]) -> Sequence[Content]:
    """Option lists joined: a tuple without repeats when every part is one, else lazily."""
    if all(isinstance(p, tuple) for p in parts):
        return unique([c for p in parts for c in p])
    return Options(parts)
