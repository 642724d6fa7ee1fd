"""capture_ledger.spec.kit.crash.strace."""

from __future__ import annotations

from capture_ledger.spec.kit.crash.strace._driver import coroutine_ledger
from capture_ledger.spec.kit.crash.strace._parser import parse_trace
from capture_ledger.spec.kit.crash.strace._plan import RunPlan
from capture_ledger.spec.kit.crash.strace._recorder import (
    PARK_DELAY,
    Target,
    TraceError,
    record_positions,
    record_target,
    supported,
)
from capture_ledger.spec.kit.crash.strace._simulation import Marker
from capture_ledger.spec.kit.crash.strace._syscalls import read_syscalls, str_arg
from capture_ledger.spec.kit.crash.strace._tracing import TraceRun, run_traced, tracing_problem

__all__ = [
    "PARK_DELAY",
    "Marker",
    "RunPlan",
    "Target",
    "TraceError",
    "TraceRun",
    "coroutine_ledger",
    "parse_trace",
    "read_syscalls",
    "record_positions",
    "record_target",
    "run_traced",
    "str_arg",
    "supported",
    "tracing_problem",
]
