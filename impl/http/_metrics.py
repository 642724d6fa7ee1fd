"""Metrics of a served ledger in the Prometheus text format (SPEC.md R-HTTP-1, the metrics route).

``LedgerMetrics`` owns one ``prometheus_client.CollectorRegistry`` per app (never the global one, so two
apps in one process, or one test after another, do not share counts). It exposes:

- ``capture_ledger_operation_seconds{operation=...}``: a latency histogram of every ledger call made
  through ``LedgerMetrics.instrument(ledger)`` — the control routes' ``manifest``, ``retire`` and
  ``delete``, and ``record`` when the hosting model server writes through the same instrumented ledger;
- ``capture_ledger_removed_ids_total{operation, outcome}``: IDs reported ``removed`` or ``absent``;
- the store's statistics, read at scrape time from ``ledger.statistics()`` when the ledger has it: every
  numeric field ``f`` of the record becomes ``capture_ledger_store_f`` (a gauge for sizes, whose names
  start with ``cached_`` or end in ``_size``; a counter ``..._total`` otherwise), and the cache sizes
  also appear as the source's ``capture_ledger_cache_size{cache="ledger_rollouts"|"ledger_rows"}``;
  its text and boolean fields (the resolved ``fence_sync``, ``group_commit``) become the labels of
  ``capture_ledger_store_info{...} 1``;
- before the statistics are read, the ledger's ``sweep_cache()`` when it has one: the handle drops the
  cached rows of rollouts that other handles (other workers) removed, so ``cached_rows`` counts rows of
  rollouts that still exist (R-STORE-7);
- ``capture_ledger_server_worker_info{pid=...}``: which worker process answered the scrape.

Not guaranteed: metric values across workers (each worker process has its own registry and its own
store handle, so a scrape reports, and sweeps, the one worker that answered it; docs/simulate.md says how
to reach them all); a ``record`` histogram when nothing records through the instrumented ledger (the
control plane itself never records); exact bucket boundaries.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import attrs
from capture_ledger.spec.core.protocol import OPERATIONS
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = [
    "BUCKETS",
    "CONTENT_TYPE",
    "OPERATIONS",
    "InstrumentedLedger",
    "LedgerMetrics",
    "statistics_fields",
    "statistics_labels",
]

#: The media type of the Prometheus text format served by the metrics route.
CONTENT_TYPE: str = CONTENT_TYPE_LATEST
# OPERATIONS, the operations timed, is the protocol's one list (spec.core.protocol), re-exported.
#: The latency histogram's bucket bounds, in seconds. Appends and directory syncs take 0.1 to 0.5 ms on
#: local disk (docs/architecture.md §Facts); a batch of 4096 takes more.
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


def statistics_fields(record: object) -> dict[str, Any]:
    """The numeric fields of a statistics record (a dataclass, attrs class, named tuple or mapping).

    Args:
        record: what ``ledger.statistics()`` returned.

    Returns:
        Field name to value for the fields whose values are ``int`` or ``float`` (not ``bool``); a field
        that is itself such a record maps to a ``dict[str, float]`` of its numeric fields.
    """
    fields: dict[str, Any] = {}
    for name, value in _fields(record).items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            fields[str(name)] = float(value)
        elif not isinstance(value, str | bytes) and (nested := _numbers(value)):
            fields[str(name)] = nested
    return fields


def statistics_labels(record: object) -> dict[str, str]:
    """The text and boolean fields of a statistics record, as label values (``True`` -> ``"true"``).

    Args:
        record: what ``ledger.statistics()`` returned.

    Returns:
        Field name to label value for the fields whose values are ``str`` or ``bool``.
    """
    labels: dict[str, str] = {}
    for name, value in _fields(record).items():
        if isinstance(value, bool):
            labels[str(name)] = "true" if value else "false"
        elif isinstance(value, str):
            labels[str(name)] = value
    return labels


def _fields(record: object) -> Mapping[str, Any]:
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    if attrs.has(type(record)):
        return attrs.asdict(record, recurse=False)  # type: ignore[arg-type]
    if hasattr(record, "_asdict"):
        result: Mapping[str, Any] = record._asdict()
        return result
    if isinstance(record, Mapping):
        return record
    return {}


def _numbers(record: object) -> dict[str, float]:
    return {
        str(k): float(v)
        for k, v in _fields(record).items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def _is_size(name: str) -> bool:
    return name.startswith("cached_") or name.endswith("_size")


class _StoreCollector:
    """Reads the store's statistics at scrape time (they are the store's own counts, not ours)."""

    def __init__(self, ledger: object) -> None:
        self._ledger = ledger

    def collect(self) -> Iterator[Metric]:
        yield _worker_info()
        sweep = getattr(self._ledger, "sweep_cache", None)
        if callable(sweep) and not inspect.iscoroutinefunction(sweep):
            sweep()  # rows of rollouts other workers removed are not counted as cached
        statistics = getattr(self._ledger, "statistics", None)
        if not callable(statistics) or inspect.iscoroutinefunction(statistics):
            return
        record = statistics()
        fields = statistics_fields(record)
        labels = statistics_labels(record)
        if labels:
            info = GaugeMetricFamily(
                "capture_ledger_store_info",
                "The store's configuration as resolved (e.g. fence_sync, group_commit).",
                labels=sorted(labels),
            )
            info.add_metric([labels[name] for name in sorted(labels)], 1.0)
            yield info
        for name, value in sorted(fields.items()):
            metric_name = f"capture_ledger_store_{name}"
            documentation = f"The store's statistic {name!r}."
            if isinstance(value, dict):  # e.g. calls per operation: one counter with a label
                label = name[:-1] if name.endswith("s") else "name"
                family = CounterMetricFamily(metric_name, documentation, labels=[label])
                for key, number in sorted(value.items()):
                    family.add_metric([key], number)
                yield family
            elif _is_size(name):
                yield _gauge(metric_name, documentation, value)
            else:
                counter = CounterMetricFamily(metric_name, documentation)
                counter.add_metric([], value)
                yield counter
        caches = {"ledger_rollouts": fields.get("cached_rollouts"), "ledger_rows": fields.get("cached_rows")}
        if any(v is not None for v in caches.values()):
            sizes = GaugeMetricFamily(
                "capture_ledger_cache_size",
                "Entries in the store's row cache (the source's cache.size).",
                labels=["cache"],
            )
            for cache, size in caches.items():
                if size is not None:
                    sizes.add_metric([cache], size)
            yield sizes


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(name, documentation)
    gauge.add_metric([], value)
    return gauge


def _worker_info() -> GaugeMetricFamily:
    info = GaugeMetricFamily(
        "capture_ledger_server_worker_info", "The worker process that answered this scrape.", labels=["pid"]
    )
    info.add_metric([str(os.getpid())], 1.0)
    return info


class LedgerMetrics:
    """The metrics of one served ledger, in a registry of their own."""

    def __init__(self, ledger: object) -> None:
        """Create the registry and its metrics.

        Args:
            ledger: the served ledger; its ``statistics()``, if any, is read at every scrape.
        """
        self.registry = CollectorRegistry(auto_describe=True)
        self._seconds = Histogram(
            "capture_ledger_operation_seconds",
            "Latency of ledger operations, including failed calls.",
            ["operation"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self._ids = Counter(
            "capture_ledger_removed_ids",
            "IDs passed to retire and delete, by what the ledger reported.",
            ["operation", "outcome"],
            registry=self.registry,
        )
        for operation in OPERATIONS:
            self._seconds.labels(operation)  # present (at zero) before the first call
        self.registry.register(_StoreCollector(ledger))

    def observe(self, operation: str, seconds: float) -> None:
        """Record one call's latency."""
        self._seconds.labels(operation).observe(seconds)

    def count_removal(self, operation: str, result: Mapping[str, list[str]]) -> None:
        """Count the IDs of a retire or delete result by outcome."""
        for outcome in ("removed", "absent"):
            if result[outcome]:
                self._ids.labels(operation, outcome).inc(len(result[outcome]))

    def timed(self, operation: str, method: Callable[..., Any], *args: Any) -> Any:
        """Call ``method(*args)`` and record its latency; a coroutine result is timed until it completes.

        Returns:
            What ``method`` returned, or, when that is awaitable, an awaitable of its result.
        """
        start = time.perf_counter()
        try:
            result = method(*args)
        except BaseException:
            self.observe(operation, time.perf_counter() - start)
            raise
        if inspect.isawaitable(result):
            return self._finish(operation, start, result)
        self.observe(operation, time.perf_counter() - start)
        return result

    async def _finish(self, operation: str, start: float, pending: Awaitable[Any]) -> Any:
        try:
            return await pending
        finally:
            self.observe(operation, time.perf_counter() - start)

    def instrument(self, ledger: Any) -> InstrumentedLedger:
        """A ledger whose calls are timed into this registry; give it to the code that records."""
        return InstrumentedLedger(ledger, self)

    def render(self) -> bytes:
        """The registry in the Prometheus text format (``CONTENT_TYPE``)."""
        return generate_latest(self.registry)


