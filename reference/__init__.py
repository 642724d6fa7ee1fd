"""The reference capture ledger: minimal, in memory, obviously correct (SPEC.md §Operations).

``ReferenceLedger`` is the conformance kit's baseline and a test double for framework code.
``capture_ledger.reference.mutants`` holds deliberately broken variants the kit must reject.
"""

from __future__ import annotations

from capture_ledger.reference._ledger import ReferenceLedger, open_reference_ledger

__all__ = ["ReferenceLedger", "open_reference_ledger"]
