"""The kernel crash study: the persistence models checked against real ext4, XFS and btrfs (SPEC.md §Crash,
R-CRASH-1..4; docs/crash.md §The kernel study).

A block-write log served by a FUSE daemon (``blocklog``, ``daemon``) under a loop device (``host``), ext4 in
three configurations at 1 KiB and at 4 KiB blocks, XFS and btrfs (``filesystems``), a crash-study workload
recorded with the store's own timeline (``recorder``), crash states built the CrashMonkey way (``states``),
recovered by the kernel (``recovery``), read back and judged exactly as the model study does, and compared
with the persistence models (``compare``, ``study``), with block-level timelines (``timeline``), the workloads
only a real disk gives meaning to (``workloads``), and the run, table and picture (``report``).

Needs root, ``/dev/fuse``, loop devices, e2fsprogs and the ``kernel`` extra; ``host.missing`` says what is
absent, ``filesystems.lacking`` what XFS or btrfs would need besides (xfsprogs, btrfs-progs). Nothing on the
production path imports it; only ``daemon`` imports pyfuse3.

``kernel_target`` does the same for any ledger traced from outside (``crash --target TARGET --kernel``,
docs/crash-target.md §On the real kernel): the strace recorder of ``crash --target`` run on the image
(``target_recorder``, the target opened through ``target_factory``, which marks the block log), each state
read back by a fresh handle of the target in a child process and compared with the strace-recorded model.
"""

from __future__ import annotations

from capture_ledger.impl.study.kernel._blocklog import FLUSH, MARK, WRITE, LogRecord, encode, read_log
from capture_ledger.impl.study.kernel._compare import reader_class
from capture_ledger.impl.study.kernel._filesystems import (
    BLOCK_SIZE,
    DEFAULT_FILESYSTEMS,
    FILESYSTEMS,
    lacking,
    make_image,
)
from capture_ledger.impl.study.kernel._host import (
    KernelSetupError,
    fuse_daemon,
    leftovers,
    loop_device,
    missing,
    mounted,
    strict,
    workspace,
)
from capture_ledger.impl.study.kernel._recorder import KernelRecording, record_on_kernel
from capture_ledger.impl.study.kernel._recovery import Recoverer
from capture_ledger.impl.study.kernel._report import KernelStudy, comparison_svg, kernel_study
from capture_ledger.impl.study.kernel._states import crash_states, epochs, materialize
from capture_ledger.impl.study.kernel._study import KernelCell, kernel_cell, trace_window
from capture_ledger.impl.study.kernel._target import (
    MAX_STATES,
    TARGET_WORKLOADS,
    TargetKernelCell,
    TargetKernelResult,
    kernel_target,
)
from capture_ledger.impl.study.kernel._target_factory import MarkControl, MarkedLedger
from capture_ledger.impl.study.kernel._target_recorder import (
    TargetKernelRecording,
    TraceMark,
    record_target_on_kernel,
    target_window,
)
from capture_ledger.impl.study.kernel._workloads import CI_WORKLOADS, FULL_WORKLOADS, KERNEL_WORKLOADS

__all__ = [
    "BLOCK_SIZE",
    "CI_WORKLOADS",
    "DEFAULT_FILESYSTEMS",
    "FILESYSTEMS",
    "FLUSH",
    "FULL_WORKLOADS",
    "KERNEL_WORKLOADS",
    "MARK",
    "MAX_STATES",
    "TARGET_WORKLOADS",
    "WRITE",
    "KernelCell",
    "KernelRecording",
    "KernelSetupError",
    "KernelStudy",
    "LogRecord",
    "MarkControl",
    "MarkedLedger",
    "Recoverer",
    "TargetKernelCell",
    "TargetKernelRecording",
    "TargetKernelResult",
    "TraceMark",
    "comparison_svg",
    "crash_states",
    "encode",
    "epochs",
    "fuse_daemon",
    "kernel_cell",
    "kernel_study",
    "kernel_target",
    "lacking",
    "leftovers",
    "loop_device",
    "make_image",
    "materialize",
    "missing",
    "mounted",
    "read_log",
    "reader_class",
    "record_on_kernel",
    "record_target_on_kernel",
    "strict",
    "target_window",
    "trace_window",
    "workspace",
]
