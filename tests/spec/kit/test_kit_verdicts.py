"""Whatever a ledger does, the conformance kit answers with a verdict, never a crash (R-KIT-6..8).

Each ledger here misbehaves in one way that is not a wrong result: it raises an exception no operation may
raise (``RuntimeError``, ``OSError``, even ``KeyboardInterrupt`` and a private ``BaseException``), returns a
value of the wrong shape or type, logs a warning that cannot be formatted, hangs, or its factory raises,
hangs or returns no ledger. The kit must raise ``AssertionError`` naming what happened, with a
counterexample program; a hang within the per-call budget, leaving at most one thread behind. An error of
the kit or of Hypothesis is a ``KitError``, never a verdict. The correct reference ledger passes under the
same settings (tests/spec/kit/test_kit_reference.py), so each rejection is the misbehaviour's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.reference import ReferenceLedger, open_reference_ledger
from capture_ledger.spec import RolloutRemoval
from capture_ledger.spec.core.protocol import OPERATIONS
from capture_ledger.spec.kit import CALL_BUDGET_ENV, DEFAULT_CALL_BUDGET, PROFILES, Opaque, call_budget, plain
from capture_ledger.spec.kit.sequential import KitError, check_ledger, conformance_machine, count_steps
from hypothesis import Phase, settings
from hypothesis.database import ExampleDatabase

#: Deterministic, and small: every misbehaviour here shows within a few steps.
SEARCH = settings(PROFILES["ci"], max_examples=30)
#: The same without shrinking (most of a failing run's time): enough to show the verdict.
NO_SHRINK = settings(SEARCH, phases=[Phase.explicit, Phase.reuse, Phase.generate])
#: The budget of the hanging ledgers: short, since they never return.
SHORT = 0.2


class Boom(BaseException):
    """An exception that is not an ``Exception``: no operation may raise it."""


def _rejection(factory: Callable[[Path], Any], *, shrink: bool = False, **kwargs: Any) -> str:
    """The kit's verdict on the ledgers ``factory`` opens: an ``AssertionError`` with a program."""
    with pytest.raises(AssertionError) as caught:
        check_ledger(factory, settings=SEARCH if shrink else NO_SHRINK, **kwargs)
    message = str(caught.value)
    assert "does not conform" in message
    assert "\nstate = LedgerConformance()" in message
    return message


# ------------------------------------------------------------------------------- raising what none may
class RetireRaises(ReferenceLedger):
    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        raise RuntimeError("retire is broken")


class ManifestRaisesOSError(ReferenceLedger):
    def manifest(self, rollout_id: str) -> Any:
        raise OSError(5, "Input/output error")


class HasRowsInterrupts(ReferenceLedger):
    def has_rows(self, rollout_id: str) -> bool:
        raise KeyboardInterrupt  # raised by the ledger on the kit's worker thread, not by the user


class AdmitRaisesBaseException(ReferenceLedger):
    def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        raise Boom("admit")


@pytest.mark.parametrize(
    ("ledger", "raised"),
    [
        (RetireRaises, "raised RuntimeError: retire is broken"),
        (ManifestRaisesOSError, "raised OSError: [Errno 5] Input/output error"),
        (HasRowsInterrupts, "raised KeyboardInterrupt"),
        (AdmitRaisesBaseException, "raised Boom: admit"),
    ],
)
def test_an_exception_no_operation_may_raise_is_a_verdict(ledger: type[ReferenceLedger], raised: str) -> None:
    message = _rejection(lambda workspace: ledger())
    assert raised in message
    assert "the model" in message
    assert "state.teardown()" in message


def test_a_verdict_on_an_unexpected_exception_is_shrunk_like_any_other() -> None:
    message = _rejection(lambda workspace: RetireRaises(), shrink=True)
    assert "raised RuntimeError: retire is broken" in message
    assert count_steps(message) == 1  # the retire itself


# ----------------------------------------------------------------------------- returning the wrong shape
class ManifestReturnsList(ReferenceLedger):
    def manifest(self, rollout_id: str) -> Any:
        return list(super().manifest(rollout_id).values())


