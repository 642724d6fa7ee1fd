"""``capture-ledger verify``: run the conformance kit against a ledger factory (SPEC.md R-KIT-1..11).

TARGET is ``module:callable`` (loaded by ``spec.kit``); the callable takes a workspace directory
(``pathlib.Path``) and returns a ``CaptureLedger`` (or a coroutine resolving to one). The current directory
is put on ``sys.path`` so that a project's own modules import. Without TARGET the production
``FileLineageStore`` is checked with three handles on one directory, as three workers of one model server.

First the protocol check a model server's start-up would make (methods missing, coroutines, signatures that
differ), then the verdict: the operations checked, the requirements checked and not checked, and each
broken requirement with its quoted text and a counterexample program. ``--operations`` chooses the methods
to check (default: those the ledger has); ``--all`` goes on past the first broken requirement;
``--json`` prints one object (``LedgerVerdict.to_json``) on standard output, the protocol check then going
to standard error.

Exit codes: 0 conforms, 1 does not conform (``exit_code`` of ``LedgerVerdict.result``), 2 the target cannot
be loaded or the kit failed (a message on standard error, never a traceback).
Not guaranteed: that a passing run proves conformance; it found no counterexample in the examples run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from capture_ledger.impl.cli._options import FILE_STORE_TARGET, UsageError
from capture_ledger.impl.cli._preflight import open_once
from capture_ledger.impl.cli._progress import Progress, showing
from capture_ledger.spec.core.verdicts import exit_code
from capture_ledger.spec.kit import load_target

if TYPE_CHECKING:
    from capture_ledger.spec.kit.sequential import LedgerVerdict

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
        "the ledgers a factory opens. Exit 0 when no counterexample is found, 1 with each broken "
        "requirement and its shrunk counterexample otherwise, 2 when the target cannot be loaded.",
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
        "--operations",
        default=None,
        help="comma-separated protocol methods to check (default: the ones the ledger has)",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        dest="every",
        help="go on after the first broken requirement and report each one once",
    )
    parser.add_argument(
        "--profile",
        choices=("dev", "ci", "nightly"),
        default=None,
        help="Hypothesis settings profile (default: $CAPTURE_LEDGER_PROFILE or dev)",
    )
    parser.add_argument("--max-examples", type=int, default=None, help="override the profile's example count")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.set_defaults(handler=_handle)


def _operations(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    return tuple(part.strip() for part in text.split(",") if part.strip())


def run_verify(
    target: str | None = None,
    *,
    handles: int | None = None,
    profile: str | None = None,
    max_examples: int | None = None,
    operations: tuple[str, ...] | None = None,
    every: bool = False,
    protocol_out: Any = None,
) -> dict[str, Any]:
    """Run the kit and return the ``--json`` object (with ``profile`` and ``report`` added).

    Args:
        target: ``module:callable``; default: the production file store.
        handles: handles per workspace (default: 3 for the default target, else 1).
        profile: the Hypothesis profile (default: ``$CAPTURE_LEDGER_PROFILE`` or ``dev``).
        max_examples: overrides the profile's example count.
        operations: the protocol methods to check (default: those the ledger has).
        every: report every broken requirement, not only the first.
        protocol_out: where to print the protocol check before the run (a text stream), or nowhere.

    Raises:
        TargetError: the target cannot be loaded.
        UsageError: an unknown operation or profile, or the kit itself failed (``KitError``).
    """
    verdict = _judge(
        target,
        handles=handles,
        profile=profile,
        max_examples=max_examples,
        operations=operations,
        every=every,
        protocol_out=protocol_out,
    )
    return _summary(verdict, profile)


def _summary(verdict: LedgerVerdict, profile: str | None) -> dict[str, Any]:
    from capture_ledger.spec.kit import PROFILE_ENV

    summary = verdict.to_json()
    summary["profile"] = profile or os.environ.get(PROFILE_ENV) or "dev"
    summary["report"] = verdict.report()
    return summary


def _judge(
    target: str | None,
    *,
    handles: int | None,
    profile: str | None,
    max_examples: int | None,
    operations: tuple[str, ...] | None,
    every: bool,
    protocol_out: Any,
) -> LedgerVerdict:
    """The kit's ``LedgerVerdict`` on ``target`` (``run_verify``'s arguments and errors)."""
    from capture_ledger.spec.kit import ProtocolCheck, profile_settings
    from capture_ledger.spec.kit.sequential import KitError, judge_ledger

    name = target or DEFAULT_TARGET
    factory = load_target(name)
    count = handles if handles is not None else (_DEFAULT_HANDLES if target is None else 1)
    try:
        settings = profile_settings(profile)
    except ValueError as error:
        raise UsageError(str(error)) from None
    if max_examples is not None:
        from hypothesis import settings as Settings  # noqa: N812

        settings = Settings(settings, max_examples=max_examples)

    def show(check: ProtocolCheck) -> None:
        if protocol_out is not None:
            print("\n".join(check.lines()), file=protocol_out, flush=True)

    try:
        return judge_ledger(
            factory,
            handles=count,
            settings=settings,
            operations=operations,
            every=every,
            target=name,
            on_protocol=show,
        )
    except KitError as error:
        raise UsageError(f"the kit could not judge {name}: {error}") from None
    except ValueError as error:
        raise UsageError(str(error)) from None


def _handle(args: argparse.Namespace) -> int:
    for option, value in (("--handles", args.handles), ("--max-examples", args.max_examples)):
        if value is not None and value < 1:
            raise UsageError(f"{option} must be at least 1")
    open_once(args.target or DEFAULT_TARGET)  # a factory raising at the first open: exit 2, one line
    with Progress(showing(json=args.json), label="verify") as bar:
        bar.phase("the kit's examples run")
        verdict = _judge(
            args.target,
            handles=args.handles,
            profile=args.profile,
            max_examples=args.max_examples,
            operations=_operations(args.operations),
            every=args.every,
            protocol_out=sys.stderr if args.json else sys.stdout,
        )
    summary = _summary(verdict, args.profile)
    report = summary.pop("report")
    if args.json:
        summary.pop("profile")
        print(json.dumps(summary, indent=2))
        return exit_code(verdict.result)
    said = "conforms" if summary["conforms"] else "DOES NOT CONFORM"
    rate = summary["examples"] / summary["seconds"] if summary["seconds"] else 0.0
    print(
        f"{summary['target']} (handles={summary['handles']}, profile={summary['profile']}): {said}\n"
        f"  operations: {', '.join(summary['operations'])}\n"
        f"  checked: {', '.join(summary['checked'])}\n"
        f"  not checked: {', '.join(summary['not_checked']) or 'none'}\n"
        f"  {summary['examples']} examples, {summary['steps']} steps, {summary['seconds']} s "
        f"({rate:.1f} examples/s)"
    )
    if not summary["conforms"]:
        print(report)
    return exit_code(verdict.result)
