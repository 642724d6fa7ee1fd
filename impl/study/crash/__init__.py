"""capture_ledger.impl.study.crash."""

from __future__ import annotations

from capture_ledger.impl.study.crash._configs import CONFIGS, EXPECTED, OTHER_GUARDS, SMALL, STEPS
from capture_ledger.impl.study.crash._crash import explore
from capture_ledger.impl.study.crash._crosscheck import cross_check, store_target
from capture_ledger.impl.study.crash._freed import freed_by_setup
from capture_ledger.impl.study.crash._observation import (
    READ_BUDGET,
    ImageObserver,
    OpenStore,
    default_opener,
    observe_directory,
)
from capture_ledger.impl.study.crash._recording import (
    RecordingFileSystem,
    StoreConfig,
    lay_baseline,
    operation_runner,
    record,
    record_each,
    run_paused,
)
from capture_ledger.impl.study.crash._report import Study, render_markdown, study, write_report

__all__ = [
    "CONFIGS",
    "EXPECTED",
    "OTHER_GUARDS",
    "READ_BUDGET",
    "SMALL",
    "STEPS",
    "ImageObserver",
    "OpenStore",
    "RecordingFileSystem",
    "StoreConfig",
    "Study",
    "cross_check",
    "default_opener",
    "explore",
    "freed_by_setup",
    "lay_baseline",
    "observe_directory",
    "operation_runner",
    "record",
    "record_each",
    "render_markdown",
    "run_paused",
    "store_target",
    "study",
    "write_report",
]
