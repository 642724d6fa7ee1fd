"""Running the control plane as a server: the worker processes of ``capture-ledger serve`` (SPEC.md
R-HTTP-1, R-STORE-2).

- ``export_environment``, ``app_from_environment``, ``listening_socket``, ``run_workers``: what
  ``capture-ledger serve`` runs. The socket is bound once; each uvicorn worker process builds its app in
  factory mode from the environment (``app_from_environment``) and so opens its own ledger handle on the
  shared directory, as the workers of one model server do; the store's striped locks make them safe
  together (R-STORE-2). At shutdown a worker closes its ledger. ``ServeOptions`` carries what else a
  worker needs: whether the file store shares directory syncs (``group_commit``), how many threads run
  ledger calls (anyio's default pool has 40), and an ``extend`` hook, ``module:callable(app, ledger)``,
  through which a hosting model server (or the simulation, ``impl/simulate``) adds its own routes to the
  app, served by the same workers and the same ledger handle.

Servers on loopback for tests, benchmarks and the simulation (``ServerProcess``, ``ServerThread``) live in
``impl.simulate`` (its test servers), off the production path.

Not guaranteed: any TLS; a token kept secret from processes of the
same user (the workers receive it in their environment, which such processes can read).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import uvicorn
from anyio.to_thread import current_default_thread_limiter
from capture_ledger.impl.http._auth import TOKEN_ENV
from capture_ledger.impl.http._limits import guarded_protocol, limits_from_environment
from capture_ledger.impl.http.server import create_app
from capture_ledger.impl.store.file_store import (
    DEFAULT_COMBINE_REMOVALS,
    DEFAULT_GROUP_COMMIT,
    FileLineageStore,
)
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.importer import import_from_string
from uvicorn.supervisors import Multiprocess

__all__ = [
    "DIRECTORY_ENV",
    "LEDGER_ENV",
    "OPTIONS_ENV",
    "ServeOptions",
    "app_from_environment",
    "export_environment",
    "listening_socket",
    "run_workers",
]

#: Where a worker finds the directory it serves (set by ``export_environment`` before any worker starts).
DIRECTORY_ENV = "CAPTURE_LEDGER_SERVE_DIR"
#: ``module:callable`` opening the served ledger from the directory; unset for the file store.
LEDGER_ENV = "CAPTURE_LEDGER_SERVE_LEDGER"
#: The ``ServeOptions`` of the workers, as JSON (set by ``export_environment``).
OPTIONS_ENV = "CAPTURE_LEDGER_SERVE_OPTIONS"


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeOptions:
    """What each worker of ``capture-ledger serve`` needs beyond the directory, the token and the ledger.

    Attributes:
        group_commit: the file store's ``group_commit`` (concurrent removals share directory syncs;
            default off, docs/group-commit.md §The decision); ignored for a ledger opened by ``--ledger``.
        combine_removals: the file store's ``combine_removals`` (``"auto"``, ``True`` or ``False``:
            concurrent removals run as one batch); ignored for a ledger opened by ``--ledger``.
        threads: how many threads of a worker run ledger calls at once (anyio's default pool: 40); ``None``
            keeps the default.
        extend: ``module:callable`` called as ``callable(app, ledger)`` in each worker after the app is
            built, to add the hosting server's own routes; ``None`` for none.
    """

    group_commit: bool = DEFAULT_GROUP_COMMIT
    combine_removals: bool | Literal["auto"] = DEFAULT_COMBINE_REMOVALS
    threads: int | None = None
    extend: str | None = None

    def to_json(self) -> str:
        """The options as one JSON object."""
        return json.dumps(
            {
                "group_commit": self.group_commit,
                "combine_removals": self.combine_removals,
                "threads": self.threads,
                "extend": self.extend,
            }
        )

    @classmethod
    def from_json(cls, text: str | None) -> ServeOptions:
        """Options from ``to_json``'s text; the defaults for ``None``."""
        return cls() if text is None else cls(**json.loads(text))


# ---------------------------------------------------------------------------------- the workers of serve
class _ClosingApp:
    """Close the worker's ledger at shutdown (the app itself has no lifespan of its own); size the thread
    pool at startup."""

    def __init__(self, app: ASGIApp, ledger: Any, *, threads: int | None = None) -> None:
        self.app = app
        self.ledger = ledger
        self.threads = threads

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self.threads is not None:  # the limiter belongs to the running loop: set it here
                    current_default_thread_limiter().total_tokens = self.threads
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def close(self) -> None:
        """Close the ledger, if it can be closed."""
        close = getattr(self.ledger, "close", None)
        if callable(close):
            close()


def export_environment(
    directory: Path, *, token: str, ledger: str | None = None, options: ServeOptions | None = None
) -> None:
    """Set what ``app_from_environment`` reads, then build one app and close it, to fail here and once.

    Worker processes are spawned: they read their configuration from the environment they inherit.

    Args:
        directory: the directory the served ledger is kept in.
        token: the bearer token (already checked by the caller).
        ledger: ``module:callable`` opening the ledger from ``directory``; ``None`` for the file store
            (or for ``$CAPTURE_LEDGER_SERVE_LEDGER`` when it is set).
        options: the workers' ``ServeOptions``; ``None`` for the defaults.

    Raises:
        Exception: whatever opening the ledger raised, or a ``ValueError`` for a token ``create_app``
            refuses.
    """
    os.environ[DIRECTORY_ENV] = str(directory)
    os.environ[TOKEN_ENV] = token
    if ledger is not None:
        os.environ[LEDGER_ENV] = ledger
    os.environ[OPTIONS_ENV] = (options or ServeOptions()).to_json()
    probe = app_from_environment()
    assert isinstance(probe, _ClosingApp)
    probe.close()


def app_from_environment() -> ASGIApp:
    """The app of one worker process: its own ledger handle on ``$CAPTURE_LEDGER_SERVE_DIR``.

    uvicorn calls this (factory mode) in every worker, so no ledger handle is shared between processes.
    The ledger is opened by ``$CAPTURE_LEDGER_SERVE_LEDGER`` (``module:callable``, resolved as uvicorn
    resolves its own targets) when it is set, else it is a ``FileLineageStore`` with the options'
    ``group_commit`` and ``combine_removals``. The options' ``extend`` hook, if any, then adds its routes.

    Raises:
        KeyError: the environment lacks the directory or the token (``export_environment`` sets both).
        ValueError: the token is not a valid bearer token.
    """
    directory = Path(os.environ[DIRECTORY_ENV])
    target = os.environ.get(LEDGER_ENV)
    options = ServeOptions.from_json(os.environ.get(OPTIONS_ENV))
    if target is None:
        ledger: Any = FileLineageStore(
            directory, group_commit=options.group_commit, combine_removals=options.combine_removals
        )
    else:
        ledger = import_from_string(target)(directory)
    app = create_app(
        ledger, auth_token=os.environ[TOKEN_ENV], body_timeout=limits_from_environment().body_timeout
    )
    if options.extend is not None:
        import_from_string(options.extend)(app, ledger)
    return _ClosingApp(app, ledger, threads=options.threads)


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``port`` 0: the kernel picks one) and listening.

    Args:
        host: an IPv4 or IPv6 address.
        port: the port, or 0.

    Returns:
        The socket; ``getsockname()[1]`` is its port.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on accepted sockets whose proto says TCP;
    # without it every response waits ~40 ms for a delayed ACK (measured: 50 ms against 1 ms a request,
    # docs/http.md).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def run_workers(sock: socket.socket, *, workers: int, log_level: str, access_log: bool) -> None:
    """Serve on ``sock`` with ``workers`` uvicorn processes (one: this process) until told to stop.

    The server's limits (connections, head, body and keep-alive timeouts, the HTTP parser, R-HTTP-7) come
    from ``$CAPTURE_LEDGER_SERVE_LIMITS`` (``impl.http``), the defaults when it is unset.

    Args:
        sock: the bound socket (``listening_socket``); the workers inherit it.
        workers: worker processes, at least 1; each builds its app with ``app_from_environment``.
        log_level: uvicorn's log level.
        access_log: log every request.
    """
    sock.set_inheritable(True)  # the workers receive it
    limits = limits_from_environment()  # $CAPTURE_LEDGER_SERVE_LIMITS, read again by each worker
    config = uvicorn.Config(
        f"{__name__}:app_from_environment",
        factory=True,
        workers=workers,
        log_level=log_level,
        access_log=access_log,
        timeout_graceful_shutdown=5,
        # R-HTTP-7: the connection cap and the head timeout live in the protocol (impl/http/limits.py).
        http=guarded_protocol(),
        timeout_keep_alive=limits.keep_alive_timeout,
        loop=limits.loop,  # checked by ServerLimits
    )
    if workers == 1:
        uvicorn.Server(config).run(sockets=[sock])
    else:
        Multiprocess(config, sockets=[sock]).run()
