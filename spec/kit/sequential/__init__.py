"""capture_ledger.spec.kit.sequential."""

from __future__ import annotations

from capture_ledger.spec.kit.sequential._classify import (
    call_requirement,
    change_requirement,
    misordered,
    named_ids,
    single_id_operation,
    state_kind,
)
from capture_ledger.spec.kit.sequential._conformance import (
    KitError,
    LedgerFactory,
    check_ledger,
    conformance_machine,
    conformance_test_case,
    count_steps,
    factory_name,
    judge_ledger,
    kit_settings,
    rule_names,
)
from capture_ledger.spec.kit.sequential._strategies import (
    INVALID_ROLLOUT_IDS,
    INVALID_ROWS,
    invalid_rollout_id_strings,
    invalid_rollout_ids,
    json_values,
    rollout_ids,
)
from capture_ledger.spec.kit.sequential._verdict import Broken, LedgerVerdict

__all__ = [
    "INVALID_ROLLOUT_IDS",
    "INVALID_ROWS",
    "Broken",
    "KitError",
    "LedgerFactory",
    "LedgerVerdict",
    "call_requirement",
    "change_requirement",
    "check_ledger",
    "conformance_machine",
    "conformance_test_case",
    "count_steps",
    "factory_name",
    "invalid_rollout_id_strings",
    "invalid_rollout_ids",
    "json_values",
    "judge_ledger",
    "kit_settings",
    "misordered",
    "named_ids",
    "rollout_ids",
    "rule_names",
    "single_id_operation",
    "state_kind",
]
