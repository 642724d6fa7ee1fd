"""The crash contract and the persistence models (SPEC.md §Crash, R-CRASH-1..4).

``durability`` says which disk images a crash may leave under a file system's persistence model;
``contract`` says which states each rollout ID may then be in. Pure; imports only ``spec.core``.
"""

from __future__ import annotations

from capture_ledger.spec.crash._replay import replay

__all__ = ["replay"]
