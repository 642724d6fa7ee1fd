"""Workloads of the kernel study beyond the crash study's catalogue (R-CRASH-1..4, R-STORE-6; docs/crash.md
§The kernel study).

The kernel study runs the crash study's workloads (``impl/study/crash/_configs.py (configurations) and
spec/kit/crash/_workloads.py (workloads)``) and these, which need a real file system's blocks to mean
anything:

- ``record-straddle``: 22 rows of 45 bytes fill a ledger to byte 990; the next record spans the 1 KiB
  block boundary, so a crash during its fsync can keep the second block and lose the first.
- ``record-reuse-block``: a ledger of 22 rows is deleted in the setup (its blocks freed, their bytes still
  on the disk); a new ledger is then written, and its blocks may be the freed ones.

``KERNEL_WORKLOADS`` maps every workload the kernel study knows, catalogue first; ``CI_WORKLOADS`` are the
ones the test suite runs on every configuration; ``FULL_WORKLOADS`` what the command runs by default.

Not guaranteed: that the allocator hands the freed blocks to the new ledger (the study reports what the
kernel did).
"""

from __future__ import annotations

from capture_ledger.spec.core.model import Delete, Operation, Record, Retire
from capture_ledger.spec.kit.crash import WORKLOADS, Workload

__all__ = ["CI_WORKLOADS", "FULL_WORKLOADS", "KERNEL_WORKLOADS", "ROW_BYTES"]

#: The bytes of one row's line below: ``{"record":{"model_call_id":"cNN","value":1}}`` and a newline.
ROW_BYTES = 45


def _rows(rollout_id: str, count: int) -> tuple[Operation, ...]:
    return tuple(Record(rollout_id, {"model_call_id": f"c{i:02d}", "value": 1}) for i in range(count))


_EXTRA = (
    Workload(
        name="record-straddle",
        setup=_rows("r1", 22),
        ops=(Record("r1", {"model_call_id": "c22", "value": 1}),),
        note="a record whose line spans a 1 KiB block boundary: a crash may keep its second block only",
    ),
    Workload(
        name="record-reuse-block",
        setup=(*_rows("r1", 22), Retire(["r1"]), Delete(["r1"])),
        ops=(Record("r2", {"model_call_id": "n00", "value": 2}),),
        note="a new ledger after a deleted one: its block may be one the deleted ledger's rows are still in",
    ),
)

#: Every workload the kernel study knows, by name.
KERNEL_WORKLOADS: dict[str, Workload] = {**WORKLOADS, **{w.name: w for w in _EXTRA}}

#: What the test suite runs on every file-system configuration (the budget of docs/crash.md).
CI_WORKLOADS = (
    "record-new",
    "retire-live",
    "retire-overlap",
    "delete-reuse",
    "retire-delete-reuse",
    "record-straddle",
)

#: What ``capture-ledger crash --kernel`` runs without ``--workload``.
FULL_WORKLOADS = (
    "record-new",
    "record-append",
    "record-torn",
    "retire-live",
    "retire-overlap",
    "retire-retry-eio",
    "delete-reuse",
    "retire-delete-reuse",
    "record-retry-eio",
    "delete-retry-eio",
    "mixed",
    "record-straddle",
    "record-reuse-block",
)
