"""``capture-ledger serve`` and the client sub-commands ``manifest``, ``retire``, ``delete`` (R-HTTP-1..5).

``serve --dir DIR [--host 127.0.0.1] [--port 8000] [--workers N] [--token-file F]`` serves the file store
kept in DIR. The bearer token comes from ``$CAPTURE_LEDGER_TOKEN`` or from ``--token-file`` (the file
wins), never from the command line, which other users of the machine can read; without a token the
server refuses to start (exit 2). The socket is bound before any worker starts (``--port 0`` picks a free
port), and one JSON line ``{"url", "pid", "workers", "directory"}`` is printed to standard output once it
is bound. Every worker process, one or several, builds its app with uvicorn's factory mode from the
environment (``app_from_environment``) and so opens its own store handle on the shared directory, as the
workers of one model server do; the store's striped locks make them safe together (R-STORE-2).

The client sub-commands take IDs as arguments or, when none are given, one per line on standard input,
and print the JSON answer. Exit codes: 0 success; 1 the server or the ledger refused (a JSON error on
standard error); 2 a usage error (no token, no IDs on a terminal).

Not guaranteed: TLS (bind to loopback, or put a proxy in front); a token kept secret from processes of
the same user (they can read each other's environment).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import uvicorn
from capture_ledger.impl.cli.verify import load_target
from capture_ledger.impl.http.auth import validate_bearer_token
from capture_ledger.impl.http.client import ControlPlaneError, RolloutControlClient
from capture_ledger.impl.http.server import create_app
from capture_ledger.impl.http.serving import TOKEN_ENV
from capture_ledger.spec.core.errors import CaptureLedgerError
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.supervisors import Multiprocess

__all__ = [
    "DEFAULT_LEDGER",
    "DIRECTORY_ENV",
    "LEDGER_ENV",
    "URL_ENV",
    "app_from_environment",
    "read_token",
    "register",
]

#: Where a worker finds the directory it serves (set by ``serve`` before any worker starts).
DIRECTORY_ENV = "CAPTURE_LEDGER_SERVE_DIR"
#: ``module:callable`` opening the served ledger; the file store by default.
LEDGER_ENV = "CAPTURE_LEDGER_SERVE_LEDGER"
#: The default server URL of the client sub-commands.
URL_ENV = "CAPTURE_LEDGER_URL"
DEFAULT_LEDGER = "capture_ledger.impl.store.file_store:open_file_store"
_DEFAULT_URL = "http://127.0.0.1:8000"


class _UsageError(Exception):
    """A mistake on the command line: exit 2 with the message."""


def read_token(token_file: str | None) -> str:
    """The bearer token: the content of ``token_file`` (stripped) if given, else ``$CAPTURE_LEDGER_TOKEN``.

    Raises:
        _UsageError: neither gives a non-empty token, or the file cannot be read.
    """
    if token_file is not None:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except OSError as error:
            raise _UsageError(f"cannot read --token-file {token_file}: {error}") from error
        source = f"--token-file {token_file}"
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        source = f"${TOKEN_ENV}"
    if not token:
        raise _UsageError(
            f"no bearer token: set ${TOKEN_ENV} or pass --token-file FILE "
            "(a token is never taken from the command line, where other users can read it)"
        )
    try:
        return validate_bearer_token(token)
    except ValueError as error:
        raise _UsageError(f"the token from {source} is not usable: {error}") from error


class _ClosingApp:
    """Close the worker's store at shutdown (the app itself has no lifespan of its own)."""

    def __init__(self, app: ASGIApp, ledger: Any) -> None:
        self.app = app
        self.ledger = ledger

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                close = getattr(self.ledger, "close", None)
                if callable(close):
                    close()
                await send({"type": "lifespan.shutdown.complete"})
                return


def app_from_environment() -> ASGIApp:
    """The app of one worker process: its own ledger handle on ``$CAPTURE_LEDGER_SERVE_DIR``.

    uvicorn calls this (factory mode) in every worker, so no store handle is shared between processes.

    Raises:
        KeyError: the environment lacks the directory or the token (``serve`` sets both).
        ValueError: the token is not a valid bearer token.
    """
    directory = Path(os.environ[DIRECTORY_ENV])
    ledger = load_target(os.environ.get(LEDGER_ENV, DEFAULT_LEDGER))(directory)
    return _ClosingApp(create_app(ledger, auth_token=os.environ[TOKEN_ENV]), ledger)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on accepted sockets whose proto says TCP;
    # without it each response waits ~40 ms for a delayed ACK (measured: 50 ms against 1 ms a request).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)  # the workers receive it
    return sock


