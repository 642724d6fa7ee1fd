"""``capture-ledger serve``'s limit flags reach every worker (SPEC.md R-HTTP-7; docs/http.md §Server limits).

A real ``serve`` process on loopback: ``--max-connections 2`` answers a third connection with a 503 at once,
and ``--header-timeout 1`` closes a connection that sends no request head with a 408; a limit out of range
is a usage error (exit 2, one line) before anything starts.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from capture_ledger.impl.http import LIMITS_ENV, TOKEN_ENV

TOKEN = "limits-token"


def _serve(directory: Path, *flags: str) -> subprocess.Popen[bytes]:
    environment = {**os.environ, TOKEN_ENV: TOKEN}
    environment.pop(LIMITS_ENV, None)
    command = [sys.executable, "-m", "capture_ledger.impl.cli.main", "serve", "--dir", str(directory)]
    return subprocess.Popen(
        [*command, "--port", "0", *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, int]]:
    process = _serve(tmp_path / "lineage", "--max-connections", "2", "--header-timeout", "1")
    try:
        assert process.stdout is not None
        url = json.loads(process.stdout.readline())["url"]
        host, port = url.removeprefix("http://").split(":")
        yield host, int(port)
    finally:
        process.terminate()
        process.wait(timeout=30)


def _answer(sock: socket.socket) -> tuple[int, str]:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"]


def test_the_flags_set_the_connection_cap_and_the_head_timeout(served: tuple[str, int]) -> None:
    idle = [socket.create_connection(served, timeout=30) for _ in range(2)]
    try:
        extra = socket.create_connection(served, timeout=30)
        with extra:
            assert _answer(extra) == (503, "ServerBusy")  # the third connection: beyond --max-connections 2
        assert _answer(idle[0]) == (408, "RequestTimeout")  # no request head within --header-timeout 1
    finally:
        for sock in idle:
            sock.close()


def test_a_limit_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    process = _serve(tmp_path / "lineage", "--header-timeout", "0")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 2 and out == b""
    message = err.decode().strip()
    assert message.startswith("capture-ledger serve: a limit is out of range") and "\n" not in message
