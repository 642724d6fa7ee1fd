"""``capture-ledger serve``: serve the control plane of a lineage directory over HTTP (SPEC.md R-HTTP-1..3).

``serve --dir DIR [--host 127.0.0.1] [--port 8000] [--workers N] [--ledger module:callable] [--group-commit]
[--combine | --no-combine] [--threads N] [--extend module:callable] [--token-file F]`` serves the ledger kept
in DIR (the file store unless ``--ledger`` names another factory; ``--group-commit`` makes the file store's
concurrent removals share their directory syncs, ``--no-combine`` runs each removal on its own instead of
combining concurrent ones into one batch, for comparison). ``--threads`` sizes each worker's pool of threads
that run ledger calls (default 40, anyio's); ``--extend module:callable`` is called as ``callable(app,
ledger)`` in each worker to add the hosting server's own routes (the simulation's fake inference route,
``impl/simulate``). The bearer token comes from ``$CAPTURE_LEDGER_TOKEN`` or from ``--token-file`` (the file
wins), never from the command line. The ledger is opened once before anything is bound, so a missing token, an
unusable target or a directory that cannot be opened is exit 2 with one line on standard error. Then the
socket is bound (``--port 0`` picks a free port), one JSON line ``{"url", "pid", "workers", "directory"}`` is
printed to standard output, and the workers start: each builds its app in uvicorn's factory mode and so opens
its own ledger handle on the shared directory (``impl.http.serving``).

The HTTP stack (uvicorn, FastAPI) is imported only when the command runs, not to build the parser.
Not guaranteed: TLS (bind to loopback, or put a proxy in front); a token kept secret from processes of
the same user (they can read each other's environment).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from capture_ledger.impl.cli._options import UsageError, add_token_option, read_token
from capture_ledger.impl.http import TOKEN_ENV
from capture_ledger.spec.kit import load_target

__all__ = ["register", "run_serve"]


def register(subparsers: Any) -> None:
    """Add ``serve`` to the command line.

    Args:
        subparsers: the ``capture-ledger`` parser's sub-parsers.
    """
    parser = subparsers.add_parser(
        "serve",
        help="serve the control plane of a lineage directory over HTTP",
        description="Serve GET .../rollouts/{id}/manifest, POST .../rollouts/retire and .../rollouts/delete "
        "and .../metrics for the file store in DIR, behind a bearer token read from "
        f"${TOKEN_ENV} or --token-file. Prints one JSON line with the URL once the socket is bound.",
    )
    parser.add_argument("--dir", required=True, help="the lineage directory (created if missing)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8000, help="port to bind; 0 picks a free one (default: 8000)"
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="worker processes, each with its own store handle (default: 1)"
    )
    parser.add_argument(
        "--ledger",
        default=None,
        help="module:callable opening the served ledger from a directory (default: the file store)",
    )
    parser.add_argument(
        "--group-commit",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="the file store's concurrent removals share directory syncs (default: off; it did not pay)",
    )
    parser.add_argument(
        "--combine",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the file store's concurrent removals run as one batch (default: auto, on where fences sync "
        "with the directory: journaled file systems, tmpfs)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads per worker that run ledger calls at once (default: 40, anyio's default pool)",
    )
    parser.add_argument(
        "--extend",
        default=None,
        help="module:callable called as callable(app, ledger) in each worker to add the host's own routes",
    )
    parser.add_argument(
        "--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"]
    )
    parser.add_argument("--access-log", action="store_true", help="log every request")
    limits = parser.add_argument_group(
        "limits (R-HTTP-7; each defaults to $CAPTURE_LEDGER_SERVE_LIMITS's value, else the built-in one)"
    )
    limits.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="open connections per worker; above it a 503 (default: the open-file limit less 256)",
    )
    limits.add_argument(
        "--header-timeout", type=float, default=None, help="seconds for a request's line and headers (10)"
    )
    limits.add_argument("--body-timeout", type=float, default=None, help="seconds for a request's body (30)")
    limits.add_argument(
        "--keep-alive-timeout", type=int, default=None, help="seconds an idle connection is kept (5)"
    )
    limits.add_argument(
        "--http", choices=["auto", "h11", "httptools"], default=None, help="uvicorn's HTTP parser (auto)"
    )
    add_token_option(parser)
    parser.set_defaults(handler=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """Serve until a signal stops the server.

    Args:
        args: the parsed ``serve`` arguments.

    Returns:
        0 once the server has stopped.

    Raises:
        UsageError: no usable token, fewer than one worker, a target that cannot be loaded, or a ledger
            that cannot be opened in the directory.
    """
    token = read_token(args.token_file)
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads must be at least 1")
    from capture_ledger.impl.http import serving  # the HTTP stack, only now

    target = args.ledger or os.environ.get(serving.LEDGER_ENV)
    if target is not None:
        load_target(target)  # report a bad target here, naming it; each worker resolves it again
    if args.extend is not None:
        load_target(args.extend)
    options = serving.ServeOptions(
        group_commit=args.group_commit,
        combine_removals="auto" if args.combine is None else args.combine,
        threads=args.threads,
        extend=args.extend,
    )
    _export_limits(args)
    directory = Path(args.dir).resolve()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        serving.export_environment(directory, token=token, ledger=target, options=options)
    except Exception as error:
        opener = target or "the file store"
        raise UsageError(f"cannot open {directory} with {opener}: {type(error).__name__}: {error}") from error
    sock = serving.listening_socket(args.host, args.port)
    shown_host = f"[{args.host}]" if ":" in args.host else args.host
    announcement = {"url": f"http://{shown_host}:{sock.getsockname()[1]}", "pid": os.getpid()}
    print(json.dumps({**announcement, "workers": args.workers, "directory": str(directory)}), flush=True)
    serving.run_workers(sock, workers=args.workers, log_level=args.log_level, access_log=args.access_log)
    return 0


#: The ``serve`` flags that set a field of ``ServerLimits`` (flag destination -> field).
_LIMIT_FLAGS = ("max_connections", "header_timeout", "body_timeout", "keep_alive_timeout", "http")


def _export_limits(args: argparse.Namespace) -> None:
    """Put the limits the flags give, over ``$CAPTURE_LEDGER_SERVE_LIMITS``'s, where every worker reads them.

    Raises:
        UsageError: a limit out of range (a timeout not positive, fewer than one connection).
    """
    from capture_ledger.impl.http import LIMITS_ENV, limits_from_environment

    given = {name: getattr(args, name) for name in _LIMIT_FLAGS if getattr(args, name) is not None}
    if not given:
        return
    try:
        limits = dataclasses.replace(limits_from_environment(), **given)
    except ValueError as error:
        raise UsageError(f"a limit is out of range: {error}") from error
    os.environ[LIMITS_ENV] = limits.to_json()
