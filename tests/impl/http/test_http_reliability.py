"""What outside faults, load and bad input did to ``serve``, against a real uvicorn on loopback (SPEC.md
R-HTTP-2, R-HTTP-3, R-HTTP-5, R-HTTP-7).

Each test is one finding of an outside campaign, checked by counts and answers (never by times):

- a lone surrogate in a removal body is a 400, a body that is not UTF-8 a 422, never a 500;
- every error, 4xx and 5xx, is the one JSON shape; an ``OSError`` of the store is a 500 that keeps the
  connection sound (the next request on it is answered), an unexpected exception a 500 with
  ``Connection: close``; a corrupt ledger is a 500, not the caller's 400;
- repeated JSON keys, a charset other than UTF-8, a byte-order mark, UTF-16 and deep nesting are refused
  and change nothing; ``Bearer`` with two spaces is 401;
- a connection beyond the cap gets a 503 in the error shape at once; a head or a body that does not arrive
  in time gets a 408 and the connection is closed; an idle kept-alive connection is closed;
- the client resends a manifest read whose connection was dropped before any answer.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.impl.http import PREFIX, GuardedHttpToolsProtocol, ServerLimits
from capture_ledger.impl.http.client import RolloutControlClient, ServerError
from capture_ledger.impl.http.server import create_app
from capture_ledger.impl.simulate import ServerProcess, ServerThread
from capture_ledger.impl.store import ledger_name
from capture_ledger.impl.store.file_store import FileLineageStore

TOKEN = "reliability-token"
AUTH = f"Bearer {TOKEN}"
RETIRE = f"{PREFIX}/rollouts/retire"
LIMITS = ServerLimits(header_timeout=1.0, body_timeout=1.0, keep_alive_timeout=1, max_connections=12)


@pytest.fixture(scope="module")
def lineage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("lineage")
    with FileLineageStore(directory) as store:
        for rollout_id in ("live-a", "live-b"):
            store.record(rollout_id, {"model_call_id": "m0", "staging_key": None})
    (directory / ledger_name("corrupt")).write_bytes(b'{"record":{"model_call_id":"m0"}}\nnot json\n')
    (directory / ledger_name("broken")).mkdir()  # reading it fails with an OSError (EISDIR)
    return directory


@pytest.fixture(scope="module", params=["h11", "httptools"])
def server(lineage: Path, request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """``serve`` with each HTTP parser uvicorn offers (httptools only where it is installed)."""
    if request.param == "httptools" and GuardedHttpToolsProtocol is None:
        pytest.skip("httptools is not installed")
    with ServerProcess(lineage, token=TOKEN, limits=replace(LIMITS, http=request.param)) as running:
        yield running


def _connection(server: ServerProcess) -> http.client.HTTPConnection:
    host, port = server.url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=30)


def _post(
    server: ServerProcess, body: bytes, *, content_type: str = "application/json", auth: str = AUTH
) -> tuple[int, dict[str, str], Any]:
    connection = _connection(server)
    try:
        connection.request(
            "POST", RETIRE, body=body, headers={"Authorization": auth, "Content-Type": content_type}
        )
        response = connection.getresponse()
        headers = {k.lower(): v for k, v in response.getheaders()}
        return response.status, headers, json.loads(response.read())
    finally:
        connection.close()


def _listing(directory: Path) -> list[tuple[str, int]]:
    return sorted((p.name, p.stat().st_size) for p in directory.iterdir() if p.is_file())


def _is_error_shape(body: Any) -> bool:
    return isinstance(body, dict) and set(body) == {"detail", "error", "rollout_id"}


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        pytest.param(b'{"rollout_ids": ["\\ud800"]}', 400, "InvalidRolloutIdError", id="surrogate-escape"),
        pytest.param(b'{"rollout_ids": ["a\\udfffb", "live-a"]}', 400, "InvalidRolloutIdError", id="low"),
        pytest.param(b'{"rollout_ids": ["\xed\xa0\x80"]}', 422, "RequestValidationError", id="raw-ED-A0-80"),
        pytest.param(b'{"rollout_ids": ["\xff"]}', 422, "RequestValidationError", id="raw-FF"),
        pytest.param(b'{"rollout_ids": ["a\\u0000"]}', 400, "InvalidRolloutIdError", id="nul-escape"),
        pytest.param(
            b'{"rollout_ids": [".."], "rollout_ids": ["live-a"]}', 422, "RequestValidationError", id="dup"
        ),
        pytest.param(
            b'{"rollout_ids": ["live-a"], "x": {"a": 1, "a": 2}}', 422, "RequestValidationError", id="dup2"
        ),
        pytest.param(b'\xef\xbb\xbf{"rollout_ids": ["live-a"]}', 422, "RequestValidationError", id="bom"),
        pytest.param(
            '{"rollout_ids": ["live-a"]}'.encode("utf-16"), 422, "RequestValidationError", id="utf-16"
        ),
        pytest.param(
            '{"rollout_ids": ["live-a"]}'.encode("utf-16-le"), 422, "RequestValidationError", id="utf-16le"
        ),
        pytest.param(b"[" * 10_000 + b"]" * 10_000, 422, "RequestValidationError", id="deep-10k"),
        pytest.param(b'{"rollout_ids": ' + b"[" * 300 + b"]" * 300 + b"}", 422, "RequestValidationError"),
    ],
)
def test_bad_bodies_are_refused_in_the_error_shape_and_change_nothing(
    server: ServerProcess, lineage: Path, body: bytes, status: int, error: str
) -> None:
    before = _listing(lineage)
    got, _, answer = _post(server, body)
    assert (got, answer["error"]) == (status, error), answer
    assert _is_error_shape(answer)
    assert _listing(lineage) == before


@pytest.mark.parametrize(
    ("content_type", "status"),
    [("application/json; charset=latin-1", 415), ("application/json; charset=utf-16", 415)],
)
def test_a_charset_other_than_utf8_is_refused(
    server: ServerProcess, lineage: Path, content_type: str, status: int
) -> None:
    before = _listing(lineage)
    got, headers, answer = _post(server, b'{"rollout_ids": ["live-a"]}', content_type=content_type)
    assert (got, answer["error"]) == (status, "UnsupportedMediaType") and _is_error_shape(answer)
    assert headers["connection"] == "close"
    assert _listing(lineage) == before
    assert (
        _post(server, b'{"rollout_ids": ["absent-z"]}', content_type="application/json; charset=UTF-8")[0]
        == 200
    )


@pytest.mark.parametrize("auth", [f"Bearer  {TOKEN}", f"Bearer\t{TOKEN}", f"Bearer {TOKEN} x", f"{TOKEN}"])
def test_a_bearer_header_not_exactly_scheme_space_token_is_401(server: ServerProcess, auth: str) -> None:
    got, headers, answer = _post(server, b'{"rollout_ids": ["live-a"]}', auth=auth)
    assert (got, answer["error"]) == (401, "Unauthorized") and headers["connection"] == "close"


# ---------------------------------------------------------------------------------------- server faults
def test_an_os_error_is_a_500_in_the_shape_and_the_connection_stays_sound(server: ServerProcess) -> None:
    connection = _connection(server)
    try:
        statuses = []
        for path in ("broken", "live-b", "broken", "live-b"):  # one connection, kept alive throughout
            connection.request("GET", f"{PREFIX}/rollouts/{path}/manifest", headers={"Authorization": AUTH})
            response = connection.getresponse()
            answer = json.loads(response.read())
            statuses.append((response.status, answer.get("error")))
            assert response.getheader("connection") != "close"
    finally:
        connection.close()
    assert statuses == [(500, "IsADirectoryError"), (200, None), (500, "IsADirectoryError"), (200, None)]
    got, _, answer = _post(server, b'{"rollout_ids": ["broken"]}')
    assert got == 500 and _is_error_shape(answer) and "EISDIR" in answer["detail"]


def test_a_corrupt_ledger_is_a_server_fault(server: ServerProcess) -> None:
    connection = _connection(server)
    try:
        connection.request("GET", f"{PREFIX}/rollouts/corrupt/manifest", headers={"Authorization": AUTH})
        response = connection.getresponse()
        answer = json.loads(response.read())
    finally:
        connection.close()
    assert (response.status, answer["error"], answer["rollout_id"]) == (500, "CorruptLedgerError", None)
    with RolloutControlClient(server.url, auth_token=TOKEN) as client, pytest.raises(ServerError) as raised:
        client.manifest("corrupt")
    assert raised.value.status == 500 and raised.value.error == "CorruptLedgerError"


class _Exploding:
    """A third-party ledger whose manifest raises something no handler knows."""

    def manifest(self, rollout_id: str) -> dict[str, Any]:
        raise RuntimeError("unexpected")

    def retire(self, rollout_ids: list[str]) -> dict[str, list[str]]:
        return {"removed": [], "absent": list(rollout_ids)}


def test_an_unexpected_exception_is_a_500_in_the_shape_with_connection_close() -> None:
    with ServerThread(create_app(_Exploding(), auth_token=TOKEN), limits=LIMITS) as running:
        host, port = running.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            connection.request("GET", f"{PREFIX}/rollouts/x/manifest", headers={"Authorization": AUTH})
            response = connection.getresponse()
            answer = json.loads(response.read())
        finally:
            connection.close()
    assert (response.status, answer["error"]) == (500, "RuntimeError") and _is_error_shape(answer)
    assert response.getheader("connection") == "close"
    assert response.getheader("content-type") == "application/json"


# ------------------------------------------------------------------------------------- server limits
def _raw(server: ServerProcess) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _answer(raw: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, json.loads(body)


def test_a_connection_beyond_the_cap_gets_a_503_in_the_shape(server: ServerProcess) -> None:
    idle = [_raw(server) for _ in range(LIMITS.connections())]
    try:
        extra = _raw(server)
        status, headers, answer = _answer(_read_all(extra))  # answered and closed before it sent anything
        extra.close()
        assert (status, answer["error"], headers["connection"]) == (503, "ServerBusy", "close")
        assert headers["retry-after"] == "1"
    finally:
        for sock in idle:
            sock.close()
    with RolloutControlClient(server.url, auth_token=TOKEN, retries=3, backoff=0.2) as client:
        assert client.manifest("live-b")["rollout_id"] == "live-b"


@pytest.mark.parametrize(
    "sent",
    [b"", b"GET /training-token-capture/control/metrics HTTP/1.1\r\nHost: x\r\n"],
    ids=["none", "half"],
)
def test_a_head_that_does_not_arrive_in_time_is_a_408_and_closed(server: ServerProcess, sent: bytes) -> None:
    sock = _raw(server)
    try:
        sock.sendall(sent)
        status, headers, answer = _answer(_read_all(sock))
    finally:
        sock.close()
    assert (status, answer["error"], headers["connection"]) == (408, "RequestTimeout", "close")


def test_a_body_that_does_not_arrive_in_time_is_a_408_and_closed(
    server: ServerProcess, lineage: Path
) -> None:
    before = _listing(lineage)
    sock = _raw(server)
    try:
        sock.sendall(
            f"POST {RETIRE} HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n".encode()
            + b'{"rollout_ids": ["live-a"'
        )
        status, headers, answer = _answer(_read_all(sock))
    finally:
        sock.close()
    assert (status, answer["error"], headers["connection"]) == (408, "RequestTimeout", "close")
    assert _listing(lineage) == before


def test_an_idle_kept_alive_connection_is_closed(server: ServerProcess) -> None:
    sock = _raw(server)
    try:
        sock.sendall(f"GET {PREFIX}/metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {AUTH}\r\n\r\n".encode())
        first = sock.recv(1 << 20)
        assert first.startswith(b"HTTP/1.1 200")
        rest = _read_all(sock)  # returns once the server closes its end (keep-alive timeout)
    finally:
        sock.close()
    assert b"HTTP/1.1" not in rest  # closed silently: no answer on an idle connection


# ------------------------------------------------------------------------------------------ the client
def test_the_client_resends_a_manifest_read_whose_connection_was_dropped() -> None:
    """A peer that closes the first connection without an answer (as a server does when it drops a
    kept-alive one) and answers the second: ``manifest`` returns, after exactly two requests."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: list[bytes] = []
    body = json.dumps({"rollout_id": "r", "records": [], "failures": []}).encode()

    def serve() -> None:
        for attempt in range(2):
            conn, _ = listener.accept()
            with conn:
                seen.append(conn.recv(65536))
                if attempt == 1:
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                        + str(len(body)).encode()
                        + b"\r\nconnection: close\r\n\r\n"
                        + body
                    )

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with RolloutControlClient(f"http://127.0.0.1:{port}", auth_token=TOKEN) as client:
            manifest = client.manifest("r")
            assert (manifest["rollout_id"], manifest["records"], manifest["failures"]) == ("r", [], [])
    finally:
        thread.join(30)
        listener.close()
    assert len(seen) == 2 and all(request.startswith(b"GET ") for request in seen)


