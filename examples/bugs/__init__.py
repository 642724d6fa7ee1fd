"""Seeded bugs in the example ledgers, and the catalogue that says which layer must kill each
(docs/bugs.md).

``catalogue.CATALOGUE`` lists them; ``sqlite_bugs``, ``directory_bugs`` and ``async_bugs`` hold them, each a
small variation of its example ledger with a factory ``open_<name>(workspace)``. Nothing here is imported
eagerly: ``from examples.bugs.catalogue import CATALOGUE``.
"""
