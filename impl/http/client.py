"""Clients of the control plane: ``RolloutControlClient`` (blocking) and ``AsyncRolloutControlClient``
(SPEC.md R-HTTP-4, R-HTTP-5).

Both validate and de-duplicate the whole list before anything is sent (a bare string is a ``TypeError``),
split it into requests of at most ``MAX_LEDGER_BATCH`` IDs (read at call time, or a smaller
``batch_size``), and merge the results in order; the batching is ``capture_ledger.impl.http.batching``, shared
by both. ``manifest`` validates its ID before building the URL and rejects a manifest that names another
rollout. Answers map back to the errors the ledger raised: 410 -> ``RolloutRetiredError``, 400 naming an
invalid ID -> ``InvalidRolloutIdError``; anything else -> a ``ControlPlaneError`` subclass carrying the
status and the server's reason. ``retries`` resends a failed retire or delete request (timeouts, lost
connections, 5xx) after an exponential backoff: both are idempotent (R-RETIRE-4). ``manifest`` is never
retried by the client.

Not guaranteed: atomicity across requests. When the third request of a split list fails, the first two
have taken effect; resend the whole list (IDs the first attempt removed are then reported ``absent``). A
retried request that had reached the server reports its IDs ``absent`` for the same reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self
from urllib.parse import quote

import httpx
from capture_ledger.impl.http.auth import validate_bearer_token
from capture_ledger.impl.http.batching import batch_limit, check_removal, merge_removals, plan_removal
from capture_ledger.impl.http.server import PREFIX
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
_RETRYABLE = (ServerError, ControlPlaneTimeoutError, ControlPlaneUnavailableError)


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

    def delay(self, attempt: int, error: ControlPlaneError) -> float | None:
        """The pause before resend number ``attempt + 1``, or ``None`` to give up and raise ``error``."""
        if attempt >= self.retries or not isinstance(error, _RETRYABLE):
            return None
        return float(min(self.max_backoff, self.backoff * 2**attempt))


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


def _settings(base_url: str, auth_token: str, timeout: float) -> tuple[str, dict[str, str], httpx.Timeout]:
    validate_bearer_token(auth_token)
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    root = base_url.rstrip("/") + PREFIX
    return root, {"Authorization": f"Bearer {auth_token}"}, httpx.Timeout(timeout)


def _manifest_url(root: str, rollout_id: str) -> str:
    # Validate before the ID becomes part of a URL: no path tricks, no surprise 404 (R-ID-1).
    return f"{root}/rollouts/{quote(validate_rollout_id(rollout_id), safe='')}/manifest"


# ---------------------------------------------------------------------------------------------- clients
class RolloutControlClient:
    """A blocking client of one model server's control plane."""

    def __init__(
        self,
        base_url: str,
        *,
        auth_token: str,
        timeout: float = 10.0,
        retries: int = 0,
        backoff: float = 0.1,
        batch_size: int | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """Open a connection pool to ``base_url`` (the server's root, e.g. ``http://127.0.0.1:8000``).

        Args:
            base_url: the server's root URL; the routes' prefix is added by the client.
            auth_token: the server's bearer token.
            timeout: seconds to wait for connecting, sending and each read.
            retries: how often a failed retire or delete request is resent (timeouts, lost connections,
                5xx); by default never.
            backoff: seconds before the first resend, doubled for each further one (at most 5 s).
            batch_size: IDs per request; by default ``MAX_LEDGER_BATCH`` as it is at each call.
            transport: an httpx transport (for tests); by default the network.

        Raises:
            ValueError: an empty token, a non-positive timeout, a negative retry setting, or a batch size
                outside 1..``MAX_LEDGER_BATCH``.
        """
        self._root, headers, http_timeout = _settings(base_url, auth_token, timeout)
        self._retry = RetryPolicy(retries=retries, backoff=backoff)
        self._batch_size = batch_size
        batch_limit(batch_size)  # refuse a bad size now rather than at the first call
        self._http = httpx.Client(headers=headers, timeout=http_timeout, transport=transport)

    def manifest(self, rollout_id: str) -> Manifest:
        """The rollout's manifest.

        Raises:
            InvalidRolloutIdError: the ID is invalid (nothing is sent).
            RolloutRetiredError: the rollout is retired (410).
            ControlPlaneError: any other failure, with its status and the server's reason.
        """
        url = _manifest_url(self._root, rollout_id)
        try:
            response = self._http.get(url)
        except httpx.TransportError as error:
            raise _transport_error(error, url) from error
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
        plan = plan_removal(rollout_ids, batch_size=self._batch_size)
        return merge_removals([self._send(operation, batch) for batch in plan.batches])

    def _send(self, operation: str, batch: tuple[str, ...]) -> RolloutRemoval:
        url = f"{self._root}/rollouts/{operation}"
        attempt = 0
        while True:
            try:
                try:
                    response = self._http.post(url, json={"rollout_ids": list(batch)})
                except httpx.TransportError as error:
                    raise _transport_error(error, url) from error
                return _removal_of(batch, _interpret(response))
            except ControlPlaneError as error:
                pause = self._retry.delay(attempt, error)
                if pause is None:
                    raise
                time.sleep(pause)
                attempt += 1

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


class AsyncRolloutControlClient:
    """The same client for asyncio code; every method is a coroutine."""

    def __init__(
        self,
        base_url: str,
        *,
        auth_token: str,
        timeout: float = 10.0,
        retries: int = 0,
        backoff: float = 0.1,
        batch_size: int | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """Open a connection pool; the arguments are those of ``RolloutControlClient``."""
        self._root, headers, http_timeout = _settings(base_url, auth_token, timeout)
        self._retry = RetryPolicy(retries=retries, backoff=backoff)
        self._batch_size = batch_size
        batch_limit(batch_size)  # refuse a bad size now rather than at the first call
        self._http = httpx.AsyncClient(headers=headers, timeout=http_timeout, transport=transport)

    async def manifest(self, rollout_id: str) -> Manifest:
        """The rollout's manifest; raises as ``RolloutControlClient.manifest`` does."""
        url = _manifest_url(self._root, rollout_id)
        try:
            response = await self._http.get(url)
        except httpx.TransportError as error:
            raise _transport_error(error, url) from error
        return _manifest_of(rollout_id, _interpret(response, rollout_id=rollout_id))

    async def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Retire every rollout of the list; raises as ``RolloutControlClient.retire`` does."""
        return await self._remove("retire", rollout_ids)

    async def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        """Delete every rollout of the list; raises as ``RolloutControlClient.retire`` does."""
        return await self._remove("delete", rollout_ids)

    async def _remove(self, operation: str, rollout_ids: Sequence[str]) -> RolloutRemoval:
        plan = plan_removal(rollout_ids, batch_size=self._batch_size)
        # Sequential on purpose: the merge is in order and a failure stops before later batches.
        return merge_removals([await self._send(operation, batch) for batch in plan.batches])

    async def _send(self, operation: str, batch: tuple[str, ...]) -> RolloutRemoval:
        url = f"{self._root}/rollouts/{operation}"
        attempt = 0
        while True:
            try:
                try:
                    response = await self._http.post(url, json={"rollout_ids": list(batch)})
                except httpx.TransportError as error:
                    raise _transport_error(error, url) from error
                return _removal_of(batch, _interpret(response))
            except ControlPlaneError as error:
                pause = self._retry.delay(attempt, error)
                if pause is None:
                    raise
                await asyncio.sleep(pause)
                attempt += 1

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()
