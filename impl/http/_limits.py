"""What a production server limits: connections, slow heads, slow bodies, idle keep-alive (SPEC.md R-HTTP-7).

``ServerLimits`` holds the figures; ``capture-ledger serve`` reads them from ``$CAPTURE_LEDGER_SERVE_LIMITS``
(JSON, any subset of the fields) in every worker, and the test servers of ``impl.simulate`` pass them to their
uvicorn servers. ``GuardedH11Protocol`` (and ``GuardedHttpToolsProtocol`` when ``httptools`` is installed) is
uvicorn's HTTP protocol with three guards added:

- **connections**: a connection beyond ``max_connections`` open in this worker is answered at once with
  503 ``ServerBusy`` in the error shape, ``Connection: close`` and ``Retry-After: 1``, and closed, before
  anything of it is read. The default stays ``reserve_fds`` below the process's open-file limit, so the
  store's own files (64 lock files, a ledger per thread, the directory) always find a descriptor and
  ``accept`` never fails with ``EMFILE`` (before: 1,100 idle connections above a limit of 1,024 made
  requests with the right token time out while uvicorn logged 71 MB of ``EMFILE`` tracebacks in 25 s).
- **request head**: a request's line and headers must arrive within ``header_timeout`` seconds of its
  first byte (or of the connection, for a connection that sends nothing); otherwise 408 ``RequestTimeout``
  with ``Connection: close``, and the connection is closed. uvicorn itself times out only idle keep-alive
  connections, and never one that trickles a header byte at a time.
- **malformed requests**: what the HTTP parser itself refuses (a broken request line, a control
  character in a header) is a 400 ``InvalidHTTPRequest`` in the error shape, ``Connection: close``.
- **keep-alive**: an idle connection between requests is closed after ``keep_alive_timeout`` (uvicorn's
  own timer), silently: an answer on an idle connection could be taken for the answer to a request the
  client is sending at that moment.

The body's read timeout (``body_timeout``: the whole body within that many seconds of the first read)
is enforced by ``body_limit.BodyLimit``, which counts the body too: 408 with ``Connection: close``.

Not guaranteed: limits across worker processes (each worker counts its own connections), TLS handshakes,
or fairness between clients.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import resource
from dataclasses import asdict, dataclass, replace
from typing import Any

from capture_ledger.impl.http._responses import error_body, render_json
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "LIMITS_ENV",
    "GuardedH11Protocol",
    "ServerLimits",
    "guarded_protocol",
    "limits_from_environment",
]

#: JSON object of ``ServerLimits`` fields read by every worker of ``capture-ledger serve``.
LIMITS_ENV = "CAPTURE_LEDGER_SERVE_LIMITS"


def _default_max_connections(reserve: int) -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 4096
    return max(16, min(4096, soft - reserve))


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerLimits:
    """The limits of one worker process.

    Attributes:
        header_timeout: seconds for a request's line and headers, from its first byte.
        body_timeout: seconds for a request's whole body, from the app's first read of it.
        keep_alive_timeout: seconds an idle connection is kept between requests.
        max_connections: open connections per worker; ``None``: the open-file limit less ``reserve_fds``
            (at most 4,096).
        reserve_fds: descriptors kept free for the store when ``max_connections`` is derived.
        http: uvicorn's HTTP parser: ``"auto"`` (``httptools`` when it is installed, else ``h11``: measured
            twice the manifest reads per second of one worker, docs/http.md), ``"h11"`` or ``"httptools"``.
        loop: uvicorn's event loop: ``"auto"`` (uvloop when installed), ``"asyncio"`` or ``"uvloop"``.
    """

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive_timeout: int = 5
    max_connections: int | None = None
    reserve_fds: int = 256
    http: str = "auto"
    loop: str = "auto"

    def __post_init__(self) -> None:
        if min(self.header_timeout, self.body_timeout, self.keep_alive_timeout) <= 0:
            raise ValueError("timeouts must be positive")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if self.http not in ("auto", "h11", "httptools"):
            raise ValueError(f"http must be 'auto', 'h11' or 'httptools', not {self.http!r}")
        if self.loop not in ("auto", "asyncio", "uvloop"):
            raise ValueError(f"loop must be 'auto', 'asyncio' or 'uvloop', not {self.loop!r}")

    def connections(self) -> int:
        """The connection cap in force: ``max_connections`` or the derived default."""
        if self.max_connections is not None:
            return self.max_connections
        return _default_max_connections(self.reserve_fds)

    def to_json(self) -> str:
        """The limits as one JSON object (for ``LIMITS_ENV``)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | None) -> ServerLimits:
        """Limits from a JSON object of any subset of the fields; the defaults for ``None`` or ``""``.

        Raises:
            ValueError: not a JSON object of known fields with valid values.
        """
        if not text:
            return cls()
        given = json.loads(text)
        if not isinstance(given, dict):
            raise ValueError(f"{LIMITS_ENV} must hold a JSON object")
        return replace(cls(), **given)


