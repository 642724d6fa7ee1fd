"""``capture-ledger check TARGET``: every layer of the kit on one ledger, one verdict (SPEC.md
§Conformance; docs/check.md).

``check TARGET [--layers kit,stress,crash,kernel] [--handles N] [--processes P] [--option KEY=VALUE]
[--profile P] [--fs F] [--json] [--report DIR]`` runs ``spec.kit.check_target``: the sequential kit,
``stress`` (threads, then worker processes when the ledger's handles share state across processes), the
crash layer, and the kernel layer when asked for (``crash --target TARGET --kernel`` on each ``--fs``,
default ``KERNEL_FILESYSTEMS``: ``_check_kernel``); each layer says what it exercised and what it could not.

Exit codes: 0 conforms, 1 broken, 2 the target cannot be loaded (one line on standard error), 3
incomplete (a requested layer could not decide, or was skipped). ``--json`` prints one object:
``{"target", "verdict": "conforms"|"broken"|"incomplete", "layers": [{"layer", "verdict":
"ok"|"broken"|"unknown"|"skipped", "why_skipped", "seconds", "broken": [{"requirement",
"counterexample"}], "coverage": {...}}], "seconds"}``. Progress goes to standard error when it is a
terminal and ``--json`` is not given (``_progress``). ``--report DIR`` also writes ``DIR/index.html``
(``spec.kit.write_check_report``; docs/check.md §Report), whatever the verdict.

Not guaranteed: the wording of the text output; that ``conforms`` proves conformance.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capture_ledger.impl.cli._options import UsageError
from capture_ledger.impl.cli._preflight import open_once
from capture_ledger.impl.cli._progress import Progress, showing

if TYPE_CHECKING:
    from capture_ledger.spec.kit import LayerReport

__all__ = ["KERNEL_FILESYSTEMS", "register", "run_check"]

#: The kernel layer's file systems unless ``--fs`` is given: every kind this kernel mounts.
KERNEL_FILESYSTEMS = ("ext4-ordered", "ext4-nojournal", "xfs", "btrfs")


def register(subparsers: Any) -> None:
    """Add ``check`` to the ``capture-ledger`` parser."""
    parser = subparsers.add_parser(
        "check",
        help="run every layer of the kit (sequential, stress, crash, kernel) on a ledger: one verdict",
        description="Run the sequential kit, stress (threads, and processes when the ledger's handles "
        "share state across processes) and the crash layer on a ledger factory, in that order, and give "
        "one verdict saying what each layer exercised and what it could not. Exit 0 conforms, 1 broken, "
        "2 the target cannot be loaded, 3 incomplete.",
    )
    parser.add_argument("target", help="module:callable taking a workspace path and returning a ledger")
    parser.add_argument(
        "--layers",
        default=None,
        help="comma-separated layers among kit, stress, crash, kernel (default: kit,stress,crash)",
    )
    parser.add_argument(
        "--handles",
        type=int,
        default=None,
        help="handles per workspace (default: 3 when two handles on one workspace share rows, else 1)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=None,
        help="stress's worker processes (default: 2 when the handles share state across processes; 0: none)",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a keyword argument for the factory (a value read as JSON when it is JSON); repeatable",
    )
    parser.add_argument(
        "--profile",
        choices=("dev", "ci", "nightly"),
        default=None,
        help="Hypothesis settings profile of the sequential kit (default: $CAPTURE_LEDGER_PROFILE or dev)",
    )
    parser.add_argument(
        "--fs",
        action="append",
        default=None,
        metavar="F",
        help="a file system of the kernel layer (repeatable; default: " + ", ".join(KERNEL_FILESYSTEMS) + ")",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        metavar="DIR",
        help="also write DIR/index.html: one self-contained page with each layer's coverage, "
        "counterexamples and pictures",
    )
    parser.set_defaults(handler=run_check)


def run_check(args: argparse.Namespace) -> int:
    """Run ``check``; the exit code (see the module docstring).

    Raises:
        UsageError: an unknown layer or a setting out of range.
        TargetError: the target cannot be loaded.
    """
    from capture_ledger.spec.kit import DEFAULT_LAYERS, OptionError, TargetError, check_target, parse_options

    open_once(args.target, parse_options(args.option))  # exit 2, one line: the factory raised at once
    layers = None if args.layers is None else [n.strip() for n in args.layers.split(",") if n.strip()]
    logging.getLogger("capture_ledger").addHandler(logging.NullHandler())  # discarded writes warn, by design
    requested = len(layers) if layers is not None else len(DEFAULT_LAYERS)
    kernel = _kernel_runner(args, layers)
    with Progress(showing(json=args.json), label="check: layers", total=requested) as bar:

        def progress(layer: str, what: str) -> None:
            if what == "running":
                bar.phase(f"{layer} running")
            else:
                bar.tick()
                bar.note(f"check: {layer}: {what}")

        try:
            verdict = check_target(
                args.target,
                layers=layers,
                handles=args.handles,
                processes=args.processes,
                options=parse_options(args.option),
                profile=args.profile,
                progress=progress,
                kernel=kernel,
            )
        except (TargetError, OptionError):
            raise  # exit 2, one line naming the target (``main``)
        except ValueError as error:
            raise UsageError(str(error)) from None
    if args.report is not None:
        from capture_ledger.spec.kit import write_check_report

        page = write_check_report(verdict, args.report)
        print(f"wrote {page}", file=sys.stderr)
    if args.json:
        print(json.dumps(verdict.to_json(), indent=2))
        return verdict.exit_code
    print(verdict.summary())
    for layer in verdict.layers:
        if layer.verdict == "broken":
            print(f"\n--- {layer.layer} ---\n{layer.text}")
    return verdict.exit_code


def _kernel_runner(args: argparse.Namespace, layers: list[str] | None) -> Callable[[], LayerReport] | None:
    """The kernel layer for ``check_target`` when it is requested, on ``--fs`` (checked here: exit 2)."""
    if args.fs and (layers is None or "kernel" not in layers):
        raise UsageError("--fs goes with --layers ...,kernel")
    if layers is None or "kernel" not in layers:
        return None
    from capture_ledger.impl.cli._check_kernel import kernel_layer
    from capture_ledger.impl.study.kernel import FILESYSTEMS
    from capture_ledger.spec.kit import parse_options

    chosen = list(dict.fromkeys(args.fs or KERNEL_FILESYSTEMS))
    unknown = [name for name in chosen if name not in FILESYSTEMS]
    if unknown:
        raise UsageError(f"unknown file system {', '.join(unknown)}; choose among {', '.join(FILESYSTEMS)}")
    options = parse_options(args.option)
    return lambda: kernel_layer(args.target, options, chosen)
