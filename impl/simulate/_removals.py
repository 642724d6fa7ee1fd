"""The framework's removal requests: finished and abandoned attempts retired (or deleted) in batches
(R-RETIRE-1..4, R-DELETE-1..3, R-HTTP-4).

One ``RemovalQueue`` per (server, purpose): IDs are added as attempts finish, and a batch is sent when
``batch`` IDs wait or the oldest has waited ``flush_seconds`` (a training step ends); with ``batch=1``
each rollout gets its own request, as the source suggests to start with. Each ID's future resolves to
``"removed"`` or ``"absent"``, as the server reported it, or ``"error"`` when the request failed (the
error is kept in ``errors``). A request whose connection was lost is resent with the same batch, up to
``RESENDS`` times, as the source tells callers to do (both operations are idempotent, R-RETIRE-4).
``RemovalQueue.send`` is also the one-off removal of a list (the end-of-run delete). Every request's
duration and size are kept, so the client's cost per rollout can be put next to the server's.

Not guaranteed: order between batches (several may be in flight at once, as from several actors).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import aiohttp
from capture_ledger.impl.http import PREFIX, REMOVAL_ROUTES

__all__ = ["RESENDS", "RemovalQueue", "RemovalRequests", "RemovalServerError", "resending"]

#: How often a request whose connection was lost is sent again.
RESENDS = 3


_T = TypeVar("_T")


class RemovalServerError(RuntimeError):
    """A removal request answered with something other than a well-formed 200."""


@dataclass(kw_only=True, slots=True)
class RemovalRequests:
    """What the removal requests of one queue cost: count, IDs and seconds (client side)."""

    requests: int = 0
    ids: int = 0
    seconds: float = 0.0
    resent: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: {"removed": 0, "absent": 0})


async def resending(
    send: Callable[[], Awaitable[_T]],
    on_resend: Callable[[], None] | None = None,
    *,
    when: Callable[[], bool] | None = None,
) -> _T:
    """``await send()``, sent again (up to ``RESENDS`` times) when the connection was lost.

    Only for idempotent requests: a lost connection may or may not have delivered the first one.
    ``when``, if given, must also say yes for a resend.
    """
    for attempt in range(RESENDS + 1):
        try:
            return await send()
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientConnectionError):
            if attempt == RESENDS or (when is not None and not when()):
                raise
            if on_resend is not None:
                on_resend()
            await asyncio.sleep(0.05 * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


async def remove(session: aiohttp.ClientSession, operation: str, ids: Sequence[str]) -> dict[str, list[str]]:
    """Send one retire or delete request for ``ids`` and check the answer names each ID once.

    Raises:
        RemovalServerError: any status but 200, or an answer that does not account for every ID.
    """
    async with session.post(
        f"{PREFIX}{REMOVAL_ROUTES[operation]}", json={"rollout_ids": list(ids)}
    ) as response:
        text = await response.text()
        if response.status != 200:
            raise RemovalServerError(f"{operation} of {len(ids)} IDs: {response.status} {text[:200]}")
        answer = await response.json(content_type=None)
    removed, absent = list(answer["removed"]), list(answer["absent"])
    if sorted(removed + absent) != sorted(set(ids)):
        raise RemovalServerError(f"{operation}: the answer does not name each sent ID once: {text[:200]}")
    return {"removed": removed, "absent": absent}


class RemovalQueue:
    """Batches removal requests of one kind to one server."""

    def __init__(
        self, session: aiohttp.ClientSession, operation: str, *, batch: int, flush_seconds: float
    ) -> None:
        """Create an idle queue; ``run`` sends its batches.

        Args:
            session: the server's session (its base URL and token).
            operation: ``"retire"`` or ``"delete"``.
            batch: IDs per request.
            flush_seconds: the longest an ID waits for its batch to fill.
        """
        self.session = session
        self.operation = operation
        self.batch = batch
        self.flush_seconds = flush_seconds
        self.cost = RemovalRequests()
        self.errors: list[str] = []
        self._pending: list[tuple[str, asyncio.Future[str]]] = []
        self._oldest = 0.0
        self._sending: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._closing = False

    def add(self, rollout_id: str) -> asyncio.Future[str]:
        """Queue one ID; the future resolves to ``"removed"``, ``"absent"`` or ``"error"``."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        if not self._pending:
            self._oldest = time.monotonic()
        self._pending.append((rollout_id, future))
        if len(self._pending) >= self.batch:
            self._wake.set()
        return future

    async def run(self) -> None:
        """Send batches until ``close`` was called and nothing is pending or in flight."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=min(0.1, self.flush_seconds))
            self._wake.clear()
            due = self._pending and (
                len(self._pending) >= self.batch
                or self._closing
                or time.monotonic() - self._oldest >= self.flush_seconds
            )
            while due:
                taken, self._pending = self._pending[: self.batch], self._pending[self.batch :]
                self._oldest = time.monotonic()
                task = asyncio.create_task(self._send(taken))
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)
                due = bool(self._pending) and (len(self._pending) >= self.batch or self._closing)
            if self._closing and not self._pending:
                if self._sending:
                    await asyncio.gather(*self._sending)
                if not self._pending:
                    return

    def close(self) -> None:
        """Send what is pending now and stop ``run`` once everything was answered."""
        self._closing = True
        self._wake.set()

    async def _send(self, taken: list[tuple[str, asyncio.Future[str]]]) -> None:
        ids = [rollout_id for rollout_id, _ in taken]
        try:
            answer = await self.send(ids)
        except (RemovalServerError, aiohttp.ClientError, TimeoutError) as error:
            self.errors.append(f"{type(error).__name__}: {error}")
            for _, future in taken:
                if not future.done():
                    future.set_result("error")
            return
        outcome = {rollout_id: "removed" for rollout_id in answer["removed"]}
        outcome.update({rollout_id: "absent" for rollout_id in answer["absent"]})
        for rollout_id, future in taken:
            if not future.done():
                future.set_result(outcome[rollout_id])

    async def send(self, ids: Sequence[str]) -> dict[str, list[str]]:
        """One request for ``ids`` now (at most ``MAX_LEDGER_BATCH``), its cost counted."""
        start = time.perf_counter()

        def resent() -> None:
            self.cost.resent += 1

        answer = await resending(lambda: remove(self.session, self.operation, ids), resent)
        self.cost.seconds += time.perf_counter() - start
        self.cost.requests += 1
        self.cost.ids += len(ids)
        for outcome in ("removed", "absent"):
            self.cost.outcomes[outcome] += len(answer[outcome])
        return answer
