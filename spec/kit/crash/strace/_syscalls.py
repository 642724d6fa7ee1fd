"""The line grammar of ``strace -f -y -x`` output: one ``Syscall`` per completed call (SPEC.md §Crash;
docs/crash-target.md §The trace).

A line is ``[TID] [TIMESTAMP] NAME(ARGS) = RET``; with a status filter strace prints each call whole when it
completes, so the file order is the completion order. ``read_syscalls`` also joins the two halves of a call
split across lines (``... <unfinished ...>`` then ``<... NAME resumed> ...``, per thread) and an orphan
continuation ``) = N`` (no thread), and skips ``+++ exited +++`` and ``--- SIG ---`` lines. The helpers
read the arguments: ``split_args`` splits at top-level commas (never inside quotes, brackets or ``-y``
annotations); ``fd_arg`` reads ``4</ws/log>`` (and ``(deleted)``, and ``AT_FDCWD``); ``str_arg`` decodes a C
string (``\\xHH``, octal, the usual escapes) and refuses one that strace cut short (``"..."...``), since a
shortened write would be a silent lie; ``iov_data`` joins an iovec array's strings.

The grammar (docs/crash-target.md has examples)::

    line  := [TID ws+] [TS ws+] body          TID = digits | "[pid " digits "]"; TS = digits "." digits
    body  := NAME "(" args ")" ws* "=" ws* ret | NAME "(" head " <unfinished ...>"
           | "<... " NAME " resumed>" tail | ")" ws* "=" ws* ret | "+++ ..." | "--- ..."
    ret   := (INT | HEX | "?") ["<" PATH ">" ["(deleted)"]] [ws ERRNO ...] [ws "(" text ")"]

Not guaranteed: other strace formats (``-yy``, ``-X raw`` flag names, ``-e write=all`` dumps) than the one
``strace._tracing`` asks for.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = [
    "FdArg",
    "Syscall",
    "TruncatedDataError",
    "fd_arg",
    "int_arg",
    "iov_data",
    "path_arg",
    "read_syscalls",
    "split_args",
    "str_arg",
    "unescape",
]


class TruncatedDataError(ValueError):
    """strace cut a string short (``-s`` too small): the trace cannot say what was written."""


@dataclass(kw_only=True, frozen=True, slots=True)
class Syscall:
    """One completed call: where it is in the file, which thread made it, its name, its raw argument text,
    and its result (``retval`` ``None`` when strace printed ``?``; ``errno`` when it failed; ``injected``
    when strace itself made it fail, ``(INJECTED)``)."""

    line: int
    tid: int
    name: str
    args: str
    retval: int | None
    ret_path: str | None
    ret_deleted: bool
    errno: str | None
    injected: bool = False

    @property
    def succeeded(self) -> bool:
        """The call returned a non-negative number and no error."""
        return self.retval is not None and self.retval >= 0 and self.errno is None


_PREFIX = re.compile(r"^(?:\[pid\s+(\d+)\]|(\d+))?\s*(\d+\.\d+|\d\d:\d\d:\d\d(?:\.\d+)?)?\s*(.*)$", re.S)
_CALL = re.compile(r"^([a-z_][a-z0-9_]*)\((.*)$", re.S)
_RESUMED = re.compile(r"^<\.\.\. ([a-z_][a-z0-9_]*) resumed>(.*)$", re.S)
_UNFINISHED = " <unfinished ...>"
_RET = re.compile(
    r"^(-?\d+|0x[0-9a-fA-F]+|\?)"
    r"(?:<((?:[^>\\]|\\.)*)>(\(deleted\))?)?"
    r"(?:\s+(E[A-Z0-9_]+)\b.*)?"
    r"(?:\s+\(.*\))?\s*$",
    re.S,
)
_TOKEN = re.compile(
    r'"(?:[^"\\]|\\.)*"'  # a quoted string (escapes skipped)
    r"|(?<=[0-9D])<(?:[^>\\]|\\.)*>"  # a -y annotation right after an fd number or AT_FDCWD
    r"|[()\[\]{},]"
    r'|[^"()\[\]{},<]+|<',
    re.S,
)
_AFTER = re.compile(r"^\s*=\s*(.*)$", re.S)


def _split_call(rest: str) -> tuple[str, str] | None:
    """``args) = ret`` → ``(args, ret)``, at the top-level closing parenthesis."""
    depth = 0
    for match in _TOKEN.finditer(rest):
        token = match.group()
        if token in "([{":
            depth += 1
        elif token in ")]}":
            if depth == 0 and token == ")":
                tail = rest[match.start() + 1 :]
                after = _AFTER.match(tail)
                return rest[: match.start()], (after.group(1).strip() if after else tail.strip())
            depth -= 1
    return None


def _parse(line: int, tid: int, name: str, text: str) -> Syscall:
    split = _split_call(text)
    if split is None:
        raise ValueError(f"line {line}: cannot read the call {name}({text[:200]}")
    args, ret = split
    match = _RET.match(ret)
    retval: int | None = None
    path: str | None = None
    errno: str | None = None
    deleted = False
    if match:
        if match.group(1) != "?":
            retval = int(match.group(1), 0)
        if match.group(2) is not None:
            path = unescape(match.group(2)).decode("utf-8", "surrogateescape")
        deleted = bool(match.group(3))
        errno = match.group(4)
    return Syscall(
        line=line,
        tid=tid,
        name=name,
        args=args,
        retval=retval,
        ret_path=path,
        ret_deleted=deleted,
        errno=errno,
        injected=ret.endswith("(INJECTED)"),
    )


def read_syscalls(lines: Iterable[str]) -> Iterator[Syscall]:
    """Every call of a trace, halves joined (see the module docstring).

    Raises:
        ValueError: a line that looks like a call but cannot be read.
    """
    pending: dict[int, tuple[int, str, str]] = {}  # tid -> (line, name, head)
    last_unfinished: int | None = None
    for number, line_text in enumerate(lines, 1):
        raw = line_text.rstrip("\n")
        if not raw.strip():
            continue
        if raw.startswith(")") and last_unfinished is not None:  # an orphan continuation
            tid, rest = last_unfinished, raw
        else:
            match = _PREFIX.match(raw)
            if match is None:  # pragma: no cover - the pattern matches any line
                continue
            tid = int(match.group(1) or match.group(2) or 0)
            rest = match.group(4)
        if rest.startswith(("+++", "---", "strace:", "[ Process")):
            continue
        resumed = _RESUMED.match(rest)
        if rest.startswith(")") or resumed:
            if tid not in pending:
                continue  # resumed without a start (the tracer attached mid-call)
            _, name, head = pending.pop(tid)
            yield _parse(number, tid, name, head + (resumed.group(2) if resumed else rest))
            continue
        call = _CALL.match(rest)
        if call is None:
            continue
        name, text = call.group(1), call.group(2)
        if text.endswith(_UNFINISHED):
            pending[tid] = (number, name, text[: -len(_UNFINISHED)])
            last_unfinished = tid
            continue
        yield _parse(number, tid, name, text)


# ---------------------------------------------------------------------------------------- arguments
_ESCAPES = {"n": 10, "t": 9, "r": 13, "v": 11, "f": 12, "a": 7, "b": 8, '"': 34, "\\": 92, "'": 39, "?": 63}
_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{2}|[0-7]{1,3}|.)", re.S)
_ALL_HEX = re.compile(r"^(?:\\x[0-9a-fA-F]{2})+$")
_FD = re.compile(r"^(-?\d+|0x[0-9a-fA-F]+|AT_FDCWD)(?:<((?:[^>\\]|\\.)*)>)?(\(deleted\))?$")
_IOV_BASE = re.compile(r'iov_base=("(?:[^"\\]|\\.)*"(?:\.\.\.)?)')


def _escape(match: re.Match[bytes]) -> bytes:
    code = match.group(1)
    if code[:1] == b"x":
        return bytes([int(code[1:], 16)])
    if code[:1] in b"01234567":
        return bytes([int(code, 8)])
    return bytes([_ESCAPES[code.decode()]])


def unescape(text: str) -> bytes:
    """strace's C quoting decoded: ``\\n \\t \\" \\\\ \\xHH \\NNN`` (octal, used for ``<``/``>`` in paths)."""
    if "\\" not in text:
        return text.encode("utf-8", "surrogateescape")
    if _ALL_HEX.match(text):  # -x printed the whole string in hex
        return bytes.fromhex(text.replace("\\x", ""))
    return _ESCAPE.sub(_escape, text.encode("utf-8", "surrogateescape"))


