"""``check --report DIR``'s page, loaded in a real headless Chromium (docs/check.md §Report).

Each test builds the page of a real verdict (``write_check_report``) and has Chromium load a copy with two
scripts added: one first, that records every console error, warning and uncaught exception, and one
last, that measures the laid-out page (``--dump-dom`` returns the DOM after the scripts ran, the
measurements in an attribute). The page must load with no console error and no resource fetched, hold
every picture (its ``<svg>`` elements counted against those the verdict calls for), and no text may
overflow: every block that holds text is no wider inside than its box (``scrollWidth <= clientWidth``),
every inline text stays in its block, the page does not scroll sideways, and every SVG ``<text>``'s
``getBBox()`` lies inside its picture's ``viewBox``. ``test_the_probe_sees_overflow``: the measure can
fail.

Without Chromium (``apt-get install chromium``) the tests skip, saying so; under ``CI`` they fail.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.spec.core.verdicts import Violation
from capture_ledger.spec.kit import LayerReport, TargetVerdict, check_target, write_check_report
from capture_ledger.spec.kit.crash import check_crashes

BUG = "examples.bugs.directory_bugs"
CHROMIUM = next(
    (
        found
        for name in ("chromium", "chromium-headless-shell", "chromium-browser")
        if (found := shutil.which(name))
    ),
    None,
)

_HEAD = """<script>
window.__problems = [];
for (const level of ["error", "warn"]) {
  const original = console[level];
  console[level] = (...args) => { window.__problems.push(level + ": " + args.join(" ")); original(...args); };
}
window.addEventListener("error", (e) => window.__problems.push("error: " + (e.message || e.target)), true);
</script>"""

_PROBE = """<script>
(function () {
  const out = {svgs: document.querySelectorAll("svg").length, overflow: [], outside: [], texts: 0,
               resources: performance.getEntriesByType("resource").map((e) => e.name),
               problems: window.__problems};
  const name = (el) => el.tagName.toLowerCase() + " '" + (el.textContent || "").trim().slice(0, 60) + "'";
  const block = (el) => { let b = el.parentElement;
    while (b && getComputedStyle(b).display === "inline") b = b.parentElement; return b; };
  for (const el of document.body.querySelectorAll("*")) {
    if (el.closest("svg") || el.tagName === "SCRIPT") continue;
    if (!Array.from(el.childNodes).some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
    out.texts += 1;
    if (getComputedStyle(el).display === "inline") {
      const box = block(el).getBoundingClientRect();
      for (const r of el.getClientRects()) {
        if (r.right > box.right + 1 || r.left < box.left - 1) { out.overflow.push(name(el)); break; }
      }
    } else if (el.scrollWidth > el.clientWidth + 1) {
      out.overflow.push(name(el) + " " + el.scrollWidth + " > " + el.clientWidth);
    }
  }
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1) out.overflow.push("the page scrolls sideways");
  for (const svg of document.querySelectorAll("svg")) {
    const v = svg.viewBox.baseVal;
    for (const t of svg.querySelectorAll("text")) {
      const b = t.getBBox();
      out.texts += 1;
      if (b.x < v.x - 0.5 || b.y < v.y - 0.5 || b.x + b.width > v.x + v.width + 0.5
          || b.y + b.height > v.y + v.height + 0.5) {
        const at = [b.x, b.y, b.width, b.height].map(Math.round);
        out.outside.push("'" + t.textContent.slice(0, 60) + "' " + at + " outside " + [v.width, v.height]);
      }
    }
  }
  root.setAttribute("data-probe", btoa(unescape(encodeURIComponent(JSON.stringify(out)))));
})();
</script>"""


def _chromium() -> str:
    if CHROMIUM is None:
        why = "no headless Chromium on PATH (apt-get install chromium): the report page is not loaded"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return CHROMIUM


def _run(page: Path, profile: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         f"--user-data-dir={profile}", "--window-size=1280,900", *flags, page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def probe(page: Path, where: Path) -> dict[str, Any]:
    """Load a copy of ``page`` with the probe's scripts in Chromium: what the probe measured."""
    text = page.read_text(encoding="utf-8")
    copy = where / "probe.html"
    copy.write_text(text.replace("<head>", "<head>" + _HEAD, 1).replace("</body>", _PROBE + "</body>", 1))
    shown = _run(copy, where / "profile", "--dump-dom")
    found = re.search(r'data-probe="([A-Za-z0-9+/=]+)"', shown.stdout)
    assert found, f"the probe did not run (exit {shown.returncode}): {shown.stderr[-2000:]}"
    return dict(json.loads(base64.b64decode(found.group(1)).decode("utf-8")))