@functools.cache
def _parsed(text: str | None) -> ServerLimits:
    return ServerLimits.from_json(text)


def limits_from_environment() -> ServerLimits:
    """The limits ``$CAPTURE_LEDGER_SERVE_LIMITS`` sets (the defaults when unset); parsed once per value."""
    return _parsed(os.environ.get(LIMITS_ENV))


def _raw_answer(status: int, reason: str, error: str, detail: str, extra: str = "") -> bytes:
    body = render_json(error_body(error, detail))
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n{extra}\r\n"
    )
    return head.encode("ascii") + body


_BUSY = _raw_answer(
    503, "Service Unavailable", "ServerBusy",
    "too many open connections to this worker; retry after a pause", "retry-after: 1\r\n",
)  # fmt: skip
_HEAD_TIMEOUT = _raw_answer(
    408, "Request Timeout", "RequestTimeout", "the request's line and headers did not arrive in time"
)


class _Guard:
    """The guards of one connection; mixed into a uvicorn HTTP protocol ahead of it, so that its overrides
    wrap the protocol's own (see the module docstring)."""

    limits: ServerLimits | None = None  # None: from the environment (the workers of serve)

    # Provided by the uvicorn protocol the guard is mixed into.
    transport: asyncio.Transport
    connections: set[Any]
    cycle: Any
    loop: asyncio.AbstractEventLoop

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard_setup()

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._guard_connected()

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        self._guard_data()
        super().data_received(data)  # type: ignore[misc]

    def on_response_complete(self) -> None:
        self._disarm_head_timer()
        super().on_response_complete()  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)  # type: ignore[misc]

    def _guard_setup(self) -> None:
        self._limits = self.limits or limits_from_environment()
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_cycle: Any = None

    def _guard_connected(self) -> bool:
        if len(self.connections) > self._limits.connections():
            self.transport.write(_BUSY)
            self.transport.close()
            return False
        self._arm_head_timer()
        return True

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_cycle = self.cycle
            self._head_timer = self.loop.call_later(self._limits.header_timeout, self._head_late)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not self._head_cycle:
            return  # a request's head arrived since: the timer is for the next one
        self.transport.write(_HEAD_TIMEOUT)
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """The parser refused the request (a malformed head, a control character in a header): a 400 in
        the error shape with ``Connection: close`` instead of uvicorn's ``text/plain`` (R-HTTP-7)."""
        self.transport.write(
            _raw_answer(400, "Bad Request", "InvalidHTTPRequest", f"the HTTP request is malformed: {msg}")
        )
        self.transport.close()

    def _guard_data(self) -> None:
        # A first byte of a new request while none is in progress: its head must complete in time.
        if self.cycle is None or self.cycle.response_complete:
            self._arm_head_timer()
        else:
            self._disarm_head_timer()


class GuardedH11Protocol(_Guard, H11Protocol):  # type: ignore[misc]
    """uvicorn's h11 protocol with the connection cap and the head timeout (see the module docstring)."""


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is not installed
    HttpToolsProtocol = None  # type: ignore[assignment,misc]

if HttpToolsProtocol is not None:

    class _GuardedHttpToolsProtocol(_Guard, HttpToolsProtocol):  # type: ignore[misc]
        """uvicorn's httptools protocol with the same guards (module level: the workers pickle it)."""


#: The httptools variant, or ``None`` when ``httptools`` is not installed.
GuardedHttpToolsProtocol: type[Any] | None = (
    _GuardedHttpToolsProtocol if HttpToolsProtocol is not None else None
)


def guarded_protocol(limits: ServerLimits | None = None) -> type[Any]:
    """The guarded protocol class for ``limits.http``; bound to ``limits`` when given, else (the workers
    of serve, which pickle their configuration) reading ``$CAPTURE_LEDGER_SERVE_LIMITS``.

    Raises:
        ValueError: ``httptools`` was asked for and is not installed.
    """
    chosen = limits or limits_from_environment()
    parser = chosen.http
    if parser == "auto":
        parser = "h11" if GuardedHttpToolsProtocol is None else "httptools"
    base: type[Any] | None = GuardedH11Protocol if parser == "h11" else GuardedHttpToolsProtocol
    if base is None:
        raise ValueError("http='httptools' needs the httptools package (pip install httptools)")
    if limits is None:
        return base
    return type(base.__name__, (base,), {"limits": limits, "__module__": __name__})
