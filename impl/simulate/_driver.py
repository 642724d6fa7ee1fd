"""The framework driver of the simulation: rollouts, manifests, removals, duplicates, abandoned agents and
wrong-server requests against the servers of one arm (R-ADMIT-1..2, R-READ-1..3, R-RETIRE-1..4,
R-DELETE-1..3, R-WRITE-4..6).

``ArmDriver.run`` plays a training framework and its agents against one ``Cluster``:

- **rollouts**: ``rollouts`` attempts, at most ``in_flight`` at once; attempt ``i`` runs on server
  ``i % servers`` (the node that holds its ledger) and makes ``calls`` model calls one after another
  through the fake inference route (some fail: ``record_failure``). Then the framework reads its manifest
  over HTTP, checks that every call of its own is there, and hands the ID to the server's removal queue
  (``impl.simulate``: batches of ``batch``, or one request per rollout);
- **duplicates**: a ``duplicates`` fraction of attempts is sent a second time under the same ID, as a
  client retry does: the second execution starts once the first has finished a random call, runs all its
  calls (new call IDs) and is never read by the framework;
- **abandoned attempts**: an ``abandon`` fraction stops after a random number of calls; its agent has one
  call in flight, admitted before the framework removes the attempt and written after it (the route's
  ``hold``), and sends one more call after the removal;
- **the wrong server**: a ``wrong_server`` fraction of finished attempts is also removed on the next
  server, whose directory never saw it: every such ID must come back ``absent``;
- **the end**: once every execution has finished and every removal was answered, the directories are
  read (a ledger still there belongs to a rollout that was removed and then re-created), every worker's
  metrics are scraped, every ID each server was ever sent is deleted, and everything is measured again.

Every random choice comes from ``random.Random`` seeded by the scenario's seed, the arm and the rollout.
Not guaranteed: the interleavings themselves (they depend on the machine's timing); the counts of
re-created ledgers and discarded writes therefore vary between runs, the invariants do not.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from capture_ledger.impl.http import PREFIX, manifest_route
from capture_ledger.impl.simulate._cluster import Cluster, DirectoryState, Server, measure
from capture_ledger.impl.simulate._inference import INFERENCE_ROUTE
from capture_ledger.impl.simulate._outcome import ArmOutcome
from capture_ledger.impl.simulate._removals import (
    RemovalQueue,
    RemovalRequests,
    RemovalServerError,
    resending,
)
from capture_ledger.impl.simulate._scenario import Arm, Scenario
from capture_ledger.impl.simulate._scrape import WorkerMetrics, scrape_every_worker

__all__ = ["ArmDriver", "rollout_id"]

#: Seconds a single request may take (a held late write waits for its removal: up to two minutes).
REQUEST_TIMEOUT = 300.0
#: Connections per server and arm.
CONNECTIONS = 128
#: Seconds between two samples of the directories' size.
SAMPLE_EVERY = 1.0
_MAX_ERRORS = 20


def rollout_id(index: int) -> str:
    """The ID of attempt ``index`` (the same in every arm: each arm has directories of its own)."""
    return f"rollout-{index:06d}"


def _measure_all(servers: list[Server]) -> DirectoryState:
    """What the directories of ``servers`` hold together (blocking: run it in a thread)."""
    states = [measure(server.directory) for server in servers]
    names = tuple(sorted(name for state in states for name in state.ledger_names))
    return DirectoryState(
        ledgers=sum(s.ledgers for s in states),
        ledger_bytes=sum(s.ledger_bytes for s in states),
        fences=sum(s.fences for s in states),
        ledger_names=names,
    )


def _add_cost(total: RemovalRequests, cost: RemovalRequests) -> None:
    total.requests += cost.requests
    total.ids += cost.ids
    total.seconds += cost.seconds


class _Slot:
    """One attempt's place among the ``in_flight``: released once, by whoever is done with it first."""

    __slots__ = ("_released", "_semaphore")

    def __init__(self, semaphore: asyncio.Semaphore) -> None:
        self._semaphore = semaphore
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._semaphore.release()


