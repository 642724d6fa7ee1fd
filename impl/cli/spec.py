"""``capture-ledger spec``: print the state diagram and the operation × state table (SPEC.md §States).

Both are generated from the executable model by ``capture_ledger.spec.core.tables``; ``--check PATH`` compares
the generated block of a SPEC.md file with the model and exits 1 on drift, printing the diff.

Not guaranteed: the Markdown's exact layout, which follows the model; the block's content is what matters.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from capture_ledger.spec.core import tables

__all__ = ["register", "run_spec"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``spec`` sub-command.

    Args:
        subparsers: the ``capture-ledger`` parser's sub-parsers.
    """
    parser = subparsers.add_parser(
        "spec",
        help="print the state diagram and operation table generated from the model",
        description="Print the Mermaid state diagram and the operation × state table that SPEC.md holds, "
        "generated from the executable model.",
    )
    parser.add_argument(
        "--check",
        metavar="PATH",
        type=Path,
        help="compare the generated block of this SPEC.md with the model; exit 1 and print a diff on drift",
    )
    parser.set_defaults(handler=run_spec)


def run_spec(args: argparse.Namespace) -> int:
    """Print the generated Markdown, or check a document against it.

    Args:
        args: the parsed arguments; ``args.check`` is a path or ``None``.

    Returns:
        0, or 1 when ``--check`` finds drift, or 2 when the file cannot be read or lacks the markers.
    """
    if args.check is None:
        print(tables.render())
        return 0
    path: Path = args.check
    try:
        diff = tables.drift(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        print(f"capture-ledger spec: {path}: {error}", file=sys.stderr)
        return 2
    if diff:
        sys.stdout.write(diff)
        print(
            f"{path}: the generated block differs from the model; "
            "regenerate it with `python -m capture_ledger.spec.core.tables --write PATH`",
            file=sys.stderr,
        )
        return 1
    print(f"{path}: in sync with the model")
    return 0