def assert_readable(page: Path, where: Path, *, pictures: int) -> dict[str, Any]:
    """The page is self-contained, loads cleanly in Chromium, holds ``pictures`` SVGs, and no text
    overflows; a screenshot of it is left in ``where``."""
    html = page.read_text(encoding="utf-8")
    assert not re.search(r"<script|<link|<img|<iframe|\bsrc=|url\(|@import", html), "the page loads something"
    found = probe(page, where)
    assert found["problems"] == [], found["problems"]
    assert found["resources"] == [], found["resources"]
    assert found["svgs"] == pictures, (found["svgs"], pictures)
    assert found["overflow"] == [], found["overflow"]
    assert found["outside"] == [], found["outside"]
    shot = _run(page, where / "profile", f"--screenshot={where / 'page.png'}")
    assert (where / "page.png").stat().st_size > 10_000, shot.stderr[-2000:]
    return found


def _crash_layer(target: str, workload: str) -> LayerReport:
    """The crash layer of ``check_target`` on one workload and the journaled model (the same coverage
    keys, from a real ``CrashVerdict``)."""
    found = check_crashes(target, workloads=[workload], models=["journaled"])
    assert isinstance(found.result, Violation), str(found)
    return LayerReport(
        layer="crash",
        verdict="broken",
        requested=True,
        seconds=found.seconds,
        broken=(
            {"requirement": str(found.result.requirement), "counterexample": found.result.counterexample},
        ),
        coverage={
            "checked": ["R-CRASH-1", "R-CRASH-2", "R-CRASH-3", "R-CRASH-4", "R-STATE-3"],
            "not_checked": [],
            "deciding_model": "journaled",
            "models": {"journaled": "broken"},
            "workloads": list(found.workloads),
            "workloads_not_run": [{"workload": w, "why": why} for w, why in found.skipped],
            "faults_not_injected": [{"workload": w, "fault": f} for w, f in found.not_exercised],
            "images": found.images,
        },
        text=str(found),
        detail=found,
    )


def test_the_page_of_a_stress_and_a_crash_counterexample_reads_in_chromium(tmp_path: Path) -> None:
    """The one fast check: a real stress violation (R-CONC-3) and a real crash counterexample (a retry
    trusting a second fsync after a failed one), on one page."""
    _chromium()
    logging.getLogger("capture_ledger").addHandler(logging.NullHandler())
    stressed = check_target(f"{BUG}:open_dir_retire_without_recheck", layers=["stress"], processes=0)
    crash = _crash_layer(f"{BUG}:open_dir_retry_trusts_second_fsync", "record-append-fsync-eio")
    layers = tuple(crash if layer.layer == "crash" else layer for layer in stressed.layers)
    verdict = TargetVerdict(target=stressed.target, layers=layers, seconds=stressed.seconds + crash.seconds)
    assert [layer.verdict for layer in verdict.layers] == ["skipped", "broken", "broken", "skipped"]
    page = write_check_report(verdict, tmp_path / "report")
    assert page == tmp_path / "report" / "index.html"
    html = page.read_text(encoding="utf-8")
    assert "R-CONC-3" in html and "FAILED (its pages may be lost)" in html and "op 0 raised" in html
    broken = crash.detail.study.clauses(crash.detail.study.configs[0], "journaled")
    assert broken  # the witness, the matrix, and one timeline per clause broken
    found = assert_readable(page, tmp_path, pictures=2 + len(broken))
    assert found["texts"] > 100, found["texts"]


@pytest.mark.slow
def test_the_page_of_a_whole_check_reads_in_chromium(tmp_path: Path) -> None:
    """``check --report`` itself, on the kit and the crash layer: every model and every clause broken
    gets its timeline."""
    _chromium()
    from capture_ledger.impl.cli.main import main

    target = f"{BUG}:open_dir_retry_trusts_second_fsync"
    code = main(["check", target, "--layers", "kit,crash", "--report", str(tmp_path / "report")])
    assert code == 1
    page = tmp_path / "report" / "index.html"
    html = page.read_text(encoding="utf-8")
    for model in ("journaled", "weakest-posix", "ext4-nojournal"):
        assert f"broken under {model}" in html
    timelines = html.count("The shortest counterexample to")
    assert timelines >= 3
    assert_readable(page, tmp_path, pictures=1 + timelines)


def test_the_probe_sees_overflow(tmp_path: Path) -> None:
    """The measure can fail: a word wider than its box, a picture's text past its viewBox, a console
    error and a missing picture are each reported."""
    page = tmp_path / "bad.html"
    page.write_text(
        "<!DOCTYPE html><html><head></head><body><div style='width:100px'>" + "x" * 300 + "</div>"
        "<svg xmlns='http://www.w3.org/2000/svg' width='100' height='40' viewBox='0 0 100 40'>"
        "<text x='10' y='20' font-family='monospace' font-size='12'>" + "y" * 60 + "</text></svg>"
        "<p>ok</p><script>console.error('boom')</script></body></html>",
        encoding="utf-8",
    )
    found = probe(page, tmp_path)
    assert found["svgs"] == 1
    assert any("xxx" in entry for entry in found["overflow"]), found
    assert any("yyy" in entry for entry in found["outside"]), found
    assert found["problems"] == ["error: boom"], found
