"""The conformance kit: a Hypothesis state machine, driven by the model, that judges any ledger
(SPEC.md §Conformance, R-KIT-1..8).

Each rule builds an operation value (``capture_ledger.spec.core.model``), steps the model, runs the same
call on one of the implementation's handles, and compares the result or the exception class. After every
step, every known rollout ID is read through every handle and must read as the model says. Writes
discarded by a fence must log exactly one ``WARNING`` on the ``capture_ledger`` logger (or a child) naming
the rollout and the row's staging key; other writes must log none.

With ``handles > 1`` the handles are opened on one workspace and act as the workers of one model server;
``reopen`` replaces a handle mid-run, as a restarted worker would. Coroutine methods are awaited.

Every verdict is an ``AssertionError`` with a counterexample (R-KIT-6), whatever the ledger did: a wrong
result, an exception of any class, a value of the wrong shape, a factory that raises or returns no ledger,
or a call that does not return within the per-call budget (``calls``; a hang is reported unshrunk). The
ledger's code runs only on the worker thread of ``calls.CallRunner``, so an error raised in the kit's own
frames is the kit's: it is raised as ``KitError``, never as a verdict (R-KIT-7, R-KIT-8).

Not checked: durability across crashes (``crash``), concurrent calls (``interleave``), or speed.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import unittest
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from capture_ledger.spec.concurrency.history import apply_operation
from capture_ledger.spec.core.model import (
    Admit,
    Delete,
    Discarded,
    Err,
    HasRows,
    LedgerState,
    ManifestValue,
    Ok,
    Operation,
    ReadManifest,
    Record,
    RecordFailure,
    Removal,
    Result,
    Retire,
    manifest_value_of,
    rollout_ids_of,
    step,
)
from capture_ledger.spec.core.protocol import OPERATIONS, CaptureLedger
from capture_ledger.spec.kit.calls import (
    CALL_BUDGET_ENV,
    CallHung,
    CallRunner,
    Outcome,
    call_budget,
    error_text,
)
from capture_ledger.spec.kit.strategies import (
    invalid_rollout_ids,
    invalid_rows,
    model_call_ids,
    rollout_ids,
    rows,
)
from hypothesis import reporting
from hypothesis import settings as Settings  # noqa: N812
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

__all__ = [
    "KitError",
    "LedgerFactory",
    "NonConformance",
    "check_ledger",
    "conformance_machine",
    "conformance_test_case",
    "count_steps",
    "rule_names",
]

#: ``open_ledger(workspace)``: opens a handle on the ledger kept at ``workspace``.
LedgerFactory = Callable[[Path], Any]

#: Equal under ``==`` in Python, different rows as canonical JSON (R-WRITE-3).
LOOKALIKES: tuple[object, ...] = (1, 1.0, True)

_Rule = TypeVar("_Rule", bound=Callable[..., Any])
_T = TypeVar("_T")


class NonConformance(AssertionError):  # noqa: N818 -- a verdict, not an error
    """The ledger under study did something the model does not allow: a verdict (R-KIT-6, R-KIT-7)."""


class KitError(RuntimeError):
    """The kit failed before reaching a verdict: an error of the kit or of Hypothesis, not of the ledger."""


def _describe(result: Result) -> str:
    if isinstance(result, Err):
        return f"raises {result.kind.value}"
    return f"returns {result.value!r}"


def _logged(function: _Rule) -> _Rule:
    """Note each call of a rule or invariant as a line of the program, for a counterexample that
    Hypothesis does not print (a hung call, R-KIT-8)."""

    @functools.wraps(function)
    def logged(self: Any, **arguments: Any) -> Any:
        shown = ", ".join(f"{name}={value!r}" for name, value in arguments.items())
        self._steps.append(f"state.{function.__name__}({shown})")
        return function(self, **arguments)

    return logged  # type: ignore[return-value]


def conformance_machine(
    open_ledger: LedgerFactory, *, handles: int = 1, call_budget: float | None = None
) -> type[RuleBasedStateMachine]:
    """The state machine class that checks ledgers opened by ``open_ledger``.

    Args:
        open_ledger: opens a handle on the ledger kept at a workspace directory.
        handles: how many handles share one workspace; with 1, a handle per example and no reopening.
        call_budget: seconds each call of the ledger may take (``calls.call_budget``: by default
            ``$CAPTURE_LEDGER_CALL_BUDGET`` or 30; ``math.inf`` for none).

    Returns:
        A ``RuleBasedStateMachine`` subclass named ``LedgerConformance``.

    Raises:
        ValueError: ``handles`` is below 1, or the budget is not a positive number.
    """
    if handles < 1:
        raise ValueError("handles must be at least 1")
    budget = _budget(call_budget)
    handle_indexes = st.integers(0, handles - 1)

    class LedgerConformance(RuleBasedStateMachine):
        """Compares a ledger with the model after every step."""

        rollouts = Bundle("rollouts")

        def __init__(self) -> None:
            super().__init__()
            self._workspace = Path(tempfile.mkdtemp(prefix="capture-ledger-kit-"))
            self._calls = CallRunner(budget)
            self._steps: list[str] = []
            self._model = LedgerState()
            self._known: dict[str, None] = {}
            self._handles: list[Any] = []
            try:
                for _ in range(handles):
                    self._handles.append(self._open())
            except BaseException:
                self.teardown()  # Hypothesis tears down only a machine it could build
                raise

        # ------------------------------------------------------------------ plumbing
        def _run(self, what: str, job: Callable[[], _T]) -> _T:
            """``CallRunner.run``; a hung call carries the program that led to it (R-KIT-8)."""
            try:
                return self._calls.run(what, job)
            except CallHung as hung:
                if not hung.program:
                    hung.program = tuple(self._steps)
                raise

        def _open(self) -> Any:
            def job() -> tuple[Any, str | None]:
                try:
                    ledger = self._calls.await_value(open_ledger(self._workspace))
                    if isinstance(ledger, CaptureLedger):
                        return ledger, None
                    missing = [name for name in OPERATIONS if not callable(getattr(ledger, name, None))]
                    return None, (
                        f"returned {type(ledger).__name__}, which lacks methods of CaptureLedger: "
                        + ", ".join(missing)
                    )
                except BaseException as error:  # the factory's failure is a verdict
                    return None, f"raised {error_text(error)}"

            ledger, problem = self._run("open_ledger(workspace)", job)
            if problem is not None:
                raise NonConformance(f"open_ledger {problem}")
            return ledger

        def _close(self, ledger: Any) -> None:
            def job() -> str | None:
                try:
                    close = getattr(ledger, "close", None)
                    if callable(close):
                        self._calls.await_value(close())
                except BaseException as error:  # the ledger's failure is a verdict
                    return error_text(error)
                return None

            problem = self._run("close()", job)
            if problem is not None:
                raise NonConformance(f"close() of a handle raised {problem}")

        def _check(self, handle: int, op: Operation, *, changes: bool = True) -> None:
            """Run ``op`` on the model and on handle ``handle``; fail on any difference."""
            after, expected = step(self._model, op)
            ledger = self._handles[handle]
            where = f"handle {handle}: {op!r}"
            outcome = self._run(where, lambda: self._calls.outcome(lambda: apply_operation(ledger, op)))
            if outcome.error is not None:
                if not (isinstance(expected, Err) and expected.kind.matches(outcome.error)):
                    raise NonConformance(
                        f"{where} raised {outcome.error_text}; the model {_describe(expected)}"
                    ) from outcome.error
            elif isinstance(expected, Err):
                raise NonConformance(f"{where} returned {outcome.value!r}; the model {_describe(expected)}")
            else:
                self._compare(where, op, expected, outcome.value)
            self._check_warnings(where, expected, outcome)
            if changes:
                self._model = after
            for rollout_id in _ids_named(op):
                self._known.setdefault(rollout_id, None)

        @staticmethod
        def _compare(where: str, op: Operation, expected: Ok, actual: object) -> None:
            """Compare a returned value, as ``calls.plain`` data, with the model's (R-KIT-1)."""
            value = expected.value
            if isinstance(op, Record | RecordFailure):
                if actual is not None:
                    raise NonConformance(f"{where} returned {actual!r}; writes return None")
                return
            if isinstance(op, ReadManifest):
                assert isinstance(value, ManifestValue)
                try:
                    got = manifest_value_of(actual)  # type: ignore[arg-type]
                    named = actual["rollout_id"]  # type: ignore[index]
                except (KeyError, TypeError, ValueError, AttributeError) as error:
                    raise NonConformance(f"{where} returned a malformed manifest {actual!r}") from error
                if named != op.rollout_id or got != value:
                    raise NonConformance(
                        f"{where} returned {actual!r}; the model returns "
                        f"{value.to_manifest(str(op.rollout_id))!r}"
                    )
                return
            if isinstance(op, Retire | Delete):
                assert isinstance(value, Removal)
                want = {"removed": list(value.removed), "absent": list(value.absent)}
                got_removal = actual
                if isinstance(actual, dict):  # plain data: a list or a tuple of IDs is a sequence either way
                    parts = {key: actual.get(key) for key in want}
                    got_removal = {k: [*v] if isinstance(v, list | tuple) else v for k, v in parts.items()}
                if got_removal != want:
                    raise NonConformance(f"{where} returned {actual!r}; the model returns {want!r}")
                return
            if type(actual) is not type(value) or actual != value:
                raise NonConformance(f"{where} returned {actual!r}; the model returns {value!r}")

        @staticmethod
        def _check_warnings(where: str, expected: Result, outcome: Outcome) -> None:
            if outcome.problem is not None:
                raise NonConformance(f"{where} {outcome.problem}")
            messages = list(outcome.warnings)
            value = expected.value if isinstance(expected, Ok) else None
            if not isinstance(value, Discarded):
                if messages:
                    raise NonConformance(f"{where} logged {messages!r}; it should log no warning")
                return
            if len(messages) != 1:
                raise NonConformance(
                    f"{where} logged {messages!r}; a discarded write logs exactly one warning (R-WRITE-5)"
                )
            needed = [value.rollout_id] + ([value.staging_key] if value.staging_key else [])
            missing = [n for n in needed if n not in messages[0]]
            if missing:
                raise NonConformance(
                    f"{where} logged {messages[0]!r}, which does not name {missing!r} (R-WRITE-5)"
                )

        # ------------------------------------------------------------------ rules
        @initialize(target=rollouts, rollout_id=rollout_ids())
        @_logged
        def first_rollout(self, rollout_id: str) -> str:
            self._known.setdefault(rollout_id, None)
            return rollout_id

        @rule(target=rollouts, rollout_id=rollout_ids())
        @_logged
        def another_rollout(self, rollout_id: str) -> str:
            self._known.setdefault(rollout_id, None)
            return rollout_id

        @rule(handle=handle_indexes, rollout_id=rollouts, row=rows())
        @_logged
        def record(self, handle: int, rollout_id: str, row: dict[str, Any]) -> None:
            self._check(handle, Record(rollout_id, row))

        @rule(
            handle=handle_indexes,
            rollout_id=rollouts,
            row=rows(),
            first=st.sampled_from(LOOKALIKES),
            second=st.sampled_from(LOOKALIKES),
        )
        @_logged
        def record_lookalikes(
            self, handle: int, rollout_id: str, row: dict[str, Any], first: object, second: object
        ) -> None:
            """Record a row twice with values equal under ``==`` but not as canonical JSON (R-WRITE-3)."""
            self._check(handle, Record(rollout_id, {**row, "value": first}))
            self._check(handle, Record(rollout_id, {**row, "value": second}))

        @rule(
            handle=handle_indexes,
            rollout_id=rollouts,
            model_call_id=model_call_ids(),
            reason=st.sampled_from(["timeout", "aborted"]),
        )
        @_logged
        def record_failure(self, handle: int, rollout_id: str, model_call_id: str, reason: str) -> None:
            self._check(handle, RecordFailure(rollout_id, model_call_id, reason))

        @rule(handle=handle_indexes, rollout_id=rollouts, model_call_id=model_call_ids())
        @_logged
        def admit(self, handle: int, rollout_id: str, model_call_id: str) -> None:
            self._check(handle, Admit(rollout_id, model_call_id))

        @rule(handle=handle_indexes, rollout_id=rollouts)
        @_logged
        def manifest(self, handle: int, rollout_id: str) -> None:
            self._check(handle, ReadManifest(rollout_id))

        @rule(handle=handle_indexes, rollout_id=rollouts)
        @_logged
        def has_rows(self, handle: int, rollout_id: str) -> None:
            self._check(handle, HasRows(rollout_id))

        @rule(handle=handle_indexes, rollout_ids=st.lists(rollouts, max_size=4))
        @_logged
        def retire(self, handle: int, rollout_ids: list[str]) -> None:
            self._check(handle, Retire(rollout_ids))

        @rule(handle=handle_indexes, rollout_ids=st.lists(rollouts, max_size=4))
        @_logged
        def delete(self, handle: int, rollout_ids: list[str]) -> None:
            self._check(handle, Delete(rollout_ids))

        @rule(
            handle=handle_indexes,
            retire=st.booleans(),
            valid=st.lists(rollouts, max_size=3),
            invalid=invalid_rollout_ids(),
            position=st.integers(0, 3),
        )
        @_logged
        def remove_with_invalid_id(
            self, handle: int, retire: bool, valid: list[str], invalid: object, position: int
        ) -> None:
            batch: list[object] = list(valid)
            batch.insert(min(position, len(batch)), invalid)
            self._check(handle, Retire(batch) if retire else Delete(batch))

        @rule(
            handle=handle_indexes,
            retire=st.booleans(),
            rollout_id=rollouts,
            as_tuple=st.booleans(),
        )
        @_logged
        def remove_bare_string_or_tuple(
            self, handle: int, retire: bool, rollout_id: str, as_tuple: bool
        ) -> None:
            # A bare string is refused (R-BATCH-1); a tuple is a batch like a list.
            batch: object = (rollout_id,) if as_tuple else rollout_id
            self._check(handle, Retire(batch) if retire else Delete(batch))

        @rule(handle=handle_indexes, rollout_id=rollouts, row=invalid_rows())
        @_logged
        def record_invalid_row(self, handle: int, rollout_id: str, row: object) -> None:
            self._check(handle, Record(rollout_id, row))

        @rule(
            handle=handle_indexes,
            rollout_id=rollouts,
            model_call_id=st.sampled_from(["", 0, None]),
            reason=st.sampled_from(["timeout", "", 0]),
        )
        @_logged
        def record_invalid_failure(
            self, handle: int, rollout_id: str, model_call_id: object, reason: object
        ) -> None:
            self._check(handle, RecordFailure(rollout_id, model_call_id, reason))

        @rule(
            handle=handle_indexes,
            operation=st.sampled_from(["record", "record_failure", "admit", "manifest", "has_rows"]),
            rollout_id=invalid_rollout_ids(),
        )
        @_logged
        def invalid_rollout_id(self, handle: int, operation: str, rollout_id: object) -> None:
            op: Operation
            if operation == "record":
                op = Record(rollout_id, {"model_call_id": "m0"})
            elif operation == "record_failure":
                op = RecordFailure(rollout_id, "m0", "timeout")
            elif operation == "admit":
                op = Admit(rollout_id, "m0")
            elif operation == "manifest":
                op = ReadManifest(rollout_id)
            else:
                op = HasRows(rollout_id)
            self._check(handle, op)

        if handles > 1:

            @rule(handle=handle_indexes)
            @_logged
            def reopen(self, handle: int) -> None:
                """Replace a handle with a fresh one: a restarted worker (R-KIT-4)."""
                self._close(self._handles[handle])
                self._handles[handle] = self._open()

        # ------------------------------------------------------------------ invariants
        @invariant()
        @_logged
        def every_known_rollout_reads_as_the_model_says(self) -> None:
            for handle in range(len(self._handles)):
                for rollout_id in self._known:
                    self._check(handle, HasRows(rollout_id), changes=False)
                    self._check(handle, ReadManifest(rollout_id), changes=False)

        def teardown(self) -> None:
            try:
                if self._calls.usable:  # after a hung or interrupted call, the handles are abandoned
                    for ledger in self._handles:
                        self._close(ledger)
            finally:
                try:
                    self._calls.close()
                finally:
                    shutil.rmtree(self._workspace, ignore_errors=True)

    LedgerConformance.__qualname__ = "LedgerConformance"
    return LedgerConformance


