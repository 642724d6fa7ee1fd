"""The public surface of each package, pinned (SPEC.md §Protocol; trio's test_exports)."""

from __future__ import annotations

import importlib

import pytest

EXPECTED = {
    "capture_ledger.spec": {
        "MAX_LEDGER_BATCH",
        "MAX_ROLLOUT_ID_LENGTH",
        "Ok",
        "Unknown",
        "Verdict",
        "Violation",
        "canonical_json",
        "exit_code",
        "validate_failure",
        "validate_model_call_id",
        "validate_row",
        "worst",
        "ROLLOUT_ID_PATTERN",
        "CaptureLedger",
        "CaptureLedgerError",
        "ConflictingRecordError",
        "FailureRow",
        "InvalidRolloutIdError",
        "Manifest",
        "RolloutRemoval",
        "RolloutRetiredError",
        "check_concurrency",
        "check_ledger",
        "conformance_test_case",
        "staging_key",
        "validate_rollout_id",
        "validate_rollout_ids",
    },
    "capture_ledger.reference": {"ReferenceLedger", "open_reference_ledger"},
    "capture_ledger.impl": {
        "AsyncRolloutControlClient",
        "ControlPlaneError",
        "ControlPlaneTimeoutError",
        "ControlPlaneUnavailableError",
        "CorruptLedgerError",
        "FenceSync",
        "FileLineageStore",
        "FileSystem",
        "Finding",
        "LedgerMetrics",
        "OperationCounts",
        "OsFileSystem",
        "RequestRejectedError",
        "RetryPolicy",
        "RolloutControlClient",
        "ServerError",
        "StoreStatistics",
        "UnauthorizedError",
        "UnexpectedResponseError",
        "check",
        "create_app",
        "open_file_store",
        "read_snapshot",
    },
}


@pytest.mark.parametrize("package", sorted(EXPECTED))
def test_public_names_are_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert set(module.__all__) == EXPECTED[package]
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_pinned_values() -> None:
    from capture_ledger.spec import MAX_LEDGER_BATCH, MAX_ROLLOUT_ID_LENGTH, RolloutRetiredError

    assert MAX_ROLLOUT_ID_LENGTH == 200 and MAX_LEDGER_BATCH == 4096
    assert not issubclass(RolloutRetiredError, ValueError)


def test_the_store_does_not_import_the_http_stack() -> None:
    import subprocess
    import sys

    code = (
        "import sys; from capture_ledger.impl import FileLineageStore; "
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'httpx') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_client_errors_are_ledger_errors() -> None:
    from capture_ledger.impl import ControlPlaneError
    from capture_ledger.spec import CaptureLedgerError

    assert issubclass(ControlPlaneError, CaptureLedgerError)


def test_one_list_of_operation_names() -> None:
    """``spec.core.protocol.OPERATIONS`` is the protocol's methods, and every per-operation table is it."""
    import dataclasses
    import json

    from capture_ledger.impl.http import metrics
    from capture_ledger.impl.store.file_store import OperationCounts
    from capture_ledger.spec.concurrency.history import Event, event_to_json
    from capture_ledger.spec.core.model import (
        Admit,
        Delete,
        HasRows,
        Operation,
        ReadManifest,
        Record,
        RecordFailure,
        Retire,
    )
    from capture_ledger.spec.core.protocol import OPERATIONS, CaptureLedger

    protocol = [name for name in vars(CaptureLedger) if not name.startswith("_")]
    assert list(OPERATIONS) == protocol
    assert tuple(f.name for f in dataclasses.fields(OperationCounts)) == OPERATIONS
    assert metrics.OPERATIONS is OPERATIONS
    # Recorded histories name each operation as the protocol does.
    ops: list[Operation] = [
        Record("r", {"model_call_id": "m"}),
        RecordFailure("r", "m", "timeout"),
        Admit("r", "m"),
        ReadManifest("r"),
        HasRows("r"),
        Retire(["r"]),
        Delete(["r"]),
    ]
    assert [json.loads(event_to_json(Event(client=0, op=op, invoked=0.0)))["op"] for op in ops] == list(
        OPERATIONS
    )
