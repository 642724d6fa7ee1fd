"""capture_ledger.impl.study.interleave."""

from __future__ import annotations

from capture_ledger.impl.study.interleave._deepening import find_counterexample
from capture_ledger.impl.study.interleave._explore import (
    ChoiceSchedule,
    Run,
    Scenario,
    ScheduleExploration,
    ThreadSchedule,
    explore,
    run_schedule,
)
from capture_ledger.impl.study.interleave._histories import phased_client, random_operations
from capture_ledger.impl.study.interleave._scenarios import (
    EXTRA,
    GUARDS,
    SCENARIOS,
    SLOW,
    STRIPES,
    store_opener,
)
from capture_ledger.impl.study.interleave._scheduling import (
    Controller,
    GatherSchedule,
    PauseSchedule,
    Schedule,
    SchedulingFileSystem,
    pause_held,
    run_thread,
)

__all__ = [
    "EXTRA",
    "GUARDS",
    "SCENARIOS",
    "SLOW",
    "STRIPES",
    "ChoiceSchedule",
    "Controller",
    "GatherSchedule",
    "PauseSchedule",
    "Run",
    "Scenario",
    "Schedule",
    "ScheduleExploration",
    "SchedulingFileSystem",
    "ThreadSchedule",
    "explore",
    "find_counterexample",
    "pause_held",
    "phased_client",
    "random_operations",
    "run_schedule",
    "run_thread",
    "store_opener",
]
