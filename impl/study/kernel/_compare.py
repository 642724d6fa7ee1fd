"""Kernel against model: is each recovered image one the persistence model allows? (SPEC.md §Crash;
docs/crash.md §The kernel study)

Images are compared as a line reader tells them apart, the same granularity at which the models enumerate
"any prefix" (``spec.crash.durability``): per file, its bytes up to the last newline exactly, and whether a
tail follows — none, bytes the store wrote (a torn line), or bytes it never writes (a NUL: canonical JSON
never holds one, so a NUL can only come from a block the disk never wrote). ``reader_class`` computes it.

``ModelView`` gives, for one recording and one model, the classes the model allows after the first ``n``
effects (``classes``), enumerating the model's whole image space (``limit`` images at most; beyond it the
answer is ``None``, unknown; ``space_classes`` lists them per product of per-name options, not per image).
A kernel state crashed somewhere in a window of the store's trace
(``TraceWindow``): it is *inside* the model when its class is allowed after some effect count in that
window, *outside* when after none — which makes the model unsound. ``looseness`` counts the classes the
model allows at some crash point that no kernel state produced.

Not guaranteed: looseness is exact only when every crash state of the kernel was generated (subsets are
sampled in large epochs, so it is an upper bound there).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

from capture_ledger.spec.crash.durability import Alternative, DiskImage, ImageSpace, PersistenceModel
from capture_ledger.spec.kit.crash import Invoke, Recording, Return

__all__ = ["ModelView", "ReaderClass", "TraceWindow", "looseness", "reader_class", "space_classes"]

#: Per file: (name, bytes up to the last newline, tail kind: "" none, "text", "zeros").
ReaderClass = tuple[tuple[str, bytes, str], ...]


def reader_class(image: DiskImage, skip: Collection[str] = ()) -> ReaderClass:
    """The image as a line reader tells it apart (files named in ``skip``, the lock files, left out)."""
    found = []
    for name, data in image.files:
        if name in skip:
            continue
        cut = data.rfind(b"\n") + 1
        tail = data[cut:]
        kind = "" if not tail else ("zeros" if b"\0" in tail else "text")
        found.append((name, data[:cut], kind))
    return tuple(found)


#: One name's content as a line reader tells it apart: a file's (bytes up to its last newline, tail kind),
#: ``_DIRECTORY``, or ``None`` (absent).
_Key = tuple[bytes, str] | str | None
_DIRECTORY = "directory"


def _key(content: object) -> _Key:
    if isinstance(content, bytes):
        cut = content.rfind(b"\n") + 1
        tail = content[cut:]
        return (content[:cut], "" if not tail else ("zeros" if b"\0" in tail else "text"))
    return None if content is None else _DIRECTORY


def _present(name: str, directories: Collection[str]) -> bool:
    """Whether every directory above ``name`` is in the image (``spec.crash`` drops the entries of a
    missing directory)."""
    parent = name.rpartition("/")[0]
    while parent:
        if parent not in directories:
            return False
        parent = parent.rpartition("/")[0]
    return True


def _alternative_classes(alternative: Alternative, skip: Collection[str]) -> Iterator[ReaderClass]:
    names = tuple(reversed(alternative.names))
    keys = [list(dict.fromkeys(_key(c) for c in options)) for options in reversed(alternative.options)]
    for combination in itertools.product(*keys):
        chosen: dict[str, _Key] = {}
        for name, key in zip(names, combination, strict=True):
            chosen[name] = key
        for alias, name in alternative.aliases:
            chosen[alias] = chosen.get(name)
        directories = {n for n, k in chosen.items() if k == _DIRECTORY}
        directories = {d for d in directories if _present(d, directories)}
        yield tuple(
            (name, key[0], key[1])
            for name, key in sorted((n, k) for n, k in chosen.items() if isinstance(k, tuple))
            if name not in skip and _present(name, directories)
        )


def space_classes(space: ImageSpace, skip: Collection[str] = ()) -> frozenset[ReaderClass]:
    """The reader classes of every image of ``space``: ``reader_class`` of each image, computed per
    ``Alternative`` over the distinct classes of each name's options (a product of those) instead of over
    every image — the same set, fewer steps where many options differ only past their last newline."""
    if not isinstance(space, ImageSpace):  # a model's own space type: enumerate its images
        return frozenset(reader_class(image, skip) for image in space)
    return frozenset(c for alternative in space.alternatives for c in _alternative_classes(alternative, skip))


@dataclass(kw_only=True, frozen=True, slots=True)
class TraceWindow:
    """Where in the store's trace a crash state's crash happened: every event of ``trace[:completed]`` had
    completed, and any of ``trace[completed:reached]`` may have been under way; ``cuts`` are the trace
    positions (distinct histories) the crash may have followed, each judged on its own."""

    completed: int
    reached: int
    cuts: tuple[int, ...]


class ModelView:
    """The reader classes one model allows along one recording, by number of effects issued.

    Args:
        recording: the store's recording (baseline and trace).
        model: the persistence model.
        skip: file names left out of every class (the lock files).
        limit: the most images enumerated per crash point; beyond it ``classes`` answers ``None``.
    """

    def __init__(
        self, recording: Recording, model: PersistenceModel, skip: Collection[str], *, limit: int = 50_000
    ) -> None:
        self.recording = recording
        self.model = model
        self.skip = frozenset(skip)
        self.limit = limit
        self.effects = [e for e in recording.trace if not isinstance(e, Invoke | Return)]
        self._counts = [0]
        for event in recording.trace:
            self._counts.append(self._counts[-1] + (0 if isinstance(event, Invoke | Return) else 1))
        self._cache: dict[int, frozenset[ReaderClass] | None] = {}

    def effects_before(self, position: int) -> int:
        """How many effects ``trace[:position]`` holds."""
        return self._counts[min(position, len(self._counts) - 1)]

    def classes(self, count: int) -> frozenset[ReaderClass] | None:
        """The classes the model allows after the first ``count`` effects (``None``: too many to list)."""
        if count not in self._cache:
            space = self.model.space(self.recording.baseline, self.effects[:count])
            self._cache[count] = None if space.size > self.limit else space_classes(space, self.skip)
        return self._cache[count]

    def allows(self, found: ReaderClass, window: TraceWindow) -> bool | None:
        """Whether some effect count of ``window`` allows ``found`` (``None``: unknown, a space too big)."""
        unknown = False
        for count in range(self.effects_before(window.completed), self.effects_before(window.reached) + 1):
            allowed = self.classes(count)
            if allowed is None:
                unknown = True
            elif found in allowed:
                return True
        return None if unknown else False

    def everything(self) -> frozenset[ReaderClass]:
        """Every class the model allows at some crash point of the recording (spaces too big left out)."""
        found: set[ReaderClass] = set()
        for count in range(len(self.effects) + 1):
            found |= self.classes(count) or frozenset()
        return frozenset(found)


def looseness(model: ModelView, produced: Iterable[ReaderClass]) -> int:
    """How many classes the model allows somewhere along the recording that the kernel never produced."""
    return len(model.everything() - set(produced))
