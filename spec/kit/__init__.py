"""The conformance kit: what a ledger author runs against their own ledger (SPEC.md §Conformance,
R-KIT-1..12), in three layers that are siblings here:

- ``sequential``: the Hypothesis state machine driven by the model (``check_ledger``, ``judge_ledger``,
  ``conformance_test_case``), with how a call's outcome is compared and which requirement a difference
  breaks;
- ``stress``: concurrent histories of any ledger on threads, tasks or processes, judged for
  linearizability (``check_concurrency``, ``run_processes`` and the kill mode);
- ``crash``: any ledger's crash states, recorded (our seam, strace, a kernel's block log), built from a
  persistence model, read back by fresh handles and judged (``explore_points``, the strace recorder).

Shared by the three: how the kit calls a ledger (one worker thread, a budget per call), the protocol check
and the choice of methods for partial ledgers, the requirements quoted from SPEC.md, the Hypothesis
profiles, the history recorder, and the one loader of ``module:callable`` targets (``load_target``).
``pytest_plugin`` is ``pytest --capture-ledger``.

Every name is loaded on first use, so importing a part of the kit (say the target loader) costs only that
part; only the sequential kit and the profiles import Hypothesis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capture_ledger._lazy import lazy_attributes

if TYPE_CHECKING:
    from capture_ledger.spec.kit._calls import (
        CALL_BUDGET_ENV,
        DEFAULT_CALL_BUDGET,
        CallHung,
        CallRunner,
        Opaque,
        call_budget,
        plain,
    )
    from capture_ledger.spec.kit._operations import ProtocolCheck, check_protocol, select_operations
    from capture_ledger.spec.kit._profiles import PROFILE_ENV, PROFILES, load_profile, profile_settings
    from capture_ledger.spec.kit._recorder import (
        HistoryJournal,
        HistoryRecorder,
        RecordingLedger,
        read_history,
        write_history,
    )
    from capture_ledger.spec.kit._report_page import write_check_report
    from capture_ledger.spec.kit._requirements import SCOPE, breaks, checked, fail, sentence
    from capture_ledger.spec.kit._sharing import shares_across_processes, shares_between_handles
    from capture_ledger.spec.kit._suite import (
        DEFAULT_LAYERS,
        LAYERS,
        LayerReport,
        TargetVerdict,
        check_target,
    )
    from capture_ledger.spec.kit._targets import (
        OptionError,
        TargetError,
        bind_options,
        load_target,
        parse_options,
    )
    from capture_ledger.spec.kit.crash import CrashVerdict, check_crashes
    from capture_ledger.spec.kit.sequential import (
        check_ledger,
        conformance_test_case,
        judge_ledger,
        kit_settings,
    )
    from capture_ledger.spec.kit.stress import check_concurrency

#: Public names and the private module each is loaded from on first use.
_LAZY = {
    "CALL_BUDGET_ENV": "capture_ledger.spec.kit._calls",
    "CallHung": "capture_ledger.spec.kit._calls",
    "CallRunner": "capture_ledger.spec.kit._calls",
    "CrashVerdict": "capture_ledger.spec.kit.crash",
    "DEFAULT_CALL_BUDGET": "capture_ledger.spec.kit._calls",
    "HistoryJournal": "capture_ledger.spec.kit._recorder",
    "HistoryRecorder": "capture_ledger.spec.kit._recorder",
    "Opaque": "capture_ledger.spec.kit._calls",
    "PROFILES": "capture_ledger.spec.kit._profiles",
    "PROFILE_ENV": "capture_ledger.spec.kit._profiles",
    "ProtocolCheck": "capture_ledger.spec.kit._operations",
    "RecordingLedger": "capture_ledger.spec.kit._recorder",
    "SCOPE": "capture_ledger.spec.kit._requirements",
    "OptionError": "capture_ledger.spec.kit._targets",
    "TargetError": "capture_ledger.spec.kit._targets",
    "bind_options": "capture_ledger.spec.kit._targets",
    "breaks": "capture_ledger.spec.kit._requirements",
    "call_budget": "capture_ledger.spec.kit._calls",
    "check_concurrency": "capture_ledger.spec.kit.stress",
    "check_crashes": "capture_ledger.spec.kit.crash",
    "check_target": "capture_ledger.spec.kit._suite",
    "DEFAULT_LAYERS": "capture_ledger.spec.kit._suite",
    "LAYERS": "capture_ledger.spec.kit._suite",
    "LayerReport": "capture_ledger.spec.kit._suite",
    "TargetVerdict": "capture_ledger.spec.kit._suite",
    "shares_across_processes": "capture_ledger.spec.kit._sharing",
    "shares_between_handles": "capture_ledger.spec.kit._sharing",
    "write_check_report": "capture_ledger.spec.kit._report_page",
    "check_ledger": "capture_ledger.spec.kit.sequential",
    "check_protocol": "capture_ledger.spec.kit._operations",
    "checked": "capture_ledger.spec.kit._requirements",
    "conformance_test_case": "capture_ledger.spec.kit.sequential",
    "fail": "capture_ledger.spec.kit._requirements",
    "judge_ledger": "capture_ledger.spec.kit.sequential",
    "kit_settings": "capture_ledger.spec.kit.sequential",
    "load_profile": "capture_ledger.spec.kit._profiles",
    "load_target": "capture_ledger.spec.kit._targets",
    "parse_options": "capture_ledger.spec.kit._targets",
    "plain": "capture_ledger.spec.kit._calls",
    "profile_settings": "capture_ledger.spec.kit._profiles",
    "read_history": "capture_ledger.spec.kit._recorder",
    "select_operations": "capture_ledger.spec.kit._operations",
    "sentence": "capture_ledger.spec.kit._requirements",
    "write_history": "capture_ledger.spec.kit._recorder",
}

__all__ = [
    "CALL_BUDGET_ENV",
    "DEFAULT_CALL_BUDGET",
    "DEFAULT_LAYERS",
    "LAYERS",
    "PROFILES",
    "PROFILE_ENV",
    "SCOPE",
    "CallHung",
    "CallRunner",
    "CrashVerdict",
    "HistoryJournal",
    "HistoryRecorder",
    "LayerReport",
    "Opaque",
    "OptionError",
    "ProtocolCheck",
    "RecordingLedger",
    "TargetError",
    "TargetVerdict",
    "bind_options",
    "breaks",
    "call_budget",
    "check_concurrency",
    "check_crashes",
    "check_ledger",
    "check_protocol",
    "check_target",
    "checked",
    "conformance_test_case",
    "fail",
    "judge_ledger",
    "kit_settings",
    "load_profile",
    "load_target",
    "parse_options",
    "plain",
    "profile_settings",
    "read_history",
    "select_operations",
    "sentence",
    "shares_across_processes",
    "shares_between_handles",
    "write_check_report",
    "write_history",
]


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
