"""Concurrent stress of any ledger, judged for linearizability (SPEC.md R-CONC-1..3, R-KIT-12).

``mix`` draws the operation mixes (weighted toward the races that matter, on few rollout IDs so that calls
collide), ``running`` runs one mix against handles of a ledger on threads or as asyncio tasks and records
every call on one monotonic clock, ``witness`` writes a violation's minimal witness as a text timeline
(``witness_svg`` draws it as SVG), and ``check`` is ``check_concurrency``, which ties them to the
linearizability checker. Every verdict is the
shared one (``spec.core.verdicts``); a violation's ``witness`` is a ``StressWitness``.

Not guaranteed: that a seed reproduces an interleaving (it reproduces the operation mix only; the OS picks
the interleaving), or that a race is found within any number of rounds.
"""

from __future__ import annotations

from capture_ledger.spec.kit.stress._check import (
    DEFAULT_OPS,
    DEFAULT_ROUNDS,
    StressReport,
    check_concurrency,
    present_operations,
)
from capture_ledger.spec.kit.stress._judge import DEFAULT_CHECK_BUDGET, StressWitness
from capture_ledger.spec.kit.stress._mix import MixSettings, draw_round
from capture_ledger.spec.kit.stress._picture import witness_svg
from capture_ledger.spec.kit.stress._processes import run_processes
from capture_ledger.spec.kit.stress._witness import op_text, outcome_text

__all__ = [
    "DEFAULT_CHECK_BUDGET",
    "DEFAULT_OPS",
    "DEFAULT_ROUNDS",
    "MixSettings",
    "StressReport",
    "StressWitness",
    "check_concurrency",
    "draw_round",
    "op_text",
    "outcome_text",
    "present_operations",
    "run_processes",
    "witness_svg",
]