def _serve(args: argparse.Namespace) -> int:
    token = read_token(args.token_file)
    if args.workers < 1:
        raise _UsageError("--workers must be at least 1")
    directory = Path(args.dir).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    # Workers are spawned processes: they read their configuration from the inherited environment.
    os.environ[DIRECTORY_ENV] = str(directory)
    os.environ[TOKEN_ENV] = token
    if args.ledger is not None:
        os.environ[LEDGER_ENV] = args.ledger
    # Fail here, once, if the store cannot be opened or the token is refused; each worker opens its own.
    probe = app_from_environment()
    close = getattr(getattr(probe, "ledger", None), "close", None)
    if callable(close):
        close()
    sock = _bind(args.host, args.port)
    port = sock.getsockname()[1]
    shown_host = f"[{args.host}]" if ":" in args.host else args.host
    announcement = {"url": f"http://{shown_host}:{port}", "pid": os.getpid(), "workers": args.workers}
    print(json.dumps({**announcement, "directory": str(directory)}), flush=True)
    config = uvicorn.Config(
        "capture_ledger.impl.cli.serve:app_from_environment",
        factory=True,
        workers=args.workers,
        log_level=args.log_level,
        access_log=args.access_log,
        timeout_graceful_shutdown=5,
    )
    if args.workers == 1:
        uvicorn.Server(config).run(sockets=[sock])
    else:
        Multiprocess(config, sockets=[sock]).run()
    return 0


def _read_ids(ids: list[str]) -> list[str]:
    if ids:
        return ids
    if sys.stdin.isatty():
        raise _UsageError("give rollout IDs as arguments or one per line on standard input")
    return [line.strip() for line in sys.stdin if line.strip()]


def _call(args: argparse.Namespace) -> int:
    token = read_token(args.token_file)
    url = args.url or os.environ.get(URL_ENV) or _DEFAULT_URL
    with RolloutControlClient(url, auth_token=token, timeout=args.timeout, retries=args.retries) as client:
        try:
            if args.command == "manifest":
                result: Any = client.manifest(args.rollout_id)
            elif args.command == "retire":
                result = client.retire(_read_ids(args.rollout_ids))
            else:
                result = client.delete(_read_ids(args.rollout_ids))
        except (CaptureLedgerError, TypeError) as error:
            failure: dict[str, Any] = {"error": type(error).__name__, "detail": str(error)}
            if isinstance(error, ControlPlaneError):
                failure |= {"status": error.status, "reason": error.reason}
            print(json.dumps(failure), file=sys.stderr)
            return 1
    print(json.dumps(result))
    return 0


def _guarded(handler: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            code: int = handler(args)
        except _UsageError as error:
            print(f"capture-ledger {args.command}: {error}", file=sys.stderr)
            return 2
        return code

    return run


def _token_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token-file",
        default=None,
        help=f"file holding the bearer token (default: ${TOKEN_ENV}); never pass the token itself",
    )


def register(subparsers: Any) -> None:
    """Add ``serve``, ``manifest``, ``retire`` and ``delete`` to the command line."""
    serve = subparsers.add_parser(
        "serve",
        help="serve the control plane of a lineage directory over HTTP",
        description="Serve GET .../rollouts/{id}/manifest, POST .../rollouts/retire and .../rollouts/delete "
        "and .../metrics for the file store in DIR, behind a bearer token read from "
        f"${TOKEN_ENV} or --token-file. Prints one JSON line with the URL once the socket is bound.",
    )
    serve.add_argument("--dir", required=True, help="the lineage directory (created if missing)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    serve.add_argument(
        "--port", type=int, default=8000, help="port to bind; 0 picks a free one (default: 8000)"
    )
    serve.add_argument(
        "--workers", type=int, default=1, help="worker processes, each with its own store handle (default: 1)"
    )
    serve.add_argument(
        "--ledger",
        default=None,
        help=f"module:callable opening the served ledger from a directory (default: {DEFAULT_LEDGER})",
    )
    serve.add_argument(
        "--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"]
    )
    serve.add_argument("--access-log", action="store_true", help="log every request")
    _token_option(serve)
    serve.set_defaults(handler=_guarded(_serve))

    for name, text in (
        ("manifest", "print a rollout's manifest as JSON"),
        ("retire", "retire rollouts (IDs as arguments or one per line on stdin)"),
        ("delete", "delete rollouts (IDs as arguments or one per line on stdin)"),
    ):
        parser = subparsers.add_parser(
            name, help=text, description=text + ", through a control-plane server."
        )
        if name == "manifest":
            parser.add_argument("rollout_id")
        else:
            parser.add_argument("rollout_ids", nargs="*", metavar="ID")
        parser.add_argument(
            "--url", default=None, help=f"server root URL (default: ${URL_ENV} or {_DEFAULT_URL})"
        )
        parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default: 30)")
        parser.add_argument(
            "--retries", type=int, default=0, help="resends of a failed retire/delete request (default: 0)"
        )
        _token_option(parser)
        parser.set_defaults(handler=_guarded(_call))
