"""The kit's crash layer: any ledger's crash states, recorded, built, read back and judged (SPEC.md §Crash).

A ``Workload`` runs once through a recorder (our store's seam, strace for any ledger, a real kernel's block
log) into a ``Recording``; ``explore_points`` walks its crash points, asks a persistence model for the
images a crash there may leave, has an ``ImageReader`` read each back with a fresh handle, and judges what
it read against the crash contract (``judge``, ``CrashViolation``). ``CrashStudy`` is the matrix every
study fills (rows × workloads × models, ``CrashCell``), with the Markdown sections and pictures both crash
reports share; ``study_targets`` is the study of any ledger traced with strace (``TargetStudy``), and
``check_crashes`` its library form, the kit's third layer, answering a ``CrashVerdict``. Every name here is
public; the modules behind them are private.

Not guaranteed: what each recorder does not see (each says), or that a sampled space without a violation
has none.
"""

from __future__ import annotations

from capture_ledger.spec.kit.crash._check import CrashVerdict, check_crashes, target_name
from capture_ledger.spec.kit.crash._exploration import (
    CrashExploration,
    ImageReader,
    explore_points,
    violation_of,
)
from capture_ledger.spec.kit.crash._judgement import (
    Counterexamples,
    CrashPoint,
    CrashViolation,
    crash_points,
    crash_prefixes,
    images_to_judge,
    judge,
    judged_clauses,
    show_bytes,
    spans_at,
    violations_of,
)
from capture_ledger.spec.kit.crash._matrix import CrashCell, CrashStudy
from capture_ledger.spec.kit.crash._observation import Observation
from capture_ledger.spec.kit.crash._pictures import (
    MatrixSource,
    matrix_svg,
    matrix_table,
    op_label,
    timeline_svg,
)
from capture_ledger.spec.kit.crash._positions import (
    FAULT_KINDS,
    describe_fault,
    each_position,
    positions,
)
from capture_ledger.spec.kit.crash._readback import ReadBack
from capture_ledger.spec.kit.crash._reader import TargetReader
from capture_ledger.spec.kit.crash._report import (
    fence,
    per_workload_table,
    report_head,
    study_exit_code,
    study_summary,
    write_crash_report,
    write_study_report,
)
from capture_ledger.spec.kit.crash._study import TargetStudy, study_targets
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
    "FAULT_KINDS",
    "SMALL_WORKLOADS",
    "WORKLOADS",
    "Configured",
    "Counterexamples",
    "CrashCell",
    "CrashExploration",
    "CrashPoint",
    "CrashStudy",
    "CrashVerdict",
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
    "TargetConfig",
    "TargetReader",
    "TargetStudy",
    "TraceEvent",
    "Workload",
    "check_crashes",
    "crash_points",
    "crash_prefixes",
    "describe_fault",
    "each_position",
    "explore_points",
    "fence",
    "images_to_judge",
    "judge",
    "judged_clauses",
    "matrix_svg",
    "matrix_table",
    "op_label",
    "per_workload_table",
    "positions",
    "report_head",
    "run_operation",
    "show_bytes",
    "spans_at",
    "study_exit_code",
    "study_summary",
    "study_targets",
    "target_name",
    "timeline_svg",
    "violation_of",
    "violations_of",
    "write_crash_report",
    "write_study_report",
]
