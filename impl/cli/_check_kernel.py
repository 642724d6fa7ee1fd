"""``check --layers kernel``: the kernel layer of ``check`` (SPEC.md §Crash, R-CRASH-1..4, R-STATE-3;
docs/check.md, docs/crash-target.md §On the real kernel).

``kernel_layer(target, options, filesystems)`` runs ``crash --target TARGET --kernel`` on each file system
(``impl.study.kernel.kernel_target``) and folds the results into one ``LayerReport``: ``broken`` when a clause
breaks on some file system (each broken clause once, with the file system, workload and state), else
``unknown`` when some file system sampled its states, ran nothing, or could not run here, else ``ok``.
``spec.kit.check_target`` cannot build this layer itself (``spec`` never imports ``impl``): the command
hands it in as ``kernel=``.

Guaranteed: a file system that cannot run here (a missing tool, no root, no strace) is named in the
coverage's ``not_run_file_systems`` with why, never passed silently; the layer is ``skipped`` when none can.
A state outside the target's strace-recorded model is a finding about the model (coverage ``findings``),
not a verdict on the ledger. Not guaranteed: that a second run logs the same block writes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from capture_ledger.spec.kit import LayerReport

__all__ = ["CRASH_CLAUSES", "kernel_layer"]

#: What the kernel layer judges in every crash state.
CRASH_CLAUSES = ("R-CRASH-1", "R-CRASH-2", "R-CRASH-3", "R-CRASH-4", "R-STATE-3")


def kernel_layer(target: str, options: dict[str, Any], filesystems: Sequence[str]) -> LayerReport:
    """Run the kernel layer on ``target`` over ``filesystems`` (see the module docstring)."""
    from capture_ledger.impl.study.kernel import (
        FILESYSTEMS,
        KernelSetupError,
        kernel_target,
        lacking,
        missing,
        workspace,
    )
    from capture_ledger.spec.kit.crash.strace import Target, TraceError, tracing_problem

    started = time.perf_counter()
    not_run: dict[str, str] = {}
    absent = missing()
    problem = tracing_problem()
    runnable: list[str] = []
    for name in dict.fromkeys(filesystems):
        needs = ([*absent, problem] if problem else absent) or lacking(FILESYSTEMS[name])
        if needs:
            not_run[name] = "; ".join(needs)
        else:
            runnable.append(name)
    results = []
    spec = Target(target=target, options=tuple(options.items()), cwd=Path.cwd())
    for name in runnable:
        try:
            with workspace() as root:
                results.append(kernel_target(spec, FILESYSTEMS[name], root))
        except (KernelSetupError, TraceError) as error:
            not_run[name] = str(error)
    coverage: dict[str, Any] = {
        "checked": list(CRASH_CLAUSES) if results else [],
        "not_checked": [] if results else list(CRASH_CLAUSES),
        "file_systems": {r.fs: _fs_coverage(r.summary()) for r in results},
        "not_run_file_systems": not_run,
    }
    broken = [
        {"requirement": entry.clause, "counterexample": f"{r.fs} / {workload}, state {entry.state}"}
        for r in results
        for workload, entry in r.broken()
    ]
    seconds = time.perf_counter() - started
    text = "\n".join(_line(r.summary()) for r in results)
    text += "".join(f"\nnot run on {fs}: {why}" for fs, why in not_run.items())
    if not results:
        why = "no file system could run here: " + "; ".join(f"{fs}: {why}" for fs, why in not_run.items())
        return LayerReport(
            layer="kernel",
            verdict="skipped",
            requested=True,
            why_skipped=why,
            seconds=seconds,
            coverage=coverage,
            text=text.strip(),
        )
    if broken:
        verdict, why_undecided = "broken", None
    elif any(r.verdict != "ok" for r in results) or not_run:
        verdict = "unknown"
        undecided = [f"{r.fs}: {r.why_unknown()}" for r in results if r.verdict == "unknown"]
        undecided += [f"{fs}: not run ({why})" for fs, why in not_run.items()]
        why_undecided = "; ".join(undecided)
    else:
        verdict, why_undecided = "ok", None
    return LayerReport(
        layer="kernel",
        verdict=verdict,  # type: ignore[arg-type]  # one of the LayerKind literals, chosen above
        requested=True,
        why_skipped=why_undecided,
        seconds=seconds,
        broken=tuple(_first_per_requirement(broken)),
        coverage=coverage,
        text=text.strip(),
        detail=tuple(results),
    )


def _fs_coverage(summary: dict[str, Any]) -> dict[str, Any]:
    return {
        "verdict": summary["verdict"],
        "states": summary["states"],
        "outside_model": summary["outside_model"],
        "sampled": summary["sampled"],
        "workloads": summary["workloads"],
        "not_run": summary["not_run"],
        "findings": len(summary["findings"]),
    }


def _line(summary: dict[str, Any]) -> str:
    return (
        f"{summary['fs']} ({summary['model']} model): {summary['verdict']}; "
        f"{summary['states']} kernel states, {summary['outside_model']} outside the model"
    )


def _first_per_requirement(broken: list[dict[str, str]]) -> list[dict[str, str]]:
    seen: dict[str, dict[str, str]] = {}
    for entry in broken:
        seen.setdefault(entry["requirement"], entry)
    return [seen[r] for r in sorted(seen)]
