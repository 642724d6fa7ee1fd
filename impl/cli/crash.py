"""``capture-ledger crash``: the crash-consistency studies — the store under persistence models, and the
persistence models under the real kernel.

``capture-ledger crash`` runs the small study (every sync and ordering step switched off in turn, plus the
default protocol and its ``fence_sync`` options, on the small workloads, under all three persistence
models) and prints the matrix. ``--full`` adds every guard and the larger, sampled workloads; ``--model``,
``--workload`` and ``--config`` narrow it; ``--report DIR`` writes ``report.md`` with ``matrix.svg`` and
one timeline picture per counterexample. Exit code 0 when the default protocol shows no violation under
the journaled model (the study's own acceptance), 1 otherwise.

``capture-ledger crash --kernel`` runs the kernel study instead (docs/crash.md §The kernel study): each
workload on a real file-system image (``--fs``: ``ext4-ordered``, ``ext4-journal``, ``ext4-nojournal``,
``xfs``, ``btrfs``, and the ext4 ones at 4 KiB blocks as ``...-4k``; default the first three, 1 KiB ext4)
served through a block-write log, every crash state recovered by the kernel, read back by a
fresh store and judged, and compared with the matching persistence model. Progress goes to standard
error; ``--json`` prints one JSON object per file system. Exit code 0 when every state lies inside its
model and the default protocol keeps the contract on the journaled configurations, 1 otherwise, 2 when the
machine lacks what it needs (root, ``/dev/fuse``, loop devices, e2fsprogs, the ``kernel`` extra).

``capture-ledger crash --target module:callable`` studies any ledger instead, traced from outside
(docs/crash-target.md): each crash workload the target supports runs in a child process under ``strace -f
-y``, its file-system calls become the persistence models' effects, every image a model allows is read back
by a fresh handle of the target in another child process and judged; ``--option KEY=VALUE`` passes keyword
arguments to the factory, ``--first`` stops at the first violation under the strongest model (the time to
kill). It prints the matrix and the shortest counterexample of each broken clause;
``--json`` prints ``{"target", "verdict", "images", "broken": [{"clause", "model", "workload", "timeline"}],
"seconds", ...}``. Exit code 0 when no clause breaks under the journaled model (or under the strongest
``--model`` given), 1 when one does, 2 when the target cannot be loaded or traced (strace missing, ptrace
not permitted).

``capture-ledger crash --target module:callable --kernel [--fs F]`` runs those workloads on real file-system
images instead (docs/crash-target.md §On the real kernel; ``impl.study.kernel.kernel_target``): every crash
state of the block log recovered by the kernel, read back by a fresh handle of the target and judged, and
compared with the target's strace-recorded persistence model (a state outside it is a finding about the
model). ``--max-states`` bounds the states per recording (a seeded sample beyond: ``unknown``); ``--json``
prints one object per file system. Exit code 1 when a clause breaks on some file system, 0 otherwise, 2 when
the target cannot be loaded or traced or the machine lacks the kernel pieces.

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
from capture_ledger.impl.cli._progress import Progress, showing
from capture_ledger.impl.study.crash import CONFIGS, study, write_report
from capture_ledger.impl.study.kernel import FILESYSTEMS, FULL_WORKLOADS, KERNEL_WORKLOADS, MAX_STATES
from capture_ledger.spec.core.verdicts import EXIT_OK
from capture_ledger.spec.crash.durability import MODELS
from capture_ledger.spec.kit.crash import WORKLOADS, CrashCell, matrix_table

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``crash`` sub-command."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "crash",
        help="explore crash states of the file store under persistence models (or, with --kernel, check "
        "the models against real ext4); write the ordering study",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    parser.add_argument("--model", action="append", choices=sorted(MODELS), help="a persistence model")
    parser.add_argument(
        "--workload",
        action="append",
        choices=sorted(KERNEL_WORKLOADS),
        metavar="NAME",
        help=f"a workload (repeatable): {', '.join(WORKLOADS)}; with --kernel also "
        f"{', '.join(sorted(set(KERNEL_WORKLOADS) - set(WORKLOADS)))}",
    )
    parser.add_argument(
        "--config",
        action="append",
        choices=sorted(CONFIGS),
        metavar="LABEL",
        help="a store configuration (repeatable): 'default', 'fence_sync=file', 'fence_sync=syncfs', "
        "'no <step>' for a StoreVariant field switched off, 'fence_sync=file, no <step>'",
    )
    parser.add_argument("--report", type=Path, metavar="DIR", help="write report.md and SVG pictures here")
    parser.add_argument("--full", action="store_true", help="every configuration and workload")
    parser.add_argument("--budget", type=int, default=256, help="most images judged per crash point")
    parser.add_argument("--seed", type=int, default=0, help="seed for sampled crash points and subsets")
    parser.add_argument("--verbose", action="store_true", help="one line per configuration and workload")
    kernel = parser.add_argument_group("the kernel study")
    kernel.add_argument(
        "--kernel", action="store_true", help="crash states of real ext4 images, recovered by the kernel"
    )
    kernel.add_argument(
        "--fs", action="append", choices=sorted(FILESYSTEMS), help="a file-system configuration (repeatable)"
    )
    kernel.add_argument(
        "--subsets", type=int, default=16, help="most non-prefix subsets of one epoch's writes (seeded)"
    )
    kernel.add_argument(
        "--max-states",
        type=int,
        default=MAX_STATES,
        metavar="N",
        help="with --target: most kernel crash states judged per recording (a seeded sample beyond)",
    )
    kernel.add_argument("--json", action="store_true", help="one JSON object per file system (or target)")
    outside = parser.add_argument_group("any ledger, traced from outside")
    outside.add_argument(
        "--target", metavar="MODULE:CALLABLE", help="a ledger factory: its crash states, traced with strace"
    )
    outside.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a keyword argument for the factory",
    )
    outside.add_argument(
        "--first",
        action="store_true",
        help="stop at the first violation under the strongest model (time to kill)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the study ``args`` describe; print its results."""
    if args.target:
        from capture_ledger.impl.cli._crash_target import run_target

        return run_target(args)
    if args.option or args.first:
        raise UsageError("--option and --first go with --target")
    if args.kernel:
        return _run_kernel(args)
    if args.json or args.fs:
        raise UsageError("--json and --fs go with --kernel")
    unknown = sorted(set(args.workload or ()) - set(WORKLOADS))
    if unknown:
        raise UsageError(f"workload {', '.join(unknown)} runs with --kernel only")
    return _run_models(args)


