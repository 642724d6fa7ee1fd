"""Iterative deepening over the preemption bound: the failing schedule with the fewest preemptions
(docs/interleavings.md; ``_explore``).

``find_counterexample`` runs ``explore`` with bound 0, 1, ... ``max_preemptions`` and stops at the first
bound with a failing run, so the counterexample it returns has as few preemptions as any. Not guaranteed:
anything beyond ``max_preemptions``.
"""

from __future__ import annotations

from pathlib import Path

from capture_ledger.impl.study.interleave._explore import OpenHandle, Run, Scenario, explore

__all__ = ["find_counterexample"]


def find_counterexample(
    scenario: Scenario,
    *,
    open_handle: OpenHandle,
    max_preemptions: int = 2,
    base_dir: str | Path | None = None,
    timeout: float = 30.0,
) -> tuple[Run | None, int]:
    """The first failing run with the fewest preemptions (iterative deepening over ``explore``).

    Returns:
        The failing run (``None`` if every schedule up to ``max_preemptions`` passed) and the number of
        runs made over all bounds.
    """
    total = 0
    for bound in range(max_preemptions + 1):
        found = explore(
            scenario, open_handle=open_handle, preemption_bound=bound, base_dir=base_dir, timeout=timeout
        )
        total += found.runs
        if found.failures:
            return found.failures[0], total
    return None, total
