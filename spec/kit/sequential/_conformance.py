"""The conformance kit's entry points: judge any ledger against the model (SPEC.md §Conformance,
R-KIT-1..8; docs/kit.md).

``check_ledger(open_ledger, *, handles=1, settings=None, operations=None)`` runs the state machine of
``machine`` against the ledgers a factory opens, and raises ``AssertionError`` naming the broken
requirement with a shrunk, runnable counterexample; ``judge_ledger`` returns the same ``LedgerVerdict``
without raising (``capture-ledger verify`` uses it); ``conformance_test_case`` wraps ``check_ledger`` for
unittest.

Before running, one handle is opened in a scratch workspace and compared with the protocol
(``operations.check_protocol``); by default the kit checks the methods it has, so a ledger without
``retire``, ``delete`` or ``admit`` is judged on the rest and the verdict lists the requirements not
checked. With ``every=True`` the kit goes on past the first broken requirement: each round tolerates the
requirements already found (``machine``'s tainting) and searches again, until a round finds nothing new,
so each broken requirement is reported once with its own shrunk counterexample.

Every verdict is an ``AssertionError`` (R-KIT-6), whatever the ledger did; an error of the kit or of
Hypothesis is a ``KitError``, never a verdict (R-KIT-7). Three things the ledger does across examples are
verdicts too, each with the program that showed it, not shrunk: a resource it exhausted (R-KIT-7, with how
many of its handles were open, ``runs.Counts``; also when the kit's own code is the one that finds the
descriptors or the memory gone, since the kit holds a bounded number of each per run), and behaving
differently on the same program twice, which Hypothesis reports as ``Flaky`` (R-KIT-14, with the failing
run's program as the machine ran it). Not checked: durability across crashes (``crash``), concurrent calls
(``interleave``, ``stress``), or speed.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import unittest
from collections.abc import Callable, Iterable
from pathlib import Path

from capture_ledger.spec.core.protocol import OPERATIONS
from capture_ledger.spec.kit._calls import (
    CALL_BUDGET_ENV,
    CallHung,
    CallRunner,
    ResourceExhausted,
    exhausted,
)
from capture_ledger.spec.kit._calls import call_budget as resolve_call_budget
from capture_ledger.spec.kit._operations import ProtocolCheck, check_protocol, select_operations
from capture_ledger.spec.kit._requirements import SCOPE, UNTOLERABLE, NonConformance, checked
from capture_ledger.spec.kit.sequential._machine import Counts, LedgerFactory, conformance_machine
from capture_ledger.spec.kit.sequential._verdict import Broken, LedgerVerdict, count_steps, quoted
from hypothesis import HealthCheck, reporting
from hypothesis import settings as Settings  # noqa: N812
from hypothesis.errors import Flaky
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

__all__ = [
    "KitError",
    "LedgerFactory",
    "LedgerNonConformance",
    "LedgerVerdict",
    "NonConformance",
    "check_ledger",
    "conformance_machine",
    "conformance_test_case",
    "count_steps",
    "factory_name",
    "judge_ledger",
    "rule_names",
]


class KitError(RuntimeError):
    """The kit failed before reaching a verdict: an error of the kit or of Hypothesis, not of the ledger."""


class LedgerNonConformance(AssertionError):  # noqa: N818 -- a verdict, not an error
    """``check_ledger``'s verdict that the ledger does not conform; ``verdict`` holds every detail."""

    def __init__(self, verdict: LedgerVerdict) -> None:
        super().__init__(verdict.report())
        self.verdict = verdict


def factory_name(open_ledger: LedgerFactory) -> str:
    """``module:qualname`` of a factory that can be imported by that name, else its qualified name."""
    qualname = getattr(open_ledger, "__qualname__", None) or repr(open_ledger)
    module = getattr(open_ledger, "__module__", None)
    if module and "<" not in qualname and module != "__main__":
        return f"{module}:{qualname}"
    return str(qualname)


def _header(target: str, handles: int, operations: tuple[str, ...], tolerate: list[str]) -> list[str]:
    """The lines that make a counterexample a program: imports and the machine it runs on."""
    lines = ["from capture_ledger.spec.kit.sequential._conformance import conformance_machine"]
    module, sep, attribute = target.partition(":")
    if sep and module and attribute and "<" not in attribute:
        head = attribute.rpartition(".")[0]
        if head:
            lines.append(f"from {module} import {head.split('.')[0]}")
            lines.append(f"open_ledger = {attribute}")
        else:
            lines.append(f"from {module} import {attribute} as open_ledger")
    else:
        lines.append(f"open_ledger = ...  # the factory {target}")
    arguments = [f"handles={handles}"]
    if set(operations) != set(OPERATIONS):
        arguments.append(f"operations={operations!r}")
    if tolerate:
        arguments.append(f"tolerate={tuple(tolerate)!r}")
    lines.append(f"LedgerConformance = conformance_machine(open_ledger, {', '.join(arguments)})")
    return lines


