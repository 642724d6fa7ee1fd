"""Verifying any ledger from outside: its file-system calls traced with strace, its crash states built from
them and read back through the protocol (SPEC.md §Crash, R-CRASH-1..4; docs/crash-target.md).

Modules: ``syscalls`` (the line grammar of strace's output), ``simulation`` and ``calls`` (the simulated
workspace and what each call does to it), ``parser`` (a trace to the persistence models' effects).

Nothing on the production path imports this package; it may import ``spec``, ``impl.store`` and
``impl.study``.
"""
