"""The request-body cap, against a real ``capture-ledger serve`` over raw sockets (R-HTTP-6, R-HTTP-2).

What it proves, by counts (never by times):

- a body whose ``Content-Length`` passes ``MAX_BODY_BYTES`` is answered 413 in the ``ErrorBody`` shape with
  ``Connection: close`` while the client has sent only its first 64 KiB, and the server then closes: the
  client cannot push more than the two kernel socket buffers can hold, far less than the body (a server
  that drained the body, as uvicorn does after an answer without ``Connection: close``, would take it all);
- a chunked body is answered 413 once it passes the cap, with the same bound on what it could send;
- a wrong token with a large body is a 401 that closes the connection the same way (auth comes first);
- a body of exactly ``MAX_BODY_BYTES`` is read and answered (here 200), one byte more is 413;
- the largest valid batch (4096 IDs of 200 characters, indented by 4) is accepted;
- an answer sent before a body was read to its end (a GET with a chunked body) says ``Connection: close``.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from capture_ledger.impl.http import MAX_BODY_BYTES, PREFIX
from capture_ledger.impl.simulate import ServerProcess
from capture_ledger.spec.core.ids import MAX_LEDGER_BATCH, MAX_ROLLOUT_ID_LENGTH

TOKEN = "body-limit-token"
PIECE = b"a" * 65536
RETIRE = f"{PREFIX}/rollouts/retire"


def _proc_max(path: str) -> int:
    return int(Path(path).read_text().split()[-1])


#: The most a client can push into a connection whose server reads nothing: the server's receive buffer
#: and the client's send buffer at their largest, plus what the server may read before it refuses.
BUFFERED = _proc_max("/proc/sys/net/ipv4/tcp_rmem") + _proc_max("/proc/sys/net/ipv4/tcp_wmem")
BOUND = BUFFERED + MAX_BODY_BYTES + len(PIECE)
#: The body offered: twice the bound, so that a server that drains it lets the client send all of it.
OFFERED = 2 * BOUND


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("lineage"), token=TOKEN) as served:
        yield served


class RawRequest:
    """One HTTP/1.1 request over a raw socket: a writer thread sends the body, the caller reads."""

    def __init__(self, url: str, path: str, *, token: str, chunked: bool, size: int = OFFERED) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}"
        self.head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\n{framing}\r\n\r\n"
        ).encode()
        self.chunked = chunked
        self.size = size
        self.sent = 0  # body bytes the kernel accepted
        self.go_on = threading.Event()  # set: keep sending after the first piece
        self.done = threading.Event()
        self.error: str | None = None

    def _frame(self, data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data) if self.chunked else data

    def write(self) -> None:
        try:
            self.sock.sendall(self.head + self._frame(PIECE))
            self.sent = len(PIECE)
            self.go_on.wait(60)
            while self.sent < self.size:
                self.sock.sendall(self._frame(PIECE))
                self.sent += len(PIECE)
        except OSError as error:  # the server closed: EPIPE or ECONNRESET
            self.error = type(error).__name__
        finally:
            self.done.set()

    def read_answer(self) -> tuple[int, dict[str, str], dict[str, object]]:
        data = b""
        while b"\r\n\r\n" not in data:
            got = self.sock.recv(65536)
            assert got, f"the server closed without answering: {data!r}"
            data += got
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        while len(body) < int(headers["content-length"]):
            got = self.sock.recv(65536)
            assert got, "the server closed in the middle of its answer"
            body += got
        return int(lines[0].split()[1]), headers, json.loads(body)

    def closed_by_server(self) -> bool:
        try:
            return self.sock.recv(65536) == b""
        except ConnectionResetError:
            return True


def _refused(
    url: str, *, token: str, chunked: bool, start_at_once: bool
) -> tuple[RawRequest, int, dict[str, str], dict[str, object]]:
    request = RawRequest(url, RETIRE, token=token, chunked=chunked)
    writer = threading.Thread(target=request.write, daemon=True)
    if start_at_once:  # chunked: the server must see more than the cap before it can refuse
        request.go_on.set()
    writer.start()
    status, headers, body = request.read_answer()
    request.go_on.set()  # now try to push the rest of the body
    assert request.done.wait(120), "the client could still send after the answer"
    writer.join()
    return request, status, headers, body


def test_a_declared_length_over_the_cap_is_413_before_the_body_is_read(server: ServerProcess) -> None:
    request, status, headers, body = _refused(server.url, token=TOKEN, chunked=False, start_at_once=False)
    assert status == 413
    assert body["error"] == "RequestTooLarge" and body["rollout_id"] is None
    # Answered after only the first piece; afterwards the client could fill the buffers, never the body.
    assert request.sent < BOUND < OFFERED, (request.sent, request.error)
    assert request.error is not None
    assert headers["connection"] == "close"
    assert request.closed_by_server()


def test_a_chunked_body_over_the_cap_is_413(server: ServerProcess) -> None:
    request, status, headers, body = _refused(server.url, token=TOKEN, chunked=True, start_at_once=True)
    assert (status, body["error"]) == (413, "RequestTooLarge")
    assert request.sent < BOUND < OFFERED, (request.sent, request.error)
    assert headers["connection"] == "close"
    assert request.closed_by_server()


def test_a_wrong_token_is_401_first_and_the_body_is_not_drained(server: ServerProcess) -> None:
    request, status, headers, body = _refused(server.url, token="wrong", chunked=False, start_at_once=False)
    assert (status, body["error"]) == (401, "Unauthorized")
    assert request.sent < BOUND < OFFERED, (request.sent, request.error)
    assert headers["connection"] == "close"
    assert request.closed_by_server()


def _padded(ids: list[str], size: int) -> bytes:
    compact = json.dumps({"rollout_ids": ids}, separators=(",", ":")).encode()
    assert len(compact) <= size
    return compact[:-1] + b" " * (size - len(compact)) + b"}"


def test_exactly_the_cap_is_read_and_one_byte_more_is_413(server: ServerProcess) -> None:
    ids = [f"cap-{i}" for i in range(8)]
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    with httpx.Client(base_url=server.url, timeout=60, headers=auth) as client:
        at_cap = client.post(RETIRE, content=_padded(ids, MAX_BODY_BYTES))
        assert at_cap.status_code == 200, at_cap.text
        assert at_cap.json() == {"removed": [], "absent": ids}
        over = client.post(RETIRE, content=_padded(ids, MAX_BODY_BYTES + 1))
        assert over.status_code == 413 and over.json()["error"] == "RequestTooLarge"


def test_the_largest_valid_batch_fits_under_the_cap(server: ServerProcess) -> None:
    ids = [f"{i:08d}".ljust(MAX_ROLLOUT_ID_LENGTH, "x") for i in range(MAX_LEDGER_BATCH)]
    for body in (
        json.dumps({"rollout_ids": ids}, separators=(",", ":")).encode(),
        json.dumps({"rollout_ids": ids}).encode(),
        json.dumps({"rollout_ids": ids}, indent=4).encode(),
    ):
        assert len(body) <= MAX_BODY_BYTES
        answer = httpx.post(  # delete of Absent IDs: no file to create, the body is the point
            f"{server.url}{PREFIX}/rollouts/delete",
            content=body,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text[:200]
        assert len(answer.json()["absent"]) + len(answer.json()["removed"]) == MAX_LEDGER_BATCH


def test_an_answer_before_the_body_was_read_closes_the_connection(server: ServerProcess) -> None:
    # The manifest route never reads a body: the answer must not leave uvicorn draining a chunked one.
    request = RawRequest(server.url, f"{PREFIX}/rollouts/r0/manifest", token=TOKEN, chunked=True)
    request.head = request.head.replace(b"POST ", b"GET ", 1)
    writer = threading.Thread(target=request.write, daemon=True)
    writer.start()
    status, headers, body = request.read_answer()
    request.go_on.set()
    assert request.done.wait(120)
    writer.join()
    assert (status, body["rollout_id"]) == (200, "r0")
    assert request.sent < BOUND < OFFERED, (request.sent, request.error)
    assert headers["connection"] == "close"


def test_the_documents_give_the_cap_the_code_computes() -> None:
    """docs/http.md, SPEC.md R-HTTP-6 and the module docstring state the cap as the code computes it
    (docs/http.md once said 894,976 bytes while the code computed 893,952)."""
    from capture_ledger.impl.http import MAX_BODY_BYTES

    root = Path(__file__).resolve().parents[3]
    figure = f"{MAX_BODY_BYTES:,}"
    sum_text = f"4096 × (200 + 18) + 1024 = {figure}"
    assert MAX_BODY_BYTES == 4096 * (200 + 18) + 1024
    assert sum_text in (root / "docs" / "http.md").read_text(encoding="utf-8")
    assert figure in (root / "spec" / "SPEC.md").read_text(encoding="utf-8")
    assert f"= {figure}``" in (root / "impl" / "http" / "_body_limit.py").read_text(encoding="utf-8")
    for document in ("docs/http.md", "spec/SPEC.md"):
        text = (root / document).read_text(encoding="utf-8")
        stated = {int(m.replace(",", "")) for m in re.findall(r"\b(8\d\d,\d{3}) bytes", text)}
        assert stated <= {MAX_BODY_BYTES, 831_505, 835_601, 868_381}, (document, stated)
