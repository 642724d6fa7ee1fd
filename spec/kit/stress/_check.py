"""``check_concurrency``: stress any ledger with concurrent calls and judge the histories (SPEC.md
R-CONC-1..3, R-KIT-5, R-KIT-7, R-KIT-8, R-KIT-12).

Each round opens ``handles`` handles on a fresh workspace, runs a mix drawn by ``mix.draw_round`` on
``threads`` clients (threads, or asyncio tasks for a coroutine ledger, ``running.run_round``) and judges the
recorded history (``judge.judge_calls``). Rounds go on until one is a violation or ``rounds`` have run; the
verdict is ``unknown`` when no round was a violation and some round's search budget ran out. The
``StressReport`` says the verdict (the shared ``Ok``, ``Violation`` or ``Unknown`` of ``spec.core.verdicts``),
the calls made, the witness as a text timeline, and where time went (recording the history, judging it).

What the seed reproduces: the operation mix of every round (``seed=None`` draws one, reported in the
report so that the same mix can be run again). Never the interleaving: the OS and the event loop choose
it, so a race found once may need several rounds, or runs, to show again. Not guaranteed: that a race is
found within ``rounds``; anything about handles in other processes (``capture-ledger stress --processes``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capture_ledger.spec.core.protocol import OPERATIONS
from capture_ledger.spec.core.verdicts import Ok, Unknown, Verdict, Violation
from capture_ledger.spec.kit._calls import call_budget as resolve_call_budget
from capture_ledger.spec.kit._operations import select_operations
from capture_ledger.spec.kit.stress._judge import DEFAULT_CHECK_BUDGET, judge_calls
from capture_ledger.spec.kit.stress._mix import MixSettings, draw_round
from capture_ledger.spec.kit.stress._running import Call, run_round

__all__ = ["DEFAULT_OPS", "DEFAULT_ROUNDS", "StressReport", "check_concurrency", "present_operations"]

#: Calls per round unless told otherwise.
DEFAULT_OPS = 120
#: Rounds unless told otherwise.
DEFAULT_ROUNDS = 8


@dataclass(frozen=True, slots=True)
class StressReport:
    """What a stress run found.

    Attributes:
        verdict: ``Ok`` (every round linearizable), a ``Violation`` (the round's, its ``witness`` a
            ``StressWitness``) or ``Unknown`` (a round's search budget ran out: ``spent``; or the handles
            could not be opened: ``reason``). ``verdict.kind`` is ``--json``'s ``verdict``.
        calls: calls made over every round run.
        rounds: rounds run (the last one is the one judged not ``ok``, if any).
        seed: the seed of the mixes (drawn when none was given).
        history: the calls of the last round run.
        recording_seconds: wall time spent running and recording calls.
        checking_seconds: wall time spent judging histories.
        setup: why the handles could not be opened, when they could not.
        interrupted: calls that never returned and did not hang: a SIGKILLed worker's call in flight
            (``capture-ledger stress --kill``).
    """

    verdict: Verdict
    calls: int
    rounds: int
    seed: int
    history: tuple[Call, ...] = ()
    recording_seconds: float = 0.0
    checking_seconds: float = 0.0
    setup: str | None = None
    interrupted: int = 0

    @property
    def witness(self) -> str | None:
        """The violation's witness as a text timeline (its ``counterexample``), or ``None``."""
        return self.verdict.counterexample if isinstance(self.verdict, Violation) else None

    def __str__(self) -> str:
        verdict = self.verdict
        if isinstance(verdict, Violation):
            where = f"{self.calls} calls in {self.rounds} rounds (seed {self.seed})"
            return f"violation after {where}:\n{self.witness}"
        if self.setup is not None:
            return f"unknown: {self.setup}"
        if isinstance(verdict, Unknown):
            return f"unknown after {self.calls} calls: the checker's budget ran out ({verdict.spent})"
        return f"ok: {self.calls} calls in {self.rounds} rounds linearizable (seed {self.seed})"


def present_operations(factory: Callable[[Path], Any], workspace: Path) -> tuple[str, ...]:
    """The protocol methods a handle of ``factory`` has (opened once on ``workspace``, then closed)."""
    from capture_ledger.spec.kit._operations import check_protocol

    ledger = factory(workspace)
    try:
        return check_protocol(ledger).present
    finally:
        close = getattr(ledger, "close", None)
        if callable(close):
            closed = close()
            if hasattr(closed, "close"):
                closed.close()  # an unawaited coroutine: nothing to run


