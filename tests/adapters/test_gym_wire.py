"""NeMo Gym 0.7.0 and our control plane on the wire, both ways, on real uvicorn on loopback (docs/gym.md
§On the wire; SPEC.md R-HTTP-1..5).

- Gym's own ``RolloutControlClient.manifest`` (``nemo_gym.token_id_capture.control_routes``, its requests
  through ``nemo_gym.server_utils``'s aiohttp client) against ``capture-ledger serve``: a Live rollout's
  manifest validates as Gym's ``RolloutManifest`` and holds exactly the rows recorded; an Absent one is
  empty; a Retired one, an invalid ID and a wrong token reach Gym's caller as the ``RuntimeError`` Gym
  raises for any status but 200, carrying our status and our error body.
- Our blocking ``RolloutControlClient`` against Gym's ``install_rollout_control_routes`` over Gym's own
  ``FileLineageStore``: manifests pass through; a wrong token is ``UnauthorizedError``; retire and delete,
  which Gym lacks, are a 404 ``RequestRejectedError`` that changes nothing; an ID our rule refuses is
  refused before anything is sent, even where Gym would serve it.
- The same raw requests to both servers, pinning what matches and what differs (the list in docs/gym.md).

Gym's import replaces ``builtins.print``, reorders ``sys.path`` and gives the root logger a handler, so
everything that imports Gym runs in a child process, which reports through a JSON file. Without Gym or
the packages its control client imports, these tests are skipped naming them and ``tools/install-gym``;
with ``CI=true`` they fail instead.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from capture_ledger.impl.http import PREFIX
from capture_ledger.impl.http.client import (
    RequestRejectedError,
    RolloutControlClient,
    UnauthorizedError,
)
from capture_ledger.impl.simulate import ServerProcess
from capture_ledger.spec import InvalidRolloutIdError

TOKEN = "gym-wire-token"
WRONG = "not-the-token"
#: What ``import nemo_gym.server_utils`` (Gym's control client) needs beyond the ledger package: the
#: modules, and ray's metadata (``nemo_gym.global_config`` reads its version at import).
CLIENT_MODULES: tuple[str, ...] = ("aiohttp", "fastapi", "uvicorn", "httptools", "itsdangerous", "requests")
CLIENT_MODULES += ("omegaconf", "hydra", "rich", "openai", "yappi", "pydot")


def _require_gym_client() -> None:
    missing = [name for name in ("nemo_gym", *CLIENT_MODULES) if importlib.util.find_spec(name) is None]
    try:
        importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        missing.append("ray (its metadata)")
    if not missing:
        return
    message = (
        f"NeMo Gym 0.7.0's control client (nemo_gym.server_utils) cannot be imported: {', '.join(missing)} "
        "not installed; run tools/install-gym (docs/gym.md)"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}; CI must install it (.ci/run)")
    pytest.skip(message)


def _child(code: str, request: dict[str, Any], cwd: Path) -> subprocess.Popen[bytes]:
    """A Python child running ``code``, ``request`` as one JSON line on its standard input."""
    log = (cwd / "child.log").open("wb")
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        stdin=subprocess.PIPE,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    assert child.stdin is not None
    child.stdin.write(json.dumps(request).encode() + b"\n")
    child.stdin.close()
    return child


def _log(cwd: Path) -> str:
    return (cwd / "child.log").read_text(errors="replace")[-4000:]


# ------------------------------------------------------------------------- Gym's client against our serve
#: In the child: record Gym-shaped rows (what a Gym model server records: ``CallRecord``s) into our file
#: store on the server's directory, retire one rollout, then read every case with Gym's client.
GYM_CLIENT = """
    import asyncio, json, sys
    request = json.loads(sys.stdin.readline())
    from capture_ledger.adapters.gym import to_commit
    from capture_ledger.impl.store.file_store import FileLineageStore
    from nemo_gym.token_id_capture.control_routes import RolloutControlClient

    def call_record(rollout_id, n):
        row = {"model_call_id": f"m{n}", "n": n}
        return to_commit(rollout_id, row).record.model_dump(mode="json")

    store = FileLineageStore(request["directory"])
    recorded = [call_record("wire-live", n) for n in range(2)]
    for row in recorded:
        store.record("wire-live", row)
    store.record_failure("wire-live", "m9", "timeout")
    store.record("wire-gone", call_record("wire-gone", 0))
    store.retire(["wire-gone"])
    store.close()

    async def read(token, rollout_id):
        client = RolloutControlClient(request["url"], auth_token=token, request_timeout_s=60)
        try:
            manifest = await client.manifest(rollout_id)
        except Exception as error:
            return {"raised": type(error).__name__, "message": str(error)}
        return {"manifest": manifest.model_dump(mode="json"), "type": type(manifest).__name__}

    async def main():
        return {name: await read(token, rollout_id) for name, (token, rollout_id) in request["cases"].items()}

    results = asyncio.run(main())
    with open(request["out"] + ".part", "w") as out:
        json.dump({"recorded": recorded, "results": results}, out)
    import os
    os.replace(request["out"] + ".part", request["out"])
