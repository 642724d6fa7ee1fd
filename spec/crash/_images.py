"""Disk images and image spaces: what a crash leaves, and every image one crash point allows (SPEC.md §Crash;
docs/crash.md).

``DiskImage`` is what a crash leaves in the workspace: files (name, bytes) and directories, sorted, hashable
so images deduplicate. ``Baseline`` is the durable starting point of a trace. ``ImageSpace`` is a union of
``Alternative`` products of per-name options, with an exact ``size``, indexable (a seeded sample is a draw of
indexes) and iterable; an option is a file's bytes, ``DIRECTORY``, or ``None`` (the name is absent). An
option list may be lazy (a ``LazyContents`` such as ``Options``, or any ``Sequence``): the per-sector contents
of a file rewritten in place have too many combinations to list. An image drops every entry whose directory
is absent from it (a lost directory takes its entries with it).

Pure. Not guaranteed: that the images of a space are distinct (callers deduplicate).
"""

from __future__ import annotations

import math
import random
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import overload

__all__ = [
    "DIRECTORY",
    "Alternative",
    "Baseline",
    "Content",
    "Directory",
    "DiskImage",
    "ImageSpace",
    "LazyContents",
    "Options",
]


@dataclass(frozen=True, slots=True)
class Directory:
    """The option "this name is a directory" (``DIRECTORY``)."""


DIRECTORY = Directory()

#: One name's content in an image: a file's bytes, a directory, or ``None`` (absent).
Content = bytes | Directory | None


@dataclass(frozen=True, slots=True)
class DiskImage:
    """What a crash leaves: file names and their bytes, and the directories (besides the workspace itself),
    each sorted by name. Hashable, so images deduplicate."""

    files: tuple[tuple[str, bytes], ...] = ()
    directories: tuple[str, ...] = ()

    @classmethod
    def of(cls, files: Mapping[str, bytes], directories: Sequence[str] = ()) -> DiskImage:
        """Build an image from a mapping (and the directories it has)."""
        return cls(tuple(sorted(files.items())), tuple(sorted(directories)))

    def as_dict(self) -> dict[str, bytes]:
        """The image's files as a mapping."""
        return dict(self.files)


@dataclass(kw_only=True, frozen=True, slots=True)
class Baseline:
    """The durable starting point: ``(name, inode, bytes)`` for every file present before the trace,
    ``directories`` as ``(name, inode)``, and ``freed``, the bytes of files removed before it whose blocks
    the disk may still hold (a lost block of ``ext4-nojournal`` may read as one of them; callers that do not
    know them leave it empty)."""

    files: tuple[tuple[str, int, bytes], ...] = ()
    freed: tuple[bytes, ...] = ()
    directories: tuple[tuple[str, int], ...] = ()

    def image(self) -> DiskImage:
        """The baseline as an image."""
        return DiskImage.of(
            {name: data for name, _, data in self.files}, [name for name, _ in self.directories]
        )


class LazyContents(Sequence[Content]):
    """A ``Sequence`` of options computed on demand: a subclass sets ``_size`` and gives ``_at``, the item at
    an index already made non-negative and checked to be in range."""

    __slots__ = ("_size",)

    _size: int

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, index: int) -> Content: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Content]: ...

    def __getitem__(self, index: int | slice) -> Content | Sequence[Content]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._size))]
        if index < 0:
            index += self._size
        if not 0 <= index < self._size:
            raise IndexError(index)
        return self._at(index)

    @abstractmethod
    def _at(self, index: int) -> Content: ...


class Options(LazyContents):
    """A lazy concatenation of option lists (tuples or lazy sequences), itself a ``Sequence``."""

    __slots__ = ("_parts",)

    def __init__(self, parts: Sequence[Sequence[Content]]) -> None:
        self._parts = tuple(p for p in parts if len(p))
        self._size = sum(len(p) for p in self._parts)

    def _at(self, index: int) -> Content:
        for part in self._parts:
            if index < len(part):
                return part[index]
            index -= len(part)
        raise AssertionError("unreachable")  # pragma: no cover


def _present(name: str, directories: set[str]) -> bool:
    """Whether every directory above ``name`` is in the image."""
    parent = name.rpartition("/")[0]
    while parent:
        if parent not in directories:
            return False
        parent = parent.rpartition("/")[0]
    return True


@dataclass(kw_only=True, frozen=True, slots=True)
class Alternative:
    """A product of independent per-name choices: ``options[i]`` are name ``names[i]``'s possible contents.
    Names with a single option are fixed. ``aliases`` are ``(alias, name)`` pairs: the alias is another
    entry of the same file, so it holds whatever ``name`` holds (a hard link, or both names of a rename)."""

    names: tuple[str, ...]
    options: tuple[Sequence[Content], ...]
    aliases: tuple[tuple[str, str], ...] = ()

    @property
    def size(self) -> int:
        """The number of images in this product."""
        return math.prod(len(o) for o in self.options)

    def image(self, index: int) -> DiskImage:
        """The ``index``-th image of the product, in mixed radix (first name varies slowest)."""
        chosen: dict[str, Content] = {}
        for name, options in zip(reversed(self.names), reversed(self.options), strict=True):
            index, digit = divmod(index, len(options))
            chosen[name] = options[digit]
        for alias, name in self.aliases:
            chosen[alias] = chosen.get(name)
        directories = {n for n, c in chosen.items() if isinstance(c, Directory)}
        directories = {d for d in directories if _present(d, directories)}
        files = {n: c for n, c in chosen.items() if isinstance(c, bytes) and _present(n, directories)}
        return DiskImage.of(files, sorted(directories))


@dataclass(frozen=True, slots=True)
class ImageSpace:
    """Every image one crash point allows: a union of ``Alternative`` products (possibly overlapping)."""

    alternatives: tuple[Alternative, ...]
    size: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", sum(a.size for a in self.alternatives))

    def image(self, index: int) -> DiskImage:
        """The ``index``-th image, ``0 <= index < size``.

        Raises:
            IndexError: ``index`` is out of range.
        """
        if not 0 <= index < self.size:
            raise IndexError(index)
        for alternative in self.alternatives:
            if index < alternative.size:
                return alternative.image(index)
            index -= alternative.size
        raise AssertionError("unreachable")  # pragma: no cover

    def __iter__(self) -> Iterator[DiskImage]:
        for index in range(self.size):
            yield self.image(index)

    def sample(self, count: int, *, seed: int) -> list[DiskImage]:
        """``count`` images drawn without replacement by a ``random.Random(seed)`` (all when fewer)."""
        if self.size <= count:
            return list(self)
        rng = random.Random(seed)
        chosen: set[int] = set()
        while len(chosen) < count:
            chosen.add(rng.randrange(self.size))
        return [self.image(i) for i in sorted(chosen)]
