"""``capture-ledger manifest|retire|delete``: call a control-plane server (SPEC.md R-HTTP-4, R-HTTP-5).

``manifest ID``, ``retire [ID...]`` and ``delete [ID...]`` send one call through ``RolloutControlClient``
to ``--url`` (default ``$CAPTURE_LEDGER_URL``, else ``http://127.0.0.1:8000``) and print the JSON answer.
``retire`` and ``delete`` take IDs as arguments or, when none are given, one per line on standard input
(blank lines skipped); the client validates and de-duplicates the whole list and splits it into requests.
The bearer token comes from ``--token-file`` or ``$CAPTURE_LEDGER_TOKEN``.

Exit codes: 0 success; 1 the server or the ledger refused (one JSON object ``{"error", "detail"}``, with
``"status"`` and ``"reason"`` for a control-plane error, on standard error); 2 a usage error (no token, no
IDs on a terminal). The HTTP client is imported only when a call runs.

Not guaranteed: atomicity of a list split into several requests (see ``impl.http.client``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from capture_ledger.impl.cli._options import UsageError, add_token_option, read_token
from capture_ledger.spec.core.errors import CaptureLedgerError

__all__ = ["DEFAULT_URL", "URL_ENV", "register", "run_call"]

#: The environment variable naming the server of the client commands.
URL_ENV = "CAPTURE_LEDGER_URL"
#: The server when neither ``--url`` nor ``$CAPTURE_LEDGER_URL`` names one.
DEFAULT_URL = "http://127.0.0.1:8000"

_COMMANDS = {
    "manifest": "print a rollout's manifest as JSON",
    "retire": "retire rollouts (IDs as arguments or one per line on stdin)",
    "delete": "delete rollouts (IDs as arguments or one per line on stdin)",
}


def register(subparsers: Any) -> None:
    """Add ``manifest``, ``retire`` and ``delete`` to the command line.

    Args:
        subparsers: the ``capture-ledger`` parser's sub-parsers.
    """
    for name, text in _COMMANDS.items():
        parser = subparsers.add_parser(
            name, help=text, description=text + ", through a control-plane server."
        )
        if name == "manifest":
            parser.add_argument("rollout_id")
        else:
            parser.add_argument("rollout_ids", nargs="*", metavar="ID")
        parser.add_argument(
            "--url", default=None, help=f"server root URL (default: ${URL_ENV} or {DEFAULT_URL})"
        )
        parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default: 30)")
        parser.add_argument(
            "--retries", type=int, default=0, help="resends of a failed retire/delete request (default: 0)"
        )
        add_token_option(parser)
        parser.set_defaults(handler=run_call)


def _read_ids(ids: list[str]) -> list[str]:
    if ids:
        return ids
    if sys.stdin.isatty():
        raise UsageError("give rollout IDs as arguments or one per line on standard input")
    return [line.strip() for line in sys.stdin if line.strip()]


def run_call(args: argparse.Namespace) -> int:
    """Send the call ``args.command`` names and print its answer.

    Args:
        args: the parsed arguments of ``manifest``, ``retire`` or ``delete``.

    Returns:
        0 with the answer on standard output, or 1 with the refusal on standard error.

    Raises:
        UsageError: no usable token, no IDs given on a terminal, or an unusable timeout or retry count.
    """
    token = read_token(args.token_file)
    url = args.url or os.environ.get(URL_ENV) or DEFAULT_URL
    ids = None if args.command == "manifest" else _read_ids(args.rollout_ids)
    from capture_ledger.impl.http.client import ControlPlaneError, RolloutControlClient  # httpx, only now

    try:
        client = RolloutControlClient(url, auth_token=token, timeout=args.timeout, retries=args.retries)
    except ValueError as error:  # a non-positive timeout or a negative number of retries
        raise UsageError(str(error)) from error
    with client:
        try:
            if ids is None:
                result: Any = client.manifest(args.rollout_id)
            elif args.command == "retire":
                result = client.retire(ids)
            else:
                result = client.delete(ids)
        except (CaptureLedgerError, TypeError) as error:
            failure: dict[str, Any] = {"error": type(error).__name__, "detail": str(error)}
            if isinstance(error, ControlPlaneError):
                failure |= {"status": error.status, "reason": error.reason}
            print(json.dumps(failure), file=sys.stderr)
            return 1
    print(json.dumps(result))
    return 0