"""

CASES = {
    "live": (TOKEN, "wire-live"),
    "absent": (TOKEN, "wire-never"),
    "retired": (TOKEN, "wire-gone"),
    "leading-underscore": (TOKEN, "_wire"),  # Gym's validator accepts it, ours does not
    "space": (TOKEN, "wire live"),  # aiohttp sends it as wire%20live
    "dot-dot": (TOKEN, "../wire-live"),  # Gym's client does not quote the ID: yarl resolves the ".."
    "wrong-token": (WRONG, "wire-live"),
}


@pytest.fixture(scope="module")
def gym_reads_our_serve(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Gym's client on every case against a real ``capture-ledger serve``; the child's report."""
    _require_gym_client()
    root = tmp_path_factory.mktemp("gym-client")
    lineage = root / "lineage"
    with ServerProcess(lineage, token=TOKEN) as server:
        out = root / "report.json"
        request = {"url": server.url, "directory": str(lineage), "cases": CASES, "out": str(out)}
        child = _child(GYM_CLIENT, request, root)
        try:
            code = child.wait(timeout=300)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert code == 0 and out.exists(), _log(root)
        report: dict[str, Any] = json.loads(out.read_text())
        report["server_log"] = server.log()
    return report


def _refused(result: dict[str, Any], rollout_id: str) -> tuple[int, Any]:
    """The status and decoded body of Gym's ``RuntimeError`` for a non-200 answer."""
    assert result.get("raised") == "RuntimeError", result
    found = re.fullmatch(
        rf"rollout {re.escape(rollout_id)} manifest fetch failed: HTTP (\d+) (.*)", result["message"], re.S
    )
    assert found is not None, result["message"]
    return int(found.group(1)), json.loads(found.group(2))


def test_gym_reads_a_live_manifest_from_our_serve(gym_reads_our_serve: dict[str, Any]) -> None:
    live = gym_reads_our_serve["results"]["live"]
    assert live.get("type") == "RolloutManifest", live  # Gym's model (extra fields forbidden) validated it
    manifest = live["manifest"]
    assert manifest["rollout_id"] == "wire-live"
    assert manifest["records"] == gym_reads_our_serve["recorded"]
    assert [(f["model_call_id"], f["reason"]) for f in manifest["failures"]] == [("m9", "timeout")]
    assert [json.loads(r["response_id"]) for r in manifest["records"]] == [
        {"model_call_id": "m0", "n": 0},
        {"model_call_id": "m1", "n": 1},
    ]


def test_gym_reads_an_absent_rollout_as_empty(gym_reads_our_serve: dict[str, Any]) -> None:
    absent = gym_reads_our_serve["results"]["absent"]
    assert absent.get("type") == "RolloutManifest", absent
    assert absent["manifest"]["rollout_id"] == "wire-never"
    assert absent["manifest"]["records"] == [] and absent["manifest"]["failures"] == []


def test_gym_sees_a_retired_rollout_as_410_in_our_error_shape(gym_reads_our_serve: dict[str, Any]) -> None:
    status, body = _refused(gym_reads_our_serve["results"]["retired"], "wire-gone")
    assert status == 410
    assert body["error"] == "RolloutRetiredError" and body["rollout_id"] == "wire-gone"
    assert set(body) == {"detail", "error", "rollout_id"}


@pytest.mark.parametrize(("case", "rollout_id"), [("leading-underscore", "_wire"), ("space", "wire live")])
def test_gym_sees_an_invalid_id_as_400_with_gyms_own_words(
    gym_reads_our_serve: dict[str, Any], case: str, rollout_id: str
) -> None:
    status, body = _refused(gym_reads_our_serve["results"][case], rollout_id)
    assert status == 400
    assert body["error"] == "InvalidRolloutIdError" and body["rollout_id"] == rollout_id
    # What a Gym caller matches on for Gym's own server's 400 is in the message it sees from ours too.
    assert "Invalid rollout id" in gym_reads_our_serve["results"][case]["message"]
    assert body["detail"].startswith(f"Invalid rollout id: {rollout_id!r}")