def _ids_named(op: Operation) -> list[str]:
    ids = rollout_ids_of(op)
    return [] if isinstance(ids, Err) else ids


def _budget(value: float | None) -> float:
    return call_budget(value)


def _is_verdict(error: BaseException) -> bool:
    """Whether ``error`` is the kit's verdict on the ledger (possibly inside a group), not a kit error."""
    if isinstance(error, BaseExceptionGroup):
        return any(_is_verdict(e) for e in error.exceptions)
    return isinstance(error, NonConformance)


def _report(name: str, handles: int, what: str, program: list[str], *, note: str = "") -> str:
    return (
        f"the ledger opened by {name} does not conform to the capture-ledger spec "
        f"(handles={handles}).\n{what}\n\n"
        f"Counterexample{note} (paste after\n"
        "  from capture_ledger.spec.kit.conformance import conformance_machine\n"
        f"  LedgerConformance = conformance_machine(open_ledger, handles={handles})):\n" + "\n".join(program)
    )


def check_ledger(
    open_ledger: LedgerFactory,
    *,
    handles: int = 1,
    settings: Settings | None = None,
    call_budget: float | None = None,
) -> None:
    """Run the conformance machine against the ledgers ``open_ledger`` opens.

    Args:
        open_ledger: ``open_ledger(workspace) -> CaptureLedger``; handles opened on one workspace must act as
            workers of one model server sharing one lineage directory. May be a coroutine function.
        handles: handles per workspace; with 1 the kit opens one handle per example.
        settings: Hypothesis settings overriding the active profile (see ``profiles``).
        call_budget: seconds each call of the ledger may take before it counts as hung (R-KIT-8); by
            default ``$CAPTURE_LEDGER_CALL_BUDGET`` or 30 (``calls.call_budget``); ``math.inf`` for none.

    Raises:
        AssertionError: the ledger does not conform, whatever it did wrong (R-KIT-7); the message holds the
            counterexample as a list of steps that can be pasted into a Python session, shrunk except
            for a hung call (R-KIT-6, R-KIT-8).
        KitError: the kit itself failed (an error of the kit or of Hypothesis), so there is no verdict.
        ValueError: ``handles`` or ``call_budget`` is out of range.
    """
    machine = conformance_machine(open_ledger, handles=handles, call_budget=call_budget)
    name = getattr(open_ledger, "__qualname__", repr(open_ledger))
    # One bug, one counterexample: with several, Hypothesis raises a group and shrinks each separately.
    chosen = Settings(settings or Settings(), report_multiple_bugs=False)
    lines: list[str] = []
    try:
        with reporting.with_reporter(lambda text: lines.append(str(text))):
            run_state_machine_as_test(machine, settings=chosen)
    except CallHung as hung:
        program = ["state = LedgerConformance()", *hung.program, "state.teardown()"]
        what = (
            f"CallHung: {hung} (the per-call budget; set call_budget= or ${CALL_BUDGET_ENV}). The call was "
            "abandoned on its thread and the handles were not closed"
        )
        raise AssertionError(
            _report(name, handles, what, program, note=" (not shrunk: a hung call is not re-run)")
        ) from None
    except Exception as error:
        if not _is_verdict(error):
            raise KitError(
                f"the conformance kit failed before reaching a verdict on the ledger opened by {name}: "
                f"{_first_line(error)} (an error of the kit or of Hypothesis, not of the ledger)"
            ) from error
        notes = [str(n) for n in getattr(error, "__notes__", ())]
        program = _program(lines + notes) or ["state = LedgerConformance()"]  # failed while being built
        raise AssertionError(_report(name, handles, _first_line(error), program)) from error


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


def rule_names(machine: type[RuleBasedStateMachine]) -> list[str]:
    """The names of a conformance machine's rules (not its initializers or invariants)."""
    return sorted(
        name
        for name, value in vars(machine).items()
        if callable(value) and hasattr(value, "hypothesis_stateful_rule")
    )


def count_steps(message: str) -> int:
    """The number of steps of a counterexample printed by ``check_ledger`` (for reports)."""
    return sum(
        1
        for line in message.splitlines()
        if "state." in line
        and not any(skip in line for skip in ("teardown", "every_known_rollout", "first_rollout"))
        and "another_rollout" not in line
    )


def conformance_test_case(
    open_ledger: LedgerFactory,
    *,
    handles: int = 1,
    settings: Settings | None = None,
    call_budget: float | None = None,
) -> type[unittest.TestCase]:
    """The conformance check as a ``unittest.TestCase`` that pytest and unittest collect.

    Use ``TestMyLedger = conformance_test_case(open_my_ledger, handles=3)`` at module level.
    """

    class LedgerConformanceTest(unittest.TestCase):
        def test_conformance(self) -> None:
            check_ledger(open_ledger, handles=handles, settings=settings, call_budget=call_budget)

    return LedgerConformanceTest
