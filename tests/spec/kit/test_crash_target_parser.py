"""The strace parser of ``crash --target``: a trace becomes the persistence models' effects (SPEC.md §Crash,
R-CRASH-1..4; docs/crash-target.md §The trace), and the models follow the extended vocabulary.

The traces here are strace 6.1's own output (``-f -y -x``, a status filter), captured from a small program
and kept as text, so the tests are pure and fast; tests/spec/kit/test_crash_target.py runs the tracer for
real.
"""

from __future__ import annotations

from capture_ledger.spec.crash.durability import (
    Baseline,
    Create,
    Effect,
    Fsync,
    Link,
    Mkdir,
    Rename,
    SyncDir,
    SyncRange,
    Truncate,
    Unlink,
    Unsupported,
    UnsupportedEffectError,
    Write,
    space,
)
from capture_ledger.spec.kit.crash.strace import Marker, parse_trace, read_syscalls, str_arg

TRACE = """\
18762 openat(AT_FDCWD</w>, "/w/a", O_WRONLY|O_CREAT|O_APPEND|O_CLOEXEC, 0644) = 3</w/a>
18762 write(3</w/a>, "one\\n", 4)   = 4
18762 fdatasync(3</w/a>)           = 0
18762 close(3</w/a>)               = 0
18762 openat(AT_FDCWD</w>, "/w/b", O_RDWR|O_CREAT|O_CLOEXEC, 0644) = 3</w/b>
18762 pwrite64(3</w/b>, "xyz", 3, 10) = 3
18762 ftruncate(3</w/b>, 4)        = 0
18762 fsync(3</w/b>)               = 0
18762 mkdir("/w/d", 0777)          = 0
18762 link("/w/a", "/w/d/a2") = 0
18762 rename("/w/b", "/w/c")  = 0
18762 openat(AT_FDCWD</w>, "/w", O_RDONLY|O_CLOEXEC|O_DIRECTORY) = 4</w>
18762 fsync(4</w>)                 = 0
18762 close(4</w>)                 = 0
18762 openat(AT_FDCWD</w>, "/w/a", O_WRONLY|O_TRUNC|O_CLOEXEC) = 4</w/a>
18762 close(4</w/a>)               = 0
18762 unlink("/w/d/a2")            = 0
18762 sync_file_range(3</w/c>, 0, 0, SYNC_FILE_RANGE_WRITE) = 0
18762 write(5</dev/null>, "CL-INVOKE 0 x", 13) = 13
18763 pwrite64(3</w/c>, "\\x00\\x01", 2, 0 <unfinished ...>
18762 write(3</w/c>, "ab", 2)      = 2
18763 <... pwrite64 resumed>)      = 2
18762 write(7</tmp/elsewhere>, "not ours", 8) = 8
18762 openat(AT_FDCWD</w>, "/w/gone", O_RDONLY) = -1 ENOENT (No such file or directory)
"""


def _effects(text: str = TRACE) -> list[Effect | Marker]:
    parsed = parse_trace(text.splitlines(keepends=True), "/w", {}, cwd="/w")
    return [event.item for event in parsed.events]


def test_every_kind_of_call_becomes_its_effect_with_the_right_inode_and_offset() -> None:
    effects = _effects()
    a, b, d = 1 + 1, 3, 4  # inode 1 is the workspace itself; then a, b and d in order of creation
    assert effects[:13] == [
        Create("a", a),
        Write(a, b"one\n", 0),
        Fsync(a, data_only=True),
        Create("b", b),
        Write(b, b"xyz", 10),  # a write past the end: at its own offset
        Truncate(b, 4),
        Fsync(b),
        Mkdir("d", d),
        Link("d/a2", a),
        Rename("b", "c", b),
        SyncDir(""),
        Truncate(a, 0),  # O_TRUNC of a non-empty file
        Unlink("d/a2", a),
    ]
    assert effects[13] == SyncRange(b)
    assert effects[14] == Marker("INVOKE", "0 x")
    # The description's position (after ftruncate it is still 0 for a plain write: it never moved).
    assert effects[15] == Write(b, b"ab", 0)
    assert effects[16] == Write(b, b"\x00\x01", 0)  # the unfinished call, joined when it completed
    assert len(effects) == 17  # outside the workspace, and failed calls: nothing


def test_a_writable_shared_mapping_is_unsupported_and_has_no_image_space() -> None:
    text = (
        '1 openat(AT_FDCWD</w>, "/w/m", O_RDWR|O_CREAT, 0644) = 3</w/m>\n'
        "1 mmap(NULL, 4096, PROT_READ|PROT_WRITE, MAP_SHARED, 3</w/m>, 0) = 0x7f0000000000\n"
    )
    effects = _effects(text)
    assert isinstance(effects[-1], Unsupported) and "mapping" in effects[-1].reason
    try:
        space("journaled", Baseline(), [e for e in effects if not isinstance(e, Marker)])
    except UnsupportedEffectError:
        pass
    else:  # pragma: no cover - the assertion that fails
        raise AssertionError("an unsupported effect must leave no image space")


def test_a_string_strace_cut_short_is_refused_not_guessed() -> None:
    try:
        str_arg('"abc"...')
    except ValueError:
        pass
    else:  # pragma: no cover
        raise AssertionError("a truncated string must be refused")
    assert [c.name for c in read_syscalls(TRACE.splitlines())].count("pwrite64") == 2


def test_journaled_keeps_a_rename_atomic_and_tears_a_rewrite_at_sectors() -> None:
    """A rename comes back whole (old name gone, new name present) or not at all; a file rewritten in place
    holds each 512-byte sector from the last sync or from later (R-CRASH-1's premise)."""
    base = Baseline(files=(("f", 1, b"A" * 1024),))
    effects: list[Effect] = [Create("f.tmp", 2), Write(2, b"new\n", 0), Fsync(2), Rename("f.tmp", "f", 2, 1)]
    images = [i.as_dict() for i in space("journaled", base, effects)]
    assert {i["f"] for i in images} >= {b"new\n", b"A" * 1024}
    assert all("f" in i for i in images)  # the target is replaced atomically: never missing
    assert all(i["f"] == b"A" * 1024 for i in images if "f.tmp" in i)  # never both names of the new file
    rewrite: list[Effect] = [Write(1, b"B" * 1024, 0)]
    contents = {i.as_dict()["f"] for i in space("journaled", base, rewrite)}
    assert b"B" * 512 + b"A" * 512 in contents and b"A" * 512 + b"B" * 512 in contents
    assert b"A" * 1024 in contents and b"B" * 1024 in contents