def test_gyms_client_does_not_quote_the_id(gym_reads_our_serve: dict[str, Any]) -> None:
    """``../wire-live`` is not sent as one segment: the ``..`` is resolved and another path is asked for."""
    status, body = _refused(gym_reads_our_serve["results"]["dot-dot"], "../wire-live")
    assert status == 404 and body["error"] == "HTTPException"


def test_gym_sees_a_wrong_token_as_401(gym_reads_our_serve: dict[str, Any]) -> None:
    status, body = _refused(gym_reads_our_serve["results"]["wrong-token"], "wire-live")
    assert status == 401
    assert body == {"detail": "missing or wrong bearer token", "error": "Unauthorized", "rollout_id": None}


# ------------------------------------------------------------------------- our client against Gym's routes
#: In the child: Gym's FileLineageStore with rows recorded through Gym's own ``record`` (the adapter's
#: commits), Gym's routes installed on a FastAPI app, served by uvicorn on a socket bound at port 0.
GYM_ROUTES = """
    import asyncio, json, os, sys
    request = json.loads(sys.stdin.readline())
    import uvicorn
    from fastapi import FastAPI
    from capture_ledger.adapters.gym import to_commit
    from capture_ledger.impl.http.serving import listening_socket
    from nemo_gym.token_id_capture.control_routes import install_rollout_control_routes
    from nemo_gym.token_id_capture.lineage import FileLineageStore

    store = FileLineageStore(request["directory"])

    async def seed():
        for n in range(2):
            await store.record(to_commit("gym-live", {"model_call_id": f"m{n}", "n": n}))
        await store.record_failure("gym-live", "m9", "timeout")
        return await store.manifest("gym-live")

    expected = asyncio.run(seed())
    app = FastAPI()
    install_rollout_control_routes(app, store, auth_token=request["token"])
    sock = listening_socket("127.0.0.1", 0)
    with open(request["out"] + ".part", "w") as out:
        json.dump({"url": f"http://127.0.0.1:{sock.getsockname()[1]}", "expected": expected}, out)
    os.replace(request["out"] + ".part", request["out"])
    uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off")).run(sockets=[sock])
"""


@pytest.fixture(scope="module")
def gym_routes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Gym's control routes over Gym's file store on real uvicorn: its URL and Gym's own manifest."""
    _require_gym_client()
    root = tmp_path_factory.mktemp("gym-routes")
    out = root / "server.json"
    request = {"directory": str(root / "lineage"), "token": TOKEN, "out": str(out)}
    child = _child(GYM_ROUTES, request, root)
    try:
        deadline = time.monotonic() + 120
        while not out.exists():
            assert child.poll() is None, f"Gym's server exited: {_log(root)}"
            assert time.monotonic() < deadline, f"Gym's server wrote no address: {_log(root)}"
            time.sleep(0.05)
        served: dict[str, Any] = json.loads(out.read_text())
        while True:  # bound before uvicorn runs: wait until it answers (401 without a token)
            try:
                if httpx.get(served["url"] + PREFIX + "/rollouts/x/manifest", timeout=5).status_code == 401:
                    break
            except httpx.TransportError:
                pass
            assert child.poll() is None, f"Gym's server exited: {_log(root)}"
            assert time.monotonic() < deadline, f"Gym's server did not answer: {_log(root)}"
            time.sleep(0.05)
        yield served
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def test_our_client_reads_gyms_manifest(gym_routes: dict[str, Any]) -> None:
    expected = gym_routes["expected"]
    with RolloutControlClient(gym_routes["url"], auth_token=TOKEN) as client:
        manifest = client.manifest("gym-live")
    assert dict(manifest) == {
        "rollout_id": "gym-live",
        "records": expected["records"],
        "failures": expected["failures"],
    }
    assert [json.loads(r["response_id"]) for r in manifest["records"]] == [
        {"model_call_id": "m0", "n": 0},
        {"model_call_id": "m1", "n": 1},
    ]
    # Gym's failure rows carry its schema_version beside our two fields; our client passes them through.
    assert [(f["model_call_id"], f["reason"]) for f in manifest["failures"]] == [("m9", "timeout")]


def test_our_client_reads_an_absent_rollout_from_gym_as_empty(gym_routes: dict[str, Any]) -> None:
    with RolloutControlClient(gym_routes["url"], auth_token=TOKEN) as client:
        assert dict(client.manifest("gym-never")) == {
            "rollout_id": "gym-never",
            "records": [],
            "failures": [],
        }


