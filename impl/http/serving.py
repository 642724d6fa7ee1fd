"""Running the control plane as a server: the worker processes of ``capture-ledger serve``, and servers on
loopback for tests, benchmarks and scripts (SPEC.md R-HTTP-1, R-STORE-2).

- ``export_environment``, ``app_from_environment``, ``listening_socket``, ``run_workers``: what
  ``capture-ledger serve`` runs. The socket is bound once; each uvicorn worker process builds its app in
  factory mode from the environment (``app_from_environment``) and so opens its own ledger handle on the
  shared directory, as the workers of one model server do; the store's striped locks make them safe
  together (R-STORE-2). At shutdown a worker closes its ledger. ``ServeOptions`` carries what else a
  worker needs: whether the file store shares directory syncs (``group_commit``), how many threads run
  ledger calls (anyio's default pool has 40), and an ``extend`` hook, ``module:callable(app, ledger)``,
  through which a hosting model server (or the simulation, ``impl/simulate``) adds its own routes to the
  app, served by the same workers and the same ledger handle.
- ``ServerProcess``: ``capture-ledger serve`` as a separate process (one or several uvicorn workers) on a
  port the kernel picks; the context manager returns once the server answers an authenticated request,
  and stops it (SIGTERM, then SIGKILL after a grace period) on exit.
- ``ServerThread``: uvicorn serving an ASGI app in a thread of this process, on a socket bound before the
  thread starts, for callers that need many short-lived apps in one process (the HTTP conformance test).

Not guaranteed: that the port stays free between runs, any TLS, or a server reachable from other hosts
(both test servers bind to 127.0.0.1 unless told otherwise); a token kept secret from processes of the
same user (the workers receive it in their environment, which such processes can read).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import httpx
import uvicorn
from anyio.to_thread import current_default_thread_limiter
from capture_ledger.impl.http.auth import TOKEN_ENV
from capture_ledger.impl.http.routes import METRICS_ROUTE, PREFIX
from capture_ledger.impl.http.server import create_app
from capture_ledger.impl.store.file_store import FileLineageStore
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.importer import import_from_string
from uvicorn.supervisors import Multiprocess

__all__ = [
    "DIRECTORY_ENV",
    "LEDGER_ENV",
    "OPTIONS_ENV",
    "ServeOptions",
    "ServerProcess",
    "ServerThread",
    "app_from_environment",
    "export_environment",
    "listening_socket",
    "run_workers",
    "wait_until_answering",
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
        group_commit: the file store's ``group_commit`` (concurrent removals share directory syncs);
            ignored for a ledger opened by ``--ledger``.
        threads: how many threads of a worker run ledger calls at once (anyio's default pool: 40); ``None``
            keeps the default.
        extend: ``module:callable`` called as ``callable(app, ledger)`` in each worker after the app is
            built, to add the hosting server's own routes; ``None`` for none.
    """

    group_commit: bool = True
    threads: int | None = None
    extend: str | None = None

    def to_json(self) -> str:
        """The options as one JSON object."""
        return json.dumps({"group_commit": self.group_commit, "threads": self.threads, "extend": self.extend})

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
    ``group_commit``. The options' ``extend`` hook, if any, then adds its routes.

    Raises:
        KeyError: the environment lacks the directory or the token (``export_environment`` sets both).
        ValueError: the token is not a valid bearer token.
    """
    directory = Path(os.environ[DIRECTORY_ENV])
    target = os.environ.get(LEDGER_ENV)
    options = ServeOptions.from_json(os.environ.get(OPTIONS_ENV))
    if target is None:
        ledger: Any = FileLineageStore(directory, group_commit=options.group_commit)
    else:
        ledger = import_from_string(target)(directory)
    app = create_app(ledger, auth_token=os.environ[TOKEN_ENV])
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

    Args:
        sock: the bound socket (``listening_socket``); the workers inherit it.
        workers: worker processes, at least 1; each builds its app with ``app_from_environment``.
        log_level: uvicorn's log level.
        access_log: log every request.
    """
    sock.set_inheritable(True)  # the workers receive it
    config = uvicorn.Config(
        f"{__name__}:app_from_environment",
        factory=True,
        workers=workers,
        log_level=log_level,
        access_log=access_log,
        timeout_graceful_shutdown=5,
    )
    if workers == 1:
        uvicorn.Server(config).run(sockets=[sock])
    else:
        Multiprocess(config, sockets=[sock]).run()


