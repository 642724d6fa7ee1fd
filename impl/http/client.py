"""Clients of the control plane: ``RolloutControlClient`` (blocking) and ``AsyncRolloutControlClient``
(SPEC.md R-HTTP-4, R-HTTP-5).

Both validate and de-duplicate the whole list before anything is sent (a bare string is a ``TypeError``),
split it into requests of at most ``MAX_LEDGER_BATCH`` IDs (read at call time, or a smaller ``batch_size``),
and merge the results in order; the batching is ``capture_ledger.impl.http._batching``, shared by both.
``manifest`` validates its ID before building the URL and rejects a manifest that names another rollout.
Answers map back to the errors the ledger raised: 410 -> ``RolloutRetiredError``, 400 naming an invalid ID ->
``InvalidRolloutIdError``; anything else -> a ``ControlPlaneError`` subclass carrying the status and the
server's reason. ``retries`` resends a failed retire or delete request (timeouts, lost connections, 5xx) after
an exponential backoff, and so is a ``manifest`` read: all three are idempotent (R-RETIRE-4). Whatever
``retries`` says, a request whose connection was dropped before any answer came (the server closed a
kept-alive connection, or reset it) is resent once at once on a new connection (R-HTTP-7): RFC 9110 §9.2.2
allows it for idempotent requests, and without it the request after a server closed its end of a kept-alive
connection failed.

Not guaranteed: atomicity across requests. When the third request of a split list fails, the first two
have taken effect; resend the whole list (IDs the first attempt removed are then reported ``absent``). A
retried request that had reached the server reports its IDs ``absent`` for the same reason.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

import httpx
from capture_ledger.impl.http._auth import validate_bearer_token
from capture_ledger.impl.http._batching import (
    RemovalPlan,
    batch_limit,
    check_removal,
    merge_removals,
    plan_removal,
)
from capture_ledger.impl.http._routes import PREFIX, REMOVAL_ROUTES, manifest_route
from capture_ledger.spec.core.errors import CaptureLedgerError, InvalidRolloutIdError, RolloutRetiredError
from capture_ledger.spec.core.ids import validate_rollout_id
from capture_ledger.spec.core.protocol import Manifest, RolloutRemoval

__all__ = [
    "AsyncRolloutControlClient",
    "ControlPlaneError",
    "ControlPlaneTimeoutError",
    "ControlPlaneUnavailableError",
    "RequestRejectedError",
    "RetryPolicy",
    "RolloutControlClient",
    "ServerError",
    "UnauthorizedError",
    "UnexpectedResponseError",
]


class ControlPlaneError(CaptureLedgerError):
    """A control-plane request failed for a reason other than the ledger's own errors.

    Attributes:
        status: the HTTP status, or ``None`` when no answer arrived.
        reason: the server's explanation (its ``detail``), or the transport's.
        error: the error class the server named, if any.
    """

    def __init__(
        self, message: str, status: int | None = None, reason: str = "", error: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.error = error

    def __reduce__(self) -> tuple[type[ControlPlaneError], tuple[str, int | None, str, str | None]]:
        return (type(self), (str(self), self.status, self.reason, self.error))


class UnauthorizedError(ControlPlaneError, PermissionError):
    """401: the bearer token is missing or wrong; check the token the server was started with."""


class RequestRejectedError(ControlPlaneError, ValueError):
    """Another 4xx (422 malformed body, 409, 404, 400 not about an ID): fix the request, do not resend it."""


class ServerError(ControlPlaneError):
    """5xx: the server failed (for example an ``OSError`` in the store); retire and delete may be resent."""


class ControlPlaneTimeoutError(ControlPlaneError, TimeoutError):
    """No answer within the client's timeout; the request may or may not have taken effect."""


class ControlPlaneUnavailableError(ControlPlaneError, ConnectionError):
    """The connection failed or was lost; the request may or may not have taken effect."""


class UnexpectedResponseError(ControlPlaneError):
    """A 200 answer that is not what was asked for (malformed, or a manifest of another rollout)."""


