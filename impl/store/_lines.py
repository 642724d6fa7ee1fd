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

**Incarnations** (R-STORE-14). A ledger the store creates opens with an *incarnation line*,
``{"incarnation":"<12 lowercase hex digits>"}`` (random, 31 bytes with its newline), and every later line
of that ledger is *sealed*: the entry's JSON, a space, and 8 lowercase hex digits, the CRC-32 of the
incarnation line followed by that JSON (``zlib.crc32(json, zlib.crc32(incarnation_line))``). A line of
such a ledger that is not sealed with its incarnation (a stale block of a removed ledger read back inside
the new file, a line torn across a lost block, a second incarnation line) is crash residue, as a NUL is:
it and everything after it are the torn tail. A complete, correctly sealed line whose JSON is not an entry
is corruption. A new ledger is written whole (incarnation line and first row) under a temporary name
(``creation_name``), fsynced, and only then renamed into place (``ordering.Ordering.create_ledger``), so
the file a ledger's name reaches was durable, first block included, before the name existed: its first
block never reads as another file's block (a crash can only replace blocks a file did not hold at its last
fsync, and without a journal bring back a removed file under a name whose inode was never synced,
spec/crash/durability.py). It is shorter than any row line (33 bytes at least), so
a stale block cut to its length never holds a complete row. A ledger whose first line is not an
incarnation line (written before incarnations, "legacy") is read and appended to as before: unsealed lines.
The bytes of a row (``manifest``) are the same in both formats.

Lines this store wrote are read by ``canonical.record_of_line`` (the line already holds the row's canonical
JSON); any other line goes through the spec's ``json.loads``, ``validate_row`` and ``canonical_json``.

Not guaranteed: that a file not written by this module decodes. A complete line that does not decode is
corruption, reported by ``CorruptLedgerError`` (and by ``check``), never silently skipped.
"""

from __future__ import annotations

import json
import secrets
import zlib
from dataclasses import dataclass

from capture_ledger.impl.store._canonical import record_of_line
from capture_ledger.spec.core.errors import CaptureLedgerError
from capture_ledger.spec.core.model import Entry, FailureEntry, RecordEntry
from capture_ledger.spec.core.rows import canonical_json, validate_failure, validate_row

__all__ = [
    "FENCE_SUFFIX",
    "INCARNATION_BYTES",
    "LEDGER_SUFFIX",
    "CorruptLedgerError",
    "Decoded",
    "bytes_have_rows",
    "creation_name",
    "decode",
    "encode",
    "entry_json",
    "fence_name",
    "has_rows",
    "incarnation_line",
    "incarnation_seed",
    "ledger_name",
    "ledger_of_creation",
    "seal",
]

LEDGER_SUFFIX = ".lineage.jsonl"
FENCE_SUFFIX = ".lineage.retired"
#: A ledger being created is written under ``.<id>.lineage.jsonl.new`` first (R-STORE-3): no rollout ID
#: starts with a dot (R-ID-1) and the name ends in neither suffix, so no reader takes it for a ledger or
#: fence.
_CREATION_PREFIX = "."
_CREATION_SUFFIX = ".new"
_NEWLINE = 0x0A
_INCARNATION_PREFIX = b'{"incarnation":"'
_INCARNATION_SUFFIX = b'"}'
_INCARNATION_DIGITS = 12
#: The length of an incarnation line, newline included (shorter than any row line).
INCARNATION_BYTES = len(_INCARNATION_PREFIX) + _INCARNATION_DIGITS + len(_INCARNATION_SUFFIX) + 1
_HEX = frozenset(b"0123456789abcdef")
_SEAL_BYTES = 9  # a space and 8 hex digits


def ledger_name(rollout_id: str) -> str:
    """``<id>.lineage.jsonl`` (R-STORE-1)."""
    return rollout_id + LEDGER_SUFFIX


def fence_name(rollout_id: str) -> str:
    """``<id>.lineage.retired``, the empty fence (R-STORE-1)."""
    return rollout_id + FENCE_SUFFIX


def creation_name(ledger: str) -> str:
    """The temporary name a new ledger ``ledger`` (``<id>.lineage.jsonl``) is written under before it is
    renamed into place (R-STORE-3): ``.<id>.lineage.jsonl.new``. Only its rollout's creator, under the
    rollout's lock, makes or removes it; one left behind is crash residue (``check``: interrupted-create)."""
    return _CREATION_PREFIX + ledger + _CREATION_SUFFIX


def ledger_of_creation(name: str) -> str | None:
    """The ledger name whose creation ``name`` is the temporary of (``creation_name``), else ``None``."""
    if name.startswith(_CREATION_PREFIX) and name.endswith(LEDGER_SUFFIX + _CREATION_SUFFIX):
        return name[len(_CREATION_PREFIX) : -len(_CREATION_SUFFIX)]
    return None


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


