"""The ``capture-ledger`` console script: one entry point, sub-commands contributed by concept modules.

Each module in ``COMMAND_MODULES`` defines ``register(subparsers)``, which adds its sub-commands and sets
``handler=callable(args) -> int`` on each. ``main`` returns the handler's exit code; a handler that raises
``UsageError`` (``impl.cli``) or ``TargetError`` (a target that cannot be loaded,
``spec.kit``) has its message printed as ``capture-ledger COMMAND: message`` on
standard error, and the exit code is 2. Registering a command imports only what its parser needs: the
HTTP stack is imported by the commands that use it, when they run.

Not guaranteed: the human-readable output's wording; ``--json`` output, where offered, is stable.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from capture_ledger.impl.cli._options import UsageError
from capture_ledger.spec.kit import TargetError

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

#: Modules contributing sub-commands, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "capture_ledger.impl.cli.verify",
    "capture_ledger.impl.cli.spec",
    "capture_ledger.impl.cli.serve",
    "capture_ledger.impl.cli.calls",
    "capture_ledger.impl.cli.crash",
    "capture_ledger.impl.cli.interleave",
    "capture_ledger.impl.cli.explore",
    "capture_ledger.impl.cli.history",
    "capture_ledger.impl.cli.simulate",
    "capture_ledger.impl.cli.stress",
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="capture-ledger",
        description="Verify capture ledgers against the spec, serve and call the control plane, "
        "and explore interleavings and crash states of the file store.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the exit code is 0 on success."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except (UsageError, TargetError) as error:
        print(f"capture-ledger {args.command}: {error}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