def check_concurrency(  # noqa: PLR0913 - the pinned stress options, all keyword-only after the factory
    open_ledger: Callable[[Path], Any],
    *,
    handles: int = 3,
    threads: int = 4,
    operations: Iterable[str] | None = None,
    seed: int | None = None,
    ops: int = DEFAULT_OPS,
    ids: int = 3,
    rounds: int = DEFAULT_ROUNDS,
    conflicts: bool = True,
    call_budget: float | None = None,
    check_budget: int | None = DEFAULT_CHECK_BUDGET,
    workspace: Path | None = None,
) -> StressReport:
    """Stress ``open_ledger``'s ledger with concurrent calls and judge each history for linearizability.

    Args:
        open_ledger: opens a handle on a workspace directory (may be a coroutine function, and the ledger's
            methods coroutines: they then run as concurrent asyncio tasks on one event loop, R-KIT-5).
        handles: handles opened on each round's workspace (client ``c`` calls handle ``c % handles``).
        threads: concurrent clients (threads, or tasks).
        operations: the protocol methods to call; ``None``: those the ledger has (R-KIT-10).
        seed: reproduces the operation mixes (not the interleaving); ``None`` draws one.
        ops: calls per round (at least; whole scenes are drawn).
        ids: rollout IDs shared by the calls.
        rounds: rounds at most; the run stops at the first round not ``ok``.
        conflicts: also draw records of one model call with different rows.
        call_budget: seconds a call may take (R-KIT-8); ``None``: ``spec.kit.call_budget()``.
        check_budget: the checker's search steps per round (``None``: no bound).
        workspace: where to make the rounds' workspaces (a temporary directory, removed after, if ``None``).

    Returns:
        The ``StressReport``; what the ledger does is in it (R-KIT-7), never raised.

    Raises:
        ValueError: a setting out of range, or an operation that is not a protocol method.
    """
    if handles < 1 or threads < 1 or rounds < 1:
        raise ValueError("handles, threads and rounds must be at least 1")
    budget = resolve_call_budget(call_budget)
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "big")
    base = Path(tempfile.mkdtemp(prefix="capture-ledger-stress-")) if workspace is None else Path(workspace)
    try:
        present: Iterable[str] = OPERATIONS
        if operations is None:
            probe = base / "probe"
            probe.mkdir(parents=True, exist_ok=True)
            try:
                present = present_operations(open_ledger, probe)
            except Exception:  # the factory's failure is reported by the first round
                present = OPERATIONS
        chosen = select_operations(operations, present)
        settings = MixSettings(clients=threads, ops=ops, ids=ids, operations=chosen, conflicts=conflicts)
        return _rounds(
            open_ledger,
            base,
            settings=settings,
            seed=seed,
            handles=handles,
            rounds=rounds,
            budget=budget,
            check_budget=check_budget,
        )
    finally:
        if workspace is None:
            shutil.rmtree(base, ignore_errors=True)


def _rounds(
    factory: Callable[[Path], Any],
    base: Path,
    *,
    settings: MixSettings,
    seed: int,
    handles: int,
    rounds: int,
    budget: float,
    check_budget: int | None,
) -> StressReport:
    calls = 0
    recording = checking = 0.0
    verdict: Verdict = Ok()
    record: tuple[Call, ...] = ()
    for number in range(rounds):
        directory = base / f"round-{number}"
        directory.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        outcome = run_round(
            factory, directory, draw_round(settings, seed, number), handles=handles, budget=budget
        )
        recording += time.perf_counter() - started
        calls += len(outcome.calls)
        record = outcome.calls
        if outcome.setup is not None:
            unknown = Unknown(reason=outcome.setup)
            return StressReport(unknown, calls, number + 1, seed, record, recording, checking, outcome.setup)
        started = time.perf_counter()
        judged = judge_calls(outcome.calls, budget=check_budget)
        checking += time.perf_counter() - started
        if isinstance(judged, Violation):
            return StressReport(judged, calls, number + 1, seed, record, recording, checking)
        if isinstance(judged, Unknown) or isinstance(verdict, Ok):
            verdict = judged  # an undecided round does not end the run: a later one may decide
    return StressReport(verdict, calls, rounds, seed, record, recording, checking)
