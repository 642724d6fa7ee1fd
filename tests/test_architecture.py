"""The architecture holds: imports flow one way, and the store imports light (docs/architecture.md).

Every module's imports are read from its source (``ast``, including imports inside functions and under
``TYPE_CHECKING``), so an edge that only a rarely-run path takes is caught too. A fresh interpreter shows
what ``from capture_ledger.impl import FileLineageStore`` really loads.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "spec": "capture_ledger.spec",
    "reference": "capture_ledger.reference",
    "impl": "capture_ledger.impl",
    "adapters": "capture_ledger.adapters",
}

#: The groups of docs/architecture.md and the groups each may import (its own group always).
ALLOWED: dict[str, set[str]] = {
    "spec": {"spec.core", "spec.kit"},
    "spec.core": set(),
    "spec.concurrency": {"spec.core"},
    "spec.crash": {"spec.core"},
    # What a ledger author runs (the sequential kit, stress, crash): the whole spec, never impl.
    "spec.kit": {"spec.core", "spec.concurrency", "spec.crash"},
    "reference": {"spec", "spec.core", "spec.kit"},
    "impl": {"impl.store", "impl.http"},
    "impl.store": {"spec.core"},
    "impl.http": {"spec.core", "impl.store"},
    "impl.study": {"spec.core", "spec.concurrency", "spec.crash", "spec.kit", "impl.store"},
    "impl.simulate": {"spec.core", "impl.store", "impl.http"},
    # Other projects' ledgers behind the protocol (docs/gym.md): the spec and the reference, nothing of impl.
    "adapters": {"spec", "spec.core", "spec.concurrency", "spec.crash", "spec.kit", "reference"},
    "impl.cli": {
        "spec",
        "spec.core",
        "spec.concurrency",
        "spec.crash",
        "spec.kit",
        "reference",
        "impl",
        "impl.store",
        "impl.http",
        "impl.study",
        "impl.simulate",
    },
}

#: Third-party packages a group must never import.
HEAVY = {"hypothesis", "fastapi", "starlette", "uvicorn", "httpx"}
FORBIDDEN: dict[str, set[str]] = {
    "spec": HEAVY,
    "spec.core": HEAVY,
    "spec.concurrency": HEAVY,
    "spec.crash": HEAVY,
    "impl": HEAVY,
    "impl.store": HEAVY,
    "impl.http": {"hypothesis"},
}


def _group(module: str) -> str | None:
    """``capture_ledger.spec.core.model`` -> ``spec.core``; ``capture_ledger.spec`` -> ``spec``."""
    parts = module.split(".")
    if parts[0] != "capture_ledger" or len(parts) < 2 or parts[1] not in FOLDERS:
        return None  # the root package's own helpers (pkg/: the version, lazy loading) serve every group
    if len(parts) == 2:
        return parts[1] if parts[1] in FOLDERS else None
    candidate = f"{parts[1]}.{parts[2]}"
    return candidate if candidate in ALLOWED else parts[1]


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            relative = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


def _imports(path: Path, module: str) -> set[str]:
    text = path.read_text()
    tree = ast.parse(text, filename=str(path))
    lazy = "import_module" in text
    names: set[str] = set()
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # Imports by name count too: "module:callable" targets, and names a module passes to
            # importlib.import_module. (Running the command line in a child, ``-m ...cli.main``, does not.)
            value = node.value
            if value.startswith("capture_ledger.") and " " not in value and (lazy or ":" in value):
                names.add(value.split(":")[0])
    return names


MODULES = _modules()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_flow_one_way(module: str) -> None:
    source = _group(module)
    assert source is not None and source in ALLOWED, f"{module} is in no group of docs/architecture.md"
    wrong = []
    for name in sorted(_imports(MODULES[module], module)):
        target = _group(name)
        if target is not None and target != source and target not in ALLOWED[source]:
            wrong.append(f"{name} ({target})")
        top = name.split(".")[0]
        if top in FORBIDDEN.get(source, set()):
            wrong.append(f"{name} (third-party, forbidden in {source})")
    assert not wrong, f"{module} ({source}) imports {wrong}"


def test_every_group_has_modules() -> None:
    groups = {_group(module) for module in MODULES}
    assert set(ALLOWED) <= groups


def test_the_store_imports_light() -> None:
    code = (
        "import sys; from capture_ledger.impl import FileLineageStore; "
        "import capture_ledger.spec; "
        f"print(sorted(m for m in {sorted(HEAVY)!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_the_kit_still_imports_from_the_spec_package() -> None:
    code = (
        "import sys; import capture_ledger.spec as spec; assert 'hypothesis' not in sys.modules; "
        "from capture_ledger.spec import check_ledger, conformance_test_case; "
        "assert 'hypothesis' in sys.modules; print(check_ledger.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "capture_ledger.spec.kit.sequential._conformance"


def test_a_forbidden_edge_is_caught(tmp_path: Path) -> None:
    """The checker itself can fail: a store module importing the study is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("from capture_ledger.impl.study.crash._crash import explore\n")
    names = _imports(bad, "capture_ledger.impl.store.bad")
    targets = {_group(n) for n in names}
    assert "impl.study" in targets and "impl.study" not in ALLOWED["impl.store"]