def _probe(open_ledger: LedgerFactory, budget: float) -> ProtocolCheck | None:
    """Open one handle in a scratch workspace and compare it with the protocol; ``None`` when the factory
    fails (the machine then reports it, R-KIT-7).

    Raises:
        CallHung: the factory or the check did not return within the budget.
    """
    workspace = Path(tempfile.mkdtemp(prefix="capture-ledger-probe-"))
    runner = CallRunner(budget)

    def job() -> ProtocolCheck | None:
        try:
            ledger = runner.await_value(open_ledger(workspace))
            found = check_protocol(ledger)
            close = getattr(ledger, "close", None)
            if callable(close):
                runner.await_value(close())
        except BaseException:  # the factory's or close's failure: the machine reports it as a verdict
            return None
        return found

    try:
        return runner.run("open_ledger(workspace)", job)
    finally:
        try:
            runner.close()
        finally:
            shutil.rmtree(workspace, ignore_errors=True)


def _first_verdict(error: BaseException) -> NonConformance | None:
    """The kit's verdict in ``error`` (possibly inside a group, as a flaky failure is), else ``None``."""
    if isinstance(error, NonConformance):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _first_verdict(inner)
            if found is not None:
                return found
    return None


def _program(lines: list[str]) -> list[str]:
    """The runnable steps of Hypothesis's report: every line from ``state = ...`` to ``state.teardown()``.

    Continuation lines are kept, so that an argument Hypothesis prints over several lines still parses.
    """
    program: list[str] = []
    for line in lines:
        for part in line.splitlines():
            if not program and not part.startswith("state = "):
                continue
            program.append(part)
            if part.strip() == "state.teardown()":
                return program
    return program


def _first_line(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(_first_line(e) for e in error.exceptions)
    return f"{type(error).__name__}: {error}"


def _stop_in(error: BaseException) -> CallHung | ResourceExhausted | None:
    """A hung call or an exhausted resource in ``error``'s chain of contexts: Hypothesis, seeing the run
    end early, may raise ``FlakyStrategyDefinition`` from it."""
    seen: set[int] = set()
    found: BaseException | None = error
    while found is not None and id(found) not in seen:
        if isinstance(found, CallHung | ResourceExhausted):
            return found
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return None


def _stopped(stop: CallHung | ResourceExhausted, header: list[str]) -> Broken:
    """The verdict on a run the ledger stopped: a hung call (R-KIT-8) or an exhausted resource (R-KIT-7),
    with the program that led to it, not shrunk."""
    program = ["state = LedgerConformance()", *stop.program, "state.teardown()"]
    if isinstance(stop, CallHung):
        what = (
            f"R-KIT-8: CallHung: {stop} (the per-call budget; set call_budget= or ${CALL_BUDGET_ENV}). "
            "The call was abandoned on its thread and the handles were not closed"
        )
        return _broken("R-KIT-8", what, header, program, shrunk=False)
    what = (
        f"R-KIT-7: {stop} ({stop.detail}). Not shrunk: an exhausted resource builds up across examples, "
        "so a re-run of the program would not reproduce it"
    )
    return _broken("R-KIT-7", what, header, program, shrunk=False)


def _flaky(error: BaseException, header: list[str], counts: Counts) -> Broken:
    """The R-KIT-14 verdict on a ledger Hypothesis found behaving differently on one program twice, with
    the program of the failing run (the one inside a ``FlakyFailure``, else the latest), not shrunk."""
    inner = _first_verdict(error)
    found = counts.program_of(str(inner) if inner is not None else None) or counts.program_of(None)
    said = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:200]}"
    if found is None:
        what = (
            f"R-KIT-14: Hypothesis ran a program twice and the ledger behaved differently ({said}); no run "
            "failed, so there is no failing program to replay"
        )
        return _broken("R-KIT-14", what, header, ["state = LedgerConformance()"], shrunk=False)
    _, message, steps = found
    what = (
        f"R-KIT-14: the ledger behaved differently when Hypothesis ran the same program again ({said}). A "
        f"run of the program below failed with {message[:600]}; a run of the same steps then did not fail "
        "the same way. Look for state that outlives a handle or a workspace (a module-level cache or "
        "counter, the process's descriptors), randomness or the clock. Not shrunk"
    )
    program = ["state = LedgerConformance()", *steps, "state.teardown()"]
    return _broken("R-KIT-14", what, header, program, shrunk=False)


def _broken(
    requirement: str, what: str, header: list[str], program: list[str], *, shrunk: bool = True
) -> Broken:
    text = "\n".join([*header, *program])
    message = "\n".join(part for part in (what, quoted(requirement)) if part)
    return Broken(
        requirement=requirement,
        message=message,
        counterexample=text,
        steps=count_steps("\n".join(program)),
        shrunk=shrunk,
    )


