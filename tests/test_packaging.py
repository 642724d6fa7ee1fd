"""Packaging: the wheel carries every sub-package (DESIGN.md §2: a sub-package left out of ``packages`` is
silently dropped from the wheel while the editable install still imports it) and its data files."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUBPACKAGES = ("spec", "reference", "impl")


def test_wheel_contains_every_subpackage_and_data(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("capture_ledger-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "capture_ledger/__init__.py" in names and "capture_ledger/py.typed" in names
    for sub in SUBPACKAGES:
        sources = {p.name for p in (ROOT / sub).glob("*.py")}
        packed = {
            n.rsplit("/", 1)[1] for n in names if n.startswith(f"capture_ledger/{sub}/") and n.endswith(".py")
        }
        assert sources == packed, f"capture_ledger.{sub}: missing {sorted(sources - packed)}"
        assert f"capture_ledger/{sub}/py.typed" in names
        for data in list((ROOT / sub).glob("*.md")) + list((ROOT / sub).glob("*.json")):
            assert f"capture_ledger/{sub}/{data.name}" in names, f"{data.name} not packed"
    assert any(n.endswith("entry_points.txt") for n in names)
