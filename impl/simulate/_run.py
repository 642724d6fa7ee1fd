"""Running a simulation: start each arm's servers, drive the arms of a phase side by side, stop everything
(docs/simulate.md; R-HTTP-1, R-STORE-2).

``simulate(scenario)`` runs the phases of ``Scenario.arms()`` one after the other. For each phase it
starts one ``Cluster`` per arm (each server with its own directory under a fresh work folder), drives
the arms at the same time in one event loop, prints a progress line to standard error every few
seconds, and stops every server when the phase ends, fails or is interrupted. The whole run is bounded
by ``scenario.timeout``: past it the drivers are cancelled, the servers stopped and ``SimulationTimeoutError``
raised. SIGTERM is turned into ``KeyboardInterrupt`` for the run's duration, so that Ctrl-C and a
``kill`` both stop the servers before the process exits. The work folder is removed at the end unless
the caller passes its own.

Not guaranteed: cleaning up after SIGKILL (the servers' supervisors then outlive the run).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from capture_ledger.impl.simulate._cluster import Cluster
from capture_ledger.impl.simulate._driver import ArmDriver
from capture_ledger.impl.simulate._outcome import ArmOutcome
from capture_ledger.impl.simulate._scenario import Scenario

__all__ = ["PROGRESS_EVERY", "SimulationResult", "SimulationTimeoutError", "load_average", "simulate"]

#: Seconds between two progress lines.
PROGRESS_EVERY = 5.0


class SimulationTimeoutError(TimeoutError):
    """The run took longer than the scenario's ``timeout``; every server was stopped."""


def load_average() -> str:
    """``/proc/loadavg``'s first three fields (the machine's load), or ``"unknown"``."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


@dataclass(kw_only=True, slots=True)
class SimulationResult:
    """Every arm's outcome, and when and under which load the run happened."""

    scenario: Scenario
    arms: dict[str, ArmOutcome] = field(default_factory=dict)
    started: str = ""
    seconds: float = 0.0
    load_before: str = ""
    load_after: str = ""
    cores: int = 0

    @property
    def main(self) -> ArmOutcome | None:
        """The first phase's removal arm."""
        return self.arms.get(self.scenario.removal)

    def invariants(self) -> dict[str, bool]:
        """Every arm's invariants, named ``arm: invariant``; the baseline's "nothing left" ones excepted
        before its end-of-run delete, which they check after."""
        checks: dict[str, bool] = {}
        for name, outcome in self.arms.items():
            for check, holds in outcome.invariants().items():
                checks[f"{name}: {check}"] = holds
        return checks


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM raises ``KeyboardInterrupt`` as Ctrl-C does (main thread only)."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


async def _drive(drivers: list[ArmDriver], *, deadline: float, progress: Callable[[str], None]) -> None:
    started = time.monotonic()

    async def report() -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY)
            lines = " | ".join(driver.progress() for driver in drivers)
            progress(f"[{time.monotonic() - started:5.0f} s] {lines} (load {load_average()})")

    reporter = asyncio.ensure_future(report())
    try:
        await asyncio.wait_for(
            asyncio.gather(*(driver.run() for driver in drivers)), deadline - time.monotonic()
        )
    except TimeoutError as error:
        raise SimulationTimeoutError(
            "the simulation ran past its timeout; every server was stopped"
        ) from error
    finally:
        reporter.cancel()


def simulate(
    scenario: Scenario,
    *,
    work: Path | None = None,
    progress: Callable[[str], None] | None = None,
    ledger: str | None = None,
) -> SimulationResult:
    """Run every phase of ``scenario`` and return what each arm measured.

    Args:
        scenario: the knobs.
        work: the folder for the servers' directories (kept); by default a fresh temporary one, removed.
        progress: where progress lines go; by default standard error.
        ledger: ``module:callable`` opening the ledger each worker serves (``serve --ledger``); by default
            the file store.

    Returns:
        The result; ``result.invariants()`` says which invariants held.

    Raises:
        SimulationTimeoutError: the run took longer than ``scenario.timeout``.
        RuntimeError: a server did not start (its log is in the message).
    """
    say = progress or _stderr(sys.stderr)
    token = secrets.token_urlsafe(24)
    result = SimulationResult(
        scenario=scenario,
        started=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        load_before=load_average(),
        cores=os.cpu_count() or 0,
    )
    deadline = time.monotonic() + scenario.timeout
    start = time.monotonic()
    root = work if work is not None else Path(tempfile.mkdtemp(prefix="capture-ledger-simulate-"))
    try:
        with _sigterm_interrupts():
            for number, arms in enumerate(scenario.arms(), start=1):
                names = ", ".join(f"{arm.name} ({arm.rollouts} rollouts)" for arm in arms)
                shape = f"{scenario.servers} server(s) x {scenario.workers} worker(s) each"
                say(f"phase {number}: {names} on {shape}")
                with ExitStack() as servers:
                    clusters = [
                        servers.enter_context(
                            Cluster(
                                root / arm.name,
                                count=scenario.servers,
                                workers=scenario.workers,
                                token=token,
                                ledger=ledger,
                                combine_removals="auto" if arm.combine is None else arm.combine,
                            )
                        )
                        for arm in arms
                    ]
                    drivers = [
                        ArmDriver(arm, scenario, cluster, token=token)
                        for arm, cluster in zip(arms, clusters, strict=True)
                    ]
                    asyncio.run(_drive(drivers, deadline=deadline, progress=say))
                    for driver in drivers:
                        result.arms[driver.arm.name] = driver.outcome
                        say(f"  {driver.arm.name}: done in {driver.outcome.seconds:.0f} s")
    finally:
        if work is None:
            shutil.rmtree(root, ignore_errors=True)
    result.seconds = time.monotonic() - start
    result.load_after = load_average()
    return result


def _stderr(stream: TextIO) -> Callable[[str], None]:
    def say(line: str) -> None:
        print(line, file=stream, flush=True)

    return say