def split_args(text: str) -> list[str]:
    """The top-level arguments of a call's argument text."""
    found: list[str] = []
    current: list[str] = []
    depth = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in "([{":
            depth += 1
        elif token in ")]}":
            depth -= 1
        elif token == "," and depth == 0:
            found.append("".join(current).strip())
            current = []
            continue
        current.append(token)
    if current or found:
        found.append("".join(current).strip())
    return found


@dataclass(kw_only=True, frozen=True, slots=True)
class FdArg:
    """A descriptor argument: its number (``AT_FDCWD`` is -100), the path ``-y`` printed, ``(deleted)``."""

    fd: int
    path: str | None
    deleted: bool


def fd_arg(token: str) -> FdArg:
    """Read a descriptor argument.

    Raises:
        ValueError: the token is not a descriptor.
    """
    match = _FD.match(token.strip())
    if match is None:
        raise ValueError(f"not a descriptor: {token!r}")
    fd = -100 if match.group(1) == "AT_FDCWD" else int(match.group(1), 0)
    path = unescape(match.group(2)).decode("utf-8", "surrogateescape") if match.group(2) is not None else None
    return FdArg(fd=fd, path=path, deleted=bool(match.group(3)))


def str_arg(token: str) -> bytes:
    """Read a quoted string argument.

    Raises:
        TruncatedDataError: strace cut it short.
        ValueError: the token is not a quoted string.
    """
    token = token.strip()
    if token.endswith('"...'):
        raise TruncatedDataError(token[:60])
    if not token.startswith('"') or not token.endswith('"'):
        raise ValueError(f"not a string: {token[:60]!r}")
    return unescape(token[1:-1])


def path_arg(token: str) -> str:
    """Read a path argument (as ``str``, undecodable bytes kept as surrogates)."""
    return str_arg(token).decode("utf-8", "surrogateescape")


def int_arg(token: str) -> int:
    """Read an integer argument (decimal or hex; ``[N]`` for an offset passed by reference)."""
    return int(token.strip().strip("[]").split()[0], 0)


def iov_data(token: str) -> bytes:
    """The bytes of an iovec array argument, joined.

    Raises:
        TruncatedDataError: strace cut the array or one of its strings short.
    """
    if token.rstrip().endswith("..."):
        raise TruncatedDataError(token[-60:])
    return b"".join(str_arg(s) for s in _IOV_BASE.findall(token))
