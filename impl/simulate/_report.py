"""``report.md``: what a simulation measured, the source's figures side by side with ours, the invariants
and the pictures (docs/simulate.md; docs/source.md §What it measured).

``write_report(result, folder, command=...)`` writes ``folder/report.md`` and the pictures of
``impl.simulate`` next to it; when matplotlib is missing, the report says so where the pictures
would be. The report states the command, the date, the machine's cores and load before and after, and
how long the run took, because every time-based figure depends on them.

Not guaranteed: the wording; the figures themselves vary between runs and machines (the invariants do not).
"""

from __future__ import annotations

import math
from pathlib import Path

from capture_ledger.impl.simulate._outcome import ArmOutcome
from capture_ledger.impl.simulate._pictures import SOURCE_RECREATED, PicturesUnavailableError, draw
from capture_ledger.impl.simulate._run import SimulationResult
from capture_ledger.impl.simulate._summary import SOURCE, bucket, delete_us, retire_us

__all__ = ["write_report"]


def _ms(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.2f} ms"


def _us(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:,.0f} µs"


def _combining(result: SimulationResult) -> list[tuple[str, str, str]]:
    """The third phase: one retire request per rollout, the store's combined removals on and off."""
    on, off = result.arms.get("one-per-request-combined"), result.arms.get("one-per-request-alone")
    if on is None or off is None:
        return []
    per_on, per_off = on.removal_us("retire"), off.removal_us("retire")
    ratio = "—" if math.isnan(per_on) or math.isnan(per_off) or per_on == 0 else f"{per_off / per_on:.2f}×"
    return [
        (
            "retire, one request per rollout, per rollout (server side), combining on / off",
            "— (the source's first step; not measured there)",
            f"{_us(per_on)} / {_us(per_off)} (off / on: {ratio}; {on.rollouts:,} rollouts each)",
        ),
        (
            "`ledger.record` p50, one request per rollout, combining on / off",
            "—",
            f"{_ms(on.record.p50)} / {_ms(off.record.p50)}",
        ),
    ]