# --------------------------------------------------------------------------------------- the models
def _progress(cell: CrashCell) -> None:
    figures = ", ".join(f"{e.model} {e.images} images {e.verdict}" for e in cell.explorations)
    seconds = sum(e.seconds for e in cell.explorations)
    print(f"  {cell.config} / {cell.workload}: {figures} ({seconds:.1f} s)", file=sys.stderr, flush=True)


def _run_models(args: argparse.Namespace) -> int:
    with Progress(showing(json=False), label="crash: cells judged") as bar:

        def done(cell: CrashCell) -> None:
            bar.tick()
            bar.phase(f"{cell.config} / {cell.workload}")
            if args.verbose:
                _progress(cell)

        result = study(
            configs=args.config,
            models=args.model,
            workloads=args.workload,
            full=args.full,
            budget=args.budget,
            seed=args.seed,
            progress=done,
        )
    images, distinct, seconds = result.totals()
    print(matrix_table(result))
    print()
    print(
        f"{images} crash images judged ({distinct} distinct read) in {seconds:.1f} s: "
        f"{images / seconds if seconds else 0.0:.0f} images/s; {result.seconds:.1f} s in all"
    )
    if args.report is not None:
        print(f"report: {write_report(result, args.report)}")
    if "default" in result.configs and "journaled" in result.models:
        return result.exit_code("journaled", ("default",))
    return EXIT_OK


# --------------------------------------------------------------------------------------- the kernel
def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # unwinds through every teardown


def _run_kernel(args: argparse.Namespace) -> int:
    from capture_ledger.impl.study.kernel import (
        KernelCell,
        KernelSetupError,
        comparison_svg,
        kernel_study,
        missing,
    )

    if args.model or args.full:
        raise UsageError("--model and --full go with the model study, not --kernel")
    lacking = missing()
    if lacking:
        raise UsageError("the kernel study cannot run here; it needs " + "; ".join(lacking))

    def cell_done(cell: KernelCell) -> None:
        clauses = ", ".join(sorted(cell.clauses)) or "none"
        print(
            f"  {cell.fs} / {cell.config} / {cell.workload}: {cell.states} states, "
            f"{cell.inside.get(cell.model, 0)} inside {cell.model}, "
            f"{cell.outside.get(cell.model, 0)} outside, "
            f"{cell.model_only.get(cell.model, 0)} model-only; broken: {clauses} "
            f"({cell.record_seconds:.1f} s recording, {cell.seconds:.1f} s judging)",
            file=sys.stderr,
            flush=True,
        )

    def tick(title: str, done: int, total: int) -> None:
        if done and done % 200 == 0:
            print(f"    {title}: {done}/{total} states", file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        result = kernel_study(
            file_systems=args.fs,
            workloads=args.workload or FULL_WORKLOADS,
            configs=args.config,
            subsets=args.subsets,
            seed=args.seed,
            progress=cell_done,
            tick=tick,
        )
    except KernelSetupError as error:
        raise UsageError(str(error)) from error
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.json:
        for fs in result.file_systems():
            print(json.dumps(result.summary(fs)))
    else:
        print(result.table())
        print()
        for (fs, config), clauses in result.verdicts().items():
            print(f"{fs} / {config}: {', '.join(sorted(clauses)) or 'no clause broken'}")
        states = sum(c.states for c in result.cells)
        judging = sum(c.seconds for c in result.cells)
        print(
            f"{states} kernel crash states recovered and judged in {judging:.1f} s "
            f"({states / judging if judging else 0.0:.0f} states/s); {result.seconds:.1f} s in all"
        )
        for cell in result.cells:
            for finding in cell.findings:
                if finding.model == cell.model:
                    print(f"\noutside {finding.model}: {finding.workload} {finding.state}")
                    print(finding.timeline)
    if args.report is not None:
        args.report.mkdir(parents=True, exist_ok=True)
        (args.report / "kernel.svg").write_text(comparison_svg(result))
        (args.report / "kernel.md").write_text(result.markdown())
        print(f"report: {args.report / 'kernel.md'}", file=sys.stderr)
    return 0 if result.acceptable() else 1
