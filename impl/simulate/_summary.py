"""The simulation's summary: the pinned ``--json`` object, and the source's figures it is compared with
(docs/simulate.md; docs/source.md §What it measured).

``summary(result)`` is the object ``capture-ledger simulate --json`` prints. Its keys include the pinned
ones: ``rollouts``, ``calls``, ``in_flight``, ``ledger_bytes_left``, ``fence_files_left``,
``cached_rows_left`` (summed over every arm, after the end-of-run delete), ``duplicates_sent``,
``ledgers_recreated`` (in the arms that retire: 0 is the invariant), ``discarded_writes``,
``wrong_server_absent``, ``record_ms`` (``p50``, ``p99``, ``mean`` of the removal arm),
``retire_us_per_rollout``, ``delete_us_per_rollout``, ``seconds``; and more: the baseline's figures, the
re-created ledgers under delete, every invariant, the date, the load and the resolved store settings.

Not guaranteed: keys beyond the pinned ones may grow.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from capture_ledger.impl.http import BUCKETS
from capture_ledger.impl.simulate._outcome import ArmOutcome, Latency
from capture_ledger.impl.simulate._run import SimulationResult

__all__ = ["SOURCE", "bucket", "delete_us", "retire_us", "summary"]

#: The source's measured figures (docs/source.md §What it measured).
SOURCE = {
    "rollouts": 20_000,
    "calls": 4,
    "in_flight": 1024,
    "batch": 256,
    "record_ms_mean_removal": 7.2,
    "record_ms_mean_baseline": 7.0,
    "retire_us_per_rollout": 65.0,
    "delete_us_per_rollout": 41.0,
    "baseline_ledger_mb": 72.0,
    "baseline_cached_rollouts": 20_000,
    "duplicate_rollouts": 4_000,
}


def _number(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 3)


def _latency(latency: Latency) -> dict[str, float | None]:
    return {"p50": _number(latency.p50), "p99": _number(latency.p99), "mean": _number(latency.mean)}


def bucket(milliseconds: float) -> str:
    """The metrics histogram bucket that holds ``milliseconds``, as ``"<= N ms"``."""
    if math.isnan(milliseconds):
        return "none"
    for bound in BUCKETS:
        if milliseconds / 1e3 <= bound:
            return f"<= {bound * 1e3:g} ms"
    return f"> {BUCKETS[-1] * 1e3:g} ms"


def _retiring(result: SimulationResult) -> list[ArmOutcome]:
    return [o for o in result.arms.values() if o.removal == "retire"]


def delete_us(result: SimulationResult) -> float:
    """Deleting finished (Live) rollouts, as the source measured it; else the end-of-run delete."""
    for name in ("duplicates-delete", result.scenario.removal):
        outcome = result.arms.get(name)
        if outcome is not None and outcome.removal == "delete":
            return outcome.removal_us("delete")
    main = result.main
    return main.final_delete_us if main is not None else math.nan


def retire_us(result: SimulationResult) -> float:
    for name in (result.scenario.removal, "duplicates-retire"):
        outcome = result.arms.get(name)
        if outcome is not None and outcome.removal == "retire":
            return outcome.removal_us("retire")
    return math.nan


def _combining(result: SimulationResult) -> dict[str, Any] | None:
    """One retire request per rollout with the store's combined removals on and off (the third phase)."""
    on, off = result.arms.get("one-per-request-combined"), result.arms.get("one-per-request-alone")
    if on is None or off is None:
        return None
    return {
        "rollouts": on.rollouts,
        "retire_us_per_rollout_combined": _number(on.removal_us("retire")),
        "retire_us_per_rollout_alone": _number(off.removal_us("retire")),
        "record_ms_combined": _latency(on.record),
        "record_ms_alone": _latency(off.record),
        "store_combined": on.end_metrics.info.get("combine_removals"),
        "store_alone": off.end_metrics.info.get("combine_removals"),
    }


