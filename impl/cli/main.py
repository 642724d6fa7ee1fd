"""The ``capture-ledger`` console script: one entry point, sub-commands contributed by concept modules.

Each module in ``COMMAND_MODULES`` defines ``register(subparsers)``, which adds its sub-commands and sets
``handler=callable(args) -> int`` on each. ``main`` returns the handler's exit code; a handler that raises
``UsageError`` (``impl.cli``) or ``TargetError`` (a target that cannot be loaded,
``spec.kit``) has its message printed as ``capture-ledger COMMAND: message`` on
standard error, and the exit code is 2. A flag the sub-command does not know is reported by the
sub-command (its usage, then ``capture-ledger COMMAND: error: ...`` with the closest flag it has, if any),
exit 2, as is an unknown command (with the closest command). A standard output closed by its reader
(``capture-ledger spec | head -1``) ends the command quietly with exit 141, the status of a process ended by
SIGPIPE, as shell tools end. Registering a command imports only what its parser needs: the HTTP stack is
imported by the commands that use it, when they run.

Not guaranteed: the human-readable output's wording; ``--json`` output, where offered, is stable.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from capture_ledger.impl.cli._options import UsageError
from capture_ledger.spec.kit import TargetError

__all__ = ["CLOSED_OUTPUT_EXIT", "COMMAND_MODULES", "build_parser", "main"]

#: The exit status when the reader of standard output closed it (128 + SIGPIPE, as a shell reports it).
CLOSED_OUTPUT_EXIT = 141

#: Modules contributing sub-commands, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "capture_ledger.impl.cli.check",
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


def _closest(word: str, choices: Sequence[str]) -> str:
    """``"; did you mean X?"`` for the choice closest to ``word``, or ``""``."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


class _Parser(argparse.ArgumentParser):
    """An argument parser that names the closest command when given an unknown one."""

    def error(self, message: str) -> NoReturn:
        if "invalid choice:" in message:
            subparsers = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
            word = message.split("invalid choice: ", 1)[1].split(" (", 1)[0].strip("'")
            if subparsers:
                message = f"{message}{_closest(word, list(subparsers[0].choices))}"
        super().error(message)


def _unrecognized(parser: argparse.ArgumentParser, command: str, extras: Sequence[str]) -> NoReturn:
    """Report flags the sub-command does not know through the sub-command, with the closest it has."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    sub: argparse.ArgumentParser = subparsers[0].choices[command]
    flags = [flag for action in sub._actions for flag in action.option_strings]
    hints = "".join(_closest(extra.split("=", 1)[0], flags) for extra in extras if extra.startswith("-"))
    sub.error(f"unrecognized arguments: {' '.join(extras)}{hints}")


def _quiet_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command registered."""
    parser = _Parser(
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
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        _unrecognized(parser, args.command, extras)
    try:
        code: int = args.handler(args)
        sys.stdout.flush()
    except (UsageError, TargetError) as error:
        print(f"capture-ledger {args.command}: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _quiet_stdout()
        return CLOSED_OUTPUT_EXIT
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
