"""``capture-ledger stress --processes`` and ``--kill``: several processes on one workspace (SPEC.md
R-CONC-1..3, R-KIT-4, R-KIT-12, R-CRASH-1..4).

``run_processes`` starts ``processes`` workers (``stress_workers``), each loading the target and opening its
own handles on each round's shared workspace; they run their threads' columns of the round's mix and
journal every call on CLOCK_MONOTONIC, and the journals, merged, are judged as one history
(``judge.judge_calls``).

With ``kill``, each round one worker (in turn) SIGKILLs itself a seeded few hundred microseconds after a
seeded call began; the others finish their calls; then a fresh handle (in a fresh worker) reads every
rollout ID back, and the history, the killed call unreturned, followed by the read-back, is judged. A
process kill keeps the kernel's page cache, so this judges the ledger's own ordering and recovery on the
real file system (torn last lines, an interrupted retire) against R-CRASH-1..4 as the store's own kill test
does, not a power loss (``capture-ledger crash --target`` explores those).

Not guaranteed: which instruction a kill lands on (a timer, not a hook; the seed picks the call and the
delay); that an interrupted ``delete`` from a fenced state is judged on its own path (the checker takes a
delete as one point, stricter than R-CRASH-4 there).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from capture_ledger.spec.core.verdicts import Ok, Unknown, Verdict, Violation
from capture_ledger.spec.kit._targets import TargetError
from capture_ledger.spec.kit.stress._check import StressReport
from capture_ledger.spec.kit.stress._judge import StressWitness, judge_calls
from capture_ledger.spec.kit.stress._mix import MixSettings, draw_round, round_ids
from capture_ledger.spec.kit.stress._running import Call
from capture_ledger.spec.kit.stress._workers import call_from_json, read_journal

__all__ = ["run_processes"]


class _Worker:
    """One worker process and its pipes."""

    count = 0

    def __init__(self, target: str, pairs: Sequence[str], base: Path) -> None:
        _Worker.count += 1
        self.errors = base / f"worker-{_Worker.count}.err"
        self._errors = self.errors.open("w", encoding="utf-8")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "capture_ledger.spec.kit.stress._workers", target, *pairs],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            text=True,
        )
        if self._line() != "ready":
            why = self.close()
            raise TargetError(target, f"a worker could not load it: {why}")

    @property
    def stdin(self) -> IO[str]:
        assert self.process.stdin is not None
        return self.process.stdin

    def _line(self) -> str | None:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        return line.rstrip("\n") if line else None

    def send_line(self, text: str) -> None:
        """Write one line to the worker (ignored if it died)."""
        try:
            self.stdin.write(text + "\n")
            self.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def send(self, command: dict[str, Any]) -> None:
        try:
            self.stdin.write(json.dumps(command) + "\n")
            self.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def next_line(self) -> str | None:
        """The worker's next line (``None``: it died)."""
        return self._line()

    def answers(self) -> list[str] | None:
        """The lines before ``done``; ``None`` when the worker died first."""
        lines: list[str] = []
        while True:
            line = self._line()
            if line is None:
                return None
            if line == "done":
                return lines
            lines.append(line)

    def close(self) -> str:
        """End the worker; how it ended and the last line it wrote on standard error."""
        with contextlib.suppress(OSError):
            self.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._errors.close()
        lines = self.errors.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return f"exit {self.process.returncode}" + (f", {lines[-1]}" if lines else "")