class RetireReturnsCount(ReferenceLedger):
    def retire(self, rollout_ids: Sequence[str]) -> Any:
        removal = super().retire(rollout_ids)
        return {"removed": len(removal["removed"]), "absent": removal["absent"]}


class HasRowsReturnsInt(ReferenceLedger):
    def has_rows(self, rollout_id: str) -> Any:
        return int(super().has_rows(rollout_id))


class Unequal:
    """A value whose ``==`` and ``repr`` raise: only the worker thread may touch it."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing me")

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        raise RuntimeError("no printing me")


class AdmitReturnsUnequal(ReferenceLedger):
    def admit(self, rollout_id: str, model_call_id: str) -> Any:
        return Unequal()


@pytest.mark.parametrize(
    ("ledger", "said"),
    [
        (ManifestReturnsList, "returned a malformed manifest ["),
        (RetireReturnsCount, "returned {'removed': 0, 'absent': ["),
        (HasRowsReturnsInt, "returned 0; the model returns False"),
        (AdmitReturnsUnequal, "returned <Unequal: <Unequal whose repr raised RuntimeError>>"),
    ],
)
def test_a_value_of_the_wrong_shape_is_a_verdict(ledger: type[ReferenceLedger], said: str) -> None:
    assert said in _rejection(lambda workspace: ledger())


class BadWarning(ReferenceLedger):
    """Logs the discarded-write warning with format arguments that do not fit its message."""

    def _writable(self, rollout_id: str, key: str | None) -> list[dict[str, Any]] | None:
        if rollout_id not in self._rows and rollout_id in self._fences:
            logging.getLogger("capture_ledger.broken").warning("discarded %s %s", rollout_id)  # noqa: PLE1206
            return None
        return super()._writable(rollout_id, key)


def test_a_warning_that_cannot_be_formatted_is_a_verdict() -> None:
    # Outside pytest the kit reports the record it cannot format; under pytest, whose log handler raises
    # the formatting error inside the ``warning`` call, the ledger's call raised it. A verdict either way.
    message = _rejection(lambda workspace: BadWarning())
    assert "not enough arguments for format string" in message


# ------------------------------------------------------------------------------------------- factories
def test_a_factory_that_raises_is_a_verdict() -> None:
    def broken(workspace: Path) -> ReferenceLedger:
        raise RuntimeError("cannot open")

    message = _rejection(broken)
    assert "R-KIT-7: open_ledger raised RuntimeError: cannot open" in message


class WithoutDelete:
    """Every method of the protocol but ``delete``."""

    def __init__(self) -> None:
        self._ledger = ReferenceLedger()

    def __getattr__(self, name: str) -> Any:
        if name == "delete":
            raise AttributeError(name)
        return getattr(self._ledger, name)


def test_a_factory_that_returns_no_ledger_is_a_verdict_naming_what_is_missing() -> None:
    message = _rejection(lambda workspace: {})
    assert (
        "open_ledger returned dict, which lacks methods of CaptureLedger: record, record_failure," in message
    )
    # A ledger without delete is judged on the rest by default (R-KIT-10), but not when delete is asked for.
    verdict = check_ledger(lambda workspace: WithoutDelete(), settings=NO_SHRINK)
    assert "delete" not in verdict.operations and "R-DELETE-1" in verdict.not_checked
    message = _rejection(lambda workspace: WithoutDelete(), operations=OPERATIONS)
    assert "open_ledger returned WithoutDelete, which lacks methods of CaptureLedger: delete\n" in message


class CloseRaises(ReferenceLedger):
    def close(self) -> None:
        raise OSError("close failed")


def test_a_close_that_raises_is_a_verdict() -> None:
    assert "close() of a handle raised OSError: close failed" in _rejection(lambda workspace: CloseRaises())


# ----------------------------------------------------------------------------------------------- hangs
@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at the end of a test, so that the hung calls it left behind finish and their threads end."""
    event = threading.Event()
    yield event
    event.set()


def _kit_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "capture-ledger-kit-call"]


