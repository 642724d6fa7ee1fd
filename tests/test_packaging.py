"""Packaging: the wheel carries every sub-package and its data files (a sub-package left out of
``[tool.setuptools] packages`` is silently dropped from the wheel while the editable install still imports
it; see docs/architecture.md)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Source folders and the import package each is mapped to.
FOLDERS = {
    "spec": "capture_ledger/spec",
    "reference": "capture_ledger/reference",
    "impl": "capture_ledger/impl",
    "adapters": "capture_ledger/adapters",
}
DATA = ("*.md", "*.json")


def test_wheel_contains_every_subpackage_and_data(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("capture_ledger-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "capture_ledger/__init__.py" in names and "capture_ledger/py.typed" in names
    for folder, package in FOLDERS.items():
        base = ROOT / folder
        assert f"{package}/py.typed" in names
        sources = {
            f"{package}/{path.relative_to(base).as_posix()}"
            for pattern in ("*.py", *DATA)
            for path in base.rglob(pattern)
            if "__pycache__" not in path.parts
        }
        missing = sorted(sources - names)
        assert not missing, f"left out of the wheel: {missing}"
        # Every folder with Python modules is a package with an __init__.py.
        for sub in {path.parent for path in base.rglob("*.py")}:
            assert (sub / "__init__.py").exists(), f"{sub.relative_to(ROOT)} has no __init__.py"
    assert any(n.endswith("entry_points.txt") for n in names)
