"""``capture-ledger verify``: run the conformance kit against a ledger factory (SPEC.md R-KIT-1..6).

TARGET is ``module:callable`` (loaded by ``impl.cli.targets``); the callable takes a workspace directory
(``pathlib.Path``) and returns a ``CaptureLedger`` (or a coroutine resolving to one). The current directory
is put on ``sys.path`` so that a project's own modules import. Without TARGET the production
``FileLineageStore`` is checked with three handles on one directory, as three workers of one model server.

Exit codes: 0 conforms, 1 does not conform (the counterexample is printed), 2 the target cannot be loaded
(a message naming it, on standard error).
Not guaranteed: that a passing run proves conformance; it found no counterexample in the examples run.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from capture_ledger.impl.cli.options import UsageError
from capture_ledger.impl.cli.targets import FILE_STORE_TARGET, load_target
from capture_ledger.spec.kit.conformance import check_ledger, conformance_machine, rule_names
from capture_ledger.spec.kit.profiles import PROFILE_ENV, PROFILES, profile_settings

__all__ = ["DEFAULT_TARGET", "register", "run_verify"]

#: The default target: the production file store, checked with three handles.
DEFAULT_TARGET = FILE_STORE_TARGET
_DEFAULT_HANDLES = 3


def register(subparsers: Any) -> None:
    """Add ``verify`` to the command line."""
    parser = subparsers.add_parser(
        "verify",
        help="check a ledger implementation against the spec",
        description="Run the conformance kit (a Hypothesis state machine driven by the model) against "
        "the ledgers a factory opens. Exit 0 when no counterexample is found, 1 with the shrunk "
        "counterexample otherwise.",
    )
    parser.add_argument(
        "target",
        nargs="?",
        default=None,
        help=f"module:callable taking a workspace path and returning a ledger (default: {DEFAULT_TARGET})",
    )
    parser.add_argument(
        "--handles",
        type=int,
        default=None,
        help="handles opened on one workspace, acting as workers of one server "
        f"(default: {_DEFAULT_HANDLES} for the default target, 1 otherwise)",
    )
    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default=None,
        help=f"Hypothesis settings profile (default: ${PROFILE_ENV} or dev)",
    )
    parser.add_argument("--max-examples", type=int, default=None, help="override the profile's example count")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.set_defaults(handler=_handle)


def run_verify(
    target: str | None = None,
    *,
    handles: int | None = None,
    profile: str | None = None,
    max_examples: int | None = None,
) -> dict[str, Any]:
    """Run the kit and return a summary (the ``--json`` object).

    Raises:
        TargetError: the target cannot be loaded.
        ValueError: an unknown profile.
    """
    name = target or DEFAULT_TARGET
    factory = load_target(name)
    count = handles if handles is not None else (_DEFAULT_HANDLES if target is None else 1)
    settings = profile_settings(profile)
    if max_examples is not None:
        from hypothesis import settings as Settings  # noqa: N812

        settings = Settings(settings, max_examples=max_examples)
    workspaces: set[Path] = set()

    def counting(workspace: Path) -> Any:
        workspaces.add(workspace)
        return factory(workspace)

    started = time.perf_counter()
    counterexample: str | None = None
    try:
        check_ledger(counting, handles=count, settings=settings)
    except AssertionError as error:
        counterexample = str(error)
    seconds = time.perf_counter() - started
    return {
        "target": name,
        "handles": count,
        "profile": profile or os.environ.get(PROFILE_ENV) or "dev",
        "ok": counterexample is None,
        "examples": len(workspaces),
        "rules": len(rule_names(conformance_machine(factory, handles=count))),
        "seconds": round(seconds, 3),
        "examples_per_second": round(len(workspaces) / seconds, 1) if seconds else None,
        "counterexample": counterexample,
    }


def _handle(args: argparse.Namespace) -> int:
    for option, value in (("--handles", args.handles), ("--max-examples", args.max_examples)):
        if value is not None and value < 1:
            raise UsageError(f"{option} must be at least 1")
    summary = run_verify(
        args.target, handles=args.handles, profile=args.profile, max_examples=args.max_examples
    )
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        verdict = "conforms" if summary["ok"] else "DOES NOT CONFORM"
        print(
            f"{summary['target']} (handles={summary['handles']}, profile={summary['profile']}): "
            f"{verdict}\n  {summary['examples']} examples, {summary['rules']} rules, "
            f"{summary['seconds']} s ({summary['examples_per_second']} examples/s)"
        )
        if not summary["ok"]:
            print(summary["counterexample"])
    return 0 if summary["ok"] else 1
