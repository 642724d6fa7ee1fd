"""End to end against a real server: ``capture-ledger serve`` in its own process on a loopback port
(R-HTTP-1..5).

What it proves: the served file store answers every route with the specified status over a real socket;
the blocking and async clients pass against it, splitting long lists into several requests (counted on
the server's own metrics) including a list of more than ``MAX_LEDGER_BATCH`` IDs; timeouts and refused
connections become typed errors; the client sub-commands print JSON; ``serve`` refuses to start without
a token and serves another ledger factory given with ``--ledger``; and with two workers, each with its own
store handle, a write made outside the server and a retire made through one worker are seen by both
workers.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from capture_ledger.impl.cli import main as cli
from capture_ledger.impl.http import PREFIX, TOKEN_ENV
from capture_ledger.impl.http.client import (
    AsyncRolloutControlClient,
    ControlPlaneTimeoutError,
    ControlPlaneUnavailableError,
    RolloutControlClient,
)
from capture_ledger.impl.simulate import ServerProcess
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.spec import InvalidRolloutIdError, RolloutRetiredError

TOKEN = "end-to-end-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def lineage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lineage")


@pytest.fixture(scope="module")
def server(lineage: Path) -> Iterator[ServerProcess]:
    with ServerProcess(lineage, token=TOKEN) as running:
        yield running


@pytest.fixture
def store(lineage: Path) -> Iterator[FileLineageStore]:
    """A handle of this test process on the server's directory: the model server's capture path."""
    handle = FileLineageStore(lineage)
    yield handle
    handle.close()


def requests_served(url: str, operation: str) -> int:
    """How many ``operation`` calls the (single) worker has served, from its Prometheus metrics."""
    text = httpx.get(f"{url}{PREFIX}/metrics", headers=AUTH).text
    found = re.search(rf'capture_ledger_operation_seconds_count{{operation="{operation}"}} (\S+)', text)
    assert found is not None, text
    return int(float(found.group(1)))


def test_status_codes_over_the_network(server: ServerProcess, store: FileLineageStore) -> None:
    store.record("net-live", {"model_call_id": "m0"})
    store.record("net-gone", {"model_call_id": "m0"})
    with httpx.Client(base_url=server.url + PREFIX, headers=AUTH) as http:
        assert http.get("/rollouts/net-live/manifest").json()["records"] == [{"model_call_id": "m0"}]
        assert http.get("/rollouts/.net/manifest").status_code == 400
        assert http.post("/rollouts/retire", json={"rollout_ids": ["net-gone"]}).json() == {
            "removed": ["net-gone"],
            "absent": [],
        }
        assert http.get("/rollouts/net-gone/manifest").status_code == 410
        assert http.post("/rollouts/retire", json={"rollout_ids": []}).status_code == 422
        assert http.post("/rollouts/delete", json={"rollout_ids": ["net-live", "bad/id"]}).status_code == 400
        assert http.get("/rollouts/net-live/manifest").status_code == 200  # nothing changed
        assert http.post("/rollouts/delete", json={"rollout_ids": ["net-gone"]}).status_code == 200
        assert http.get("/rollouts/net-gone/manifest").json()["records"] == []
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        answer = httpx.post(
            f"{server.url}{PREFIX}/rollouts/retire", json={"rollout_ids": ["net-live"]}, headers=headers
        )
        assert answer.status_code == 401
    assert store.has_rows("net-live")


def test_blocking_client_splits_lists_into_requests(server: ServerProcess, store: FileLineageStore) -> None:
    live = ["split-1", "split-5", "split-9"]
    for rollout_id in live:
        store.record(rollout_id, {"model_call_id": "m0"})
    ids = [f"split-{i}" for i in range(10)] + ["split-1", "split-0"]  # duplicates, reported once
    before = requests_served(server.url, "retire")
    with RolloutControlClient(server.url, auth_token=TOKEN, timeout=30, batch_size=3) as client:
        result = client.retire(ids)
        assert result == {"removed": live, "absent": [i for i in dict.fromkeys(ids) if i not in live]}
        assert requests_served(server.url, "retire") - before == 4  # 10 distinct IDs in threes
        with pytest.raises(RolloutRetiredError):
            client.manifest("split-5")
        sent = requests_served(server.url, "delete")
        with pytest.raises(InvalidRolloutIdError):
            client.delete([f"split-{i}" for i in range(10)] + ["-bad"])  # invalid in the last batch
        assert requests_served(server.url, "delete") == sent  # nothing was sent
        assert client.delete(ids)["absent"] == list(dict.fromkeys(ids))


def test_more_than_max_ledger_batch_ids_take_two_requests(
    server: ServerProcess, store: FileLineageStore
) -> None:
    store.record("many-4500", {"model_call_id": "m0"})
    ids = [f"many-{i}" for i in range(5000)]
    before = requests_served(server.url, "delete")
    with RolloutControlClient(server.url, auth_token=TOKEN, timeout=60) as client:
        result = client.delete(ids)
    assert requests_served(server.url, "delete") - before == 2  # 4096 + 904
    assert result["removed"] == ["many-4500"]
    assert result["absent"] == [i for i in ids if i != "many-4500"]


def test_async_client_against_the_server(server: ServerProcess, store: FileLineageStore) -> None:
    store.record_failure("async-a", "m0", "timeout")

    async def go() -> None:
        async with AsyncRolloutControlClient(
            server.url, auth_token=TOKEN, timeout=30, batch_size=2
        ) as client:
            manifest = await client.manifest("async-a")
            assert manifest["failures"] == [{"model_call_id": "m0", "reason": "timeout"}]
            assert await client.retire(["async-a", "async-b", "async-c"]) == {
                "removed": ["async-a"],
                "absent": ["async-b", "async-c"],
            }
            with pytest.raises(RolloutRetiredError):
                await client.manifest("async-a")
            assert await client.delete(("async-a",)) == {"removed": [], "absent": ["async-a"]}

    asyncio.run(go())


def test_timeouts_and_refused_connections_are_typed_errors() -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts into its backlog, never answers
    # Bound but never listening, and held for the whole test: connecting is refused, and no other process
    # can take the port in between (a closed port could be reused).
    closed = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    closed.bind(("127.0.0.1", 0))
    closed_url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    silent_url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    try:
        with RolloutControlClient(
            silent_url, auth_token=TOKEN, timeout=0.2, retries=1, backoff=0.01
        ) as client:
            with pytest.raises(ControlPlaneTimeoutError) as waited:
                client.retire(["a"])
            assert waited.value.status is None and isinstance(waited.value, TimeoutError)
        refused = RolloutControlClient(closed_url, auth_token=TOKEN, timeout=2)
        with refused, pytest.raises(ControlPlaneUnavailableError):
            refused.manifest("a")

        async def go() -> None:
            async with AsyncRolloutControlClient(silent_url, auth_token=TOKEN, timeout=0.2) as client:
                with pytest.raises(ControlPlaneTimeoutError):
                    await client.manifest("a")

        asyncio.run(go())
    finally:
        silent.close()
        closed.close()


def run_cli(args: list[str], *, stdin: str = "") -> tuple[int, str, str]:
    """``capture-ledger ARGS`` in this process (the same entry point the console script runs)."""
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin), out, err
    try:
        code = cli.main(args)
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
    return code, out.getvalue(), err.getvalue()


def test_client_sub_commands_print_json(
    server: ServerProcess, store: FileLineageStore, tmp_path: Path
) -> None:
    store.record("cli-a", {"model_call_id": "m0"})
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    common = ["--url", server.url, "--token-file", str(token_file)]
    code, out, _ = run_cli(["manifest", "cli-a", *common])
    assert code == 0 and json.loads(out)["records"] == [{"model_call_id": "m0"}]
    code, out, _ = run_cli(["retire", "cli-a", "cli-b", *common])
    assert (code, json.loads(out)) == (0, {"removed": ["cli-a"], "absent": ["cli-b"]})
    code, _, err = run_cli(["manifest", "cli-a", *common])
    assert code == 1 and json.loads(err)["error"] == "RolloutRetiredError"
    code, out, _ = run_cli(["delete", *common], stdin="cli-a\n\ncli-b\n")  # one ID per line on stdin
    assert (code, json.loads(out)) == (0, {"removed": [], "absent": ["cli-a", "cli-b"]})
    code, _, err = run_cli(["retire", "x", "--url", server.url, "--token-file", str(tmp_path / "none")])
    assert code == 2 and "token" in err
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token")
    code, _, err = run_cli(["retire", "x", "--url", server.url, "--token-file", str(wrong)])
    assert code == 1 and json.loads(err)["status"] == 401


def test_serve_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "capture_ledger.impl.cli.main",
            "serve",
            "--dir",
            str(tmp_path),
            "--port",
            "0",
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "no bearer token" in done.stderr and done.stdout == ""


def test_serve_serves_another_ledger_factory(tmp_path: Path) -> None:
    """``--ledger module:callable``: each worker opens that ledger (here the in-memory reference)."""
    target = "capture_ledger.reference.mutants:open_reference"
    server = ServerProcess(tmp_path, token=TOKEN, ledger=target)
    with server, RolloutControlClient(server.url, auth_token=TOKEN) as client:  # entered in order
        assert client.retire(["ref-a"]) == {"removed": [], "absent": ["ref-a"]}
        with pytest.raises(RolloutRetiredError):
            client.manifest("ref-a")
    assert list(tmp_path.iterdir()) == []  # no ledger, fence or lock file: the file store never opened
    assert "Traceback" not in server.log()  # the log outlives the process, and the worker shut down cleanly


def _scrape(url: str) -> tuple[str, dict[str, int]]:
    """One fresh connection: the answering worker's pid and its per-operation call counts."""
    with httpx.Client(headers=AUTH, timeout=30) as http:
        text = http.get(f"{url}{PREFIX}/metrics").text
    pid = re.search(r'capture_ledger_server_worker_info{pid="(\d+)"}', text)
    assert pid is not None
    counts = {
        m.group(1): int(float(m.group(2)))
        for m in re.finditer(r'capture_ledger_operation_seconds_count{operation="(\w+)"} (\S+)', text)
    }
    return pid.group(1), counts


