"""The kit's crash layer: any ledger's crash states, recorded, built, read back and judged (SPEC.md §Crash).

A ``Workload`` runs once through a recorder (our store's seam, strace for any ledger, a real kernel's block
log) into a ``Recording``; ``explore_points`` walks its crash points, asks a persistence model for the
images a crash there may leave, has an ``ImageReader`` read each back with a fresh handle, and judges what
it read against the crash contract (``judge``, ``CrashViolation``). Every name here is public; the modules
behind them are private.

Not guaranteed: what each recorder does not see (each says), or that a sampled space without a violation
has none.
"""

from __future__ import annotations

from capture_ledger.spec.kit.crash._exploration import CrashExploration, ImageReader, explore_points
from capture_ledger.spec.kit.crash._judgement import (
    Counterexamples,
    CrashPoint,
    CrashViolation,
    crash_points,
    crash_prefixes,
    images_to_judge,
    judge,
    show_bytes,
    spans_at,
    violations_of,
)
from capture_ledger.spec.kit.crash._observation import Observation
from capture_ledger.spec.kit.crash._pictures import (
    MatrixSource,
    matrix_svg,
    matrix_table,
    op_label,
    timeline_svg,
)
from capture_ledger.spec.kit.crash._readback import ReadBack
from capture_ledger.spec.kit.crash._reader import TargetReader
from capture_ledger.spec.kit.crash._report import study_exit_code, study_summary, write_study_report
from capture_ledger.spec.kit.crash._study import TargetCell, study_targets
from capture_ledger.spec.kit.crash._trace import (
    Configured,
    Fault,
    FaultAt,
    Invoke,
    Pause,
    Recording,
    Return,
    TargetConfig,
    TraceEvent,
    Workload,
    run_operation,
)
from capture_ledger.spec.kit.crash._workloads import SMALL_WORKLOADS, WORKLOADS

__all__ = [
    "SMALL_WORKLOADS",
    "WORKLOADS",
    "Configured",
    "Counterexamples",
    "CrashExploration",
    "CrashPoint",
    "CrashViolation",
    "Fault",
    "FaultAt",
    "ImageReader",
    "Invoke",
    "MatrixSource",
    "Observation",
    "Pause",
    "ReadBack",
    "Recording",
    "Return",
    "TargetCell",
    "TargetConfig",
    "TargetReader",
    "TraceEvent",
    "Workload",
    "crash_points",
    "crash_prefixes",
    "explore_points",
    "images_to_judge",
    "judge",
    "matrix_svg",
    "matrix_table",
    "op_label",
    "run_operation",
    "show_bytes",
    "spans_at",
    "study_exit_code",
    "study_summary",
    "study_targets",
    "timeline_svg",
    "violations_of",
    "write_study_report",
]