def incarnation_line() -> bytes:
    """A new ledger's first line: a random incarnation, ``\\n`` included (R-STORE-14)."""
    return (
        _INCARNATION_PREFIX
        + secrets.token_hex(_INCARNATION_DIGITS // 2).encode()
        + _INCARNATION_SUFFIX
        + b"\n"
    )


def _is_incarnation(line: bytes) -> bool:
    """Whether ``line`` (without its newline) is an incarnation line as ``incarnation_line`` writes it."""
    return (
        len(line) == INCARNATION_BYTES - 1
        and line.startswith(_INCARNATION_PREFIX)
        and line.endswith(_INCARNATION_SUFFIX)
        and _HEX.issuperset(line[len(_INCARNATION_PREFIX) : -len(_INCARNATION_SUFFIX)])
    )


def incarnation_seed(line: bytes) -> int:
    """The CRC-32 of an incarnation line (``\\n`` included): what seals the ledger's lines."""
    return zlib.crc32(line)


def entry_json(entry: Entry) -> bytes:
    """The JSON of one entry's line, without the newline or a seal."""
    if isinstance(entry, RecordEntry):
        text = '{"record":' + entry.canonical + "}"
    else:
        text = (
            '{"failure":'
            + canonical_json({"model_call_id": entry.model_call_id, "reason": entry.reason})
            + "}"
        )
    return text.encode("utf-8", "surrogatepass")


def seal(body: bytes, seed: int | None) -> bytes:
    """The line of ``body`` (an entry's JSON) in a ledger of incarnation ``seed``, ``\\n`` included:
    ``body`` and its seal, or ``body`` alone in a legacy ledger (``seed`` is ``None``)."""
    if seed is None:
        return body + b"\n"
    return b"%s %08x\n" % (body, zlib.crc32(body, seed))


def encode(entry: Entry, seed: int | None = None) -> bytes:
    """The line of one entry, ``\\n`` included, sealed with ``seed`` (``None``: a legacy ledger's line)."""
    return seal(entry_json(entry), seed)


def _unsealed(line: bytes, seed: int) -> bytes | None:
    """The JSON of a line sealed with ``seed`` (without its newline), or ``None`` when the seal is not
    that incarnation's (crash residue)."""
    if len(line) <= _SEAL_BYTES or line[-_SEAL_BYTES] != 0x20:
        return None
    digits = line[-8:]
    if not _HEX.issuperset(digits):
        return None
    body = line[:-_SEAL_BYTES]
    return body if zlib.crc32(body, seed) == int(digits, 16) else None


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
    bytes consumed); bytes from ``end`` to ``size`` are a torn tail (R-STORE-6, R-STORE-11, R-STORE-14).
    ``seed`` is the ledger's incarnation seed (``incarnation_seed``), ``None`` for a legacy ledger or one
    without a complete first line.
    """

    entries: tuple[Entry, ...]
    end: int
    size: int
    seed: int | None = None

    @property
    def torn(self) -> bool:
        """Whether bytes follow the last complete line."""
        return self.size > self.end


def decode(data: bytes, *, start: int = 0, name: str = "", seed: int | None = None) -> Decoded:
    """Decode the complete lines of ``data``, which begins at byte ``start`` of the file.

    Args:
        data: bytes read from ``start`` to the end of the file.
        start: the file offset of ``data[0]`` (a line boundary).
        name: the file's name, for error messages.
        seed: the ledger's incarnation seed when ``start`` is past its first line (``Decoded.seed`` of an
            earlier decode); ignored from byte 0, where the first line says it.

    Returns:
        The entries of the complete lines, the offset past the last one, the file size seen, and the seed.

    Raises:
        CorruptLedgerError: a complete line is not a row.
    """
    entries: list[Entry] = []
    position = 0
    last = data.rfind(b"\n") + 1  # bytes past the last newline are torn (R-STORE-6)
    nul = data.find(b"\0", 0, last)
    if nul >= 0:  # crash residue: from the line holding the NUL on, nothing is a row (R-STORE-11)
        last = data.rfind(b"\n", 0, nul) + 1
    if start == 0:
        seed = None
        if last:
            first = data.index(_NEWLINE)
            if _is_incarnation(data[:first]):
                seed = incarnation_seed(data[: first + 1])
                position = first + 1
    while position < last:
        newline = data.index(_NEWLINE, position)
        line = data[position:newline]
        if seed is not None:
            body = _unsealed(line, seed)
            if body is None:  # another incarnation's bytes, or a line torn across a lost block: residue
                last = position
                break
            line = body
        try:
            entries.append(_decode_line(line))
        except (ValueError, TypeError, UnicodeDecodeError) as error:
            raise CorruptLedgerError(name, start + position, str(error)) from None
        position = newline + 1
    return Decoded(tuple(entries), start + last, start + len(data), seed)


def has_rows(data: bytes) -> bool:
    """Whether a ledger's bytes (from byte 0) hold a complete line that may be a row, without decoding
    them all: for a removal, which removes a corrupt ledger like any other (R-STORE-4, R-STORE-5)."""
    first = data.find(b"\n") + 1
    if not first or not _is_incarnation(data[: first - 1]):
        return first > 0
    second = data.find(b"\n", first)
    if second < 0:
        return False
    line = data[first:second]
    return b"\0" not in line and _unsealed(line, incarnation_seed(data[:first])) is not None


#: ``has_rows`` under the name the package exports (``impl.store.has_rows`` would read as the protocol's).
bytes_have_rows = has_rows