def judge_ledger(
    open_ledger: LedgerFactory,
    *,
    handles: int = 1,
    settings: Settings | None = None,
    operations: Iterable[str] | None = None,
    call_budget: float | None = None,
    every: bool = False,
    target: str | None = None,
    on_protocol: Callable[[ProtocolCheck], object] | None = None,
) -> LedgerVerdict:
    """Run the conformance machine against the ledgers ``open_ledger`` opens and return the verdict.

    Args:
        open_ledger: ``open_ledger(workspace) -> CaptureLedger``; handles opened on one workspace must act as
            workers of one model server sharing one lineage directory. May be a coroutine function.
        handles: handles per workspace; with 1 the kit opens one handle per example.
        settings: Hypothesis settings overriding the active profile (see ``profiles``).
        operations: the protocol methods to check; default: the ones the ledger has.
        call_budget: seconds each call of the ledger may take before it counts as hung (R-KIT-8).
        every: go on after the first broken requirement until every broken requirement is found.
        target: how the verdict names the factory (default: ``factory_name``).
        on_protocol: called with the protocol check of one handle before the run starts.

    Returns:
        The ``LedgerVerdict``: conforms, or every broken requirement found, each with its counterexample.

    Raises:
        KitError: the kit itself failed (an error of the kit or of Hypothesis), so there is no verdict.
        ValueError: ``handles`` or ``call_budget`` is out of range, or an operation is unknown.
    """
    if handles < 1:
        raise ValueError("handles must be at least 1")
    name = target or factory_name(open_ledger)
    budget = resolve_call_budget(call_budget)
    started = time.perf_counter()
    requested = None if operations is None else tuple(operations)
    select_operations(requested, ())  # refuse unknown names before opening anything
    counts = Counts()
    broken: list[Broken] = []
    protocol: ProtocolCheck | None = None
    try:
        protocol = _probe(open_ledger, budget)
    except CallHung as hung:
        header = _header(name, handles, OPERATIONS, [])
        what = f"R-KIT-8: CallHung: {hung} (the per-call budget; set call_budget= or ${CALL_BUDGET_ENV})"
        broken.append(_broken("R-KIT-8", what, header, ["state = LedgerConformance()"], shrunk=False))
    if protocol is not None and on_protocol is not None:
        on_protocol(protocol)
    chosen = select_operations(requested, protocol.present if protocol else ())
    if not broken:
        _rounds(
            open_ledger,
            name=name,
            handles=handles,
            settings=settings,
            operations=chosen,
            budget=budget,
            every=every,
            counts=counts,
            broken=broken,
        )
    yes, no = checked(chosen, handles)
    return LedgerVerdict(
        target=name,
        handles=handles,
        operations=chosen,
        checked=yes,
        not_checked=no,
        broken=tuple(broken),
        examples=counts.examples,
        steps=counts.steps,
        seconds=time.perf_counter() - started,
        protocol=protocol,
    )


def kit_settings(settings: Settings | None = None) -> Settings:
    """The Hypothesis settings the kit runs with: ``settings``, else the active profile, with two changes.

    One bug per round, shrunk on its own (with ``report_multiple_bugs`` Hypothesis would stop searching soon
    after the first bug; docs/kit.md §Every broken requirement). And no deadline, whatever the profile or
    the caller says: the kit bounds each call itself (R-KIT-8, the per-call budget), and Hypothesis's
    deadline (200 ms by default) would fail a slow but correct ledger on a loaded machine. For the same
    reason the ``too_slow`` health check is off: the kit's own strategies are fast, so only the ledger's
    calls could make a run slow.
    """
    base = settings or Settings()
    suppressed = [*base.suppress_health_check, HealthCheck.too_slow]
    return Settings(base, report_multiple_bugs=False, deadline=None, suppress_health_check=suppressed)


