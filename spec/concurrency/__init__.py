"""The concurrent protocol as a model: the step-level model of the file store (``steps``, ``programs``), its
exhaustive explorer with a pinned manifest (``explore``), recorded histories (``history``) and the
linearizability checker (SPEC.md R-CONC-1..3, R-STORE-1..7).

Imports only ``spec.core``. Not here: running real ledgers concurrently (the kit and ``impl.study`` do that).
"""

from __future__ import annotations

from capture_ledger.spec.concurrency._programs import successor

__all__ = ["successor"]