def test_a_hung_call_is_a_verdict_within_the_budget_and_leaves_one_thread(release: threading.Event) -> None:
    class HasRowsHangs(ReferenceLedger):
        def has_rows(self, rollout_id: str) -> bool:
            release.wait()  # "for ever": until the test ends
            return super().has_rows(rollout_id)

    before = set(_kit_threads())  # threads other tests in this process may have left (a replay's machine)
    message = _rejection(lambda workspace: HasRowsHangs(), call_budget=SHORT)
    assert f"CallHung: handle 0: HasRows(rollout_id='a') did not return within {SHORT:g} s" in message
    assert "not shrunk" in message
    assert "state.every_known_rollout_reads_as_the_model_says()" in message
    # Not re-run to shrink: one abandoned thread, however many examples Hypothesis would have re-run.
    left = set(_kit_threads()) - before
    assert len(left) == 1
    release.set()  # the abandoned call returns, and its thread ends
    for thread in left:
        thread.join()
    assert not set(_kit_threads()) - before


def test_a_factory_that_hangs_is_a_verdict(release: threading.Event) -> None:
    def stuck(workspace: Path) -> ReferenceLedger:
        release.wait()
        return ReferenceLedger()

    message = _rejection(stuck, call_budget=SHORT)
    assert f"open_ledger(workspace) did not return within {SHORT:g} s" in message


def test_an_async_call_that_never_completes_is_hung(release: threading.Event) -> None:
    class Never(ReferenceLedger):
        async def manifest(self, rollout_id: str) -> Any:  # type: ignore[override]
            while not release.is_set():
                await __import__("asyncio").sleep(0.01)
            return super().manifest(rollout_id)

    message = _rejection(lambda workspace: Never(), call_budget=SHORT)
    assert "ReadManifest(rollout_id='a') did not return" in message


def test_the_budget_comes_from_the_argument_the_environment_or_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(CALL_BUDGET_ENV, raising=False)
    assert call_budget() == DEFAULT_CALL_BUDGET == 30.0
    monkeypatch.setenv(CALL_BUDGET_ENV, "2.5")
    assert call_budget() == 2.5
    assert call_budget(7) == 7
    monkeypatch.setenv(CALL_BUDGET_ENV, "inf")
    assert call_budget() == float("inf")
    for bad in ("soon", "0", "-1", "nan"):
        monkeypatch.setenv(CALL_BUDGET_ENV, bad)
        with pytest.raises(ValueError, match="seconds"):
            call_budget()
    with pytest.raises(ValueError):
        conformance_machine(open_reference_ledger, call_budget=0)


# ------------------------------------------------------------------------------ the kit's own failures
class _BrokenDatabase(ExampleDatabase):
    """An example database that fails every call: an error inside Hypothesis, whatever the ledger does."""

    def fetch(self, key: bytes) -> Iterable[bytes]:
        raise RuntimeError("the example database is broken")

    def save(self, key: bytes, value: bytes) -> None:
        raise RuntimeError("the example database is broken")

    def delete(self, key: bytes, value: bytes) -> None:
        raise RuntimeError("the example database is broken")


def test_an_error_of_hypothesis_is_a_kit_error_not_a_verdict() -> None:
    # (A deadline no longer does it: the kit runs without one, tests/spec/kit/test_kit_deadline.py.)
    broken = settings(SEARCH, derandomize=False, database=_BrokenDatabase())
    with pytest.raises(KitError, match="not of the ledger"):
        check_ledger(open_reference_ledger, settings=broken)


def test_plain_copies_built_in_values_and_stands_in_for_the_rest() -> None:
    class Text(str):
        pass

    value = {"a": [1, 2.5, None, True, ("x",)], "b": {"c": "d"}}
    assert plain(value) == value
    assert type(plain(value)["a"][4]) is tuple  # type: ignore[index]
    assert plain(Text("x")) == Opaque("Text", "'x'")
    assert plain({1: "non-string key"}) == Opaque("dict", "{1: 'non-string key'}")
    nested: list[Any] = []
    nested.append(nested)
    assert isinstance(plain(nested), list)  # a cycle ends in an Opaque, not a RecursionError
