"""Lock stripes chosen by a stable hash (SPEC.md R-STORE-2, R-STORE-7).

Every rollout ID maps to one of a fixed number of lock stripes, and to one removal-counter slot inside that
stripe's lock file. The hash is ``zlib.crc32`` of the ID's UTF-8 bytes, not Python's ``hash()``, which is
salted per process (``PYTHONHASHSEED``): every process sharing a directory must agree on the stripe, or two
workers could hold "the" lock of one rollout at once.

The locks themselves are the seam's (``FileSystem.lock``): ``OsFileSystem`` takes a ``threading.Lock`` and
then ``fcntl.flock`` on a lock file it holds open, because ``flock`` alone does not exclude threads sharing
a descriptor and ``filelock`` costs 100× more per acquisition (docs/locks.md). ``stripe_lock`` is the one
way the store holds a stripe.

Not guaranteed: fairness, or exclusion between processes that were opened with different stripe counts
(every process must use the same ``stripes``; the store refuses nothing, it cannot know).
"""

from __future__ import annotations

import functools
import zlib
from types import TracebackType

from capture_ledger.impl.store.fs import GENERATION_SLOTS, FileSystem

__all__ = ["RolloutSlot", "rollout_slot", "stripe_lock", "stripe_of"]

#: ``(stripe, slot)``: the lock stripe of a rollout ID and its removal-counter slot in that stripe.
RolloutSlot = tuple[int, int]


def _crc(rollout_id: str) -> int:
    return zlib.crc32(rollout_id.encode("utf-8"))


def stripe_of(rollout_id: str, stripes: int) -> int:
    """The lock stripe of ``rollout_id`` among ``stripes``: the same in every process (R-STORE-2).

    Args:
        rollout_id: a valid rollout ID.
        stripes: the number of stripes, at least 1.

    Returns:
        An integer in ``range(stripes)``.
    """
    return _crc(rollout_id) % stripes


@functools.lru_cache(maxsize=4096)
def rollout_slot(rollout_id: str, stripes: int) -> RolloutSlot:
    """The stripe and the removal-counter slot of ``rollout_id`` (R-STORE-2, R-STORE-7).

    The slot uses the hash bits above the stripe's, so IDs sharing a stripe rarely share a slot, and a
    removal rarely invalidates another rollout's cached rows. Remembered for the last 4096 IDs asked about
    (every operation asks, some twice).
    """
    crc = _crc(rollout_id)
    return crc % stripes, (crc // stripes) % GENERATION_SLOTS


class stripe_lock:  # noqa: N801 - used as a function: ``with stripe_lock(fs, stripe):``
    """Hold lock stripe ``stripe`` of ``fs`` for the ``with`` block; released however the block ends.

    A class rather than a ``contextlib.contextmanager`` generator: it costs about half as much per use,
    and every record, read, retire and delete takes a stripe (docs/locks.md).

    Args:
        fs: the seam whose stripe to hold.
        stripe: the stripe, in ``range(fs.stripes)``.
    """

    __slots__ = ("_fs", "_stripe")

    def __init__(self, fs: FileSystem, stripe: int) -> None:
        self._fs = fs
        self._stripe = stripe

    def __enter__(self) -> None:
        self._fs.lock(self._stripe)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._fs.unlock(self._stripe)
