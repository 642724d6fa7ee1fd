"""The ledger file format: one JSON object per line (SPEC.md R-STORE-1, R-STORE-6).

A ledger ``<id>.lineage.jsonl`` holds, in append order, lines of two shapes:

- ``{"record":<row>}`` where ``<row>`` is the row's canonical JSON (sorted keys, no spaces, non-ASCII kept);
- ``{"failure":{"model_call_id":"…","reason":"…"}}`` for ``record_failure``.

Each line ends with ``\\n``; JSON escapes newlines inside strings, so ``\\n`` only ever ends a line. Text is
UTF-8 with ``surrogatepass`` (a lone surrogate in a row survives the round trip, as the model keeps it).
Bytes after the last ``\\n`` are a torn tail, left by a crash during an append that never returned: they
are not a row (R-STORE-6), and the next append first truncates them away.

A line holding a NUL byte is crash residue, and so is everything after it: ``encode`` never writes a NUL
(canonical JSON escapes every control character), so a NUL can only come from a block the disk never wrote
(on ext4 without a journal a crash may keep a later block of an unsynced append and lose an earlier one,
docs/crash.md §The kernel study). The torn tail then starts at that line (R-STORE-6, R-STORE-11). This is
safe: an fsync that returned flushed every block of the file, so a lost block only ever holds bytes of
appends not yet acknowledged, which a crash may drop (R-CRASH-4).

Lines this store wrote are read by ``canonical.record_of_line`` (the line already holds the row's canonical
JSON); any other line goes through the spec's ``json.loads``, ``validate_row`` and ``canonical_json``.

Not guaranteed: that a file not written by this module decodes. A complete line that does not decode is
corruption, reported by ``CorruptLedgerError`` (and by ``check``), never silently skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from capture_ledger.impl.store._canonical import record_of_line
from capture_ledger.spec.core.errors import CaptureLedgerError
from capture_ledger.spec.core.model import Entry, FailureEntry, RecordEntry
from capture_ledger.spec.core.rows import canonical_json, validate_failure, validate_row

__all__ = [
    "FENCE_SUFFIX",
    "LEDGER_SUFFIX",
    "CorruptLedgerError",
    "Decoded",
    "decode",
    "encode",
    "fence_name",
    "ledger_name",
]

LEDGER_SUFFIX = ".lineage.jsonl"
FENCE_SUFFIX = ".lineage.retired"
_NEWLINE = 0x0A


def ledger_name(rollout_id: str) -> str:
    """``<id>.lineage.jsonl`` (R-STORE-1)."""
    return rollout_id + LEDGER_SUFFIX


def fence_name(rollout_id: str) -> str:
    """``<id>.lineage.retired``, the empty fence (R-STORE-1)."""
    return rollout_id + FENCE_SUFFIX


class CorruptLedgerError(CaptureLedgerError):
    """A complete line of a ledger file does not decode as a row; run ``capture_ledger.impl.check``."""

    def __init__(self, name: str, offset: int, reason: str) -> None:
        self.name = name
        self.offset = offset
        self.reason = reason
        super().__init__(
            f"ledger {name!r} has a corrupt line at byte {offset}: {reason}; it was not written by "
            "capture-ledger or the disk lost data; inspect it with `check`"
        )

    def __reduce__(self) -> tuple[type[CorruptLedgerError], tuple[str, int, str]]:
        return (type(self), (self.name, self.offset, self.reason))


def encode(entry: Entry) -> bytes:
    """The line of one entry, ``\\n`` included."""
    if isinstance(entry, RecordEntry):
        text = '{"record":' + entry.canonical + "}\n"
    else:
        text = (
            '{"failure":'
            + canonical_json({"model_call_id": entry.model_call_id, "reason": entry.reason})
            + "}\n"
        )
    return text.encode("utf-8", "surrogatepass")


def _decode_line(line: bytes) -> Entry:
    fast = record_of_line(line)  # a line as this store writes it: read without re-encoding (canonical)
    if fast is not None:
        return RecordEntry(fast[0]["model_call_id"], fast[1])
    value = json.loads(line.decode("utf-8", "surrogatepass"))
    if not isinstance(value, dict) or len(value) != 1:
        raise ValueError("a line must be an object with one key, 'record' or 'failure'")
    if "record" in value:
        row = validate_row(value["record"])
        return RecordEntry(row["model_call_id"], canonical_json(row))
    if "failure" in value:
        failure = value["failure"]
        if not isinstance(failure, dict) or set(failure) != {"model_call_id", "reason"}:
            raise ValueError("a failure line holds exactly model_call_id and reason")
        return FailureEntry(*validate_failure(failure["model_call_id"], failure["reason"]))
    raise ValueError(f"unknown line kind {next(iter(value))!r}")


@dataclass(frozen=True, slots=True)
class Decoded:
    """The entries of some bytes of a ledger, and where they end.

    ``end`` is the offset just past the last complete line before any crash residue (``start`` plus the
    bytes consumed); bytes from ``end`` to ``size`` are a torn tail (R-STORE-6, R-STORE-11).
    """

    entries: tuple[Entry, ...]
    end: int
    size: int

    @property
    def torn(self) -> bool:
        """Whether bytes follow the last complete line."""
        return self.size > self.end


def decode(data: bytes, *, start: int = 0, name: str = "") -> Decoded:
    """Decode the complete lines of ``data``, which begins at byte ``start`` of the file.

    Args:
        data: bytes read from ``start`` to the end of the file.
        start: the file offset of ``data[0]`` (a line boundary).
        name: the file's name, for error messages.

    Returns:
        The entries of the complete lines, the offset past the last one, and the file size seen.

    Raises:
        CorruptLedgerError: a complete line is not a row.
    """
    entries: list[Entry] = []
    position = 0
    last = data.rfind(b"\n") + 1  # bytes past the last newline are torn (R-STORE-6)
    nul = data.find(b"\0", 0, last)
    if nul >= 0:  # crash residue: from the line holding the NUL on, nothing is a row (R-STORE-11)
        last = data.rfind(b"\n", 0, nul) + 1
    while position < last:
        newline = data.index(_NEWLINE, position)
        try:
            entries.append(_decode_line(data[position:newline]))
        except (ValueError, TypeError, UnicodeDecodeError) as error:
            raise CorruptLedgerError(name, start + position, str(error)) from None
        position = newline + 1
    return Decoded(tuple(entries), start + last, start + len(data))