def test_limits_come_from_json_and_refuse_nonsense() -> None:
    assert ServerLimits.from_json('{"max_connections": 3}').connections() == 3
    assert ServerLimits.from_json(None) == ServerLimits()
    assert ServerLimits().connections() <= os.sysconf("SC_OPEN_MAX") - ServerLimits().reserve_fds or (
        ServerLimits().connections() == 16
    )
    for bad in ('{"header_timeout": 0}', '{"max_connections": 0}', '{"nope": 1}', '{"http": "x"}', "[]"):
        with pytest.raises((ValueError, TypeError)):
            ServerLimits.from_json(bad)


@pytest.mark.parametrize(
    "raw",
    [b"NOT A REQUEST\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \x01\r\n\r\n"],
    ids=["request-line", "control-character"],
)
def test_what_the_parser_refuses_is_in_the_error_shape(server: ServerProcess, raw: bytes) -> None:
    """A head the HTTP parser refuses is a 400 in the error shape (uvicorn's was ``text/plain``); h11 may
    pass a control character on to the app, which answers 401: either way the one shape."""
    sock = _raw(server)
    try:
        sock.sendall(raw)
        status, headers, answer = _answer(_read_all(sock))
    finally:
        sock.close()
    assert (status, answer["error"]) in {(400, "InvalidHTTPRequest"), (401, "Unauthorized")}
    assert _is_error_shape(answer) and headers["connection"] == "close"