def run_processes(  # noqa: PLR0913 - the multi-process runner mirrors stress's options, all keyword-only
    target: str,
    pairs: Sequence[str],
    settings: MixSettings,
    *,
    processes: int,
    threads: int,
    handles: int,
    seed: int,
    rounds: int,
    budget: float,
    check_budget: int | None,
    base: Path,
    kill: bool = False,
) -> StressReport:
    """Run ``rounds`` rounds on ``processes`` workers; stop at the first round not ``ok``.

    Args:
        target: the ``module:callable`` each worker loads.
        pairs: ``KEY=VALUE`` keyword arguments for the factory.
        settings: the mix (``clients`` is ``processes * threads``).
        processes: worker processes.
        threads: clients per worker.
        handles: handles each worker opens per round.
        seed: the mixes' seed (and the kills').
        rounds: rounds at most.
        budget: seconds per call (R-KIT-8).
        check_budget: the checker's search steps per round.
        base: a directory for the rounds' workspaces and journals.
        kill: SIGKILL one worker per round and judge the read-back (see the module docstring).

    Returns:
        The ``StressReport``.

    Raises:
        TargetError: a worker could not load the target.
    """
    workers = [_Worker(target, pairs, base) for _ in range(processes)]
    calls_made = 0
    recording = checking = 0.0
    verdict: Verdict = Ok()
    history: tuple[Call, ...] = ()
    interrupted = 0
    rng = random.Random(f"capture-ledger-stress-kill:{seed}")
    try:
        for number in range(rounds):
            workspace = base / f"round-{number}"
            workspace.mkdir(parents=True, exist_ok=True)
            journals = [base / f"journal-{number}-{p}.jsonl" for p in range(processes)]
            victim = number % processes if kill else -1
            started = time.perf_counter()
            for p, worker in enumerate(workers):
                command: dict[str, Any] = {
                    "kind": "round",
                    "workspace": str(workspace),
                    "journal": str(journals[p]),
                    "seed": seed,
                    "round": number,
                    "settings": asdict(settings),
                    "process": p,
                    "threads": threads,
                    "handles": handles,
                    "budget": budget,
                }
                if p == victim:
                    per_worker = max(2, settings.ops // processes)
                    command["kill_after"] = rng.randint(1, per_worker // 2)  # mid-run, not at its end
                    command["kill_delay_us"] = rng.randint(0, 3000)
                worker.send(command)
            died = _meet(workers)
            for p, worker in enumerate(workers):
                if worker not in died:
                    continue
                why = worker.close()
                if p != victim:  # only the victim may die
                    problem = f"worker process {p} died during round {number}: {why}"
                    unknown = Unknown(reason=problem)
                    return StressReport(
                        unknown, calls_made, number + 1, seed, (), recording, checking, problem
                    )
                workers[p] = _Worker(target, pairs, base)  # a fresh one for the next round
            calls = [call for journal in journals for call in read_journal(journal)]
            if kill:
                reader = workers[0]
                reader.send(
                    {
                        "kind": "read",
                        "workspace": str(workspace),
                        "ids": round_ids(draw_round(settings, seed, number)),
                        "operations": list(settings.operations),
                        "budget": budget,
                    }
                )
                lines = reader.answers() or []
                last = max((c.event.returned or c.ended or c.event.invoked for c in calls), default=0.0)
                for line in lines:
                    call = call_from_json(line)
                    event = call.event
                    if event.invoked <= last:  # cannot happen on one monotonic clock; keep the order anyway
                        continue
                    calls.append(
                        Call(
                            event=dataclasses.replace(event, client=processes * threads),
                            raised=call.raised,
                            ended=call.ended,
                            hung=call.hung,
                            handle=f"reader/{call.handle}",
                        )
                    )
            recording += time.perf_counter() - started
            calls.sort(key=lambda c: (c.event.invoked, c.event.client))
            history = tuple(calls)
            calls_made += len(calls)
            interrupted += sum(1 for c in calls if c.event.returned is None and not c.raised and not c.hung)
            started = time.perf_counter()
            judged = judge_calls(calls, budget=check_budget)
            checking += time.perf_counter() - started
            if kill and isinstance(judged, Violation) and judged.requirement != "R-KIT-8":
                judged = _as_crash(judged, processes * threads)
            if isinstance(judged, Violation):
                return StressReport(
                    judged,
                    calls_made,
                    number + 1,
                    seed,
                    history,
                    recording,
                    checking,
                    interrupted=interrupted,
                )
            if isinstance(judged, Unknown) or isinstance(verdict, Ok):
                verdict = judged  # an undecided round does not end the run
            shutil.rmtree(workspace, ignore_errors=True)
        return StressReport(
            verdict,
            calls_made,
            rounds,
            seed,
            history,
            recording,
            checking,
            interrupted=interrupted,
        )
    finally:
        for worker in workers:
            worker.close()


def _meet(workers: Sequence[_Worker]) -> list[_Worker]:
    """Run a round's scene barriers: release the workers each time every live one is at a scene start,
    until every one is done; the workers that died."""
    running: list[_Worker] = list(workers)
    died: list[_Worker] = []
    while running:
        waiting = []
        for worker in running:
            line = worker.next_line()
            if line == "scene":
                waiting.append(worker)
            elif line is None:
                died.append(worker)
            # "done": it takes no further part in this round
        for worker in waiting:
            worker.send_line("stop" if died else "go")  # after a death, the round ends at this scene
        running = waiting
    return died


def _as_crash(violation: Violation, reader: int) -> Violation:
    """A violation whose witness includes the read-back after the kill names R-CRASH-1..4."""
    witness: StressWitness = violation.witness
    if not any(c.event.client == reader for c in witness.calls):
        return violation
    text = violation.counterexample.replace(
        f"{violation.requirement} violated",
        f"R-CRASH-1..4 violated after a SIGKILL (read back by c{reader})",
        1,
    )
    return Violation(requirement="R-CRASH-1..4", counterexample=text, witness=witness)
