"""Servers on loopback for tests, benchmarks and the simulation (SPEC.md R-HTTP-1, R-STORE-2).

- ``ServerProcess``: ``capture-ledger serve`` as a separate process (one or several uvicorn workers) on a
  port the kernel picks; the context manager returns once the server answers an authenticated request,
  and stops it (SIGTERM, then SIGKILL after a grace period) on exit.
- ``ServerThread``: uvicorn serving an ASGI app in a thread of this process, on a socket bound before the
  thread starts, for callers that need many short-lived apps in one process (the HTTP conformance test).

Nothing on the production path imports this module (``impl.http.serving`` is what ``serve`` runs).

Not guaranteed: that the port stays free between runs, any TLS, or a server reachable from other hosts
(both bind to 127.0.0.1 unless told otherwise).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import httpx
import uvicorn
from capture_ledger.impl.http import (
    LIMITS_ENV,
    METRICS_ROUTE,
    PREFIX,
    TOKEN_ENV,
    ServerLimits,
    guarded_protocol,
)
from capture_ledger.impl.http.serving import ServeOptions, listening_socket

__all__ = ["ServerProcess", "ServerThread", "wait_until_answering"]


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
        limits: ServerLimits | None = None,
    ) -> None:
        """Describe the server; ``start`` (or ``with``) runs it.

        Args:
            directory: the lineage directory the server's store opens (created if missing).
            token: the bearer token, passed to the child in its environment, never on its command line.
            workers: uvicorn worker processes, each with its own store handle on ``directory``.
            host: the address to bind.
            ledger: ``module:callable`` opening the served ledger (default: the file store).
            options: ``--[no-]group-commit``, ``--[no-]combine``, ``--threads``, ``--extend`` as
                ``ServeOptions`` (both switches are passed explicitly unless ``combine_removals="auto"``).
            startup_timeout: seconds to wait for the first answer.
            limits: the server's limits (``$CAPTURE_LEDGER_SERVE_LIMITS`` of the child); ``None``: the
                defaults, or what this process's environment says.
        """
        self.directory = Path(directory)
        self.token = token
        self.workers = workers
        self.host = host
        self.ledger = ledger
        self.options = options or ServeOptions()
        self.startup_timeout = startup_timeout
        self.limits = limits
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
        command += ["--group-commit" if self.options.group_commit else "--no-group-commit"]
        if self.options.combine_removals != "auto":
            command += ["--combine" if self.options.combine_removals else "--no-combine"]
        if self.options.threads is not None:
            command += ["--threads", str(self.options.threads)]
        if self.options.extend is not None:
            command += ["--extend", self.options.extend]
        environment = {**os.environ, TOKEN_ENV: self.token}
        if self.limits is not None:
            environment[LIMITS_ENV] = self.limits.to_json()
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

    def __init__(self, app: Any, *, host: str = "127.0.0.1", limits: ServerLimits | None = None) -> None:
        """Bind the socket now (so the port is known before any request), serve on ``start``.

        ``limits``: the connection cap, head and keep-alive timeouts and parser of ``serve``'s workers
        (``impl.http``; the body timeout is the app's, ``create_app(body_timeout=...)``).
        """
        self._socket = listening_socket(host, 0)
        self.url = f"http://{host}:{self._socket.getsockname()[1]}"
        chosen = limits or ServerLimits()
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            http=guarded_protocol(chosen),
            timeout_keep_alive=chosen.keep_alive_timeout,
            loop=chosen.loop,  # checked by ServerLimits
        )
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
