"""The conformance kit: a Hypothesis state machine, driven by the model, that judges any ledger
(SPEC.md §Conformance, R-KIT-1..6).

Each rule builds an operation value (``capture_ledger.spec.core.model``), steps the model, runs the same
call on
one of the implementation's handles, and compares the result or the exception class. After every step,
every known rollout ID is read through every handle and must read as the model says. Writes discarded by
a fence must log exactly one ``WARNING`` on the ``capture_ledger`` logger (or a child) naming the rollout
and the row's staging key; other writes must log none.

With ``handles > 1`` the handles are opened on one workspace and act as the workers of one model server;
``reopen`` replaces a handle mid-run, as a restarted worker would. Coroutine methods are awaited.

Not checked: durability across crashes (``crash``), concurrent calls (``interleave``), or speed.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import shutil
import tempfile
import unittest
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
    step,
)
from capture_ledger.spec.core.protocol import CaptureLedger
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
    "LedgerFactory",
    "check_ledger",
    "conformance_machine",
    "conformance_test_case",
    "count_steps",
    "rule_names",
]

#: ``open_ledger(workspace)``: opens a handle on the ledger kept at ``workspace``.
LedgerFactory = Callable[[Path], Any]

_LOGGER = "capture_ledger"

#: Equal under ``==`` in Python, different rows as canonical JSON (R-WRITE-3).
LOOKALIKES: tuple[object, ...] = (1, 1.0, True)


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _describe(result: Result) -> str:
    if isinstance(result, Err):
        return f"raises {result.kind.value}"
    return f"returns {result.value!r}"


def conformance_machine(open_ledger: LedgerFactory, *, handles: int = 1) -> type[RuleBasedStateMachine]:
    """The state machine class that checks ledgers opened by ``open_ledger``.

    Args:
        open_ledger: opens a handle on the ledger kept at a workspace directory.
        handles: how many handles share one workspace; with 1, a handle per example and no reopening.

    Returns:
        A ``RuleBasedStateMachine`` subclass named ``LedgerConformance``.
    """
    if handles < 1:
        raise ValueError("handles must be at least 1")
    handle_indexes = st.integers(0, handles - 1)

    class LedgerConformance(RuleBasedStateMachine):
        """Compares a ledger with the model after every step."""

        rollouts = Bundle("rollouts")

        def __init__(self) -> None:
            super().__init__()
            self._workspace = Path(tempfile.mkdtemp(prefix="capture-ledger-kit-"))
            self._runner: asyncio.Runner | None = None
            self._model = LedgerState()
            self._known: dict[str, None] = {}
            self._handles: list[Any] = []
            for _ in range(handles):
                self._handles.append(self._open())

        # ------------------------------------------------------------------ plumbing
        def _open(self) -> Any:
            ledger = self._await(open_ledger(self._workspace))
            if not isinstance(ledger, CaptureLedger):
                raise AssertionError(
                    f"open_ledger returned {type(ledger).__name__}, which lacks methods of "
                    "CaptureLedger: record, record_failure, admit, manifest, has_rows, retire, delete"
                )
            return ledger

        def _await(self, value: Any) -> Any:
            if not inspect.isawaitable(value):
                return value
            if self._runner is None:
                self._runner = asyncio.Runner()

            async def wait() -> Any:
                return await value

            return self._runner.run(wait())

        def _invoke(self, handle: int, op: Operation) -> tuple[str, Any]:
            ledger = self._handles[handle]
            try:
                call = apply_operation(ledger, op)
                return "ok", self._await(call)
            except Exception as error:
                return "raised", error

        @contextmanager
        def _watch(self) -> Iterator[_Warnings]:
            handler = _Warnings()
            logger = logging.getLogger(_LOGGER)
            logger.addHandler(handler)
            try:
                yield handler
            finally:
                logger.removeHandler(handler)

        def _check(self, handle: int, op: Operation, *, changes: bool = True) -> None:
            """Run ``op`` on the model and on handle ``handle``; fail on any difference."""
            after, expected = step(self._model, op)
            with self._watch() as warnings:
                outcome, actual = self._invoke(handle, op)
            where = f"handle {handle}: {op!r}"
            if isinstance(expected, Err):
                if outcome == "ok":
                    raise AssertionError(f"{where} returned {actual!r}; the model {_describe(expected)}")
                if not expected.kind.matches(actual):
                    raise AssertionError(
                        f"{where} raised {type(actual).__name__}: {actual}; the model {_describe(expected)}"
                    ) from actual
            else:
                if outcome == "raised":
                    raise AssertionError(
                        f"{where} raised {type(actual).__name__}: {actual}; the model {_describe(expected)}"
                    ) from actual
                self._compare(where, op, expected, actual)
            self._check_warnings(where, expected, warnings.records)
            if changes:
                self._model = after
            for rollout_id in _ids_named(op):
                self._known.setdefault(rollout_id, None)

        def _compare(self, where: str, op: Operation, expected: Ok, actual: Any) -> None:
            value = expected.value
            if isinstance(op, Record | RecordFailure):
                if actual is not None:
                    raise AssertionError(f"{where} returned {actual!r}; writes return None")
                return
            if isinstance(op, ReadManifest):
                assert isinstance(value, ManifestValue)
                try:
                    got = manifest_value_of(actual)
                    named = actual["rollout_id"]
                except (KeyError, TypeError, ValueError) as error:
                    raise AssertionError(f"{where} returned a malformed manifest {actual!r}") from error
                if named != op.rollout_id or got != value:
                    raise AssertionError(
                        f"{where} returned {actual!r}; the model returns "
                        f"{value.to_manifest(str(op.rollout_id))!r}"
                    )
                return
            if isinstance(op, Retire | Delete):
                assert isinstance(value, Removal)
                want = {"removed": list(value.removed), "absent": list(value.absent)}
                got_removal = (
                    {"removed": list(actual.get("removed", ())), "absent": list(actual.get("absent", ()))}
                    if isinstance(actual, dict)
                    else actual
                )
                if got_removal != want:
                    raise AssertionError(f"{where} returned {actual!r}; the model returns {want!r}")
                return
            if type(actual) is not type(value) or actual != value:
                raise AssertionError(f"{where} returned {actual!r}; the model returns {value!r}")

        @staticmethod
        def _check_warnings(where: str, expected: Result, records: list[logging.LogRecord]) -> None:
            messages = [r.getMessage() for r in records]
            value = expected.value if isinstance(expected, Ok) else None
            if not isinstance(value, Discarded):
                if messages:
                    raise AssertionError(f"{where} logged {messages!r}; it should log no warning")
                return
            if len(messages) != 1:
                raise AssertionError(
                    f"{where} logged {messages!r}; a discarded write logs exactly one warning (R-WRITE-5)"
                )
            needed = [value.rollout_id] + ([value.staging_key] if value.staging_key else [])
            missing = [n for n in needed if n not in messages[0]]
            if missing:
                raise AssertionError(
                    f"{where} logged {messages[0]!r}, which does not name {missing!r} (R-WRITE-5)"
                )

        # ------------------------------------------------------------------ rules
        @initialize(target=rollouts, rollout_id=rollout_ids())
        def first_rollout(self, rollout_id: str) -> str:
            self._known.setdefault(rollout_id, None)
            return rollout_id

        @rule(target=rollouts, rollout_id=rollout_ids())
        def another_rollout(self, rollout_id: str) -> str:
            self._known.setdefault(rollout_id, None)
            return rollout_id

        @rule(handle=handle_indexes, rollout_id=rollouts, row=rows())
        def record(self, handle: int, rollout_id: str, row: dict[str, Any]) -> None:
            self._check(handle, Record(rollout_id, row))

        @rule(
            handle=handle_indexes,
            rollout_id=rollouts,
            row=rows(),
            first=st.sampled_from(LOOKALIKES),
            second=st.sampled_from(LOOKALIKES),
        )
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
        def record_failure(self, handle: int, rollout_id: str, model_call_id: str, reason: str) -> None:
            self._check(handle, RecordFailure(rollout_id, model_call_id, reason))

        @rule(handle=handle_indexes, rollout_id=rollouts, model_call_id=model_call_ids())
        def admit(self, handle: int, rollout_id: str, model_call_id: str) -> None:
            self._check(handle, Admit(rollout_id, model_call_id))

        @rule(handle=handle_indexes, rollout_id=rollouts)
        def manifest(self, handle: int, rollout_id: str) -> None:
            self._check(handle, ReadManifest(rollout_id))

        @rule(handle=handle_indexes, rollout_id=rollouts)
        def has_rows(self, handle: int, rollout_id: str) -> None:
            self._check(handle, HasRows(rollout_id))

        @rule(handle=handle_indexes, rollout_ids=st.lists(rollouts, max_size=4))
        def retire(self, handle: int, rollout_ids: list[str]) -> None:
            self._check(handle, Retire(rollout_ids))

        @rule(handle=handle_indexes, rollout_ids=st.lists(rollouts, max_size=4))
        def delete(self, handle: int, rollout_ids: list[str]) -> None:
            self._check(handle, Delete(rollout_ids))

        @rule(
            handle=handle_indexes,
            retire=st.booleans(),
            valid=st.lists(rollouts, max_size=3),
            invalid=invalid_rollout_ids(),
            position=st.integers(0, 3),
        )
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
        def remove_bare_string_or_tuple(
            self, handle: int, retire: bool, rollout_id: str, as_tuple: bool
        ) -> None:
            # A bare string is refused (R-BATCH-1); a tuple is a batch like a list.
            batch: object = (rollout_id,) if as_tuple else rollout_id
            self._check(handle, Retire(batch) if retire else Delete(batch))

        @rule(handle=handle_indexes, rollout_id=rollouts, row=invalid_rows())
        def record_invalid_row(self, handle: int, rollout_id: str, row: object) -> None:
            self._check(handle, Record(rollout_id, row))

        @rule(
            handle=handle_indexes,
            rollout_id=rollouts,
            model_call_id=st.sampled_from(["", 0, None]),
            reason=st.sampled_from(["timeout", "", 0]),
        )
        def record_invalid_failure(
            self, handle: int, rollout_id: str, model_call_id: object, reason: object
        ) -> None:
            self._check(handle, RecordFailure(rollout_id, model_call_id, reason))

        @rule(
            handle=handle_indexes,
            operation=st.sampled_from(["record", "record_failure", "admit", "manifest", "has_rows"]),
            rollout_id=invalid_rollout_ids(),
        )
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
            def reopen(self, handle: int) -> None:
                """Replace a handle with a fresh one: a restarted worker (R-KIT-4)."""
                self._close(self._handles[handle])
                self._handles[handle] = self._open()

        # ------------------------------------------------------------------ invariants
        @invariant()
        def every_known_rollout_reads_as_the_model_says(self) -> None:
            for handle in range(len(self._handles)):
                for rollout_id in self._known:
                    self._check(handle, HasRows(rollout_id), changes=False)
                    self._check(handle, ReadManifest(rollout_id), changes=False)

        def _close(self, ledger: Any) -> None:
            close = getattr(ledger, "close", None)
            if callable(close):
                self._await(close())

        def teardown(self) -> None:
            try:
                for ledger in self._handles:
                    self._close(ledger)
            finally:
                if self._runner is not None:
                    self._runner.close()
                shutil.rmtree(self._workspace, ignore_errors=True)

    LedgerConformance.__qualname__ = "LedgerConformance"
    return LedgerConformance


def _ids_named(op: Operation) -> list[str]:
    from capture_ledger.spec.core.ids import validate_rollout_id, validate_rollout_ids

    try:
        if isinstance(op, Retire | Delete):
            return validate_rollout_ids(op.rollout_ids)
        return [validate_rollout_id(op.rollout_id)]
    except (TypeError, ValueError):
        return []


def check_ledger(open_ledger: LedgerFactory, *, handles: int = 1, settings: Settings | None = None) -> None:
    """Run the conformance machine against the ledgers ``open_ledger`` opens.

    Args:
        open_ledger: ``open_ledger(workspace) -> CaptureLedger``; handles opened on one workspace must act as
            workers of one model server sharing one lineage directory. May be a coroutine function.
        handles: handles per workspace; with 1 the kit opens one handle per example.
        settings: Hypothesis settings overriding the active profile (see ``profiles``).

    Raises:
        AssertionError: the ledger does not conform; the message holds the shrunk counterexample as a
            list of steps that can be pasted into a Python session.
    """
    machine = conformance_machine(open_ledger, handles=handles)
    # One bug, one counterexample: with several, Hypothesis raises a group and shrinks each separately.
    chosen = Settings(settings or Settings(), report_multiple_bugs=False)
    lines: list[str] = []
    try:
        with reporting.with_reporter(lambda text: lines.append(str(text))):
            run_state_machine_as_test(machine, settings=chosen)
    except Exception as error:
        notes = [str(n) for n in getattr(error, "__notes__", ())]
        steps = "\n".join(_program(lines + notes))
        name = getattr(open_ledger, "__qualname__", repr(open_ledger))
        raise AssertionError(
            f"the ledger opened by {name} does not conform to the capture-ledger spec "
            f"(handles={handles}).\n{_first_line(error)}\n\n"
            "Counterexample (paste after\n"
            "  from capture_ledger.spec.kit.conformance import conformance_machine\n"
            f"  LedgerConformance = conformance_machine(open_ledger, handles={handles})):\n"
            f"{steps}"
        ) from error


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
    open_ledger: LedgerFactory, *, handles: int = 1, settings: Settings | None = None
) -> type[unittest.TestCase]:
    """The conformance check as a ``unittest.TestCase`` that pytest and unittest collect.

    Use ``TestMyLedger = conformance_test_case(open_my_ledger, handles=3)`` at module level.
    """

    class LedgerConformanceTest(unittest.TestCase):
        def test_conformance(self) -> None:
            check_ledger(open_ledger, handles=handles, settings=settings)

    return LedgerConformanceTest
