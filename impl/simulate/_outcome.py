"""What an arm of the simulation measured, the figures derived from it, and the invariants it must meet
(R-RETIRE-1..4, R-DELETE-1..3, R-WRITE-4..6, R-STORE-7).

``ArmOutcome`` is filled by the driver (``impl.simulate``); everything else here is computed from
it: latency percentiles, microseconds per removed rollout (from the servers' own histograms, summed over
every worker), and the invariants the test suite asserts on the small scenario:

- nothing left: 0 ledger bytes, 0 fence files, 0 cached rows after the end-of-run delete, in every arm;
- retire re-creates nothing: 0 ledgers re-created in an arm that retires;
- the wrong server knows nothing: every ID sent to a server with another directory is ``absent``;
- every duplicate counted: each duplicate execution ran all its calls, and each call was either captured
  or refused at admission;
- every worker of every server answered the metrics scrape, and nothing failed (no error answer, no
  manifest missing a call of its own attempt, no held write that timed out).

Not guaranteed: comparable absolute times between machines or loads (the report states both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from capture_ledger.impl.simulate._cluster import DirectoryState
from capture_ledger.impl.simulate._removals import RemovalRequests
from capture_ledger.impl.simulate._scrape import WorkerMetrics

__all__ = ["ArmOutcome", "Latency", "latency", "us_per_id"]


@dataclass(kw_only=True, frozen=True, slots=True)
class Latency:
    """Milliseconds: percentiles and mean of a set of durations."""

    count: int
    p50: float
    p99: float
    mean: float


def latency(values: Sequence[float]) -> Latency:
    """The percentiles (nearest rank) and mean of ``values``; NaN for none."""
    if not values:
        return Latency(count=0, p50=math.nan, p99=math.nan, mean=math.nan)
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    return Latency(count=len(ordered), p50=rank(0.50), p99=rank(0.99), mean=sum(ordered) / len(ordered))


def us_per_id(seconds: float, ids: float) -> float:
    """Microseconds per ID, NaN for no IDs."""
    return seconds / ids * 1e6 if ids else math.nan


@dataclass(kw_only=True, slots=True)
class ArmOutcome:
    """What one arm did and what it left."""

    name: str
    removal: str | None
    rollouts: int
    calls: int
    servers: int
    workers: int
    attempts_finished: int = 0
    abandoned: int = 0
    calls_sent: int = 0
    calls_admitted: int = 0
    calls_refused: int = 0
    failures_recorded: int = 0
    record_ms: list[float] = field(default_factory=list)
    duplicates_sent: int = 0
    duplicates_finished: int = 0
    duplicate_calls_admitted: int = 0
    duplicate_calls_refused: int = 0
    late_writes: int = 0
    late_writes_timed_out: int = 0
    after_removal_admitted: int = 0
    after_removal_refused: int = 0
    requests_resent: int = 0
    manifests_read: int = 0
    manifests_incomplete: int = 0
    manifests_with_duplicate_rows: int = 0
    removals: RemovalRequests = field(default_factory=RemovalRequests)
    wrong_server_sent: int = 0
    wrong_server_absent: int = 0
    recreated_by_duplicates: int = 0
    recreated_by_abandoned: int = 0
    recreated_other: int = 0
    never_removed: int = 0
    run_metrics: WorkerMetrics = field(default_factory=WorkerMetrics)
    end_metrics: WorkerMetrics = field(default_factory=WorkerMetrics)
    workers_reached: int = 0
    before_delete: DirectoryState = field(
        default_factory=lambda: DirectoryState(ledgers=0, ledger_bytes=0, fences=0, ledger_names=())
    )
    end: DirectoryState = field(
        default_factory=lambda: DirectoryState(ledgers=0, ledger_bytes=0, fences=0, ledger_names=())
    )
    final_delete: RemovalRequests = field(default_factory=RemovalRequests)
    samples: list[tuple[float, int, int, int]] = field(default_factory=list)
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------------------------ derived
    @property
    def ledgers_recreated(self) -> int:
        """Ledgers that exist after their rollout was removed, before the end-of-run delete."""
        return self.recreated_by_duplicates + self.recreated_by_abandoned + self.recreated_other

    @property
    def record(self) -> Latency:
        """The ``record`` calls' own durations, as the fake inference worker measured them."""
        return latency(self.record_ms)

    def removal_us(self, operation: str) -> float:
        """Server-side microseconds per ID of ``operation`` during the run (every worker's histogram)."""
        metrics = self.run_metrics
        ids = sum(v for (op, _), v in metrics.ids.items() if op == operation)
        return us_per_id(metrics.seconds.get(operation, 0.0), ids)

    @property
    def final_delete_us(self) -> float:
        """Server-side microseconds per ID of the end-of-run delete."""
        run, end = self.run_metrics, self.end_metrics
        seconds = end.seconds.get("delete", 0.0) - run.seconds.get("delete", 0.0)
        ids = sum(v for (op, _), v in end.ids.items() if op == "delete")
        ids -= sum(v for (op, _), v in run.ids.items() if op == "delete")
        return us_per_id(seconds, ids)

    @property
    def cached_rows_left(self) -> int:
        """Rows still cached by any worker after the end-of-run delete (and each worker's sweep)."""
        return int(self.end_metrics.cached_rows)

    @property
    def discarded_writes(self) -> int:
        """Late writes discarded by a fence, summed over every worker's store handle."""
        return int(self.end_metrics.discarded_writes)

    def invariants(self) -> dict[str, bool]:
        """Each invariant of the module docstring, by name."""
        answered = self.duplicate_calls_admitted + self.duplicate_calls_refused
        checks = {
            "no ledger bytes left": self.end.ledger_bytes == 0 and self.end.ledgers == 0,
            "no fence files left": self.end.fences == 0,
            "no cached rows left": self.cached_rows_left == 0,
            "wrong server reports absent": self.wrong_server_absent == self.wrong_server_sent,
            "every duplicate counted": self.duplicates_finished == self.duplicates_sent
            and answered == self.duplicates_sent * self.calls,
            "every worker scraped": self.workers_reached == self.servers * self.workers,
            "every manifest complete": self.manifests_incomplete == 0,
            "no held write timed out": self.late_writes_timed_out == 0,
            "no errors": not self.errors and self.never_removed == 0,
        }
        if self.removal == "retire":
            checks["no ledger re-created under retire"] = self.ledgers_recreated == 0
        return checks
