"""The sequential model's results: success values and errors as values (SPEC.md §Operations, §Errors;
R-BATCH-2).

``Ok(value)`` or ``Err(ErrorKind...)``; ``ErrorKind.matches`` says which exceptions an implementation may
raise for an error value, and ``manifest_value_of`` turns an implementation's manifest into the value the
model's is compared with. The public names are re-exported by ``spec.core.model``.

Not guaranteed here: which result an operation has in a state (that is ``model.step``), or the wording of
an exception's message or of a warning.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capture_ledger.spec.core.errors import (
    CaptureLedgerError,
    ConflictingRecordError,
    InvalidRolloutIdError,
    RolloutRetiredError,
)
from capture_ledger.spec.core.protocol import Manifest
from capture_ledger.spec.core.rows import canonical_json

__all__ = [
    "VALIDATION_ERRORS",
    "Discarded",
    "Err",
    "ErrorKind",
    "ManifestValue",
    "Ok",
    "Removal",
    "Result",
    "manifest_value_of",
]


# -------------------------------------------------------------------------------------------- results
class ErrorKind(enum.Enum):
    """An error as a value. ``matches`` says which exceptions an implementation may raise for it."""

    #: Exactly ``TypeError`` (and not ``ValueError``): a bare string or non-sequence batch (R-BATCH-1).
    TYPE_ERROR = "TypeError"
    #: ``TypeError`` or ``ValueError``: a malformed row, model call ID or reason (R-WRITE-1, R-WRITE-7).
    INVALID_INPUT = "TypeError or ValueError"
    INVALID_ROLLOUT_ID = "InvalidRolloutIdError"
    ROLLOUT_RETIRED = "RolloutRetiredError"
    CONFLICTING_RECORD = "ConflictingRecordError"

    def matches(self, error: BaseException) -> bool:
        """Whether an implementation's exception is the one this error value stands for."""
        if self is ErrorKind.INVALID_ROLLOUT_ID:
            return isinstance(error, InvalidRolloutIdError)
        if self is ErrorKind.ROLLOUT_RETIRED:
            return isinstance(error, RolloutRetiredError)
        if self is ErrorKind.CONFLICTING_RECORD:
            return isinstance(error, ConflictingRecordError)
        if isinstance(error, CaptureLedgerError):
            return False
        if self is ErrorKind.TYPE_ERROR:
            return isinstance(error, TypeError) and not isinstance(error, ValueError)
        return isinstance(error, TypeError | ValueError)

    @classmethod
    def of(cls, error: BaseException) -> ErrorKind | None:
        """The most specific kind an exception stands for, or ``None`` for an unexpected one."""
        for kind in (
            cls.ROLLOUT_RETIRED,
            cls.INVALID_ROLLOUT_ID,
            cls.CONFLICTING_RECORD,
            cls.TYPE_ERROR,
            cls.INVALID_INPUT,
        ):
            if kind.matches(error):
                return kind
        return None


#: The errors only validation gives: they depend on the arguments, never on the state (R-BATCH-2).
VALIDATION_ERRORS = frozenset({ErrorKind.INVALID_ROLLOUT_ID, ErrorKind.INVALID_INPUT, ErrorKind.TYPE_ERROR})


@dataclass(frozen=True, slots=True)
class Discarded:
    """A write to a Retired rollout: no error, one warning naming ``staging_key`` if any (R-WRITE-4..5)."""

    rollout_id: str
    staging_key: str | None = None


@dataclass(frozen=True, slots=True)
class ManifestValue:
    """A manifest as a value: canonical records and ``(model_call_id, reason)`` failures."""

    records: tuple[str, ...] = ()
    failures: tuple[tuple[str, str], ...] = ()

    def to_manifest(self, rollout_id: str) -> Manifest:
        """The ``Manifest`` dict an implementation returns."""
        return {
            "rollout_id": rollout_id,
            "records": [json.loads(r) for r in self.records],
            "failures": [{"model_call_id": m, "reason": r} for m, r in self.failures],
        }


@dataclass(frozen=True, slots=True)
class Removal:
    """A ``RolloutRemoval`` as a value."""

    removed: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Ok:
    """A successful result; ``value`` is ``None``, ``Discarded``, ``str``, ``bool``,
    ``ManifestValue`` or ``Removal``."""

    value: object = None


@dataclass(frozen=True, slots=True)
class Err:
    """A failed operation; nothing changed (R-BATCH-2)."""

    kind: ErrorKind


Result = Ok | Err


def manifest_value_of(manifest: Mapping[str, Any]) -> ManifestValue:
    """The value of an implementation's manifest, for comparison with the model's.

    Raises:
        TypeError, ValueError, KeyError: the manifest is not shaped as ``Manifest``.
    """
    return ManifestValue(
        tuple(canonical_json(r) for r in manifest["records"]),
        tuple((f["model_call_id"], f["reason"]) for f in manifest["failures"]),
    )
