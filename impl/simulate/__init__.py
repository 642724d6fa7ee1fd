"""The simulation of ``capture-ledger simulate`` (docs/simulate.md): real ``serve`` servers, a fake inference
worker inside them, a framework driver, and the report that puts the source's figures next to ours
(R-RETIRE-1..4, R-DELETE-1..3, R-WRITE-4..6, R-STORE-7). Imports ``spec.core``, ``impl.store`` and
``impl.http``; nothing on the production path imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capture_ledger._lazy import lazy_attributes

if TYPE_CHECKING:
    from capture_ledger.impl.simulate._cluster import measure
    from capture_ledger.impl.simulate._outcome import latency
    from capture_ledger.impl.simulate._report import write_report
    from capture_ledger.impl.simulate._run import SimulationTimeoutError, load_average, simulate
    from capture_ledger.impl.simulate._scenario import Scenario
    from capture_ledger.impl.simulate._scrape import parse_metrics
    from capture_ledger.impl.simulate._servers import ServerProcess, ServerThread
    from capture_ledger.impl.simulate._summary import summary

#: Public names and the private module each is loaded from on first use.
_LAZY = {
    "measure": "capture_ledger.impl.simulate._cluster",
    "latency": "capture_ledger.impl.simulate._outcome",
    "write_report": "capture_ledger.impl.simulate._report",
    "SimulationTimeoutError": "capture_ledger.impl.simulate._run",
    "load_average": "capture_ledger.impl.simulate._run",
    "simulate": "capture_ledger.impl.simulate._run",
    "Scenario": "capture_ledger.impl.simulate._scenario",
    "parse_metrics": "capture_ledger.impl.simulate._scrape",
    "ServerProcess": "capture_ledger.impl.simulate._servers",
    "ServerThread": "capture_ledger.impl.simulate._servers",
    "summary": "capture_ledger.impl.simulate._summary",
}

__all__ = [
    "Scenario",
    "ServerProcess",
    "ServerThread",
    "SimulationTimeoutError",
    "latency",
    "load_average",
    "measure",
    "parse_metrics",
    "simulate",
    "summary",
    "write_report",
]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
