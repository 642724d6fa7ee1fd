"""Reading ``/metrics`` from every worker of a server (R-STORE-7; the metrics route of docs/http.md).

The workers of one ``serve`` share one listening socket, so a scrape reaches whichever worker accepts the
connection, and each worker reports only its own registry and store handle. ``scrape_every_worker``
therefore sends rounds of concurrent scrapes, each on a fresh connection, and keeps one answer per worker
process (told apart by ``capture_ledger_server_worker_info{pid}``) until it has one from each of the
server's workers, or gives up after ``rounds`` rounds and reports which it reached. A scrape also makes
the answering worker sweep its cache of rollouts other workers removed (``sweep_cache``), so the cached
rows it reports belong to rollouts that still exist.

``WorkerMetrics`` keeps the figures the simulation uses; ``add`` sums them over workers.
Not guaranteed: that every worker is reached (the kernel decides who accepts; the result says).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import aiohttp
from capture_ledger.impl.http import METRICS_ROUTE, PREFIX
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["WorkerMetrics", "parse_metrics", "scrape_every_worker"]


@dataclass(kw_only=True, slots=True)
class WorkerMetrics:
    """One worker's figures (or their sum over workers).

    Attributes:
        pids: the worker processes these figures come from.
        seconds: total seconds per ledger operation (the latency histogram's sum).
        calls: calls per ledger operation (the histogram's count).
        ids: IDs per (operation, outcome) of retire and delete.
        cached_rows: rows in the store handles' caches (after the sweep).
        cached_rollouts: rollouts in those caches.
        discarded_writes: late writes a fence discarded.
        info: the store's resolved configuration (``fence_sync``, ``group_commit``), from one worker.
    """

    pids: set[int] = field(default_factory=set)
    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, float] = field(default_factory=dict)
    ids: dict[tuple[str, str], float] = field(default_factory=dict)
    cached_rows: float = 0.0
    cached_rollouts: float = 0.0
    discarded_writes: float = 0.0
    info: dict[str, str] = field(default_factory=dict)

    def add(self, other: WorkerMetrics) -> WorkerMetrics:
        """The sum of two sets of figures (``info`` from either)."""
        total = WorkerMetrics(
            pids=self.pids | other.pids,
            cached_rows=self.cached_rows + other.cached_rows,
            cached_rollouts=self.cached_rollouts + other.cached_rollouts,
            discarded_writes=self.discarded_writes + other.discarded_writes,
            info={**other.info, **self.info},
        )
        for mine, theirs, into in (
            (self.seconds, other.seconds, total.seconds),
            (self.calls, other.calls, total.calls),
        ):
            for key in mine.keys() | theirs.keys():
                into[key] = mine.get(key, 0.0) + theirs.get(key, 0.0)
        for pair in self.ids.keys() | other.ids.keys():
            total.ids[pair] = self.ids.get(pair, 0.0) + other.ids.get(pair, 0.0)
        return total


def parse_metrics(text: str) -> WorkerMetrics:
    """The figures of one scrape in the Prometheus text format.

    Args:
        text: what ``GET .../metrics`` answered.

    Returns:
        The worker's figures.
    """
    result = WorkerMetrics()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, float(sample.value)
            if name == "capture_ledger_server_worker_info":
                result.pids.add(int(labels["pid"]))
            elif name == "capture_ledger_operation_seconds_sum":
                result.seconds[labels["operation"]] = value
            elif name == "capture_ledger_operation_seconds_count":
                result.calls[labels["operation"]] = value
            elif name == "capture_ledger_removed_ids_total":
                result.ids[(labels["operation"], labels["outcome"])] = value
            elif name == "capture_ledger_store_cached_rows":
                result.cached_rows = value
            elif name == "capture_ledger_store_cached_rollouts":
                result.cached_rollouts = value
            elif name == "capture_ledger_store_late_writes_discarded_total":
                result.discarded_writes = value
            elif name == "capture_ledger_store_info":
                result.info = dict(labels)
    return result


async def _scrape_once(url: str, token: str) -> WorkerMetrics:
    connector = aiohttp.TCPConnector(force_close=True)  # a fresh connection: any worker may accept it
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        headers = {"Authorization": f"Bearer {token}"}
        async with session.get(f"{url}{PREFIX}{METRICS_ROUTE}", headers=headers) as response:
            response.raise_for_status()
            return parse_metrics(await response.text())


async def scrape_every_worker(
    url: str, *, token: str, workers: int, rounds: int = 50
) -> tuple[WorkerMetrics, int]:
    """Scrape ``url`` until each of its ``workers`` worker processes has answered once.

    Args:
        url: the server's root URL.
        token: its bearer token.
        workers: how many worker processes it has.
        rounds: rounds of ``2 * workers`` concurrent scrapes at most.

    Returns:
        The figures summed over the workers reached (one answer each), and how many were reached.
    """
    reached: dict[int, WorkerMetrics] = {}
    for _ in range(rounds):
        answers = await asyncio.gather(*(_scrape_once(url, token) for _ in range(2 * workers)))
        for answer in answers:
            for pid in answer.pids:
                reached.setdefault(pid, answer)
        if len(reached) >= workers:
            break
    total = WorkerMetrics()
    for answer in reached.values():
        total = total.add(answer)
    return total, len(reached)