def _rounds(  # noqa: PLR0913 - one search round's inputs and accumulators, all keyword-only
    open_ledger: LedgerFactory,
    *,
    name: str,
    handles: int,
    settings: Settings | None,
    operations: tuple[str, ...],
    budget: float,
    every: bool,
    counts: Counts,
    broken: list[Broken],
) -> None:
    """Search, one round per broken requirement when ``every``; append each one found to ``broken``."""
    chosen = kit_settings(settings)
    tolerate: list[str] = []
    for _ in range(len(SCOPE) + 1):
        machine = conformance_machine(
            open_ledger,
            handles=handles,
            call_budget=budget,
            operations=operations,
            tolerate=tolerate,
            counts=counts,
        )
        header = _header(name, handles, operations, tolerate)
        lines: list[object] = []
        counts.forget_failures()
        try:
            with reporting.with_reporter(lines.append):
                run_state_machine_as_test(machine, settings=chosen)
        except (CallHung, ResourceExhausted) as stop:
            broken.append(_stopped(stop, header))
            return
        except Exception as error:
            ended = _stop_in(error)  # Hypothesis may report a stop as flaky: the stop is the verdict
            if ended is not None:
                broken.append(_stopped(ended, header))
                return
            if isinstance(error, Flaky):
                broken.append(_flaky(error, header, counts))
                return
            verdict = _first_verdict(error)
            resource = exhausted(error) if verdict is None else None
            if resource is not None:
                what = (
                    f"R-KIT-7: the kit's own code raised {_first_line(error)[:300]}: {resource} exhausted, "
                    f"after the ledger's calls ({counts.handles_note(0)}); the kit holds a bounded number "
                    "of descriptors and a bounded amount of memory per run"
                )
                program = ["state = LedgerConformance()"]
                broken.append(_broken("R-KIT-7", what, header, program, shrunk=False))
                return
            if verdict is None:
                raise KitError(
                    f"the conformance kit failed before reaching a verdict on the ledger opened by {name}: "
                    f"{_first_line(error)} (an error of the kit or of Hypothesis, not of the ledger)"
                ) from error
            notes = [str(n) for n in getattr(error, "__notes__", ())]
            program = _program([str(line) for line in lines] + notes) or [
                "state = LedgerConformance()"
            ]  # failed while being built
            requirement = type(verdict).requirement
            broken.append(_broken(requirement, str(verdict), header, program))
            if every and requirement not in UNTOLERABLE and requirement not in tolerate:
                tolerate.append(requirement)
                continue
        return


def check_ledger(
    open_ledger: LedgerFactory,
    *,
    handles: int = 1,
    settings: Settings | None = None,
    operations: Iterable[str] | None = None,
    call_budget: float | None = None,
    every: bool = False,
    target: str | None = None,
    on_protocol: Callable[[ProtocolCheck], object] | None = None,
) -> LedgerVerdict:
    """Run the conformance machine against the ledgers ``open_ledger`` opens; raise when they do not conform.

    Args:
        open_ledger: ``open_ledger(workspace) -> CaptureLedger``; handles opened on one workspace must act as
            workers of one model server sharing one lineage directory. May be a coroutine function.
        handles: handles per workspace; with 1 the kit opens one handle per example.
        settings: Hypothesis settings overriding the active profile (see ``profiles``).
        operations: the protocol methods to check; default: the ones the ledger has.
        call_budget: seconds each call of the ledger may take before it counts as hung (R-KIT-8); by
            default ``$CAPTURE_LEDGER_CALL_BUDGET`` or 30 (``calls.call_budget``); ``math.inf`` for none.
        every: go on after the first broken requirement and report each one found.
        target: how messages name the factory (default: ``factory_name``).
        on_protocol: called with the protocol check of one handle before the run starts.

    Returns:
        The ``LedgerVerdict`` of a ledger that conforms: the requirements checked and those not checked.

    Raises:
        LedgerNonConformance: an ``AssertionError``: the ledger does not conform, whatever it did wrong
            (R-KIT-7); the message names each broken requirement, quotes it, and holds its counterexample
            as a program that can be pasted into a Python session, shrunk except for a hung call (R-KIT-6,
            R-KIT-8).
        KitError: the kit itself failed (an error of the kit or of Hypothesis), so there is no verdict.
        ValueError: ``handles`` or ``call_budget`` is out of range, or an operation is unknown.
    """
    verdict = judge_ledger(
        open_ledger,
        handles=handles,
        settings=settings,
        operations=operations,
        call_budget=call_budget,
        every=every,
        target=target,
        on_protocol=on_protocol,
    )
    if not verdict.conforms:
        raise LedgerNonConformance(verdict)
    return verdict


def rule_names(machine: type[RuleBasedStateMachine]) -> list[str]:
    """The names of a conformance machine's rules (not its initializers or invariants)."""
    return sorted(
        name
        for name, value in vars(machine).items()
        if callable(value) and hasattr(value, "hypothesis_stateful_rule")
    )


def conformance_test_case(
    open_ledger: LedgerFactory,
    *,
    handles: int = 1,
    settings: Settings | None = None,
    operations: Iterable[str] | None = None,
    call_budget: float | None = None,
) -> type[unittest.TestCase]:
    """The conformance check as a ``unittest.TestCase`` that pytest and unittest collect.

    Use ``TestMyLedger = conformance_test_case(open_my_ledger, handles=3)`` at module level.
    """
    chosen = None if operations is None else tuple(operations)

    class LedgerConformanceTest(unittest.TestCase):
        def test_conformance(self) -> None:
            check_ledger(
                open_ledger, handles=handles, settings=settings, operations=chosen, call_budget=call_budget
            )

    return LedgerConformanceTest
