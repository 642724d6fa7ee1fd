"""Example capture ledgers written against the protocol alone, and a catalogue of seeded bugs
(docs/examples.md, docs/bugs.md).

This folder is not part of the installed ``capture_ledger`` package: it is a ledger author's code, kept in a
checkout and judged from the outside, the way a third party's ledger is. From the repository root::

    capture-ledger verify examples.sqlite_ledger:open_ledger --handles 3
    capture-ledger verify examples.directory_ledger:open_ledger --handles 3
    capture-ledger verify examples.async_ledger:open_ledger --handles 3

(``verify`` puts the current directory on ``sys.path``). Each ledger satisfies ``CaptureLedger`` (SPEC.md
§Protocol) with all seven operations, and each module's factory ``open_ledger(workspace)`` opens handles that,
on one workspace, act as workers of one model server:

- ``sqlite_ledger``: stdlib ``sqlite3``, one transaction per operation, fences as a table; the
  ``synchronous`` and ``journal_mode`` pragmas are factory options.
- ``directory_ledger``: one directory per rollout holding one file per row and a fence marker file; its own
  fsync and directory-sync discipline, ``fcntl.flock`` across processes.
- ``async_ledger``: coroutine methods over one in-memory state per workspace and process, an
  ``asyncio.Lock``, and awaits in the middle of operations.

``examples.bugs`` holds deliberately broken variants of the three, each a few lines, and ``CATALOGUE``
lists them with the layer (sequential kit, concurrency, crash) expected to kill each.

Not guaranteed: these are examples, not products; each module says what it does not promise.
"""