def test_two_workers_each_open_the_store_and_see_each_others_changes(tmp_path: Path) -> None:
    writer = FileLineageStore(tmp_path)
    writer.record("shared", {"model_call_id": "m0"})
    with ServerProcess(tmp_path, token=TOKEN, workers=2) as server:

        def every_worker_reads(expect_status: int, baseline: dict[str, int]) -> dict[str, int]:
            """Read 'shared' on fresh connections until both workers have served a read."""
            latest: dict[str, int] = {}
            for _ in range(400):
                with httpx.Client(headers=AUTH, timeout=30) as http:
                    answer = http.get(f"{server.url}{PREFIX}/rollouts/shared/manifest")
                assert answer.status_code == expect_status
                if expect_status == 200:
                    assert answer.json()["records"] == [{"model_call_id": "m0"}]
                pid, counts = _scrape(server.url)
                latest[pid] = counts["manifest"]
                if len(latest) == 2 and all(latest[p] > baseline.get(p, 0) for p in latest):
                    return latest
            pytest.fail(f"both workers did not serve reads: {latest}")

        served = every_worker_reads(200, {})  # a write made outside the server, seen by both workers
        with httpx.Client(headers=AUTH, timeout=30) as http:
            retired = http.post(f"{server.url}{PREFIX}/rollouts/retire", json={"rollout_ids": ["shared"]})
        assert retired.json() == {"removed": ["shared"], "absent": []}
        writer.record("shared", {"model_call_id": "m1"})  # a late write: discarded by the fence
        every_worker_reads(410, served)  # the retire made through one worker, seen by both
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "shared.lineage.retired"
    ]
    writer.close()


def test_the_token_comes_from_the_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from capture_ledger.impl.cli import read_token

    token_file = tmp_path / "token"
    token_file.write_text("  from-file\n")
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    assert read_token(None) == "from-env"
    assert read_token(str(token_file)) == "from-file"  # the file wins
    monkeypatch.delenv(TOKEN_ENV)
    for bad in (None, str(tmp_path / "missing")):
        with pytest.raises(Exception, match="token"):
            read_token(bad)
    # One rule for the CLI, the server and the clients (impl/http/auth.py): what the server would refuse at
    # start-up is refused here first.
    for bad_token in ("two words", "caf\u00e9", "a:b"):
        token_file.write_text(bad_token)
        with pytest.raises(Exception, match="not usable"):
            read_token(str(token_file))