class ArmDriver:
    """Drives one arm against its cluster; ``outcome`` holds what it measured."""

    def __init__(self, arm: Arm, scenario: Scenario, cluster: Cluster, *, token: str) -> None:
        """Plan the arm (which attempts are duplicated, abandoned, sent to the wrong server).

        Args:
            arm: the arm: its name, rollouts and removal.
            scenario: the knobs shared by every arm.
            cluster: the running servers of this arm.
            token: their bearer token.
        """
        self.arm = arm
        self.scenario = scenario
        self.servers: list[Server] = cluster.servers
        self.token = token
        self.outcome = ArmOutcome(
            name=arm.name,
            removal=arm.removal,
            rollouts=arm.rollouts,
            calls=scenario.calls,
            servers=len(self.servers),
            workers=cluster.workers,
        )
        plan = random.Random(f"{scenario.seed}/{arm.name}/plan")
        everyone = list(range(arm.rollouts))
        self.duplicated = set(plan.sample(everyone, round(scenario.duplicates * arm.rollouts)))
        rest = [i for i in everyone if i not in self.duplicated]
        self.abandoned = set(plan.sample(rest, min(len(rest), round(scenario.abandon * arm.rollouts))))
        self.sent: list[set[str]] = [set() for _ in self.servers]  # every ID each server was sent
        self.removed: set[str] = set()  # IDs whose home server answered their removal
        self.started = 0.0
        self._background: set[asyncio.Task[None]] = set()
        self._sessions: list[aiohttp.ClientSession] = []
        self._queues: list[RemovalQueue] = []
        self._wrong: list[RemovalQueue] = []

    # ------------------------------------------------------------------------------------- helpers
    def _error(self, message: str) -> None:
        if len(self.outcome.errors) < _MAX_ERRORS:
            self.outcome.errors.append(message)

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _call(
        self, server: int, rollout: str, index: int, call_id: str, *, fail: bool, parent: str | None
    ) -> dict[str, Any]:
        payload = {
            "rollout_id": rollout,
            "model_call_id": call_id,
            "index": index,
            "fail": fail,
            "parent_call_id": parent,
        }

        async def send() -> dict[str, Any]:
            # A lost connection is resent: admission and an identical row are idempotent (R-WRITE-3).
            async with self._sessions[server].post(INFERENCE_ROUTE, json=payload) as response:
                if response.status != 200:
                    raise RemovalServerError(
                        f"inference {rollout}/{call_id}: {response.status} {await response.text()}"
                    )
                answer: dict[str, Any] = await response.json()
                return answer

        answer = await resending(send, self._resent)
        self.outcome.calls_sent += 1
        if answer["admitted"]:
            self.outcome.calls_admitted += 1
            if answer["failed"]:
                self.outcome.failures_recorded += 1
            else:
                self.outcome.record_ms.append(float(answer["record_ms"]))
        else:
            self.outcome.calls_refused += 1
        return answer

    async def _calls(
        self, rng: random.Random, server: int, rollout: str, indices: range, suffix: str = ""
    ) -> tuple[list[str], int]:
        """Make the calls ``indices`` one after another; the admitted call IDs and the refused count."""
        admitted: list[str] = []
        refused = 0
        for index in indices:
            call_id = f"c{index}{suffix}"
            parent = f"c{index - 1}{suffix}" if index else None
            fail = rng.random() < self.scenario.failures
            answer = await self._call(server, rollout, index, call_id, fail=fail, parent=parent)
            if answer["admitted"]:
                admitted.append(call_id)
            else:
                refused += 1
        return admitted, refused

    # ------------------------------------------------------------------------------------ attempts
    async def _attempt(self, index: int, slot: _Slot) -> None:
        rng = random.Random(f"{self.scenario.seed}/{self.arm.name}/{index}")
        server = index % len(self.servers)
        rollout = rollout_id(index)
        self.sent[server].add(rollout)
        try:
            if index in self.abandoned:
                await self._abandon(rng, server, rollout, slot)
                return
            calls = self.scenario.calls
            duplicate_after = rng.randrange(calls) if index in self.duplicated else -1
            own: list[str] = []
            for call in range(calls):
                own += (await self._calls(rng, server, rollout, range(call, call + 1)))[0]
                if call == duplicate_after:
                    self._spawn(self._duplicate(index, server, rollout))
            await self._read_manifest(server, rollout, own)
            self.outcome.attempts_finished += 1
            if self.arm.removal is not None:
                self._queues[server].add(rollout).add_done_callback(self._acknowledge_later(rollout))
                if len(self.servers) > 1 and rng.random() < self.scenario.wrong_server:
                    self._spawn(self._wrong_server(server, rollout))
        except Exception as error:  # every failure is a finding of the run, never a crash of the driver
            self._error(f"attempt {rollout}: {type(error).__name__}: {error}")
        finally:
            slot.release()

    def _acknowledged(self, rollout: str, outcome: str) -> bool:
        """Note that the server answered the rollout's removal; False when the request failed."""
        if outcome == "error":
            return False
        self.removed.add(rollout)
        return True

    def _acknowledge_later(self, rollout: str) -> Callable[[asyncio.Future[str]], None]:
        def done(future: asyncio.Future[str]) -> None:
            self._acknowledged(rollout, future.result())

        return done

    def _resent(self) -> None:
        self.outcome.requests_resent += 1

    async def _read_manifest(self, server: int, rollout: str, own: list[str]) -> None:
        async def read() -> dict[str, Any]:
            async with self._sessions[server].get(PREFIX + manifest_route(rollout)) as response:
                if response.status != 200:
                    raise RemovalServerError(f"manifest {rollout}: {response.status} {await response.text()}")
                answer: dict[str, Any] = await response.json()
                return answer

        manifest = await resending(read, self._resent)
        self.outcome.manifests_read += 1
        seen = {row["model_call_id"] for row in manifest["records"]}
        seen |= {row["model_call_id"] for row in manifest["failures"]}
        if not set(own) <= seen:
            self.outcome.manifests_incomplete += 1
            self._error(f"manifest {rollout} lacks {sorted(set(own) - seen)}")
        if any(call.endswith("-retry") for call in seen):
            self.outcome.manifests_with_duplicate_rows += 1

    async def _duplicate(self, index: int, server: int, rollout: str) -> None:
        """The second execution of a rollout (a client retry), under the same ID."""
        self.outcome.duplicates_sent += 1
        rng = random.Random(f"{self.scenario.seed}/{self.arm.name}/{index}/retry")
        try:
            admitted, refused = await self._calls(rng, server, rollout, range(self.scenario.calls), "-retry")
            self.outcome.duplicate_calls_admitted += len(admitted)
            self.outcome.duplicate_calls_refused += refused
            self.outcome.duplicates_finished += 1
        except Exception as error:  # every failure is a finding of the run, never a crash of the driver
            self._error(f"duplicate {rollout}: {type(error).__name__}: {error}")

    async def _abandon(self, rng: random.Random, server: int, rollout: str, slot: _Slot) -> None:
        """Calls until a random point, then the framework gives up; the agent keeps writing."""
        self.outcome.abandoned += 1
        calls = self.scenario.calls
        cut = rng.randint(1, calls - 1) if calls > 1 else 1
        try:
            await self._calls(rng, server, rollout, range(cut))
        finally:
            slot.release()  # the framework has given the attempt up
        if self.arm.removal is None:  # nothing removes it: the agent just finishes
            await self._calls(rng, server, rollout, range(cut, calls))
            return
        final = await self._held_write(server, rollout, cut)  # returns once the call was admitted
        if final is None:
            return
        # The framework removes the attempt.
        if not self._acknowledged(rollout, await self._queues[server].add(rollout)):
            return
        result = await final  # the write, made after the removal
        if "error" in result:
            raise RemovalServerError(str(result["error"]))
        self.outcome.late_writes += 1
        if result.get("hold_timed_out"):
            self.outcome.late_writes_timed_out += 1
        after = await self._call(server, rollout, cut + 1, f"c{cut + 1}", fail=False, parent=f"c{cut}")
        if after["admitted"]:
            self.outcome.after_removal_admitted += 1
        else:
            self.outcome.after_removal_refused += 1

    async def _held_write(
        self, server: int, rollout: str, index: int
    ) -> asyncio.Future[dict[str, Any]] | None:
        """Start a held call; return (once admitted) a future of its final answer, or ``None`` if refused.

        The final answer is ``{"error": ...}`` when the call failed after its admission.
        """
        payload = {
            "rollout_id": rollout,
            "model_call_id": f"c{index}",
            "index": index,
            "parent_call_id": f"c{index - 1}",
            "hold": True,
        }
        loop = asyncio.get_running_loop()
        admitted: asyncio.Future[bool | str] = loop.create_future()
        final: asyncio.Future[dict[str, Any]] = loop.create_future()

        async def attempt() -> None:
            async with self._sessions[server].post(INFERENCE_ROUTE, json=payload) as response:
                if response.status != 200:
                    raise RemovalServerError(f"held write {rollout}: {response.status}")
                first = json.loads(await response.content.readline())
                self.outcome.calls_sent += 1
                if not first["admitted"]:
                    self.outcome.calls_refused += 1
                    admitted.set_result(False)
                    return
                self.outcome.calls_admitted += 1
                admitted.set_result(True)
                final.set_result(json.loads(await response.content.readline()))

        async def go() -> None:
            try:
                # Resent only while nothing was admitted: the connection was lost before the first line.
                await resending(attempt, self._resent, when=lambda: not admitted.done())
            except Exception as error:  # a finding of the run, reported through the futures
                message = f"held write {rollout}: {type(error).__name__}: {error}"
                if not admitted.done():
                    admitted.set_result(message)
                if not final.done():
                    final.set_result({"error": message})

        self._spawn(go())
        answer = await admitted
        if isinstance(answer, str):
            raise RemovalServerError(answer)
        return final if answer else None

    async def _wrong_server(self, server: int, rollout: str) -> None:
        other = (server + 1) % len(self.servers)
        self.sent[other].add(rollout)
        self.outcome.wrong_server_sent += 1
        if await self._wrong[other].add(rollout) == "absent":
            self.outcome.wrong_server_absent += 1

    # ---------------------------------------------------------------------------------------- run
    async def _sample(self) -> None:
        while True:
            total = await asyncio.to_thread(_measure_all, self.servers)
            self.outcome.samples.append(
                (time.monotonic() - self.started, total.ledger_bytes, total.ledgers, total.fences)
            )
            await asyncio.sleep(SAMPLE_EVERY)

    async def _scrape(self) -> WorkerMetrics:
        total = WorkerMetrics()
        reached = 0
        for server in self.servers:
            metrics, count = await scrape_every_worker(server.url, token=self.token, workers=server.workers)
            total = total.add(metrics)
            reached += count
        self.outcome.workers_reached = reached
        return total

    def progress(self) -> str:
        """One line: rollouts done, calls, removals, bytes on disk."""
        o = self.outcome
        bytes_now = o.samples[-1][1] if o.samples else 0
        removed = sum(queue.cost.ids for queue in self._queues)
        return (
            f"{o.name}: {o.attempts_finished + o.abandoned}/{o.rollouts} rollouts, {o.calls_sent} calls, "
            f"{removed} removed, {bytes_now / 1e6:.1f} MB"
        )

    async def run(self) -> ArmOutcome:
        """Drive the arm to its end and return what it measured."""
        self.started = time.monotonic()
        # Connections per server: enough to keep every worker's threads busy, few enough that each is
        # reused within uvicorn's 5 s keep-alive even when this loop lags (measured: with 512, a loaded
        # machine made about 17% of requests meet a connection the server had just closed).
        limit = min(self.scenario.in_flight, CONNECTIONS)
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
        headers = {"Authorization": f"Bearer {self.token}"}
        for server in self.servers:
            # Idle connections are dropped before uvicorn's 5 s keep-alive timeout closes them under us.
            connector = aiohttp.TCPConnector(limit=limit, keepalive_timeout=2.0)
            session = aiohttp.ClientSession(
                base_url=server.url, headers=headers, connector=connector, timeout=timeout
            )
            self._sessions.append(session)
        operation = self.arm.removal or "delete"
        flush = self.scenario.flush_seconds
        batch = self.arm.batch or self.scenario.batch
        self._queues = [RemovalQueue(s, operation, batch=batch, flush_seconds=flush) for s in self._sessions]
        self._wrong = [RemovalQueue(s, operation, batch=batch, flush_seconds=flush) for s in self._sessions]
        runners = [asyncio.ensure_future(q.run()) for q in self._queues + self._wrong]
        sampler = asyncio.ensure_future(self._sample())
        attempts: list[asyncio.Task[None]] = []
        try:
            slots = asyncio.Semaphore(self.scenario.in_flight)
            for index in range(self.arm.rollouts):
                await slots.acquire()
                attempts.append(asyncio.ensure_future(self._attempt(index, _Slot(slots))))
            await asyncio.gather(*attempts)
            while self._background:
                await asyncio.gather(*list(self._background), return_exceptions=True)
            for queue in self._queues + self._wrong:
                queue.close()
            await asyncio.gather(*runners)
            await self._finish()
        finally:  # also on cancellation (a timeout, Ctrl-C): nothing may outlive the sessions
            pending = [sampler, *runners, *attempts, *self._background]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for session in self._sessions:
                await session.close()
        self.outcome.seconds = time.monotonic() - self.started
        return self.outcome

    async def _finish(self) -> None:
        o = self.outcome
        for queue in self._queues:
            _add_cost(o.removals, queue.cost)
            for key, value in queue.cost.outcomes.items():
                o.removals.outcomes[key] += value
        for queue in self._queues + self._wrong:
            o.requests_resent += queue.cost.resent
            for error in queue.errors:
                self._error(f"{queue.operation}: {error}")
        o.before_delete = await asyncio.to_thread(_measure_all, self.servers)
        if self.arm.removal is not None:  # a ledger of a removed rollout was re-created after the removal
            for name in o.before_delete.ledger_names:
                index = int(name.rsplit("-", 1)[1])
                if name not in self.removed:
                    o.never_removed += 1  # its removal failed (an error of the run, reported as such)
                elif index in self.abandoned:
                    o.recreated_by_abandoned += 1
                elif index in self.duplicated:
                    o.recreated_by_duplicates += 1
                else:
                    o.recreated_other += 1
        o.run_metrics = await self._scrape()
        for k, session in enumerate(self._sessions):  # the end of the run: delete everything
            queue = RemovalQueue(session, "delete", batch=self.scenario.batch, flush_seconds=1.0)
            ids = sorted(self.sent[k])
            for start in range(0, len(ids), self.scenario.batch):
                await queue.send(ids[start : start + self.scenario.batch])
            _add_cost(o.final_delete, queue.cost)
        o.end_metrics = await self._scrape()
        o.end = await asyncio.to_thread(_measure_all, self.servers)
