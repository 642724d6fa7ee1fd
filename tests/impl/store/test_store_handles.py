"""A handle's descriptors: ``close`` releases them, and so does collecting an unclosed handle, with a
``ResourceWarning`` (docs/store.md, "Handles hold descriptors until close()").

Measured as the property: the process's open descriptors, counted in ``/proc/self/fd`` (skipped where
there is no such directory), before and after many handles were opened and dropped.
"""

from __future__ import annotations

import gc
import os
import warnings
import weakref
from pathlib import Path

import pytest
from capture_ledger.impl.store import OsFileSystem
from capture_ledger.impl.store.file_store import FileLineageStore

FD_DIR = Path("/proc/self/fd")
needs_fd_dir = pytest.mark.skipif(not FD_DIR.is_dir(), reason="no /proc/self/fd to count descriptors in")

#: Handles opened and dropped per test; each holds 65 descriptors (64 lock stripes and the directory).
HANDLES = 200
#: Descriptors the count may move by for reasons of its own (the listing's own, a log handler's file).
SLACK = 8
ROW = {"model_call_id": "m1", "staging_key": "r/m1"}


def open_descriptors() -> int:
    return len(os.listdir(FD_DIR))


def _warmed(directory: Path) -> None:
    """One handle opened, used and closed first, so that what stays open once per process (the shared
    syncs' registry, an imported module's file) is counted in the baseline."""
    with FileLineageStore(directory) as store:
        store.record("r", ROW)
    gc.collect()


@needs_fd_dir
def test_dropped_handles_do_not_leak_their_descriptors(tmp_path: Path) -> None:
    _warmed(tmp_path)
    before = open_descriptors()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        for i in range(HANDLES):
            store = FileLineageStore(tmp_path)
            store.record("r", ROW)
            assert store.manifest("r")["records"] == [ROW]
            del store
            if i % 10 == 9:  # a full collection costs ~15 ms in this process; every 10th handle will do
                gc.collect()
    gc.collect()
    after = open_descriptors()
    # Without the finalizer this grew by HANDLES * 65 = 13,000 (measured).
    assert after - before <= SLACK, f"{after - before} descriptors leaked by {HANDLES} dropped handles"


@needs_fd_dir
def test_closed_handles_do_not_leak_their_descriptors(tmp_path: Path) -> None:
    _warmed(tmp_path)
    before = open_descriptors()
    for _ in range(HANDLES):
        store = FileLineageStore(tmp_path)
        store.record("r", ROW)
        store.close()
        store.close()  # twice: harmless, and closes nothing another handle opened since
    gc.collect()
    assert open_descriptors() - before <= SLACK


@needs_fd_dir
def test_a_handle_holds_one_descriptor_per_stripe_until_closed(tmp_path: Path) -> None:
    """The measurement can fail: an open handle's descriptors are seen, so a leak would be."""
    _warmed(tmp_path)
    before = open_descriptors()
    store = FileLineageStore(tmp_path, stripes=16)
    assert open_descriptors() - before == 16 + 1  # the lock stripes and the directory
    store.close()
    assert open_descriptors() == before


def test_an_unclosed_handle_warns_when_collected(tmp_path: Path) -> None:
    store = FileLineageStore(tmp_path)
    store.record("r", ROW)
    with pytest.warns(ResourceWarning, match="unclosed FileLineageStore on"):
        del store
        gc.collect()


def test_a_closed_handle_does_not_warn(tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = FileLineageStore(tmp_path)
        store.record("r", ROW)
        store.close()
        del store
        with FileLineageStore(tmp_path) as other:
            other.manifest("r")
        del other
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_the_finalizer_does_not_keep_the_handle_alive(tmp_path: Path) -> None:
    """The finalizer's callback holds the file system, never the handle, and a handle holds no cycle:
    dropping the last reference collects it at once, without waiting for the cycle collector."""
    store = FileLineageStore(tmp_path)
    store.record("r", ROW)
    ref = weakref.ref(store)
    with pytest.warns(ResourceWarning):
        gc.disable()
        try:
            del store
            assert ref() is None
        finally:
            gc.enable()


def test_a_handle_on_a_given_file_system_leaves_it_open(tmp_path: Path) -> None:
    """A handle closes (or, collected, finalizes) only the descriptors it opened: a given seam is the
    caller's, and no warning is owed for it."""
    fs = OsFileSystem(tmp_path, stripes=4)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            store = FileLineageStore(tmp_path, fs=fs)
            store.record("r", ROW)
            del store
            gc.collect()
        assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
        with FileLineageStore(tmp_path, fs=fs) as again:
            assert again.manifest("r")["records"] == [ROW]  # the seam still works after both handles
        assert fs.stat(".capture-ledger.lock.000") is not None
    finally:
        fs.close_all()