def _comparison(result: SimulationResult) -> list[str]:
    s = result.scenario
    main, baseline = result.main, result.arms.get("baseline")
    under_delete, under_retire = result.arms.get("duplicates-delete"), result.arms.get("duplicates-retire")
    arms = list(result.arms.values())
    rows = [
        (
            "rollouts × calls, in flight, batch",
            "20,000 × 4, 1,024, 256",
            f"{s.rollouts:,} × {s.calls}, {s.in_flight:,}, {s.batch}",
        ),
        ("ledger bytes left after removal", "0", f"{sum(o.end.ledger_bytes for o in arms):,}"),
        (
            "fence files left after the end-of-run delete",
            "— (not reported)",
            f"{sum(o.end.fences for o in arms):,}",
        ),
        ("cached rows left", "0", f"{sum(o.cached_rows_left for o in arms):,}"),
    ]
    if baseline is not None:
        bytes_left = baseline.before_delete.ledger_bytes / 1e6
        cached = int(baseline.run_metrics.cached_rollouts)
        rows += [
            (
                "without removal: ledger bytes",
                "72 MB",
                f"{bytes_left:.1f} MB ({baseline.before_delete.ledgers:,} ledgers)",
            ),
            (
                "without removal: cached rollouts",
                "20,000",
                f"{cached:,} (each worker's cache holds at most 2,048 rollouts)",
            ),
        ]
    if main is not None and baseline is not None:
        on, off = main.record, baseline.record
        rows += [
            ("`ledger.record` mean, removal on / off", "7.2 / 7.0 ms", f"{_ms(on.mean)} / {_ms(off.mean)}"),
            ("`ledger.record` p50, removal on / off", "—", f"{_ms(on.p50)} / {_ms(off.p50)}"),
            (
                "`ledger.record` p99 histogram bucket, on / off",
                "the same bucket",
                f"{bucket(on.p99)} / {bucket(off.p99)} (p99 {_ms(on.p99)} / {_ms(off.p99)})",
            ),
        ]
    rows += [
        ("retire, per rollout (server side)", "about 65 µs", _us(retire_us(result))),
        ("delete of finished rollouts, per rollout (server side)", "about 41 µs", _us(delete_us(result))),
    ]
    rows += _combining(result)
    if under_delete is not None and under_retire is not None:
        source = f"{SOURCE_RECREATED['duplicates']:,} duplicates of {SOURCE['duplicate_rollouts']:,} rollouts"
        rows += [
            (
                "ledgers re-created by duplicates, deleting finished rollouts",
                f"345 ({source})",
                f"{under_delete.recreated_by_duplicates:,} ({under_delete.duplicates_sent:,} duplicates of "
                f"{under_delete.rollouts:,} rollouts)",
            ),
            (
                "ledgers re-created by duplicates, retiring finished rollouts",
                "0",
                f"{under_retire.recreated_by_duplicates:,} ({under_retire.duplicates_sent:,} duplicates)",
            ),
        ]
    lines = ["| figure | the source | this run |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return lines


def _arms(result: SimulationResult) -> list[str]:
    lines = [
        "| arm | removal | attempts (abandoned) | calls admitted / refused | record p50 / p99 / mean | "
        "duplicates | re-created (dup. / aband.) | discarded writes | wrong server absent | "
        "before the end delete: ledgers, MB, fences, cached rows | left: bytes, fences, cached rows "
        "| seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, o in result.arms.items():
        r = o.record
        before = o.before_delete
        lines.append(
            f"| {name} | {o.removal or 'none'} | {o.attempts_finished + o.abandoned:,} ({o.abandoned:,}) | "
            f"{o.calls_admitted:,} / {o.calls_refused:,} | {_ms(r.p50)} / {_ms(r.p99)} / {_ms(r.mean)} | "
            f"{o.duplicates_sent:,} | {o.recreated_by_duplicates:,} / {o.recreated_by_abandoned:,} | "
            f"{o.discarded_writes:,} | {o.wrong_server_absent:,} of {o.wrong_server_sent:,} | "
            f"{before.ledgers:,}, {before.ledger_bytes / 1e6:.1f}, {before.fences:,}, "
            f"{int(o.run_metrics.cached_rows):,} | {o.end.ledger_bytes:,}, {o.end.fences:,}, "
            f"{o.cached_rows_left:,} | {o.seconds:.0f} |"
        )
    return lines


def _costs(outcome: ArmOutcome) -> str:
    client = outcome.removals.seconds / outcome.removals.ids * 1e6 if outcome.removals.ids else math.nan
    return (
        f"- {outcome.name}: {outcome.removals.requests:,} removal requests for {outcome.removals.ids:,} IDs; "
        f"server side {_us(outcome.removal_us(outcome.removal or 'delete'))} per ID, client side (the whole "
        f"request) {_us(client)} per ID; the end-of-run delete {_us(outcome.final_delete_us)} per ID."
    )


def write_report(result: SimulationResult, folder: Path, *, command: str) -> Path:
    """Write ``report.md`` and its pictures into ``folder``.

    Args:
        result: the simulation's result.
        folder: the report's folder (created if missing).
        command: the command line that ran the simulation, quoted in the report.

    Returns:
        The path of ``report.md``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    invariants = result.invariants()
    info = next((o.end_metrics.info for o in result.arms.values() if o.end_metrics.info), {})
    try:
        pictures = [f"![{name.removesuffix('.png')}]({name})" for name in draw(result, folder)]
    except PicturesUnavailableError as missing:
        pictures = [f"No pictures: {missing}."]
    s = result.scenario
    lines = [
        "# capture-ledger simulate",
        "",
        f"- command: `{command}`",
        f"- date: {result.started}; duration {result.seconds:.0f} s; {result.cores} cores; load average "
        f"(1, 5, 15 min) {result.load_before} before, {result.load_after} after",
        f"- servers per arm: {s.servers} `capture-ledger serve`, {s.workers} worker(s) each, each server "
        f"with its own lineage directory; store `fence_sync={info.get('fence_sync', '?')}`, "
        f"`group_commit={info.get('group_commit', '?')}`",
        f"- scenario: {s.rollouts:,} rollouts of {s.calls} calls, {s.in_flight:,} in flight, removal "
        f"batches of {s.batch} (or after {s.flush_seconds:g} s), {s.duplicates:.0%} sent twice, "
        f"{s.abandon:.0%} abandoned, {s.failures:.0%} of calls failing, {s.wrong_server:.0%} also sent to "
        f"the wrong server, seed {s.seed}",
        "",
        "## The source's figures next to ours",
        "",
        *_comparison(result),
        "",
        "Time-based figures depend on the machine and its load (above); the source measured on its own "
        "workstation. Counts do not.",
        "",
        "## Invariants",
        "",
        *[f"- {'holds' if holds else '**BROKEN**'}: {name}" for name, holds in invariants.items()],
        "",
        "## Pictures",
        "",
        *pictures,
        "",
        "## Every arm",
        "",
        *_arms(result),
        "",
        "Removal cost:",
        "",
        *[_costs(o) for o in result.arms.values() if o.removal is not None],
        "",
    ]
    errors = [f"- {name}: {error}" for name, o in result.arms.items() for error in o.errors]
    if errors:
        lines += ["## Errors", "", *errors, ""]
    path = folder / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
