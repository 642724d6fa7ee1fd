"""The kernel crash study: the persistence models checked against real ext4 (SPEC.md §Crash, R-CRASH-1..4;
docs/crash.md §The kernel study).

A block-write log served by a FUSE daemon (``blocklog``, ``daemon``) under a loop device (``host``), ext4 in
three configurations (``filesystems``), a crash-study workload recorded with the store's own timeline
(``recorder``), crash states built the CrashMonkey way (``states``), recovered by the kernel
(``recovery``), read back and judged exactly as the model study does, and compared with the persistence
models (``compare``, ``study``), with block-level timelines (``timeline``), the workloads only a real
disk gives meaning to (``workloads``), and the run, table and picture (``report``).

Needs root, ``/dev/fuse``, loop devices, e2fsprogs and the ``kernel`` extra; ``host.missing`` says what is
absent. Nothing on the production path imports it; only ``daemon`` imports pyfuse3.
"""
