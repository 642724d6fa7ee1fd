"""What a workload's setup removed: bytes whose blocks a disk may still hold when the recorded operations
run (R-CRASH-3; SPEC.md §Crash; docs/crash.md §The kernel study).

On ext4 without a journal a block that a crash left unwritten can read as whatever a removed file left in
it: the kernel study saw a re-created ledger come back holding the rows of the ledger a delete had removed.
The ``ext4-nojournal`` model therefore lets a lost block read as a block of any removed file's bytes — those
removed during the recorded trace (its ``Unlink`` effects) and those removed by the setup, before the
trace, which ``Baseline.freed`` carries. ``freed_by_setup`` computes the latter by running the setup once
more, through a recorder, on a scratch directory; ``removed_bytes`` reads them off any trace.

Not guaranteed: bytes removed by anything but the workload (the study's directories are fresh), or by a
``Truncate`` (a torn tail cut away is left out).
"""

from __future__ import annotations

from collections.abc import Sequence

from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.impl.store.fs import OsFileSystem
from capture_ledger.impl.study.crash._observation import scratch_directory
from capture_ledger.impl.study.crash._recording import RecordingFileSystem
from capture_ledger.spec.crash.durability import Truncate, Unlink, Write
from capture_ledger.spec.kit.crash import TraceEvent, Workload, run_operation

__all__ = ["freed_by_setup", "removed_bytes"]

_CACHE: dict[tuple[str, int], tuple[bytes, ...]] = {}


def removed_bytes(trace: Sequence[TraceEvent]) -> tuple[bytes, ...]:
    """The bytes each file held when a trace unlinked it (empty files left out), in trace order."""
    data: dict[int, bytearray] = {}
    removed: list[bytes] = []
    for event in trace:
        if isinstance(event, Write):
            data.setdefault(event.inode, bytearray()).extend(event.data)
        elif isinstance(event, Truncate):
            del data.setdefault(event.inode, bytearray())[event.size :]
        elif isinstance(event, Unlink) and data.get(event.inode):
            removed.append(bytes(data[event.inode]))
    return tuple(removed)


def freed_by_setup(workload: Workload, *, stripes: int = 4) -> tuple[bytes, ...]:
    """The bytes of the files ``workload``'s setup removed (a retire's ledgers, a delete's), computed once
    per setup by running it through a recorder on a scratch directory.

    Raises:
        Exception: whatever the setup raises (a workload whose setup fails cannot be recorded either).
    """
    key = (repr(workload.setup), stripes)
    if key not in _CACHE:
        if not workload.setup:
            return ()
        with scratch_directory("capture-ledger-setup-") as directory:
            inner = OsFileSystem(directory, stripes=stripes)
            try:
                recorder = RecordingFileSystem(inner)
                with FileLineageStore(directory, fs=recorder) as store:
                    for op in workload.setup:
                        run_operation(store, op)
            finally:
                inner.close_all()
        _CACHE[key] = removed_bytes(recorder.trace)
    return _CACHE[key]
