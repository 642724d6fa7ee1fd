"""The public surface of each package, pinned (SPEC.md §Protocol; trio's test_exports)."""

from __future__ import annotations

import importlib

import pytest

EXPECTED = {
    "capture_ledger.spec": {
        "MAX_LEDGER_BATCH",
        "MAX_ROLLOUT_ID_LENGTH",
        "ROLLOUT_ID_PATTERN",
        "CaptureLedger",
        "CaptureLedgerError",
        "ConflictingRecordError",
        "FailureRow",
        "InvalidRolloutIdError",
        "Manifest",
        "RolloutRemoval",
        "RolloutRetiredError",
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
        "StoreVariant",
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