# ---------------------------------------------------------------------------------- servers for tests
class _Served:
    """A server started on entering a ``with`` block and stopped on leaving it."""

    def start(self) -> Self:
        """Start serving and return once the server answers."""
        raise NotImplementedError

    def stop(self) -> object:
        """Stop serving and release what the server holds."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def wait_until_answering(url: str, *, token: str, timeout: float = 30.0, alive: Any = None) -> None:
    """Block until ``url`` answers an authenticated metrics request with 200.

    Args:
        url: the server's root URL.
        token: its bearer token.
        timeout: seconds to wait at most.
        alive: a callable returning False once the server has died (to stop waiting early).

    Raises:
        TimeoutError: no 200 answer within ``timeout``.
        RuntimeError: ``alive()`` returned False.
    """
    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {token}"}
    while True:
        if alive is not None and not alive():
            raise RuntimeError(f"the server at {url} exited before it answered")
        try:
            if httpx.get(f"{url}{PREFIX}{METRICS_ROUTE}", headers=headers, timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the server at {url} did not answer within {timeout} s")
        time.sleep(0.02)


class ServerProcess(_Served):
    """``capture-ledger serve`` in a child process, on a loopback port chosen by the kernel."""

    def __init__(
        self,
        directory: Path | str,
        *,
        token: str,
        workers: int = 1,
        host: str = "127.0.0.1",
        ledger: str | None = None,
        options: ServeOptions | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        """Describe the server; ``start`` (or ``with``) runs it.

        Args:
            directory: the lineage directory the server's store opens (created if missing).
            token: the bearer token, passed to the child in its environment, never on its command line.
            workers: uvicorn worker processes, each with its own store handle on ``directory``.
            host: the address to bind.
            ledger: ``module:callable`` opening the served ledger (default: the file store).
            options: ``--no-group-commit``, ``--threads``, ``--extend`` as ``ServeOptions``.
            startup_timeout: seconds to wait for the first answer.
        """
        self.directory = Path(directory)
        self.token = token
        self.workers = workers
        self.host = host
        self.ledger = ledger
        self.options = options or ServeOptions()
        self.startup_timeout = startup_timeout
        self.url = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None  # the running child's standard error
        self._last_log = ""

    @property
    def pid(self) -> int:
        """The server's (or the worker supervisor's) process ID."""
        if self._process is None:
            raise RuntimeError("the server is not running")
        return self._process.pid

    def start(self) -> Self:
        """Start the child and wait until it answers.

        Raises:
            RuntimeError: the child exited or printed no address; its log is in the message.
            TimeoutError: it did not answer within ``startup_timeout``.
        """
        command = [
            sys.executable,
            "-m",
            "capture_ledger.impl.cli.main",
            "serve",
            "--dir",
            str(self.directory),
        ]
        command += ["--host", self.host, "--port", "0", "--workers", str(self.workers)]
        if self.ledger is not None:
            command += ["--ledger", self.ledger]
        if not self.options.group_commit:
            command += ["--no-group-commit"]
        if self.options.threads is not None:
            command += ["--threads", str(self.options.threads)]
        if self.options.extend is not None:
            command += ["--extend", self.options.extend]
        environment = {**os.environ, TOKEN_ENV: self.token}
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop
        self._process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self._stderr, env=environment
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()  # serve prints one JSON line once its socket is bound
        try:
            self.url = str(json.loads(line)["url"])
            wait_until_answering(
                self.url, token=self.token, timeout=self.startup_timeout, alive=self._running
            )
        except (ValueError, KeyError, RuntimeError, TimeoutError) as error:
            log = self.log()
            self.stop()
            raise RuntimeError(f"capture-ledger serve did not start: {error}\n{log}") from error
        return self

    def _running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log(self) -> str:
        """What the server wrote to its standard error so far (or before it was last stopped)."""
        if self._stderr is None:
            return self._last_log
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def stop(self, *, grace: float = 15.0) -> int | None:
        """Stop the server (SIGTERM, then SIGKILL after ``grace`` seconds) and return its exit code."""
        process, self._process = self._process, None
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout is not None:
            process.stdout.close()
        self._last_log = self.log()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        return process.returncode


class ServerThread(_Served):
    """uvicorn serving ``app`` in a daemon thread of this process, on a loopback port."""

    def __init__(self, app: Any, *, host: str = "127.0.0.1") -> None:
        """Bind the socket now (so the port is known before any request), serve on ``start``."""
        self._socket = listening_socket(host, 0)
        self.url = f"http://{host}:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, args=([self._socket],), daemon=True)

    def start(self, *, timeout: float = 30.0) -> Self:
        """Start serving; return once uvicorn reports that it started.

        Raises:
            TimeoutError: it did not start within ``timeout``.
        """
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise TimeoutError("the in-process uvicorn server did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Ask uvicorn to exit, wait for the thread, and close the socket."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(30.0)
        self._socket.close()
