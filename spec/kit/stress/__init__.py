"""Concurrent stress of any ledger, judged for linearizability (SPEC.md R-CONC-1..3, R-KIT-12).

``mix`` draws the operation mixes (weighted toward the races that matter, on few rollout IDs so that calls
collide), ``running`` runs one mix against handles of a ledger on threads or as asyncio tasks and records
every call on one monotonic clock, ``witness`` writes a violation's minimal witness as a text timeline, and
``check`` is ``check_concurrency``, which ties them to the linearizability checker.

Not guaranteed: that a seed reproduces an interleaving (it reproduces the operation mix only; the OS picks
the interleaving), or that a race is found within any number of rounds.
"""

from __future__ import annotations
