"""Running a program under strace, the way the parser needs its output (SPEC.md §Crash; docs/crash-target.md
§The trace).

``STRACE_FLAGS`` are the tested flags: follow every thread and child (``-f``), name the file behind every
descriptor (``-y``, never ``-yy``), hex any string with a non-printable byte (``-x``), never cut a string
short (``-s 268435456``, a maximum, not a buffer), print each call whole when it completes (a status filter,
with ``-qq`` and no signal lines, so the file order is the completion order), skip the data of reads, and
trace only ``TRACE_SET`` (the calls that change files, descriptors, positions or processes; ``%file`` and
``%desc`` would add every stat and poll). ``Injection`` adds strace's own fault and delay injection
(``-e inject=SYSCALL:error=EIO:when=N``, ``delay_enter``, ``delay_exit``), counted per thread, which is how
a crash workload's failed call or parked operation is made from outside (``recorder``).

``tracing_problem()`` says why this machine cannot trace (strace missing, ptrace not permitted), or
``None``. ``run_traced`` runs a command and returns its exit status and standard error.

Not guaranteed: other strace versions than 6.1 print the same (the parser is tested against 6.1); a traced
program runs several times slower per system call (40–110 µs each, docs/crash-target.md §Speed).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["STRACE_FLAGS", "TRACE_SET", "Injection", "TraceRun", "run_traced", "tracing_problem"]

#: The calls traced (``?``: ignored where the architecture has no such call).
TRACE_SET = (
    "open,openat,openat2,creat,close,close_range,dup,dup2,dup3,fcntl,read,readv,write,writev,pwrite64,"
    "pwritev,pwritev2,lseek,ftruncate,truncate,fallocate,fsync,fdatasync,sync_file_range,syncfs,sync,msync,"
    "mmap,mremap,munmap,rename,renameat,renameat2,link,linkat,symlink,symlinkat,unlink,unlinkat,mkdir,"
    "mkdirat,rmdir,mknod,mknodat,chdir,fchdir,clone,clone3,fork,vfork,execve,execveat,sendfile,"
    "copy_file_range,splice,io_uring_setup,io_submit,flock,"
    "?_llseek,?fcntl64,?ftruncate64,?truncate64,?sync_file_range2,?mmap2,?pwrite,?sendfile64"
)
STRACE_FLAGS = (
    "-f",
    "-y",
    "-x",
    "-s",
    "268435456",
    "-qq",
    "-e",
    "signal=none",
    "-e",
    "status=successful,failed,unfinished",
    "-e",
    "raw=read,readv",
    "-e",
    f"trace={TRACE_SET}",
)


@dataclass(kw_only=True, frozen=True, slots=True)
class Injection:
    """strace's tampering with the ``when``-th call of ``syscall`` in each thread: fail it with ``error``
    (``EIO``), or hold it ``delay_enter`` seconds before it runs, or ``delay_exit`` seconds after. ``when``
    ``0`` means every call."""

    syscall: str
    when: int = 0
    error: str | None = None
    delay_enter: float = 0.0
    delay_exit: float = 0.0

    def flag(self) -> str:
        """The ``-e inject=...`` expression."""
        parts = [self.syscall]
        if self.error:
            parts.append(f"error={self.error}")
        if self.delay_enter:
            parts.append(f"delay_enter={int(self.delay_enter * 1_000_000)}")
        if self.delay_exit:
            parts.append(f"delay_exit={int(self.delay_exit * 1_000_000)}")
        parts.append(f"when={self.when}" if self.when else "when=1+")
        return "inject=" + ":".join(parts)


@dataclass(frozen=True, slots=True)
class TraceRun:
    """A traced run: the program's exit status and its standard error (and strace's)."""

    returncode: int
    stderr: str


@functools.cache
def tracing_problem() -> str | None:
    """Why this machine cannot trace a program, or ``None`` when it can (checked once per process)."""
    if shutil.which("strace") is None:
        return "strace is not installed (Debian and Ubuntu: apt-get install strace)"
    try:
        probe = subprocess.run(
            ["strace", "-f", "-qq", "-e", "trace=write", "-o", "/dev/null", sys.executable, "-c", "pass"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"strace could not be run: {error}"
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
        return f"strace cannot trace here (is ptrace permitted? kernel.yama.ptrace_scope, seccomp): {why}"
    return None


def run_traced(
    command: Sequence[str],
    trace: Path,
    *,
    injections: Sequence[Injection] = (),
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 300.0,
) -> TraceRun:
    """Run ``command`` under strace with ``STRACE_FLAGS``, writing the trace to ``trace``.

    Args:
        command: the program and its arguments (trace the real interpreter, not a shell shim).
        trace: where strace writes its output.
        injections: faults and delays to inject.
        cwd: the program's working directory.
        env: its environment (default: this process's).
        timeout: seconds before the run is killed.

    Returns:
        The exit status (``-9`` after a timeout) and standard error.
    """
    argv = ["strace", *STRACE_FLAGS]
    for injection in injections:
        argv += ["-e", injection.flag()]
    argv += ["-o", str(trace), *command]
    # Its own process group, so that a timeout kills the traced program and its children with strace:
    # killing strace alone leaves a hung tracee running (holding its workspace, a mount in the kernel study).
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=None if env is None else dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as running:
        try:
            _, stderr = running.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(running.pid, signal.SIGKILL)
            _, stderr = running.communicate()
            return TraceRun(-9, (stderr or "") + f"\n(killed after {timeout:g} s)")
    return TraceRun(running.returncode, stderr)
