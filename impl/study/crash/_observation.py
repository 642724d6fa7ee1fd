"""Reading a crash image back with a fresh store: what the files say, what the API says, what ``check`` finds
(R-STATE-3, R-STORE-8; SPEC.md §Crash; docs/verdicts.md).

The crash explorer (``crash``) and the kernel study (``kernel``) both judge a disk image by what a fresh
store reads from it. ``ImageObserver`` materializes images into a scratch directory (or takes a directory
that already holds one, such as a mounted ext4 image) and reads every rollout ID of the workload three ways:
from the files (``consistency.read_snapshot`` and the abstraction function), through the public API
(``manifest``, ``admit``), and with ``consistency.check``. Whatever the store under study does — raise,
leave bytes the abstraction cannot map, hang past the budget — becomes part of the ``Observation``, never an
exception. Observations are cached by image content, so an image is read once per recording.

Not guaranteed: that a store which hangs stops (its thread is abandoned, ``bounded``), or that reading
leaves the directory unchanged (opening a store may create lock files).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from capture_ledger.impl.store import LEDGER_SUFFIX, Finding, check, read_snapshot
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import FileSystem, OsFileSystem, lock_file_name
from capture_ledger.impl.study._bounded import BoundedCaller, Hung, Returned
from capture_ledger.impl.study.crash._recording import StoreConfig
from capture_ledger.spec.core.abstraction import abstract
from capture_ledger.spec.core.errors import RolloutRetiredError
from capture_ledger.spec.core.model import (
    RETIRED,
    FailureEntry,
    Live,
    ManifestValue,
    RecordEntry,
    RolloutState,
    manifest_value_of,
)
from capture_ledger.spec.crash.durability import DiskImage
from capture_ledger.spec.kit.crash import CrashPoint, Observation

__all__ = [
    "CRASH_RESIDUE",
    "READ_BUDGET",
    "ImageObserver",
    "OpenStore",
    "default_opener",
    "observe_directory",
    "scratch_directory",
]

_PROBE_CALL = "crash-probe"

#: Opens the store under study on a directory over a given seam (default: ``FileLineageStore`` with the
#: recording's ``StoreConfig.ordering()``). Any object with ``manifest``, ``admit`` and ``close`` will do.
OpenStore = Callable[[Path, FileSystem], Any]

#: Seconds one image may take to be read back (files, ``check`` and the store's API) before it counts as
#: a hang: generous, a healthy read takes about a millisecond.
READ_BUDGET = 10.0

#: What a crash may leave and the spec allows (R-STORE-6, R-STATE-2): torn tails, interrupted retires (a
#: ledger beside its fence), empty ledgers and temporaries left by an interrupted create (R-STORE-3), and,
#: without a journal, a fence brought back holding a removed ledger's bytes. Any other ``check`` finding
#: breaks R-STORE-8.
CRASH_RESIDUE = frozenset(
    {"torn-tail", "interrupted-retire", "empty-ledger", "interrupted-create", "stale-fence"}
)


@contextmanager
def scratch_directory(prefix: str = "capture-ledger-crash-") -> Iterator[Path]:
    """A fresh directory, on ``/dev/shm`` when available (images need no durability); removed after."""
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _api_mismatch(store: Any, rollout_id: str, state: RolloutState) -> str | None:
    """Whether the public API reads ``rollout_id`` as the files say (R-STATE-3, R-READ-*, R-ADMIT-2)."""
    try:
        manifest = store.manifest(rollout_id)
        read: object = manifest_value_of(manifest)
    except RolloutRetiredError:
        read = RETIRED
    admitted = store.admit(rollout_id, _PROBE_CALL) is not None
    if state == RETIRED:
        ok = read == RETIRED and not admitted
    elif isinstance(state, Live):
        expected = ManifestValue(
            tuple(e.canonical for e in state.entries if isinstance(e, RecordEntry)),
            tuple((e.model_call_id, e.reason) for e in state.entries if isinstance(e, FailureEntry)),
        )
        ok = read == expected and admitted != state.fenced
    else:
        ok = read == ManifestValue() and admitted
    return None if ok else f"{rollout_id}: files say {state!r}, API read {read!r}, admitted={admitted}"


def _findings(directory: Path) -> tuple[str, ...]:
    try:
        found = check(directory)
    except Exception as error:  # the files are beyond what check can read: report it, do not crash
        return (f"check raised {type(error).__name__}: {error}",)
    return tuple(sorted(repr(f) for f in found if not _allowed_finding(f)))


def _allowed_finding(finding: Finding) -> bool:
    return finding.kind in CRASH_RESIDUE


def default_opener(config: StoreConfig) -> OpenStore:
    """Opens ``FileLineageStore`` with ``config``'s ordering (the same build runs after the reboot)."""

    def open_store(directory: Path, fs: FileSystem) -> FileLineageStore:
        return FileLineageStore(directory, fs=fs, ordering=config.ordering())

    return open_store


def _culprit(error: Exception, ids: Sequence[str]) -> str | None:
    """The rollout ID whose ledger ``error`` names, if it is one of ``ids``."""
    name = getattr(error, "name", None)
    if isinstance(name, str) and name.endswith(LEDGER_SUFFIX) and name[: -len(LEDGER_SUFFIX)] in ids:
        return name[: -len(LEDGER_SUFFIX)]
    return None