#: Errors after which resending an idempotent request is sensible.
_RETRYABLE: tuple[type[ControlPlaneError], ...] = (
    ServerError,
    ControlPlaneTimeoutError,
    ControlPlaneUnavailableError,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often and after which pauses a retire or delete request is resent.

    Attributes:
        retries: resends after the first attempt (0: none).
        backoff: seconds before the first resend; doubled each time, at most ``max_backoff``.
        max_backoff: the longest pause.
    """

    retries: int = 0
    backoff: float = 0.1
    max_backoff: float = 5.0

    def __post_init__(self) -> None:
        if self.retries < 0 or self.backoff < 0 or self.max_backoff < 0:
            raise ValueError("retries, backoff and max_backoff must not be negative")

    def pauses(self) -> Iterator[float]:
        """The pause before each resend, in order: ``backoff``, twice that, ..., at most ``max_backoff``.

        Returns:
            ``retries`` pauses in seconds. Only a timeout, a lost connection or a 5xx/429 is resent.
        """
        return (float(min(self.max_backoff, self.backoff * 2**attempt)) for attempt in range(self.retries))


# ---------------------------------------------------------------------------------------------- shared logic
def _reason(response: httpx.Response) -> tuple[str, str | None, Any]:
    """The server's ``detail``, error class name and decoded body (or the raw text when not JSON)."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500], None, None
    if isinstance(body, Mapping):
        detail = body.get("detail", "")
        error = body.get("error")
        return (
            (detail if isinstance(detail, str) else repr(detail)),
            (error if isinstance(error, str) else None),
            body,
        )
    return repr(body)[:500], None, body


def _interpret(response: httpx.Response, *, rollout_id: str | None = None) -> Any:
    """The decoded body of a 200 answer; otherwise the typed error of its status (R-HTTP-5)."""
    if response.status_code == 200:
        try:
            return response.json()
        except ValueError as decode_error:
            raise UnexpectedResponseError(
                f"{response.request.method} {response.request.url.path}: 200 with a body that is not JSON",
                200,
                response.text[:500],
            ) from decode_error
    reason, error, body = _reason(response)
    status = response.status_code
    named = body.get("rollout_id") if isinstance(body, Mapping) else None
    if status == 410:
        raise RolloutRetiredError(named if isinstance(named, str) else str(rollout_id))
    if status == 400 and error == InvalidRolloutIdError.__name__:
        raise InvalidRolloutIdError(named if isinstance(named, str) else rollout_id, reason)
    message = f"{response.request.method} {response.request.url.path} answered {status}: {reason}"
    if status == 401:
        raise UnauthorizedError(message, status, reason, error)
    if status >= 500:
        raise ServerError(message, status, reason, error)
    if status == 429:  # a proxy shedding load: worth resending like a 5xx
        raise ServerError(message, status, reason, error)
    raise RequestRejectedError(message, status, reason, error)


def _dropped(error: httpx.TransportError) -> bool:
    """Whether the connection was dropped under the request (not refused, not timed out): resend once."""
    return isinstance(error, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError)


def _transport_error(error: httpx.TransportError, url: str) -> ControlPlaneError:
    if isinstance(error, httpx.TimeoutException):
        message = f"{url}: no answer in time ({type(error).__name__})"
        return ControlPlaneTimeoutError(message, None, str(error))
    return ControlPlaneUnavailableError(f"{url}: {type(error).__name__}: {error}", None, str(error))


def _manifest_of(rollout_id: str, payload: Any) -> Manifest:
    """Check a manifest answer: it must be a manifest, and of ``rollout_id`` (R-HTTP-5)."""
    if not (
        isinstance(payload, Mapping)
        and isinstance(payload.get("records"), list)
        and isinstance(payload.get("failures"), list)
    ):
        raise UnexpectedResponseError(f"malformed manifest for {rollout_id!r}: {payload!r:.200}", 200)
    if payload.get("rollout_id") != rollout_id:
        raise UnexpectedResponseError(
            f"asked for the manifest of {rollout_id!r} and got one of {payload.get('rollout_id')!r}", 200
        )
    return {"rollout_id": rollout_id, "records": payload["records"], "failures": payload["failures"]}


def _removal_of(batch: Sequence[str], payload: Any) -> RolloutRemoval:
    checked = check_removal(batch, payload)
    if isinstance(checked, str):
        raise UnexpectedResponseError(f"malformed retire/delete answer: {checked}", 200)
    return checked


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default TLS context, built once per process.

    Each ``httpx.Client()`` otherwise loads the CA bundle again: about 100 ms per client (measured,
    docs/http.md), which dominated opening a client. ``$SSL_CERT_FILE`` and ``$SSL_CERT_DIR`` are read at
    the first use.
    """
    return httpx.create_ssl_context()


# ---------------------------------------------------------------------------------------------- clients
_Transport = TypeVar("_Transport", httpx.BaseTransport, httpx.AsyncBaseTransport)


class _ControlClient(Generic[_Transport]):
    """What both clients share: the checked settings, the URLs, the retry policy and the batch plan."""

    def __init__(
        self,
        base_url: str,
        *,
        auth_token: str,
        timeout: float = 10.0,
        retries: int = 0,
        backoff: float = 0.1,
        batch_size: int | None = None,
        transport: _Transport | None = None,
    ) -> None:
        """Open a connection pool to ``base_url`` (the server's root, e.g. ``http://127.0.0.1:8000``).

        Args:
            base_url: the server's root URL; the routes' prefix is added by the client.
            auth_token: the server's bearer token.
            timeout: seconds to wait for connecting, sending and each read.
            retries: how often a failed request is resent (timeouts, lost connections, 5xx); by default
                never (a connection dropped before any answer is resent once regardless).
            backoff: seconds before the first resend, doubled for each further one (at most 5 s).
            batch_size: IDs per request; by default ``MAX_LEDGER_BATCH`` as it is at each call.
            transport: an httpx transport (for tests), blocking or async as the client; by default the
                network.

        Raises:
            ValueError: an empty token, a non-positive timeout, a negative retry setting, or a batch size
                outside 1..``MAX_LEDGER_BATCH``.
        """
        validate_bearer_token(auth_token)
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        batch_limit(batch_size)  # refuse a bad size now rather than at the first call
        self._root = base_url.rstrip("/") + PREFIX
        self._retry = RetryPolicy(retries=retries, backoff=backoff)
        self._batch_size = batch_size
        self._connect({"Authorization": f"Bearer {auth_token}"}, httpx.Timeout(timeout), transport)

    def _connect(self, headers: dict[str, str], timeout: httpx.Timeout, transport: _Transport | None) -> None:
        raise NotImplementedError

    def _manifest_url(self, rollout_id: str) -> str:
        # Validate before the ID becomes part of a URL: no path tricks, no surprise 404 (R-ID-1).
        return self._root + manifest_route(validate_rollout_id(rollout_id))

    def _plan(self, rollout_ids: Sequence[str]) -> RemovalPlan:
        return plan_removal(rollout_ids, batch_size=self._batch_size)


class RolloutControlClient(_ControlClient[httpx.BaseTransport]):
    """A blocking client of one model server's control plane."""

    _http: httpx.Client

    def _connect(
        self, headers: dict[str, str], timeout: httpx.Timeout, transport: httpx.BaseTransport | None
    ) -> None:
        self._http = httpx.Client(
            headers=headers, timeout=timeout, transport=transport, verify=_tls_context()
        )

    def manifest(self, rollout_id: str) -> Manifest:
        """The rollout's manifest; resent like a removal after a timeout, a lost connection or a 5xx.

        Raises:
            InvalidRolloutIdError: the ID is invalid (nothing is sent).
            RolloutRetiredError: the rollout is retired (410).
            ControlPlaneError: any other failure, with its status and the server's reason.
        """
        url = self._manifest_url(rollout_id)
        for pause in self._retry.pauses():
            try:
                return self._read_manifest(rollout_id, url)
            except _RETRYABLE:
                time.sleep(pause)
        return self._read_manifest(rollout_id, url)

    def _read_manifest(self, rollout_id: str, url: str) -> Manifest:
        response = self._request("GET", url)
        return _manifest_of(rollout_id, _interpret(response, rollout_id=rollout_id))

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Retire every rollout of the list, in requests of at most the batch size.

        Raises:
            TypeError: a bare string or not a sequence (nothing is sent).
            InvalidRolloutIdError: an invalid ID anywhere in the list (nothing is sent).
            ControlPlaneError: a request failed after its retries; earlier requests took effect.
        """
        return self._remove("retire", rollout_ids)

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Delete every rollout of the list; raises as ``retire`` does."""
        return self._remove("delete", rollout_ids)

    def _remove(self, operation: str, rollout_ids: Sequence[str]) -> RolloutRemoval:
        return merge_removals([self._send(operation, batch) for batch in self._plan(rollout_ids).batches])

    def _send(self, operation: str, batch: tuple[str, ...]) -> RolloutRemoval:
        for pause in self._retry.pauses():
            try:
                return self._post(operation, batch)
            except _RETRYABLE:
                time.sleep(pause)
        return self._post(operation, batch)  # the last attempt: its error is the caller's

    def _post(self, operation: str, batch: tuple[str, ...]) -> RolloutRemoval:
        response = self._request("POST", self._root + REMOVAL_ROUTES[operation], {"rollout_ids": list(batch)})
        return _removal_of(batch, _interpret(response))

    def _request(self, method: str, url: str, body: object = None) -> httpx.Response:
        try:
            return self._http.request(method, url, json=body)
        except httpx.TransportError as error:
            if not _dropped(error):
                raise _transport_error(error, url) from error
        try:  # dropped before any answer: once more at once, on a new connection (idempotent)
            return self._http.request(method, url, json=body)
        except httpx.TransportError as error:
            raise _transport_error(error, url) from error

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


class AsyncRolloutControlClient(_ControlClient[httpx.AsyncBaseTransport]):
    """The same client for asyncio code; every method is a coroutine. Its arguments are the blocking one's."""

    _http: httpx.AsyncClient

    def _connect(
        self, headers: dict[str, str], timeout: httpx.Timeout, transport: httpx.AsyncBaseTransport | None
    ) -> None:
        self._http = httpx.AsyncClient(
            headers=headers, timeout=timeout, transport=transport, verify=_tls_context()
        )

    async def manifest(self, rollout_id: str) -> Manifest:
        """The rollout's manifest; resent and raising as ``RolloutControlClient.manifest``."""
        url = self._manifest_url(rollout_id)
        for pause in self._retry.pauses():
            try:
                return await self._read_manifest(rollout_id, url)
            except _RETRYABLE:
                await asyncio.sleep(pause)
        return await self._read_manifest(rollout_id, url)

    async def _read_manifest(self, rollout_id: str, url: str) -> Manifest:
        response = await self._request("GET", url)
        return _manifest_of(rollout_id, _interpret(response, rollout_id=rollout_id))

    async def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Retire every rollout of the list; raises as ``RolloutControlClient.retire`` does."""
        return await self._remove("retire", rollout_ids)

    async def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Delete every rollout of the list; raises as ``RolloutControlClient.retire`` does."""
        return await self._remove("delete", rollout_ids)

    async def _remove(self, operation: str, rollout_ids: Sequence[str]) -> RolloutRemoval:
        # Sequential on purpose: the merge is in order and a failure stops before later batches.
        plan = self._plan(rollout_ids)
        return merge_removals([await self._send(operation, batch) for batch in plan.batches])

    async def _send(self, operation: str, batch: tuple[str, ...]) -> RolloutRemoval:
        for pause in self._retry.pauses():
            try:
                return await self._post(operation, batch)
            except _RETRYABLE:
                await asyncio.sleep(pause)
        return await self._post(operation, batch)  # the last attempt: its error is the caller's

    async def _post(self, operation: str, batch: tuple[str, ...]) -> RolloutRemoval:
        body = {"rollout_ids": list(batch)}
        response = await self._request("POST", self._root + REMOVAL_ROUTES[operation], body)
        return _removal_of(batch, _interpret(response))

    async def _request(self, method: str, url: str, body: object = None) -> httpx.Response:
        try:
            return await self._http.request(method, url, json=body)
        except httpx.TransportError as error:
            if not _dropped(error):
                raise _transport_error(error, url) from error
        try:  # dropped before any answer: once more at once, on a new connection (idempotent)
            return await self._http.request(method, url, json=body)
        except httpx.TransportError as error:
            raise _transport_error(error, url) from error

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()
