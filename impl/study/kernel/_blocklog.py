"""The block-write log: what the kernel wrote to a disk image, in order (SPEC.md §Crash, R-CRASH-1..4).

The FUSE daemon (``daemon``) appends one record per event it serves, in the order the kernel queued them:

- ``W`` a block write: byte offset, length and the bytes;
- ``S`` a flush (FUSE ``fsync`` of the image file: the block layer's ``REQ_PREFLUSH``, and the emulated
  ``REQ_FUA`` of a device without FUA): every write before it is durable once it is answered;
- ``M`` a mark: text the study wrote to the daemon's control file (``START``, ``END``, and ``T <n>``:
  the store's own trace then held ``n`` completed events).

Record layout (little endian): ``op:1s seq:Q offset:Q length:I aux:I t_ns:Q`` followed by ``length`` bytes
for ``W`` and ``M``. Reads are not logged. Pure: no FUSE, no root; ``read_log`` parses a log file and
``encode`` is what the daemon writes.

Not guaranteed: that a log cut short (the daemon killed mid-record) parses beyond its last whole record;
discards and write-zeroes (the daemon refuses them, so the kernel falls back to plain writes).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FLUSH", "MARK", "WRITE", "LogRecord", "encode", "read_log"]

WRITE, FLUSH, MARK = "W", "S", "M"
_HEADER = struct.Struct("<1sQQIIQ")


@dataclass(kw_only=True, frozen=True, slots=True)
class LogRecord:
    """One logged event: ``op`` is ``W``, ``S`` or ``M``; ``data`` the written bytes or the mark's text."""

    op: str
    seq: int
    offset: int
    data: bytes = b""

    @property
    def text(self) -> str:
        """A mark's text."""
        return self.data.decode("utf-8", "replace")


def encode(op: str, seq: int, offset: int, data: bytes, t_ns: int) -> bytes:
    """One record as the daemon writes it."""
    return _HEADER.pack(op.encode("ascii"), seq, offset, len(data), 0, t_ns) + data


def read_log(path: Path) -> list[LogRecord]:
    """Every whole record of the log at ``path``, in order.

    Args:
        path: a log written by the daemon.

    Returns:
        The records (a record cut short at the end is left out).

    Raises:
        OSError: the log cannot be read.
    """
    raw = path.read_bytes()
    records: list[LogRecord] = []
    position = 0
    while position + _HEADER.size <= len(raw):
        op, seq, offset, length, _, _ = _HEADER.unpack_from(raw, position)
        position += _HEADER.size
        kind = op.decode("ascii", "replace")
        data = b""
        if kind in (WRITE, MARK):
            if position + length > len(raw):
                break
            data = raw[position : position + length]
            position += length
        records.append(LogRecord(op=kind, seq=seq, offset=offset, data=data))
    return records