class InstrumentedLedger:
    """A ``CaptureLedger`` that forwards every call to ``ledger`` and times it (sync or async alike)."""

    def __init__(self, ledger: Any, metrics: LedgerMetrics) -> None:
        self.ledger = ledger
        self._metrics = metrics

    def record(self, rollout_id: str, row: Mapping[str, Any]) -> Any:
        """Forward ``record``."""
        return self._metrics.timed("record", self.ledger.record, rollout_id, row)

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> Any:
        """Forward ``record_failure``."""
        method = self.ledger.record_failure
        return self._metrics.timed("record_failure", method, rollout_id, model_call_id, reason)

    def admit(self, rollout_id: str, model_call_id: str) -> Any:
        """Forward ``admit``."""
        return self._metrics.timed("admit", self.ledger.admit, rollout_id, model_call_id)

    def manifest(self, rollout_id: str) -> Any:
        """Forward ``manifest``."""
        return self._metrics.timed("manifest", self.ledger.manifest, rollout_id)

    def has_rows(self, rollout_id: str) -> Any:
        """Forward ``has_rows``."""
        return self._metrics.timed("has_rows", self.ledger.has_rows, rollout_id)

    def retire(self, rollout_ids: Any) -> Any:
        """Forward ``retire``."""
        return self._metrics.timed("retire", self.ledger.retire, rollout_ids)

    def delete(self, rollout_ids: Any) -> Any:
        """Forward ``delete``."""
        return self._metrics.timed("delete", self.ledger.delete, rollout_ids)
