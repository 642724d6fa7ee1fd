"""The project stands alone: no file points outside the repository (docs/architecture.md).

Its users have only the repository, so no tracked file may cite the team's design brief, a path beside the
checkout, this project's tracker issue numbers, or a path on the machine the work was done on. Decisions
live in SPEC.md §Decisions and docs/; requirements are cited by their IDs.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: What may not appear, each with why. Built from parts so that this file does not match itself.
OUTSIDE = {
    "the design brief": re.compile("DESIGN" + r"\.md"),
    "a path beside the checkout": re.compile(r"\.\./" + "shared"),
    "a tracker issue number": re.compile(r"\b[Ii]ssue" + r" #?\d+"),
    "a path on the development machine": re.compile("/" + r"work/(?:\.venv|main|shared)"),
}


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return [ROOT / name for name in out.splitlines() if (ROOT / name).is_file()]


def _offences(paths: list[Path], *, root: Path = ROOT) -> list[str]:
    found = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for what, pattern in OUTSIDE.items():
                if pattern.search(line):
                    found.append(f"{path.relative_to(root)}:{number}: {what}: {line.strip()[:100]}")
    return found


def test_no_file_points_outside_the_repository() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an installed copy has no tracked files to read)")
    offences = _offences(_tracked())
    assert not offences, "\n".join(offences)


def test_the_check_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "note.md"
    bad.write_text(
        "See " + "DESIGN" + ".md §5 and issue" + " 3 item 2, and run /" + "work/.venv/bin/python.\n"
    )
    bad.write_text(bad.read_text() + "Also ../" + "shared/STYLE.md.\n")
    offences = _offences([bad], root=tmp_path)
    assert len(offences) == 4, offences
