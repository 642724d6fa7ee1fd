"""Progress on standard error (impl/cli/_progress.py): drawn on a terminal, quiet when standard error is
not a terminal and under ``--json``.

Each case runs ``capture-ledger check`` on the reference ledger's kit layer (a few seconds) in a child
process whose standard error is a pseudo-terminal with a width (or a pipe), and reads what it drew.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHECK = ["check", "capture_ledger.reference.mutants:open_reference", "--layers", "kit", "--profile", "ci"]


def _on_a_terminal(*argv: str) -> tuple[int, str, str]:
    """Run the command with standard error on a 120-column pseudo-terminal: (exit, stdout, stderr)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "capture_ledger.impl.cli.main", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    drawn = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the child closed its side
                break
            if not chunk:
                break
            drawn += chunk
        elif process.poll() is not None:
            break
    os.close(master)
    assert process.stdout is not None
    out = process.stdout.read().decode()
    return process.wait(timeout=60), out, drawn.decode(errors="replace")


def test_a_terminal_sees_the_layers_counted_and_each_result() -> None:
    code, out, err = _on_a_terminal(*CHECK)
    assert code == 0, out
    assert "check: layers: 0/1" in err  # the bar, before the layer ends
    assert "kit running" in err
    assert "check: kit: ok in " in err  # the layer's result, printed above the bar
    assert "CONFORMS" in out and "check: layers" not in out  # standard output is left alone


def test_json_output_draws_nothing_even_on_a_terminal() -> None:
    code, out, err = _on_a_terminal(*CHECK, "--json")
    assert code == 0
    assert err == ""
    assert out.lstrip().startswith("{")


def test_a_standard_error_that_is_not_a_terminal_gets_no_progress() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "capture_ledger.impl.cli.main", *CHECK],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0
    assert done.stderr == ""