def _read_image(directory: Path, ids: Sequence[str], stripes: int, open_store: OpenStore) -> Observation:
    """Read ``ids`` from ``directory``; whatever the store under study raises becomes part of the answer."""
    fs = OsFileSystem(directory, stripes=stripes)
    try:
        try:
            states = abstract(read_snapshot(fs))
        except Exception as error:
            reason = f"the files do not map to states: {type(error).__name__}: {error}"
            return Observation(
                states=(),
                mismatches=(),
                findings=_findings(directory),
                unreadable=reason,
                culprit=_culprit(error, ids),
            )
        findings = _findings(directory)
        try:
            store = open_store(directory, fs)
        except Exception as error:
            reason = f"opening the store raised {type(error).__name__}: {error}"
            return Observation(states=(), mismatches=(), findings=findings, unreadable=reason)
        mismatches = []
        for rid in ids:
            try:
                mismatches.append(_api_mismatch(store, rid, states.get(rid)))
            except Exception as error:
                mismatches.append(f"{rid}: reading it back raised {type(error).__name__}: {error}")
        try:
            store.close()
        except Exception as error:
            mismatches.append(f"{ids[0]}: closing the store raised {type(error).__name__}: {error}")
        return Observation(
            states=tuple((rid, states.get(rid)) for rid in ids),
            mismatches=tuple(m for m in mismatches if m is not None),
            findings=findings,
        )
    finally:
        fs.close_all()


def _hung(budget: float) -> Observation:
    return Observation(
        states=(),
        mismatches=(),
        findings=(),
        unreadable=f"the store did not answer within {budget:g} s (a hang when reopened)",
    )


class ImageObserver:
    """Reads images with a fresh store, within a budget, once per distinct image (``cache``).

    Args:
        base: a scratch directory to materialize images in.
        config: the store configuration (its stripes; the default opener's ordering).
        ids: the rollout IDs to read.
        open_store: opens the store under study.
        budget: seconds one read may take.

    After a hang the hung thread keeps its directory: the next image goes to a fresh one (``hangs``).
    """

    def __init__(
        self, base: Path, config: StoreConfig, ids: Sequence[str], open_store: OpenStore, budget: float
    ) -> None:
        self.base = base
        self.config = config
        self.ids = tuple(ids)
        self.open_store = open_store
        self.cache: dict[DiskImage, Observation] = {}
        self.locks = {lock_file_name(s) for s in range(config.stripes)}
        self.caller = BoundedCaller(budget, name="crash-image-reader")
        self.directory = self._fresh()

    @property
    def hangs(self) -> int:
        """How many reads hung so far."""
        return self.caller.hangs

    def _fresh(self) -> Path:
        directory = self.base / f"image-{self.caller.hangs}"
        directory.mkdir(exist_ok=True)
        OsFileSystem(directory, stripes=self.config.stripes).close_all()
        return directory

    @property
    def reads(self) -> int:
        """Distinct images read so far (the cache's size)."""
        return len(self.cache)

    def read_images(self, images: Sequence[DiskImage], point: CrashPoint) -> list[Observation]:
        """``observe`` each of ``images`` (``exploration.TargetReader``; the crash point is not needed)."""
        return [self.observe(image) for image in images]

    def observe(self, image: DiskImage) -> Observation:
        """Materialize ``image`` (lock files kept) and read it; cached by content."""
        cached = self.cache.get(image)
        if cached is not None:
            return cached
        for name in os.listdir(self.directory):
            if name not in self.locks:
                os.unlink(self.directory / name)
        for name, data in image.files:
            if name not in self.locks:
                (self.directory / name).write_bytes(data)
        hangs = self.caller.hangs
        observation = self._read(self.directory)
        if self.caller.hangs != hangs:
            self.directory = self._fresh()  # the hung thread keeps the old one
        self.cache[image] = observation
        return observation

    def observe_in(self, directory: Path, image: DiskImage) -> Observation:
        """Read ``directory``, which holds ``image`` already (a mounted ext4 image, say); cached by content.

        After a hang the caller must not reuse ``directory`` while the hung thread may still touch it.
        """
        cached = self.cache.get(image)
        if cached is not None:
            return cached
        observation = self._read(directory)
        self.cache[image] = observation
        return observation

    def _read(self, directory: Path) -> Observation:
        outcome = self.caller.call(
            lambda: _read_image(directory, self.ids, self.config.stripes, self.open_store)
        )
        if isinstance(outcome, Returned):
            return outcome.value
        if isinstance(outcome, Hung):
            return _hung(outcome.budget)
        raise outcome.error  # _read_image catches what the store raises; this is an error of our own

    def close(self) -> None:
        """Stop the reader thread (a hung one is abandoned)."""
        self.caller.close()


def observe_directory(
    directory: Path,
    ids: Sequence[str],
    *,
    config: StoreConfig | None = None,
    open_store: OpenStore | None = None,
    budget: float = READ_BUDGET,
) -> Observation:
    """Read ``ids`` from ``directory`` with a fresh store: from the files, through the API, and ``check``.

    Args:
        directory: a lineage directory (its lock files made with ``config.stripes`` stripes).
        ids: the rollout IDs to read.
        config: the store configuration to read with (default: the production store, 4 stripes).
        open_store: opens the store under study (default: ``FileLineageStore`` with ``config.ordering()``).
        budget: seconds the whole read may take before it counts as a hang.

    Returns:
        The state of each ID read from the files, API reads that disagree with them or raised (R-STATE-3),
        and the ``check`` findings that a crash may not leave (R-STORE-8); or, when the directory cannot
        be read at all or the store hangs, an ``Observation`` whose ``unreadable`` says why. Nothing the
        store under study does is raised from here.
    """
    config = config or StoreConfig()
    opener = open_store or default_opener(config)
    caller = BoundedCaller(budget, name="crash-directory-reader")
    try:
        outcome = caller.call(lambda: _read_image(directory, ids, config.stripes, opener))
    finally:
        caller.close()
    if isinstance(outcome, Returned):
        return outcome.value
    if isinstance(outcome, Hung):
        return _hung(outcome.budget)
    raise outcome.error