def _arm(outcome: ArmOutcome) -> dict[str, Any]:
    return {
        "removal": outcome.removal,
        "rollouts": outcome.rollouts,
        "attempts_finished": outcome.attempts_finished,
        "abandoned": outcome.abandoned,
        "calls_sent": outcome.calls_sent,
        "calls_admitted": outcome.calls_admitted,
        "calls_refused": outcome.calls_refused,
        "failures_recorded": outcome.failures_recorded,
        "record_ms": _latency(outcome.record),
        "duplicates_sent": outcome.duplicates_sent,
        "duplicate_calls_admitted": outcome.duplicate_calls_admitted,
        "duplicate_calls_refused": outcome.duplicate_calls_refused,
        "late_writes": outcome.late_writes,
        "calls_after_removal": {
            "admitted": outcome.after_removal_admitted,
            "refused": outcome.after_removal_refused,
        },
        "manifests_read": outcome.manifests_read,
        "requests_resent": outcome.requests_resent,
        "manifests_with_duplicate_rows": outcome.manifests_with_duplicate_rows,
        "removal_requests": outcome.removals.requests,
        "removal_client_us_per_rollout": _number(outcome.removals.seconds / outcome.removals.ids * 1e6)
        if outcome.removals.ids
        else None,
        "retire_us_per_rollout": _number(outcome.removal_us("retire")),
        "delete_us_per_rollout": _number(outcome.removal_us("delete")),
        "final_delete_us_per_rollout": _number(outcome.final_delete_us),
        "wrong_server_sent": outcome.wrong_server_sent,
        "wrong_server_absent": outcome.wrong_server_absent,
        "ledgers_recreated": {
            "by_duplicates": outcome.recreated_by_duplicates,
            "by_abandoned_agents": outcome.recreated_by_abandoned,
            "other": outcome.recreated_other,
        },
        "never_removed": outcome.never_removed,
        "discarded_writes": outcome.discarded_writes,
        "before_end_delete": {
            "ledgers": outcome.before_delete.ledgers,
            "ledger_bytes": outcome.before_delete.ledger_bytes,
            "fence_files": outcome.before_delete.fences,
            "cached_rows": int(outcome.run_metrics.cached_rows),
            "cached_rollouts": int(outcome.run_metrics.cached_rollouts),
        },
        "ledger_bytes_left": outcome.end.ledger_bytes,
        "fence_files_left": outcome.end.fences,
        "cached_rows_left": outcome.cached_rows_left,
        "workers_scraped": outcome.workers_reached,
        "seconds": round(outcome.seconds, 1),
        "invariants": outcome.invariants(),
        "errors": outcome.errors,
    }


def summary(result: SimulationResult, *, report: Path | None = None) -> dict[str, Any]:
    """The ``--json`` object (its keys: the module docstring).

    Args:
        result: the simulation's result.
        report: where ``report.md`` was written, if it was.

    Returns:
        A JSON-ready dict.
    """
    arms = list(result.arms.values())
    scenario = result.scenario
    main = result.main
    baseline = result.arms.get("baseline")
    under_delete = result.arms.get("duplicates-delete")
    info = next((o.end_metrics.info for o in arms if o.end_metrics.info), {})
    invariants = result.invariants()
    return {
        "rollouts": scenario.rollouts,
        "calls": scenario.calls,
        "in_flight": scenario.in_flight,
        "batch": scenario.batch,
        "servers": scenario.servers,
        "workers": scenario.workers,
        "removal": scenario.removal,
        "duplicate_rollouts": scenario.duplicate_rollouts,
        "combining_rollouts": scenario.combining_rollouts,
        "ledger_bytes_left": sum(o.end.ledger_bytes for o in arms),
        "fence_files_left": sum(o.end.fences for o in arms),
        "cached_rows_left": sum(o.cached_rows_left for o in arms),
        "duplicates_sent": sum(o.duplicates_sent for o in arms),
        "ledgers_recreated": sum(o.ledgers_recreated for o in _retiring(result)),
        "ledgers_recreated_under_delete": under_delete.recreated_by_duplicates if under_delete else None,
        "discarded_writes": sum(o.discarded_writes for o in arms),
        "wrong_server_sent": sum(o.wrong_server_sent for o in arms),
        "wrong_server_absent": sum(o.wrong_server_absent for o in arms),
        "record_ms": _latency(main.record) if main else None,
        "record_ms_without_removal": _latency(baseline.record) if baseline else None,
        "retire_us_per_rollout": _number(retire_us(result)),
        "combining": _combining(result),
        "delete_us_per_rollout": _number(delete_us(result)),
        "seconds": round(result.seconds, 1),
        "ok": all(invariants.values()),
        "invariants": invariants,
        "fence_sync": info.get("fence_sync"),
        "group_commit": info.get("group_commit"),
        "date": result.started,
        "load": {"before": result.load_before, "after": result.load_after, "cores": result.cores},
        "report": str(report) if report is not None else None,
        "arms": {name: _arm(outcome) for name, outcome in result.arms.items()},
    }
