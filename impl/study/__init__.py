"""Tools that study the real store's protocol; nothing on the production path imports them.

Study-only variants of the store, each switching one step off (``variants``); the interleaving scheduler
(``scheduling``, ``interleave``, ``scenarios``, ``invariants``); the recording seam and crash explorer
(``recording``, ``crash``, with how an image is read back and judged: ``observation``, ``judgement``, and
what a setup removed: ``freed``), the
crash study's catalogue, report and pictures (``workloads``, ``report``, ``pictures``); the kernel crash
study, which checks the persistence models against real ext4 (``kernel``); fault injection (``faults``);
multi-process workloads (``histories``); and calls into the code under study with a time budget
(``bounded``).
"""
