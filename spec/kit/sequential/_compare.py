"""How one call of the ledger compares with the model: its result, its warnings, and the kind of state a
read shows (SPEC.md R-KIT-1..3; the machine's read-back, R-KIT-2, R-KIT-11).

Pure functions over an ``Outcome`` (what the ledger did, as plain data, ``calls``) and the model's result:
each returns what differs, as text for the verdict, or ``None``. No ledger code runs here.
Not guaranteed: the wording of the differences.
"""

from __future__ import annotations

from dataclasses import dataclass

from capture_ledger.spec.core.model import (
    Delete,
    Discarded,
    Err,
    HasRows,
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
)
from capture_ledger.spec.kit._calls import Outcome

__all__ = ["Read", "difference", "kind_seen", "warning_problem"]


@dataclass(frozen=True, slots=True)
class Read:
    """One read of a read-back: what differs from the model (``None``: nothing), the kind of state it
    shows when it is wrong (``classify.state_kind``'s, or ``other``; empty for a right read), and what it
    returned then, as plain data (``None`` for a right read)."""

    problem: str | None
    kind: str
    value: object = None


def _describe(result: Result) -> str:
    if isinstance(result, Err):
        return f"raises {result.kind.value}"
    return f"returns {result.value!r}"


def difference(op: Operation, expected: Result, outcome: Outcome) -> str | None:
    """How ``outcome`` differs from the model's ``expected`` result, or ``None`` (R-KIT-1)."""
    if outcome.error is not None:
        if isinstance(expected, Err) and expected.kind.matches(outcome.error):
            return None
        return f"raised {outcome.error_text}; the model {_describe(expected)}"
    actual = outcome.value
    if isinstance(expected, Err):
        return f"returned {actual!r}; the model {_describe(expected)}"
    value = expected.value
    if isinstance(op, Record | RecordFailure):
        return None if actual is None else f"returned {actual!r}; writes return None"
    if isinstance(op, ReadManifest):
        assert isinstance(value, ManifestValue)
        got: ManifestValue | None = None
        named: object = None
        try:
            got = manifest_value_of(actual)  # type: ignore[arg-type]
            named = actual["rollout_id"]  # type: ignore[index]
        except (KeyError, TypeError, ValueError, AttributeError):
            got = None
        if got is None:
            return f"returned a malformed manifest {actual!r}"
        if named != op.rollout_id or got != value:
            return f"returned {actual!r}; the model returns {value.to_manifest(str(op.rollout_id))!r}"
        return None
    if isinstance(op, Retire | Delete):
        assert isinstance(value, Removal)
        want = {"removed": list(value.removed), "absent": list(value.absent)}
        got_removal = actual
        if isinstance(actual, dict):  # plain data: a list or a tuple of IDs is a sequence either way
            parts = {key: actual.get(key) for key in want}
            got_removal = {k: [*v] if isinstance(v, list | tuple) else v for k, v in parts.items()}
        return None if got_removal == want else f"returned {actual!r}; the model returns {want!r}"
    if type(actual) is not type(value) or actual != value:
        return f"returned {actual!r}; the model returns {value!r}"
    return None


def warning_problem(expected: Result, outcome: Outcome) -> tuple[bool, str | None]:
    """``(discarded, problem)``: whether the model discards the write, and what is wrong with the warnings
    logged (R-WRITE-5, R-KIT-3), or ``None``."""
    if outcome.problem is not None:
        return False, outcome.problem
    messages = list(outcome.warnings)
    value = expected.value if isinstance(expected, Ok) else None
    if not isinstance(value, Discarded):
        return False, (f"logged {messages!r}; it should log no warning" if messages else None)
    if len(messages) != 1:
        return True, f"logged {messages!r}; a discarded write logs exactly one warning"
    needed = [value.rollout_id] + ([value.staging_key] if value.staging_key else [])
    missing = [n for n in needed if n not in messages[0]]
    return True, (f"logged {messages[0]!r}, which does not name {missing!r}" if missing else None)


def kind_seen(op: Operation, outcome: Outcome) -> str:
    """The kind of state a read's outcome shows: ``absent``, ``live``, ``retired`` or ``other``."""
    if outcome.error is not None:
        return "retired" if type(outcome.error).__name__ == "RolloutRetiredError" else "other"
    value = outcome.value
    if isinstance(op, HasRows):
        return {True: "live", False: "absent"}.get(value, "other") if type(value) is bool else "other"
    try:
        seen = manifest_value_of(value)  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError, AttributeError):
        return "other"
    return "live" if seen.records or seen.failures else "absent"
