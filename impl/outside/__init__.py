"""Verifying any ledger from outside: its file-system calls traced with strace, its crash states built from
them and read back through the protocol (SPEC.md §Crash, R-CRASH-1..4; docs/crash-target.md).

Modules: ``tracing`` (running under strace), ``syscalls`` (the line grammar of strace's output),
``simulation`` and ``calls`` (the simulated workspace and what each call does to it), ``parser`` (a trace to
the persistence models' effects), ``plan`` and ``driver`` (the traced child), ``recorder`` (a crash
workload recorded from outside), ``reader`` and ``readback`` (images read back by fresh handles in a child
process, and what the readings say), ``explorer`` (every image judged), ``study`` and ``report`` (the
command's study and its report), ``factories`` and ``crosscheck`` (our own store traced from outside,
compared with the seam study).

Nothing on the production path imports this package; it may import ``spec``, ``impl.store`` and
``impl.study``. Not guaranteed: anything beyond what docs/crash-target.md lists as supported.
"""