def test_our_client_sees_gyms_401(gym_routes: dict[str, Any]) -> None:
    with (
        RolloutControlClient(gym_routes["url"], auth_token=WRONG) as client,
        pytest.raises(UnauthorizedError) as raised,
    ):
        client.manifest("gym-live")
    assert raised.value.status == 401
    assert raised.value.reason == "missing or invalid control-plane bearer token"
    assert raised.value.error is None  # Gym's body is FastAPI's {"detail"}: no error class named


@pytest.mark.parametrize("operation", ["retire", "delete"])
def test_gym_has_no_retire_or_delete_route(gym_routes: dict[str, Any], operation: str) -> None:
    with RolloutControlClient(gym_routes["url"], auth_token=TOKEN) as client:
        with pytest.raises(RequestRejectedError) as raised:
            getattr(client, operation)(["gym-live"])
        assert raised.value.status == 404 and raised.value.reason == "Not Found"
        assert [r["model_call_id"] for r in client.manifest("gym-live")["records"]] == ["m0", "m1"]


def test_our_client_refuses_an_id_gym_would_serve(gym_routes: dict[str, Any]) -> None:
    """``_gym`` passes Gym's validator (200, empty) but not R-ID-1: our client sends nothing."""
    raw = httpx.get(
        gym_routes["url"] + PREFIX + "/rollouts/_gym/manifest", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert raw.status_code == 200 and raw.json()["records"] == []
    with (
        RolloutControlClient(gym_routes["url"], auth_token=TOKEN) as client,
        pytest.raises(InvalidRolloutIdError),
    ):
        client.manifest("_gym")


# ------------------------------------------------------------------------- the same raw requests to both
@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    _require_gym_client()
    with ServerProcess(tmp_path_factory.mktemp("ours"), token=TOKEN) as server:
        yield server.url


def _get(url: str, path: str, authorization: str | None) -> httpx.Response:
    headers = {} if authorization is None else {"Authorization": authorization}
    return httpx.get(url + path, headers=headers, timeout=30)


def test_both_servers_answer_an_invalid_id_400_with_gyms_words(ours: str, gym_routes: dict[str, Any]) -> None:
    path = PREFIX + "/rollouts/a%20b/manifest"
    answers = {
        name: _get(url, path, f"Bearer {TOKEN}") for name, url in [("ours", ours), ("gym", gym_routes["url"])]
    }
    assert {name: a.status_code for name, a in answers.items()} == {"ours": 400, "gym": 400}
    assert answers["gym"].json() == {"detail": "Invalid rollout id: 'a b'"}
    ours_body = answers["ours"].json()
    assert (
        ours_body["detail"].startswith("Invalid rollout id: 'a b'")
        and ours_body["error"] == "InvalidRolloutIdError"
    )


@pytest.mark.parametrize(
    ("path", "authorization", "expected"),
    [
        # the same
        ("/rollouts/r/manifest", f"Bearer {TOKEN}", {"ours": 200, "gym": 200}),
        ("/rollouts/r/manifest", None, {"ours": 401, "gym": 401}),
        ("/rollouts/r/manifest", f"Bearer {WRONG}", {"ours": 401, "gym": 401}),
        # the scheme's case: RFC 7235 makes it free (ours); Gym compares the whole header as a string
        ("/rollouts/r/manifest", f"bearer {TOKEN}", {"ours": 200, "gym": 401}),
        # auth before routing (ours) or inside the route (Gym): a stranger learns Gym's paths
        ("/rollouts/r/nothing", None, {"ours": 401, "gym": 404}),
        ("/metrics", f"Bearer {TOKEN}", {"ours": 200, "gym": 404}),
    ],
)
def test_what_both_servers_answer(
    ours: str, gym_routes: dict[str, Any], path: str, authorization: str | None, expected: dict[str, int]
) -> None:
    answers = {
        name: _get(url, PREFIX + path, authorization)
        for name, url in [("ours", ours), ("gym", gym_routes["url"])]
    }
    assert {name: a.status_code for name, a in answers.items()} == expected
    for name, answer in answers.items():
        if answer.status_code != 200:
            body = answer.json()
            if name == "ours":
                assert set(body) == {"detail", "error", "rollout_id"}
            else:
                assert set(body) == {"detail"}  # FastAPI's HTTPException body
    if expected == {"ours": 200, "gym": 200}:
        assert answers["ours"].json() == {"rollout_id": "r", "records": [], "failures": []}
        assert answers["gym"].json() == {
            "schema_version": 2,
            "rollout_id": "r",
            "records": [],
            "failures": [],
        }
    if expected["ours"] == 401:
        assert answers["ours"].headers["www-authenticate"] == "Bearer"
    if expected["gym"] == 401:
        assert "www-authenticate" not in answers["gym"].headers
