"""The public surface of each package, pinned (SPEC.md §Protocol; trio's test_exports)."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

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
        "check_crashes",
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

    from capture_ledger.impl.http import LedgerMetrics
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
    assert sys.modules[LedgerMetrics.__module__].OPERATIONS is OPERATIONS
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


# ------------------------------------------------------------------------------------- private modules
ROOT = Path(__file__).resolve().parents[1]
#: Folders whose ``.py`` files are read for imports (the installed packages, and what uses them).
READ = ("pkg", "spec", "reference", "impl", "adapters", "tests", "benchmarks", "examples")
_FOLDER_PACKAGE = {
    "pkg": "capture_ledger",
    "spec": "capture_ledger.spec",
    "reference": "capture_ledger.reference",
    "impl": "capture_ledger.impl",
    "adapters": "capture_ledger.adapters",
}


def _module_of(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = [p for p in relative.parts if p != "__init__"]
    head = _FOLDER_PACKAGE.get(parts[0])
    return ".".join([head, *parts[1:]]) if head else ".".join(parts)


def _imported(text: str, module: str, is_package: bool) -> set[str]:
    """Every ``capture_ledger`` module ``text`` imports, by statement or by name (``module:callable``
    targets in string constants)."""
    names: set[str] = set()
    package = module if is_package else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            names.add(base)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # A ``module:callable`` target names a module as surely as an import does.
            names.update(re.findall(r"(capture_ledger(?:\.\w+)+):\w", node.value))
    return {n for n in names if n.startswith("capture_ledger.")}


def private_imports(text: str, module: str, *, is_package: bool = False) -> list[str]:
    """The private modules (a ``_name`` part) that ``module`` imports from outside their package.

    A private module ``a.b._c`` (or anything below it) may be imported only by modules of ``a.b`` and its
    sub-packages; everyone else goes through ``a.b``'s ``__init__``.
    """
    wrong = []
    for name in sorted(_imported(text, module, is_package)):
        parts = name.split(".")
        private = next((i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")), None)
        if private is None:
            continue
        owner = ".".join(parts[:private])
        if module != owner and not module.startswith(owner + "."):
            wrong.append(name)
    return wrong


def _sources() -> list[Path]:
    return sorted(p for folder in READ for p in (ROOT / folder).rglob("*.py") if p.is_file())


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_module_is_imported_from_outside_its_package(path: Path) -> None:
    module = _module_of(path)
    wrong = private_imports(path.read_text(), module, is_package=path.name == "__init__.py")
    assert not wrong, f"{module} imports private modules of other packages: {wrong}"


def test_a_private_import_from_outside_is_caught() -> None:
    """The rule can fail: the CLI reaching into the kit's private module is reported; the kit's own
    sub-packages reaching into it are not."""
    bad = "from capture_ledger.spec.kit._targets import load_target\n"
    assert private_imports(bad, "capture_ledger.impl.cli.verify") == ["capture_ledger.spec.kit._targets"]
    assert private_imports(bad, "capture_ledger.spec.kit.stress._workers") == []
    named = 'TARGET = "capture_ledger.impl.study.crash.' + '_crosscheck:store_target"\n'
    assert private_imports(named, "tests.impl.cli.test_cli") == [
        "capture_ledger.impl.study.crash._crosscheck"
    ]


def _packages() -> list[str]:
    found = []
    for folder, package in _FOLDER_PACKAGE.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.append(".".join([package, *parts]))
    return sorted(found)


@pytest.mark.parametrize("package", _packages())
def test_every_package_says_what_it_exports(package: str) -> None:
    """Each package's ``__init__`` has ``__all__``, and every name in it resolves."""
    module = importlib.import_module(package)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{package} has no __all__"
    for name in exported:
        assert getattr(module, name) is not None, f"{package}.{name}"
