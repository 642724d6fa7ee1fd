"""``capture-ledger crash --target``: the crash states of any ledger, traced from outside (SPEC.md §Crash,
R-CRASH-1..4, R-KIT-13; docs/crash-target.md).

``run_target(args)`` checks the target loads and opens one handle (exit 2, one line, when it cannot be
loaded or its factory raises at once: ``_preflight.open_once``) and that this machine can
trace (exit 2 when strace is missing or ptrace is not permitted), runs ``spec.kit.crash.study_targets``
on it with the ``--model``, ``--workload``, ``--budget``, ``--seed``, ``--option`` and ``--first`` given,
and prints the matrix and the shortest counterexample of each broken clause, or with ``--json`` the pinned
object (``target_json``: ``spec.kit.crash.study_summary``'s, its ``verdict`` the deciding model's, with
``models`` giving each model's verdict and ``deciding_model``); ``--report DIR`` writes ``report.md`` and
the pictures. The exit code is ``spec.kit.crash.study_exit_code``'s (``CrashStudy.exit_code``:
``exit_code`` of a ``Violation`` under the strongest model, else 0).

Not guaranteed: the wording of the human-readable output (``--json`` is stable).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from capture_ledger.impl.cli._options import UsageError
from capture_ledger.impl.cli._preflight import open_once
from capture_ledger.impl.cli._progress import Progress, showing
from capture_ledger.spec.core.verdicts import Unknown
from capture_ledger.spec.crash.durability import MODELS
from capture_ledger.spec.kit import parse_options
from capture_ledger.spec.kit.crash import (
    CrashCell,
    TargetStudy,
    matrix_table,
    study_exit_code,
    study_summary,
    study_targets,
    write_study_report,
)
from capture_ledger.spec.kit.crash.strace import Target, TraceError, tracing_problem

__all__ = ["run_kernel_target", "run_target", "target_json"]


def _progress(cell: CrashCell) -> None:
    figures = ", ".join(f"{e.model} {e.images} images {e.verdict}" for e in cell.explorations)
    print(
        f"  {cell.config} / {cell.workload}: {figures} (traced in {cell.record_seconds:.1f} s)",
        file=sys.stderr,
        flush=True,
    )


def run_target(args: argparse.Namespace) -> int:
    """Study ``args.target``; print the result; the exit code (see the module docstring)."""
    if args.kernel:
        return run_kernel_target(args)
    if args.full or args.config or args.fs:
        raise UsageError("--target goes without --full, --config and --fs (--fs: with --kernel)")
    # exit 2, one line: a target that cannot be loaded (TargetError), a factory raising at the first open
    open_once(args.target, parse_options(args.option))
    problem = tracing_problem()
    if problem is not None:
        raise UsageError(f"cannot trace {args.target}: {problem}")
    unknown = sorted(set(args.workload or ()) - set(_workloads()))
    if unknown:
        raise UsageError(f"workload {', '.join(unknown)} runs with --kernel only")
    models = [m for m in MODELS if m in (args.model or MODELS)]
    target = Target(target=args.target, options=tuple(parse_options(args.option).items()), cwd=Path.cwd())
    with Progress(showing(json=args.json), label="crash --target: workloads judged") as bar:

        def done(cell: CrashCell) -> None:
            bar.tick()
            bar.phase(cell.workload)
            if args.verbose:
                _progress(cell)

        try:
            study = study_targets(
                [target],
                models=models,
                first=args.first,
                workloads=args.workload,
                budget=args.budget,
                seed=args.seed,
                progress=done,
            )
        except TraceError as error:
            raise UsageError(str(error)) from error
    summary = target_json(study, target.name)
    if args.json:
        print(json.dumps(summary))
    else:
        images, distinct, seconds = study.totals()
        print(matrix_table(study, rows="target"))
        print()
        ran = ", ".join(study.workloads) or "none"
        print(f"workloads run: {ran}")
        for _, workload, why in study.skipped:
            print(f"not run: {workload} ({why})")
        for _, workload, why in study.unsupported():
            print(f"unknown: {workload}: {why}")
        for _, workload, fault in study.not_exercised():
            print(f"not exercised: {workload}: {fault} (fault not injected: the operation made no such call)")
        print(
            f"{images} crash images judged ({distinct} distinct read back) in {seconds:.1f} s: "
            f"{images / seconds if seconds else 0.0:.0f} images/s; {study.seconds:.1f} s in all"
        )
        print(_deciding_line(summary))
        for entry in summary["broken"]:
            print(f"\n{entry['clause']} under {entry['model']} ({entry['workload']}):\n{entry['timeline']}")
    if args.report is not None:
        print(f"report: {write_study_report(study, args.report)}", file=sys.stderr)
    return study_exit_code(study)


def target_json(study: TargetStudy, name: str) -> dict[str, Any]:
    """The ``--json`` object: ``study_summary``'s, its ``verdict`` the deciding model's and its ``models``
    each model's verdict in a word (docs/crash-target.md §JSON).

    ``verdict`` is the kind of the deciding model's result (the strongest studied, ``journaled`` when it
    runs, as the exit status): ``violation``; ``ok`` only when every image of every workload was judged;
    else ``unknown``, ``deciding_why`` then saying why (``none found (sampled)``: no violation in a
    sample). ``models`` maps each model studied, strongest first, to ``ok``, ``broken``, ``none found
    (sampled)`` or ``unknown`` (``CrashStudy.model_verdict``); the weaker models inform, never decide.
    """
    summary = study_summary(study, name)
    deciding = study.deciding_model()
    result = study.result(name, deciding) if deciding else Unknown(reason="no model studied")
    summary["verdict"] = result.kind
    summary["models"] = {model: study.model_verdict(name, model) for model in study.models}
    summary["deciding_model"] = deciding
    summary["deciding_why"] = None if not isinstance(result, Unknown) else f"{result.reason}; {result.spent}"
    return summary


def _deciding_line(summary: dict[str, Any]) -> str:
    words = ", ".join(f"{model} {word}" for model, word in summary["models"].items())
    deciding = summary["deciding_model"]
    line = f"models: {words}; the exit code follows {deciding} ({summary['verdict']})"
    if deciding is not None and deciding != "journaled":
        line += (
            f"\nnote: only the journaled model decides the exit code of a run that studies it; journaled "
            f"was not studied here (--model), so {deciding}, the strongest studied, stands in for it"
        )
    elif len(summary["models"]) > 1:
        line += "; the weaker models inform, they do not decide"
    return line


def _workloads() -> tuple[str, ...]:
    from capture_ledger.spec.kit.crash import WORKLOADS

    return tuple(WORKLOADS)


# ------------------------------------------------------------------------------------ on the real kernel
def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds through every teardown


def run_kernel_target(args: argparse.Namespace) -> int:
    """``crash --target TARGET --kernel``: the target's crash workloads on real images (docs/crash-target.md
    §On the real kernel); one result per ``--fs`` (default ``DEFAULT_FILESYSTEMS``). Exit 1 when a clause
    breaks on some file system, 0 otherwise (``unknown`` included), 2 when the target cannot be loaded or
    traced or the machine lacks a kernel piece (one line saying which)."""
    from capture_ledger.impl.study.kernel import (
        DEFAULT_FILESYSTEMS,
        FILESYSTEMS,
        KernelSetupError,
        kernel_target,
        lacking,
        missing,
        workspace,
    )
    from capture_ledger.spec.kit.crash import WORKLOADS

    if args.full or args.config or args.model or args.first or args.report is not None:
        raise UsageError("--target --kernel goes without --full, --config, --model, --first and --report")
    absent = missing()
    if absent:
        raise UsageError("the kernel study cannot run here; it needs " + "; ".join(absent))
    names = list(dict.fromkeys(args.fs or DEFAULT_FILESYSTEMS))
    for name in names:
        needs = lacking(FILESYSTEMS[name])
        if needs:
            raise UsageError(f"{name} cannot run here; it needs " + "; ".join(needs))
    options = parse_options(args.option)
    open_once(args.target, options)
    problem = tracing_problem()
    if problem is not None:
        raise UsageError(f"cannot trace {args.target}: {problem}")
    unknown = sorted(set(args.workload or ()) - set(WORKLOADS))
    if unknown:
        raise UsageError(f"workload {', '.join(unknown)} is not in the crash catalogue (--target runs those)")
    target = Target(target=args.target, options=tuple(options.items()), cwd=Path.cwd())
    previous = signal.signal(signal.SIGTERM, _interrupt)
    results = []
    try:
        for name in names:
            with workspace() as root:

                def done(cell: Any, fs: str = name) -> None:
                    if args.verbose:
                        print(
                            f"  {fs} / {cell.workload}: {cell.states} states of {cell.candidates}, "
                            f"{cell.outside} outside the model, broken: "
                            f"{', '.join(b.clause for b in cell.broken) or 'none'}",
                            file=sys.stderr,
                            flush=True,
                        )

                results.append(
                    kernel_target(
                        target,
                        FILESYSTEMS[name],
                        root,
                        workloads=args.workload,
                        subsets=args.subsets,
                        max_states=args.max_states,
                        seed=args.seed,
                        progress=done,
                    )
                )
    except (KernelSetupError, TraceError) as error:
        raise UsageError(str(error)) from error
    finally:
        signal.signal(signal.SIGTERM, previous)
    for result in results:
        summary = result.summary()
        if args.json:
            print(json.dumps(summary))
            continue
        sampled = f", sampled in {', '.join(summary['sampled'])}" if summary["sampled"] else ""
        print(
            f"{result.fs} ({result.model} model): {summary['verdict']}; {summary['states']} kernel states "
            f"judged{sampled}; {summary['outside_model']} outside the model, "
            f"{summary['model_unknown']} beyond its enumeration, {summary['unrecoverable']} not mountable; "
            f"{result.seconds:.1f} s"
        )
        for entry in summary["not_run"]:
            print(f"  not run: {entry['workload']} ({entry['why']})")
        for entry in summary["broken"]:
            print(f"\n{entry['clause']} on {result.fs} ({entry['workload']}, state {entry['state']}):")
            print(entry["timeline"])
            print(entry["blocks"])
        for finding in summary["findings"]:
            print(
                f"\noutside the {finding['model']} model (a finding about the model): {finding['workload']}"
            )
            print(finding["timeline"])
    return 1 if any(r.verdict == "violation" for r in results) else 0
