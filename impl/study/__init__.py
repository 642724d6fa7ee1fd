"""Tools that study the real store's protocol; nothing on the production path imports them.

Study-only variants of the store, each switching one step off (``variants``); the interleaving scheduler
(``scheduling``, ``interleave``, ``scenarios``, ``invariants``); the recording seam and crash explorer
(``recording``, ``crash``, with how an image is read back and judged: ``observation``, ``judgement``, and
what a setup removed: ``freed``), the
crash study's catalogue, report and pictures (``workloads``, ``report``, ``pictures``); the kernel crash
study, which checks the persistence models against real ext4 (``kernel``); fault injection (``faults``);
multi-process workloads (``histories``); the reliability campaign's storm of SIGKILLed writer processes
(``kill_storm``); and calls into the code under study with a time budget (``bounded``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capture_ledger._lazy import lazy_attributes

if TYPE_CHECKING:
    from capture_ledger.impl.study._faults import FAULTABLE_CALLS, Fault, FaultyFileSystem, InjectedFaultError
    from capture_ledger.impl.study._hooked import FsCall, HookedFileSystem
    from capture_ledger.impl.study._kill_storm import KillStormResult, kill_storm
    from capture_ledger.impl.study._variants import STEP_NAMES, StoreVariant, VariantOrdering

#: Public names and the private module each is loaded from on first use.
_LAZY = {
    "FAULTABLE_CALLS": "capture_ledger.impl.study._faults",
    "Fault": "capture_ledger.impl.study._faults",
    "FaultyFileSystem": "capture_ledger.impl.study._faults",
    "InjectedFaultError": "capture_ledger.impl.study._faults",
    "FsCall": "capture_ledger.impl.study._hooked",
    "HookedFileSystem": "capture_ledger.impl.study._hooked",
    "KillStormResult": "capture_ledger.impl.study._kill_storm",
    "kill_storm": "capture_ledger.impl.study._kill_storm",
    "STEP_NAMES": "capture_ledger.impl.study._variants",
    "StoreVariant": "capture_ledger.impl.study._variants",
    "VariantOrdering": "capture_ledger.impl.study._variants",
}

__all__ = [
    "FAULTABLE_CALLS",
    "STEP_NAMES",
    "Fault",
    "FaultyFileSystem",
    "FsCall",
    "HookedFileSystem",
    "InjectedFaultError",
    "KillStormResult",
    "StoreVariant",
    "VariantOrdering",
    "kill_storm",
]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