# ------------------------------------------------------------------------------------------ the rooms
def _edges_from(prefix: str) -> set[tuple[str, str]]:
    """Every (module, imported project module) pair of the modules under ``prefix``."""
    found = set()
    for module, path in MODULES.items():
        if module == prefix or module.startswith(prefix + "."):
            for name in _imports(path, module):
                if name.startswith("capture_ledger."):
                    found.add((module, name))
    return found


def _reaching(prefix: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{module} -> {name}"
        for module, name in _edges_from(prefix)
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    )


def test_the_spec_never_imports_impl() -> None:
    """The spec (model, checkers, kit) is the contract; it never depends on our implementation."""
    assert _reaching("capture_ledger.spec", ("capture_ledger.impl", "capture_ledger.reference")) == []


def test_the_store_imports_only_the_core_spec() -> None:
    wrong = [
        f"{m} -> {n}"
        for m, n in _edges_from("capture_ledger.impl.store")
        if _group(n) is not None
        and not n.startswith(("capture_ledger.impl.store", "capture_ledger.spec.core"))
    ]
    assert wrong == []


def test_the_kit_imports_nothing_of_the_study() -> None:
    """What a ledger author runs (``spec.kit``) stands on the spec alone, not on our store's study."""
    assert _reaching("capture_ledger.spec.kit", ("capture_ledger.impl",)) == []


def test_nothing_on_the_production_path_imports_the_study_or_the_kit() -> None:
    """What a model server embeds (the store, the HTTP control plane) never loads the study tools, the
    kit, the simulation or the command line."""
    forbidden = (
        "capture_ledger.impl.study",
        "capture_ledger.spec.kit",
        "capture_ledger.impl.simulate",
        "capture_ledger.impl.cli",
    )
    for room in ("capture_ledger.impl.store", "capture_ledger.impl.http"):
        assert _reaching(room, forbidden) == [], room


def test_a_room_rule_can_fail(tmp_path: Path) -> None:
    """The room rules read real imports: a store module importing the kit is seen as such."""
    bad = tmp_path / "bad.py"
    bad.write_text("from capture_ledger.spec.kit import load_target\n")
    names = _imports(bad, "capture_ledger.impl.store.bad")
    assert any(n.startswith("capture_ledger.spec.kit") for n in names)


def test_the_root_package_imports_nothing_of_the_project() -> None:
    """``pkg/`` (``capture_ledger`` itself, whose helpers every group may use) depends on no group."""
    for path in sorted((ROOT / "pkg").glob("*.py")):
        module = "capture_ledger" if path.name == "__init__.py" else f"capture_ledger.{path.stem}"
        assert [n for n in _imports(path, module) if n.startswith("capture_ledger.")] == [], path
