"""The conformance machine: a Hypothesis state machine, driven by the model, that judges one ledger
(SPEC.md §Conformance, R-KIT-1..8).

Each rule builds an operation value (``capture_ledger.spec.core.model``), steps the model, runs the same
call on one of the implementation's handles, and compares the result or the exception class (R-KIT-1).
After every step, every known rollout ID is read back through every handle and must read as the model
says (R-KIT-2). Writes discarded by a fence must log exactly one ``WARNING`` on the ``capture_ledger``
logger (or a child) naming the rollout and the row's staging key; other calls must log none (R-KIT-3).
With ``handles > 1`` the handles are opened on one workspace and act as the workers of one model server;
``reopen`` replaces a handle mid-run, as a restarted worker would (R-KIT-4). Coroutines are awaited.

Only the rules of the chosen ``operations`` exist (``operations``), and the read-back uses ``has_rows`` and
``manifest`` only where they are chosen. Every failure is raised by ``requirements.fail`` as the class of
the requirement it breaks (``classify``): a missing warning for a discarded write is held until the
read-back after the step has shown whether the write was discarded at all (else it is R-WRITE-4's).
Requirements in ``tolerate`` do not fail: the rollout IDs involved are *tainted*, and every later
operation naming one is skipped (IDs never interact, R-CONC-1, so the rest of the run stays meaningful).
``check_ledger(..., every=True)`` uses that to find each broken requirement in turn.

The ledger's code runs only on the worker thread of ``calls.CallRunner``; whatever it does is a verdict,
and an error raised in the kit's own frames is the kit's (R-KIT-7, R-KIT-8). A call that exhausts a
resource (``calls.exhausted``) raises ``calls.ResourceExhausted`` with the program and how many handles
were open (``runs.Counts``), and stops the search at once (R-KIT-7). Teardown closes each handle and then
drops every reference the machine holds to it, so that a ledger without ``close`` is collected (and its
own finalizers run) when the example ends, not when Hypothesis lets go of the machine.
Not checked: durability across crashes, concurrent calls, or speed.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from capture_ledger.spec.concurrency.history import apply_operation
from capture_ledger.spec.core.model import (
    Admit,
    Delete,
    HasRows,
    LedgerState,
    Operation,
    ReadManifest,
    Record,
    RecordFailure,
    Result,
    Retire,
    step,
    step_rollout,
)
from capture_ledger.spec.core.protocol import OPERATIONS
from capture_ledger.spec.kit._calls import CallHung, CallRunner, Outcome, ResourceExhausted, error_text
from capture_ledger.spec.kit._calls import call_budget as resolve_call_budget
from capture_ledger.spec.kit._requirements import NonConformance, fail
from capture_ledger.spec.kit.sequential._classify import (
    call_requirement,
    change_requirement,
    misordered,
    named_ids,
    single_id_operation,
    state_kind,
)
from capture_ledger.spec.kit.sequential._compare import Read, difference, kind_seen, warning_problem
from capture_ledger.spec.kit.sequential._runs import Counts
from capture_ledger.spec.kit.sequential._runs import logged as _logged
from capture_ledger.spec.kit.sequential._strategies import (
    invalid_rollout_ids,
    invalid_rows,
    model_call_ids,
    rollout_ids,
    rows,
)
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

__all__ = ["LOOKALIKES", "Counts", "LedgerFactory", "conformance_machine"]

#: ``open_ledger(workspace)``: opens a handle on the ledger kept at ``workspace``.
LedgerFactory = Callable[[Path], Any]

#: Equal under ``==`` in Python, different rows as canonical JSON (R-WRITE-3).
LOOKALIKES: tuple[object, ...] = (1, 1.0, True)

_SINGLE = ("record", "record_failure", "admit", "manifest", "has_rows")

_T = TypeVar("_T")


def conformance_machine(
    open_ledger: LedgerFactory,
    *,
    handles: int = 1,
    call_budget: float | None = None,
    operations: Iterable[str] | None = None,
    tolerate: Iterable[str] = (),
    counts: Counts | None = None,
) -> type[RuleBasedStateMachine]:
    """The state machine class that checks ledgers opened by ``open_ledger``.

    Args:
        open_ledger: opens a handle on the ledger kept at a workspace directory.
        handles: how many handles share one workspace; with 1, a handle per example and no reopening.
        call_budget: seconds each call of the ledger may take (``calls.call_budget``: by default
            ``$CAPTURE_LEDGER_CALL_BUDGET`` or 30; ``math.inf`` for none).
        operations: the protocol methods to check (default: all of them); a factory's ledger must have
            each.
        tolerate: requirement IDs whose failures taint the rollout IDs involved instead of failing.
        counts: where to count examples and steps (default: a fresh ``Counts``, the class's ``counts``).

    Returns:
        A ``RuleBasedStateMachine`` subclass named ``LedgerConformance``.

    Raises:
        ValueError: ``handles`` is below 1, the budget is not a positive number, or an operation is not a
            method of the protocol.
    """
    if handles < 1:
        raise ValueError("handles must be at least 1")
    budget = resolve_call_budget(call_budget)
    chosen = tuple(OPERATIONS) if operations is None else tuple(operations)
    unknown = [name for name in chosen if name not in OPERATIONS]
    if unknown or not chosen:
        raise ValueError(f"operations must be methods of CaptureLedger, not {unknown or 'none'}")
    ops = frozenset(chosen)
    reads = tuple(op for op in ("has_rows", "manifest") if op in ops)
    removals = tuple(op for op in ("retire", "delete") if op in ops)
    singles = [op for op in _SINGLE if op in ops]
    tolerated = frozenset(tolerate)
    counted = counts if counts is not None else Counts()
    handle_indexes = st.integers(0, handles - 1)

    class LedgerConformance(RuleBasedStateMachine):
        """Compares a ledger with the model after every step."""

        rollouts = Bundle("rollouts")
        counts = counted

        def __init__(self) -> None:
            super().__init__()
            counted.examples += 1
            self._counts = counted
            self._workspace = Path(tempfile.mkdtemp(prefix="capture-ledger-kit-"))
            self._calls = CallRunner(budget)
            self._steps: list[str] = []
            self._model = LedgerState()
            self._known: dict[str, None] = {}
            self._last: dict[str, tuple[int, Operation, LedgerState]] = {}
            self._tainted: set[str] = set()
            self._pending: tuple[str, list[str]] | None = None
            self._stopped = False  # a resource ran out: teardown's closes are no verdict of their own
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

        def _stop_if_exhausted(self, what: str, error: BaseException | None) -> None:
            """Raise ``ResourceExhausted`` when ``error`` says a resource ran out (R-KIT-7)."""
            stop = counted.exhaustion(what, error, self._steps, len(self._handles))
            if stop is not None:
                self._stopped = True
                raise stop

        def _open(self) -> Any:
            def job() -> tuple[Any, str | None, BaseException | None]:
                try:
                    ledger = self._calls.await_value(open_ledger(self._workspace))
                    missing = [name for name in chosen if not callable(getattr(ledger, name, None))]
                except BaseException as error:  # the factory's failure is a verdict
                    return None, f"raised {error_text(error)}", error
                if missing:
                    return (
                        None,
                        (
                            f"returned {type(ledger).__name__}, which lacks methods of CaptureLedger: "
                            + ", ".join(missing)
                        ),
                        None,
                    )
                return ledger, None, None

            ledger, problem, error = self._run("open_ledger(workspace)", job)
            self._stop_if_exhausted("open_ledger(workspace)", error)
            if problem is not None:
                fail("R-KIT-7", f"open_ledger {problem}")
            counted.opened_one(ledger)
            return ledger

        def _close(self, ledger: Any) -> None:
            def job() -> tuple[bool, str | None, BaseException | None]:
                try:
                    close = getattr(ledger, "close", None)
                    if callable(close):
                        self._calls.await_value(close())
                except BaseException as error:  # the ledger's failure is a verdict
                    return True, error_text(error), error
                return callable(close), None, None

            closable, problem, error = self._run("close()", job)
            self._stop_if_exhausted("close()", error)
            if problem is not None:
                fail("R-KIT-7", f"close() of a handle raised {problem}")
            if closable:
                counted.closed += 1
            else:
                counted.unclosable += 1

        def _call(self, handle: int, op: Operation) -> Outcome:
            ledger = self._handles[handle]
            what = f"handle {handle}: {op!r}"
            outcome = self._run(what, lambda: self._calls.outcome(lambda: apply_operation(ledger, op)))
            self._stop_if_exhausted(what, outcome.error)
            return outcome

        def _broken(self, requirement: str, what: str, ids: list[str]) -> None:
            """Fail with ``requirement``, or, when it is tolerated, taint ``ids`` and go on."""
            if requirement not in tolerated:
                counted.failed(requirement, f"{requirement}: {what}", tuple(self._steps))
                fail(requirement, what)
            self._tainted.update(ids)

        def _check(self, handle: int, op: Operation) -> None:
            """Run ``op`` on the model and on handle ``handle``; a difference is a broken requirement."""
            ids = named_ids(op)
            if self._tainted and not self._tainted.isdisjoint(ids):
                return  # an ID a tolerated failure left in an unknown state
            before = self._model
            after, expected = step(before, op)
            outcome = self._call(handle, op)
            problem = difference(op, expected, outcome)
            if problem is not None:
                requirement = call_requirement(op, before, outcome.value)
                self._broken(requirement, f"handle {handle}: {op!r} {problem}", ids)
                return
            discarded, warning = warning_problem(expected, outcome)
            if warning is not None:
                what = f"handle {handle}: {op!r} {warning}"
                if discarded:  # R-WRITE-5, unless the read-back shows the write was not discarded at all
                    self._pending = self._pending or (what, ids)
                else:
                    self._broken("R-WRITE-5", what, ids)
                    return
            self._model = after
            for rollout_id in ids:
                self._known.setdefault(rollout_id, None)
                self._last[rollout_id] = (handle, op, before)

        # ------------------------------------------------------------------ read-back
        def _expected(self, rollout_id: str) -> dict[str, Result]:
            state = self._model.get(rollout_id)
            return {
                "has_rows": step_rollout(state, rollout_id, HasRows(rollout_id))[1],
                "manifest": step_rollout(state, rollout_id, ReadManifest(rollout_id))[1],
            }

        def _reads(self, handle: int, rollout_id: str, expected: dict[str, Result]) -> dict[str, Read]:
            """Run each read on ``handle``: per read, what differs from the model and the kind of state
            it shows."""
            found: dict[str, Read] = {}
            for name in reads:
                op = single_id_operation(name, rollout_id)
                outcome = self._call(handle, op)
                problem = difference(op, expected[name], outcome)
                if problem is None and (outcome.warnings or outcome.problem):
                    problem = (
                        outcome.problem or f"logged {list(outcome.warnings)!r}; it should log no warning"
                    )
                if problem is None:  # a right read shows the model's kind: nothing to work out
                    found[name] = Read(None, "")
                else:
                    found[name] = Read(f"{name} {problem}", kind_seen(op, outcome), outcome.value)
            return found

        def _read_back(self, rollout_id: str) -> None:
            expected = self._expected(rollout_id)
            for handle in range(handles):
                found = self._reads(handle, rollout_id, expected)
                shown = "; ".join(read.problem for read in found.values() if read.problem)
                if shown:
                    requirement, note = self._blame(handle, rollout_id, found)
                    what = f"handle {handle}: reading back {rollout_id!r}: {shown}{note}"
                    self._broken(requirement, what, [rollout_id])
                    return

        def _blame(self, handle: int, rollout_id: str, found: dict[str, Read]) -> tuple[str, str]:
            """The requirement a wrong read-back breaks (``classify``), and a note saying why."""
            kind = state_kind(self._model.get(rollout_id))
            wrong = [name for name, read in found.items() if read.problem]
            right = [name for name, read in found.items() if not read.problem]
            last = self._last.get(rollout_id)
            # has_rows and manifest disagree about the kind of state (the one the model disagrees with is
            # the wrong read), or no operation named the ID: the read is wrong.
            if last is not None and last[0] != handle:
                changer = last[0]
                again = self._reads(changer, rollout_id, self._expected(rollout_id))
                if not any(read.problem for read in again.values()):
                    note = f" (handle {changer}, which made the change, reads it as the model says)"
                    return "R-KIT-4", note
            if "manifest" in wrong and misordered(self._model.get(rollout_id), found["manifest"].value):
                return "R-READ-2", " (the model's rows, in another order than they were appended)"
            if (len(wrong) == 1 and right and found[wrong[0]].kind != kind) or last is None:
                return call_requirement(single_id_operation(wrong[0], rollout_id), self._model), ""
            changer, op, before = last
            note = f" (the state left by the last operation naming it: handle {changer}: {op!r})"
            return change_requirement(op, before, rollout_id), note

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

        if "record" in ops:

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

            @rule(handle=handle_indexes, rollout_id=rollouts, row=invalid_rows())
            @_logged
            def record_invalid_row(self, handle: int, rollout_id: str, row: object) -> None:
                self._check(handle, Record(rollout_id, row))

        if "record_failure" in ops:

            @rule(
                handle=handle_indexes,
                rollout_id=rollouts,
                model_call_id=model_call_ids(),
                reason=st.sampled_from(["timeout", "aborted"]),
            )
            @_logged
            def record_failure(self, handle: int, rollout_id: str, model_call_id: str, reason: str) -> None:
                self._check(handle, RecordFailure(rollout_id, model_call_id, reason))

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

        if "admit" in ops:

            @rule(handle=handle_indexes, rollout_id=rollouts, model_call_id=model_call_ids())
            @_logged
            def admit(self, handle: int, rollout_id: str, model_call_id: str) -> None:
                self._check(handle, Admit(rollout_id, model_call_id))

        if "manifest" in ops:

            @rule(handle=handle_indexes, rollout_id=rollouts)
            @_logged
            def manifest(self, handle: int, rollout_id: str) -> None:
                self._check(handle, ReadManifest(rollout_id))

        if "has_rows" in ops:

            @rule(handle=handle_indexes, rollout_id=rollouts)
            @_logged
            def has_rows(self, handle: int, rollout_id: str) -> None:
                self._check(handle, HasRows(rollout_id))

        if "retire" in ops:

            @rule(handle=handle_indexes, rollout_ids=st.lists(rollouts, max_size=4))
            @_logged
            def retire(self, handle: int, rollout_ids: list[str]) -> None:
                self._check(handle, Retire(rollout_ids))

        if "delete" in ops:

            @rule(handle=handle_indexes, rollout_ids=st.lists(rollouts, max_size=4))
            @_logged
            def delete(self, handle: int, rollout_ids: list[str]) -> None:
                self._check(handle, Delete(rollout_ids))

        if removals:
            which = st.booleans() if len(removals) == 2 else st.just(removals[0] == "retire")

            @rule(
                handle=handle_indexes,
                retire=which,
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

            @rule(handle=handle_indexes, retire=which, rollout_id=rollouts, as_tuple=st.booleans())
            @_logged
            def remove_bare_string_or_tuple(
                self, handle: int, retire: bool, rollout_id: str, as_tuple: bool
            ) -> None:
                # A bare string is refused (R-BATCH-1); a tuple is a batch like a list.
                batch: object = (rollout_id,) if as_tuple else rollout_id
                self._check(handle, Retire(batch) if retire else Delete(batch))

        if singles:

            @rule(handle=handle_indexes, operation=st.sampled_from(singles), rollout_id=invalid_rollout_ids())
            @_logged
            def invalid_rollout_id(self, handle: int, operation: str, rollout_id: object) -> None:
                self._check(handle, single_id_operation(operation, rollout_id))

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
            if reads:
                for rollout_id in self._known:
                    if rollout_id not in self._tainted:
                        self._read_back(rollout_id)
            pending, self._pending = self._pending, None
            if pending is not None and self._tainted.isdisjoint(pending[1]):
                self._broken("R-WRITE-5", *pending)

        def teardown(self) -> None:
            try:
                if self._calls.usable:  # after a hung or interrupted call, the handles are abandoned
                    while self._handles:
                        try:
                            self._close(self._handles.pop())
                        except (NonConformance, ResourceExhausted):
                            if not self._stopped:
                                raise
            finally:
                self._handles = []  # the kit holds no handle past its example (a ledger without close)
                try:
                    self._calls.close()
                finally:
                    shutil.rmtree(self._workspace, ignore_errors=True)

    LedgerConformance.__qualname__ = "LedgerConformance"
    return LedgerConformance
