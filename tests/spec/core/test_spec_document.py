"""SPEC.md agrees with the executable model, and every cited requirement is defined (SPEC.md §States).

The state diagram and the operation × state table in SPEC.md are generated from ``step``; these tests fail,
with a diff, when the document's block differs from ``capture_ledger.spec.core.tables.render()``, and show
that
both regeneration paths (``python -m capture_ledger.spec.core.tables --write`` and ``capture-ledger spec
--check``)
work on a real copy of the document.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from capture_ledger.impl.cli import main as cli
from capture_ledger.spec.core import tables

ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "spec" / "SPEC.md"
# Folders whose files cite requirement IDs: the code, the tests, the docs and the benchmarks.
CITING = ("spec", "reference", "impl", "pkg", "tests", "docs", "benchmarks", "tools")
_CITED = re.compile(r"\bR-([A-Z]+)-(\d+)(?:\.\.(\d+))?")
_DEFINED = re.compile(r"^- \*\*(R-[A-Z]+-\d+)\*\*", re.MULTILINE)


def _defined() -> list[str]:
    return _DEFINED.findall(SPEC.read_text(encoding="utf-8"))


def _citations() -> dict[str, list[str]]:
    """Every requirement ID cited outside SPEC.md (ranges such as ``R-ID-1..3`` expanded) and where."""
    cited: dict[str, list[str]] = {}
    for folder in CITING:
        base = ROOT / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path == SPEC or not path.is_file() or path.suffix not in {".py", ".md", ".json", ""}:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            for match in _CITED.finditer(text):
                prefix, first, last = match.group(1), int(match.group(2)), match.group(3)
                for number in range(first, int(last or first) + 1):
                    cited.setdefault(f"R-{prefix}-{number}", []).append(str(path.relative_to(ROOT)))
    return cited


def test_the_generated_block_matches_the_model() -> None:
    diff = tables.drift(SPEC.read_text(encoding="utf-8"))
    assert not diff, (
        "SPEC.md's generated block differs from the model; run "
        "`python -m capture_ledger.spec.core.tables --write`:\n" + diff
    )


def test_every_cited_requirement_is_defined() -> None:
    defined = set(_defined())
    missing = {rid: sorted(set(paths)) for rid, paths in _citations().items() if rid not in defined}
    assert not missing, f"requirement IDs cited but not defined in SPEC.md: {missing}"


def test_requirements_are_defined_once_and_numbered_without_gaps() -> None:
    defined = _defined()
    assert len(defined) == len(set(defined)), "a requirement is defined twice"
    numbers: dict[str, list[int]] = {}
    for rid in defined:
        prefix, number = rid.rsplit("-", 1)
        numbers.setdefault(prefix, []).append(int(number))
    assert {prefix: sorted(n) for prefix, n in numbers.items()} == {
        prefix: list(range(1, len(n) + 1)) for prefix, n in numbers.items()
    }
    expected_groups = {"ID", "BATCH", "STATE", "WRITE", "ADMIT", "READ", "RETIRE", "DELETE", "ERR"}
    expected_groups |= {"KIT", "STORE", "CONC", "CRASH", "HTTP"}
    assert {prefix.removeprefix("R-") for prefix in numbers} == expected_groups


def test_the_model_is_cited_by_requirement() -> None:
    # Each requirement on the sequential model is cited somewhere outside SPEC.md (model, kit or tests).
    groups = ("ID", "BATCH", "STATE", "WRITE", "ADMIT", "READ", "RETIRE", "DELETE")
    sequential = tuple(f"R-{group}-" for group in groups)
    cited = _citations()
    uncited = [rid for rid in _defined() if rid.startswith(sequential) and rid not in cited]
    assert not uncited, f"requirements of the sequential model that no code, test or doc cites: {uncited}"


@pytest.mark.parametrize(
    ("operation", "state", "text"),
    [
        ("`manifest`", "Retired", "Retired / raises RolloutRetiredError"),
        ("`manifest`", "Absent", "Absent / returns an empty manifest"),
        ("`retire([r1])`", "Live", "Retired / removed [r1]"),
        ("`retire([r1])`", "Live (fenced)", "Retired / removed [r1]"),
        ("`retire([r1])`", "Retired", "Retired / absent [r1]"),
        ("`delete([r1])`", "Retired", "Absent / absent [r1]"),
        ("`admit`", "Live (fenced)", "Live (fenced) / returns None"),
        ("`record` a new row", "Retired", "Retired / discarded, one warning naming `r1/c2`"),
        ("`record` a new row", "Live (fenced)", "Live (fenced) / row appended"),
        ("`record` a different row for a recorded call", "Live", "Live / raises ConflictingRecordError"),
        ('`retire("r1")` (a bare string)', "Live", "Live / raises TypeError"),
    ],
)
def test_cells_say_what_the_prose_says(operation: str, state: str, text: str) -> None:
    assert tables.cells()[operation, state].text() == text


def test_the_diagram_draws_every_state_and_the_fence_transitions() -> None:
    diagram = tables.mermaid_diagram()
    for edge in (
        "Absent --> Live: record, record_failure",
        "Live --> Retired: retire",
        "Fenced --> Retired: retire",
        "Retired --> Absent: delete",
        "Retired --> Retired: record (discarded), record_failure (discarded), admit (None), retire",
    ):
        assert edge in diagram
    assert "Retired --> Live" not in diagram  # R-WRITE-4: no write brings a retired rollout back


def _drifted_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "SPEC.md"
    original = SPEC.read_text(encoding="utf-8")
    broken = original.replace("Retired / raises RolloutRetiredError", "Retired / returns an empty manifest")
    assert broken != original
    copy.write_text(broken, encoding="utf-8")
    return copy


def test_module_write_regenerates_a_drifted_block(tmp_path: Path) -> None:
    copy = _drifted_copy(tmp_path)
    assert tables.drift(copy.read_text(encoding="utf-8"))
    command = [sys.executable, "-m", "capture_ledger.spec.core.tables"]
    assert subprocess.run([*command, "--check", str(copy)], capture_output=True, check=False).returncode == 1
    subprocess.run([*command, "--write", str(copy)], capture_output=True, check=True)
    assert copy.read_text(encoding="utf-8") == SPEC.read_text(encoding="utf-8")


def test_cli_spec_prints_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["spec"]) == 0
    assert capsys.readouterr().out.strip() == tables.render()
    assert cli.main(["spec", "--check", str(SPEC)]) == 0
    capsys.readouterr()
    assert cli.main(["spec", "--check", str(_drifted_copy(tmp_path))]) == 1
    assert "-| `manifest` |" in capsys.readouterr().out
    no_markers = tmp_path / "empty.md"
    no_markers.write_text("# nothing generated here\n", encoding="utf-8")
    assert cli.main(["spec", "--check", str(no_markers)]) == 2
