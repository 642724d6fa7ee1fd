"""``capture-ledger check-history``: judge recorded histories for linearizability (SPEC.md R-CONC-1, R-KIT-9).

``check-history FILE [FILE ...] [--budget N]`` reads JSON-lines histories with
``spec.kit.read_history`` (one ``event_to_json`` line per call; the two lines a ``HistoryJournal``
writes for one call merged; several clients' files merged by invocation time) and judges them with
``spec.concurrency.linearizability.check_history``. What it prints, and its exit code:

- linearizable: ``N events: Ok()``, exit 0;
- not linearizable: first the line ``N events: Violation(requirement='R-CONC-1')``, printed and flushed
  as soon as ``decide`` has the verdict, then the explanation and a minimal witness (the ``counterexample``
  of ``check_history``'s violation, which decides again and then explains and shrinks under its own bound),
  exit 1;
- undecided: ``N events: Unknown(spent=S)``, the search steps spent, and how to allow more, exit 2;
- not a history: ``error: FILE:LINE: why`` on standard error, exit 2 -- a file that cannot be read, a line
  that is not JSON or not an event (an unknown operation, arguments that do not fit it, a time that is not
  a finite number, a return before the invocation, a result that does not fit the operation), or an event
  the checker refuses (``error: event N is malformed: ...``).

The exit status is ``spec.core.verdicts.exit_code`` of the verdict (input that is not a history is
``Unknown(reason=...)``: nothing was judged).

A last line without its newline, torn when a recorder was killed in the middle of writing it, is skipped
(as ``read_history`` does) with a note on standard error, so that a dropped event is never silent.

The search budget is ``DEFAULT_BUDGET`` = 10,000,000 steps unless ``--budget`` says otherwise (``0``: none).
A 100,000-call history of 16 clients needs about 210,000 steps; the expensive case is many mutually
concurrent writes to one rollout, where the checker takes 70,000-90,000 steps a second on the development
machines, so the default bounds such a search at a few minutes instead of for ever.

Not guaranteed: the wording of the messages.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from capture_ledger.spec.concurrency.history import Event, event_from_json
from capture_ledger.spec.concurrency.linearizability import Unknown, Violation, check_history, decide
from capture_ledger.spec.core.verdicts import exit_code
from capture_ledger.spec.kit import read_history

__all__ = ["DEFAULT_BUDGET", "load_history", "register"]

#: Search steps ``check-history`` allows unless ``--budget`` says otherwise.
DEFAULT_BUDGET = 10_000_000
#: How much of a file's end is read to find a torn last line.
_TAIL = 64 * 1024


def register(subparsers: Any) -> None:
    """Add ``check-history`` to the ``capture-ledger`` parser."""
    checker = subparsers.add_parser(
        "check-history",
        help="judge recorded JSON-lines histories for linearizability",
        description="Exit 0 if linearizable, 1 if not (with a minimal witness), 2 if undecided within the "
        "search budget, or if a file is not a history.",
    )
    checker.add_argument("files", nargs="+", metavar="FILE", help="JSON-lines history, one event per line")
    checker.add_argument(
        "--budget",
        type=_budget,
        default=DEFAULT_BUDGET,
        help=f"at most this many search steps, 0 for no limit (default: {DEFAULT_BUDGET:,})",
    )
    checker.set_defaults(handler=_check_history)


def _budget(text: str) -> int | None:
    try:
        steps = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of steps: {text!r}") from None
    if steps < 0:
        raise argparse.ArgumentTypeError("the budget cannot be negative")
    return steps or None


def _torn_tail(path: Path) -> str | None:
    """The last line of ``path`` if it has no newline (it may have been torn), else ``None``."""
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(max(0, size - _TAIL))
        tail = handle.read()
    last = tail.rsplit(b"\n", 1)[-1]
    return last.decode("utf-8", errors="replace") if last.strip() else None


def _locate(paths: Sequence[Path], error: ValueError) -> str:
    """``FILE:LINE: why`` for the first line of ``paths`` that is not an event (or ``error`` itself)."""
    for path in paths:
        try:
            lines = path.read_text(encoding="utf-8").split("\n")[:-1]  # the last piece: "" or torn
        except UnicodeDecodeError as undecodable:
            return f"{path}: not UTF-8 text ({undecodable})"
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    event_from_json(line)
                except ValueError as found:
                    return f"{path}:{number}: {found}"
    return str(error)


def load_history(files: Sequence[str | Path]) -> tuple[list[Event], list[str]]:
    """The merged events of ``files`` and a note for each torn last line skipped (R-KIT-9).

    Raises:
        OSError: a file cannot be read.
        ValueError: a file is not a history; the message is ``FILE:LINE: why``.
    """
    paths = [Path(f) for f in files]
    notes = [
        f"{path}: skipped the last line, which has no newline (torn?): {torn[:80]!r}"
        for path in paths
        if (torn := _torn_tail(path)) is not None
    ]
    try:
        events = read_history(*paths)
    except ValueError as error:
        raise ValueError(_locate(paths, error)) from None
    return events, notes


def _check_history(args: argparse.Namespace) -> int:
    try:
        events, notes = load_history(args.files)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        verdict = decide(events, budget=args.budget)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return exit_code(Unknown(reason=str(error)))
    if isinstance(verdict, Violation):
        # The verdict first, at once; then the explained, shrunk witness, which may take longer.
        print(f"{len(events)} events: Violation(requirement={verdict.requirement!r})", flush=True)
        explained = check_history(events, budget=args.budget)
        if isinstance(explained, Violation):
            verdict = explained
        print(verdict.counterexample)
    elif isinstance(verdict, Unknown):
        # The search stops exactly when it has spent the budget: what it spent is ``--budget``.
        print(f"{len(events)} events: Unknown(spent={args.budget})")
        print(
            f"undecided: the search budget of {args.budget:,} steps ran out before a verdict; allow more "
            "with --budget (0 for no limit)"
        )
    else:
        print(f"{len(events)} events: {verdict!r}")
    return exit_code(verdict)
