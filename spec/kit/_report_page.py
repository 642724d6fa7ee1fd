"""``write_check_report``: a ``TargetVerdict`` as one self-contained HTML page a person reads (SPEC.md
§Conformance; docs/check.md §Report).

``capture-ledger check TARGET --report DIR`` writes ``DIR/index.html``: the verdict and one row per layer
first, then a section per layer with its coverage (requirements checked and not checked; the kit's
operations, examples and handles; stress's runs; crash's models deciding and informing, workloads run and
not run with why, faults requested against those injected, explorations sampled, traces no model
follows) and each counterexample: the kit's runnable program, the stress witness as text and as its
picture (``spec.kit.stress.witness_svg``), the crash matrix (``spec.kit.crash.matrix_svg``) and, for
each model and each clause it breaks, the shortest counterexample as text and as a timeline
(``spec.kit.crash.timeline_svg``). The pictures are inline SVG and the style inline CSS: the page loads
nothing (no script, no font, no network).

The pictures come from ``LayerReport.detail`` (the kit's ``LedgerVerdict``, the ``StressReport`` tuple,
the ``CrashVerdict``); a layer without one (it did not run, or a verdict built by hand) shows its text.

Not guaranteed: the page's layout, wording or colours (it is for people: ``check --json`` is for tools).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capture_ledger.spec.core.verdicts import Violation

if TYPE_CHECKING:
    from capture_ledger.spec.kit._suite import LayerReport, TargetVerdict

__all__ = ["render_check_report", "write_check_report"]

_STYLE = """
body { font-family: sans-serif; margin: 24px; max-width: 1200px; color: #222; }
h1 { font-size: 22px; overflow-wrap: anywhere; }
h2 { font-size: 18px; border-bottom: 1px solid #ccc; padding-bottom: 4px; margin-top: 32px; }
h3 { font-size: 15px; overflow-wrap: anywhere; }
table { border-collapse: collapse; margin: 8px 0; table-layout: fixed; width: 100%; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; word-break: break-word; }
th { background: #f4f4f4; }
code { overflow-wrap: anywhere; }
pre { background: #f7f7f7; border: 1px solid #e2e2e2; padding: 8px; white-space: pre-wrap;
      overflow-wrap: anywhere; font-size: 12px; }
p, li, dd, dt { overflow-wrap: anywhere; }
figure { margin: 12px 0; }
figure svg { max-width: 100%; height: auto; display: block; border: 1px solid #eee; }
.verdict { display: inline-block; padding: 1px 8px; border-radius: 4px; font-weight: bold; }
.ok, .conforms { background: #dff0d8; color: #2d662d; }
.broken { background: #f2dede; color: #a12a27; }
.unknown, .incomplete { background: #fcf8e3; color: #7a5d12; }
.skipped { background: #eeeeee; color: #555; }
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def _badge(kind: str) -> str:
    return f'<span class="verdict {_e(kind)}">{_e(kind)}</span>'


def _list(items: Iterable[object], empty: str = "none") -> str:
    shown = [f"<li>{_e(i)}</li>" for i in items]
    return f"<ul>{''.join(shown)}</ul>" if shown else f"<p>{_e(empty)}</p>"


def _codes(items: Iterable[object]) -> str:
    return ", ".join(f"<code>{_e(i)}</code>" for i in items) or "none"


def _table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    cells = ["<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows]
    if not cells:
        return "<p>none</p>"
    heading = "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"
    return f"<table>{heading}{''.join(cells)}</table>"


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg.strip()}<figcaption>{_e(caption)}</figcaption></figure>"


def _requirements(layer: LayerReport) -> str:
    return (
        f"<p>Requirements checked: {_codes(layer.coverage.get('checked', []))}</p>"
        f"<p>Requirements not checked: {_codes(layer.coverage.get('not_checked', []))}</p>"
    )


# ------------------------------------------------------------------------------------------- layers
def _kit(layer: LayerReport) -> str:
    cov = layer.coverage
    parts = [
        f"<p>Operations checked: {_codes(cov.get('operations', []))}</p>",
        _requirements(layer),
        f"<p>{_e(cov.get('examples', 0))} examples, {_e(cov.get('steps', 0))} steps, "
        f"{_e(cov.get('handles', '?'))} handle(s) per workspace.</p>",
    ]
    if "one_handle_because" in cov:
        parts.append(f"<p>One handle because {_e(cov['one_handle_because'])}.</p>")
    broken = getattr(layer.detail, "broken", None)
    if broken:
        for found in broken:
            parts += [
                f"<h3>{_e(found.requirement)} broken</h3>",
                f"<p>{_e(found.message)}</p>",
                f"<p>The kit's runnable program ({found.steps} step(s)"
                + ("" if found.shrunk else ", not shrunk")
                + "):</p>",
                f"<pre>{_e(found.counterexample)}</pre>",
            ]
    else:
        parts += _broken_text(layer)
    return "".join(parts)


def _broken_text(layer: LayerReport) -> list[str]:
    return [
        f"<h3>{_e(b['requirement'])} broken</h3><pre>{_e(b['counterexample'])}</pre>" for b in layer.broken
    ]


def _stress_reports(layer: LayerReport) -> tuple[Any, ...]:
    detail = layer.detail
    return tuple(detail) if isinstance(detail, tuple) else ()


def _stress(layer: LayerReport) -> str:
    from capture_ledger.spec.kit.stress import witness_svg

    runs = layer.coverage.get("runs", {})
    rows = []
    for name, run in runs.items():
        if isinstance(run, dict):
            rows.append((name, run.get("verdict"), run.get("calls"), run.get("rounds"), run.get("seed")))
        else:
            rows.append((name, str(run), "-", "-", "-"))
    parts = [
        _requirements(layer),
        "<p>Runs:</p>",
        _table(("run", "verdict", "calls", "rounds", "seed"), rows),
    ]
    reports = _stress_reports(layer)
    if not reports:
        return "".join(parts + _broken_text(layer))
    for name, report in zip(runs, reports, strict=False):
        verdict = report.verdict
        if not isinstance(verdict, Violation):
            continue
        where = f"{report.calls} calls in {report.rounds} round(s), seed {report.seed}"
        parts += [
            f"<h3>{_e(verdict.requirement)} broken on {_e(name)} ({_e(where)})</h3>",
            "<p>The witness:</p>",
            f"<pre>{_e(verdict.counterexample)}</pre>",
            _figure(witness_svg(verdict), f"The witness of {verdict.requirement}: one lane per call."),
        ]
    return "".join(parts)


def _broken_crashes(found: Any) -> list[tuple[str, str, Any]]:
    """``(model, clause, shortest counterexample)`` for every model and every clause it breaks."""
    study = found.study
    name = study.configs[0] if study.configs else found.target
    broken = []
    for model in study.models:
        for clause in sorted(study.clauses(name, model)):
            example = study.shortest(name, model, clause=clause)
            if example is not None:
                broken.append((model, clause, example))
    return broken


def _crash_coverage(layer: LayerReport, found: Any) -> list[str]:
    cov = layer.coverage
    deciding = cov.get("deciding_model")
    models = [(m, v, "deciding" if m == deciding else "informing") for m, v in cov.get("models", {}).items()]
    not_run = [(w["workload"], w["why"]) for w in cov.get("workloads_not_run", [])]
    parts = [
        _requirements(layer),
        f"<p>{_e(cov.get('images', 0))} crash images judged.</p>",
        "<p>Persistence models (the strongest decides; the weaker ones inform):</p>",
        _table(("model", "verdict", "role"), models),
        f"<p>Workloads run: {_codes(cov.get('workloads', []))}</p>",
        "<p>Workloads not run:</p>",
        _table(("workload", "why"), not_run),
    ]
    if found is not None:
        study = found.study
        name = study.configs[0] if study.configs else found.target
        faults = [
            (
                f["workload"],
                "; ".join(map(str, f["requested"])),
                "; ".join(map(str, f["injected"])) or "none",
                "yes" if len(f["injected"]) == len(f["requested"]) else "not exercised",
            )
            for f in study.faults(name)
        ]
        parts += [
            "<p>Faults requested and injected:</p>",
            _table(("workload", "requested", "injected", "exercised"), faults),
        ]
    missed = [(f["workload"], f["fault"]) for f in cov.get("faults_not_injected", [])]
    if missed:
        parts += ["<p>Faults not exercised (never injected):</p>", _table(("workload", "fault"), missed)]
    sampled = [(s["workload"], s["model"]) for s in cov.get("sampled", [])]
    if sampled:
        parts += ["<p>Explorations judged on a sample:</p>", _table(("workload", "model"), sampled)]
    unsupported = [(u["workload"], u["why"]) for u in cov.get("unsupported", [])]
    if unsupported:
        parts += ["<p>Traces with effects no model follows:</p>", _table(("workload", "why"), unsupported)]
    return parts


def _crash(layer: LayerReport) -> str:
    from capture_ledger.spec.kit.crash import CrashVerdict, matrix_svg, timeline_svg

    found = layer.detail if isinstance(layer.detail, CrashVerdict) else None
    parts = _crash_coverage(layer, found)
    if found is None:
        return "".join(parts + _broken_text(layer))
    parts.append(_figure(matrix_svg(found.study), "Which clause breaks, per workload row and model."))
    for model, clause, example in _broken_crashes(found):
        parts += [
            f"<h3>{_e(clause)} broken under {_e(model)} (workload {_e(example.workload)})</h3>",
            f"<pre>{_e(example.render())}</pre>",
            _figure(
                timeline_svg(found.study.recording_of(example), example),
                f"The shortest counterexample to {clause} under {model}.",
            ),
        ]
    return "".join(parts)


_SECTIONS = {"kit": _kit, "stress": _stress, "crash": _crash}


def _section(layer: LayerReport) -> str:
    head = f'<h2 id="{_e(layer.layer)}">{_e(layer.layer)} {_badge(layer.verdict)}</h2>'
    why = f"<p>Why: {_e(layer.why_skipped)}</p>" if layer.why_skipped else ""
    if layer.why_skipped == "not requested" or layer.layer not in _SECTIONS:
        return head + why
    if layer.verdict == "skipped":
        return head + why + _requirements(layer)
    return head + why + f"<p>{layer.seconds:.1f} s.</p>" + _SECTIONS[layer.layer](layer)


def render_check_report(verdict: TargetVerdict) -> str:
    """The page (see the module docstring) as one HTML document."""
    rows = "".join(
        f'<tr><td><a href="#{_e(layer.layer)}">{_e(layer.layer)}</a></td><td>{_badge(layer.verdict)}</td>'
        f"<td>{'yes' if layer.requested else 'no'}</td>"
        f"<td>{_e(', '.join(b['requirement'] for b in layer.broken) or '-')}</td>"
        f"<td>{_e(layer.why_skipped or '-')}</td><td>{layer.seconds:.1f} s</td></tr>"
        for layer in verdict.layers
    )
    table = (
        "<table><colgroup><col style='width:10%'><col style='width:11%'><col style='width:10%'>"
        "<col style='width:17%'><col style='width:42%'><col style='width:10%'></colgroup>"
        "<tr><th>layer</th><th>verdict</th><th>requested</th><th>broken</th><th>why</th><th>time</th></tr>"
        f"{rows}</table>"
    )
    title = f"capture-ledger check {verdict.target}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{_e(title)}</h1>"
        f"<p>Verdict: {_badge(verdict.verdict)} in {verdict.seconds:.1f} s "
        f"(exit code {verdict.exit_code}).</p>{table}"
        + "".join(_section(layer) for layer in verdict.layers)
        + "</body></html>\n"
    )


def write_check_report(verdict: TargetVerdict, directory: Path) -> Path:
    """Write ``directory/index.html`` (creating ``directory``): the page of ``verdict``.

    Returns:
        The path of ``index.html``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    page = directory / "index.html"
    page.write_text(render_check_report(verdict), encoding="utf-8")
    return page
