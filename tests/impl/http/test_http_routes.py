"""The control routes in process, through httpx's ASGI transport (R-HTTP-1..3, R-HTTP-5).

What it proves, against the reference ledger and the file store alike: each route's status codes; that
every path, known or not, needs the bearer token and that a near-miss token is refused; that a refused
removal changes nothing; that sync store calls run off the event loop and coroutine methods are awaited;
that ledger errors map by class to one status each and never to a 500; that the OpenAPI document
describes every route, body and error; the metrics; and the async client's error mapping, retries and
refusal of a manifest that names another rollout. The real-server tests are in test_http_server.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest
from capture_ledger.impl.http import PREFIX, statistics_fields
from capture_ledger.impl.http.client import (
    AsyncRolloutControlClient,
    ControlPlaneError,
    RequestRejectedError,
    RolloutControlClient,
    ServerError,
    UnauthorizedError,
    UnexpectedResponseError,
)
from capture_ledger.impl.http.server import create_app
from capture_ledger.impl.simulate import ServerThread
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.reference import ReferenceLedger
from capture_ledger.reference.mutants import AsyncLedger
from capture_ledger.spec import (
    CaptureLedgerError,
    ConflictingRecordError,
    InvalidRolloutIdError,
    RolloutRemoval,
    RolloutRetiredError,
)
from fastapi import FastAPI
from fastapi.responses import JSONResponse

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def call(app: Any, method: str, path: str, *, headers: Mapping[str, Any] = AUTH, **kw: Any) -> httpx.Response:
    """One request to ``app`` in process; an exception inside the app propagates (so a 500 cannot hide)."""

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.request(method, path, headers=dict(headers), **kw)

    return asyncio.run(go())


@pytest.fixture(params=["reference", "file"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "reference":
        yield ReferenceLedger()
        return
    store = FileLineageStore(tmp_path)
    yield store
    store.close()


def seeded(ledger: Any) -> Any:
    ledger.record("live", {"model_call_id": "m0", "value": 1.0})
    ledger.record_failure("live", "m1", "timeout")
    ledger.record("gone", {"model_call_id": "m0"})
    ledger.retire(["gone"])
    return create_app(ledger, auth_token=TOKEN)


def test_create_app_refuses_to_start_without_a_usable_token() -> None:
    for token in ("", " ", "two words", "tök", None):
        with pytest.raises(ValueError, match="bearer token"):
            create_app(ReferenceLedger(), auth_token=token)  # type: ignore[arg-type]


def test_manifest_status_codes(ledger: Any) -> None:
    app = seeded(ledger)
    live = call(app, "GET", f"{PREFIX}/rollouts/live/manifest")
    assert live.status_code == 200
    assert live.json() == {
        "rollout_id": "live",
        "records": [{"model_call_id": "m0", "value": 1.0}],
        "failures": [{"model_call_id": "m1", "reason": "timeout"}],
    }
    assert isinstance(live.json()["records"][0]["value"], float)  # 1.0 stays 1.0 (canonical rows)
    absent = call(app, "GET", f"{PREFIX}/rollouts/never/manifest")
    assert (absent.status_code, absent.json()) == (
        200,
        {"rollout_id": "never", "records": [], "failures": []},
    )
    gone = call(app, "GET", f"{PREFIX}/rollouts/gone/manifest")
    assert gone.status_code == 410
    assert gone.json()["error"] == "RolloutRetiredError" and gone.json()["rollout_id"] == "gone"
    for bad in (".hidden", "-x", "a" * 201, "a%20b", "%C3%BC"):
        answer = call(app, "GET", f"{PREFIX}/rollouts/{bad}/manifest")
        assert answer.status_code == 400, bad
        assert answer.json()["error"] == "InvalidRolloutIdError"


def test_removal_status_codes_and_results(ledger: Any) -> None:
    app = seeded(ledger)
    body = {"rollout_ids": ["x", "live", "x", "gone"]}
    answer = call(app, "POST", f"{PREFIX}/rollouts/retire", json=body)
    assert (answer.status_code, answer.json()) == (200, {"removed": ["live"], "absent": ["x", "gone"]})
    with pytest.raises(RolloutRetiredError):
        ledger.manifest("live")
    answer = call(app, "POST", f"{PREFIX}/rollouts/delete", json={"rollout_ids": ["live", "gone"]})
    assert (answer.status_code, answer.json()) == (200, {"removed": [], "absent": ["live", "gone"]})
    assert ledger.manifest("live")["records"] == []


MALFORMED: list[Any] = [
    {"rollout_ids": []},
    {"rollout_ids": "live"},
    {"rollout_ids": ["live"], "force": True},
    {"ids": ["live"]},
    {"rollout_ids": [1]},
    {"rollout_ids": [None]},
    {"rollout_ids": ["live", ["nested"]]},
    {"rollout_ids": [f"r{i}" for i in range(4097)]},
    ["live"],
    "live",
    None,
]


@pytest.mark.parametrize("operation", ["retire", "delete"])
def test_malformed_bodies_are_422_and_change_nothing(ledger: Any, operation: str) -> None:
    app = seeded(ledger)
    for body in MALFORMED:
        answer = call(app, "POST", f"{PREFIX}/rollouts/{operation}", json=body)
        assert answer.status_code == 422, body
        assert answer.json()["error"] == "RequestValidationError"
    for raw in (b"", b"{", b"\xff\xfe", b'{"rollout_ids": ["live"]'):
        answer = call(app, "POST", f"{PREFIX}/rollouts/{operation}", content=raw)
        assert answer.status_code == 422, raw
    assert ledger.has_rows("live")


@pytest.mark.parametrize("operation", ["retire", "delete"])
def test_an_invalid_id_is_400_and_changes_nothing(ledger: Any, operation: str) -> None:
    app = seeded(ledger)
    answer = call(app, "POST", f"{PREFIX}/rollouts/{operation}", json={"rollout_ids": ["live", "../etc"]})
    assert answer.status_code == 400
    assert answer.json() == {
        "detail": answer.json()["detail"],
        "error": "InvalidRolloutIdError",
        "rollout_id": "../etc",
    }
    assert ledger.has_rows("live")  # R-BATCH-2


def test_exactly_max_ledger_batch_ids_are_accepted(ledger: Any) -> None:
    app = create_app(ledger, auth_token=TOKEN)
    ids = [f"r{i}" for i in range(4096)]
    answer = call(app, "POST", f"{PREFIX}/rollouts/delete", json={"rollout_ids": ids})
    assert answer.status_code == 200 and answer.json()["absent"] == ids


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": ""},
        {"Authorization": TOKEN},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer "},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Bearer {TOKEN.upper()}"},
        {"Authorization": "Bearer t\u00f6ken".encode()},  # non-ASCII bytes: refused, not a TypeError
    ],
)
def test_every_path_needs_the_token(headers: dict[str, Any]) -> None:
    ledger = ReferenceLedger()
    ledger.record("live", {"model_call_id": "m0"})
    app = create_app(ledger, auth_token=TOKEN)
    routes: list[tuple[str, str, dict[str, Any] | None]] = [
        ("GET", f"{PREFIX}/rollouts/live/manifest", None),
        ("POST", f"{PREFIX}/rollouts/retire", {"rollout_ids": ["live"]}),
        ("POST", f"{PREFIX}/rollouts/delete", {"rollout_ids": ["live"]}),
        ("POST", f"{PREFIX}/rollouts/delete", {"rollout_ids": []}),  # 401 before 422
        ("GET", f"{PREFIX}/metrics", None),
        ("GET", f"{PREFIX}/openapi.json", None),
        ("POST", "/openapi.json", None),  # only a GET of the public document passes without the token
        ("POST", "/docs", None),
        ("GET", "/nowhere", None),
    ]
    for method, path, body in routes:
        answer = call(app, method, path, headers=headers, json=body)
        assert answer.status_code == 401, (method, path)
        assert answer.headers["www-authenticate"] == "Bearer"
    assert ledger.has_rows("live")


def test_the_scheme_is_case_insensitive_and_unknown_paths_are_404_with_the_token() -> None:
    app = create_app(ReferenceLedger(), auth_token=TOKEN)
    assert (
        call(app, "GET", f"{PREFIX}/metrics", headers={"Authorization": f"bearer {TOKEN}"}).status_code == 200
    )
    assert call(app, "GET", "/nowhere").status_code == 404


def test_the_openapi_document_and_its_page_are_public_and_nothing_else_is() -> None:
    """``GET /openapi.json`` and ``GET /docs`` need no token (the document holds no ledger data; a browser
    cannot send one); the document is the one served under the prefix, the page points at it."""
    ledger = ReferenceLedger()
    ledger.record("live", {"model_call_id": "m0"})
    app = create_app(ledger, auth_token=TOKEN)
    public = call(app, "GET", "/openapi.json", headers={})
    assert public.status_code == 200
    assert public.json() == call(app, "GET", f"{PREFIX}/openapi.json").json()
    assert f"{PREFIX}/rollouts/retire" in public.json()["paths"]
    assert "/openapi.json" not in public.json()["paths"] and "/docs" not in public.json()["paths"]
    page = call(app, "GET", "/docs", headers={})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "'/openapi.json'" in page.text or '"/openapi.json"' in page.text
    for path in (f"{PREFIX}/openapi.json", f"{PREFIX}/rollouts/live/manifest", "/docs/", "/openapi.json/x"):
        assert call(app, "GET", path, headers={}).status_code == 401, path


class _ThreadRecorder:
    """A ledger that notes the name and the thread of every call, delegating to the reference."""

    def __init__(self) -> None:
        self.inner = ReferenceLedger()
        self.calls: list[tuple[str, threading.Thread]] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def recorded(*args: Any) -> Any:
            self.calls.append((name, threading.current_thread()))
            return method(*args)

        return recorded


def test_sync_store_calls_run_off_the_event_loop_thread() -> None:
    recorder = _ThreadRecorder()
    app = create_app(recorder, auth_token=TOKEN)
    call(app, "GET", f"{PREFIX}/rollouts/a/manifest")
    call(app, "POST", f"{PREFIX}/rollouts/retire", json={"rollout_ids": ["a"]})
    call(app, "POST", f"{PREFIX}/rollouts/delete", json={"rollout_ids": ["a"]})
    assert [name for name, _ in recorder.calls] == ["manifest", "retire", "delete"]
    # The loop runs in the main thread here.
    assert all(thread is not threading.main_thread() for _, thread in recorder.calls)


def test_coroutine_methods_are_awaited_on_the_loop() -> None:
    recorder = _ThreadRecorder()
    recorder.inner.record("a", {"model_call_id": "m0"})
    app = create_app(AsyncLedger(recorder), auth_token=TOKEN)  # coroutine methods, as NeMo Gym's are
    assert call(app, "GET", f"{PREFIX}/rollouts/a/manifest").json()["records"] == [{"model_call_id": "m0"}]
    assert call(app, "POST", f"{PREFIX}/rollouts/retire", json={"rollout_ids": ["a"]}).json()["removed"] == [
        "a"
    ]
    assert call(app, "GET", f"{PREFIX}/rollouts/a/manifest").status_code == 410
    assert call(app, "POST", f"{PREFIX}/rollouts/delete", json={"rollout_ids": ["a"]}).status_code == 200
    # Each coroutine ran to its end (the wrapped call happened), awaited on the loop, not in a worker thread.
    assert [name for name, _ in recorder.calls] == ["manifest", "retire", "manifest", "delete"]
    assert all(thread is threading.main_thread() for _, thread in recorder.calls)


class _Refusing(ReferenceLedger):
    """A ledger whose removals raise a given error (how a custom ledger might refuse input)."""

    def __init__(self, error: Callable[[], BaseException]) -> None:
        super().__init__()
        self.error = error

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        raise self.error()


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (lambda: TypeError("no"), 400),
        (lambda: ValueError("no"), 400),
        (lambda: InvalidRolloutIdError("x"), 400),
        (lambda: ConflictingRecordError("a", "m0"), 409),
        (lambda: RolloutRetiredError("a"), 410),
        (lambda: CaptureLedgerError("custom"), 400),
    ],
)
def test_ledger_errors_map_by_class_never_to_500(error: Callable[[], BaseException], status: int) -> None:
    app = create_app(_Refusing(error), auth_token=TOKEN)
    answer = call(app, "POST", f"{PREFIX}/rollouts/retire", json={"rollout_ids": ["a"]})
    assert answer.status_code == status
    assert answer.json()["error"] == type(error()).__name__


def test_openapi_describes_every_route_body_and_error() -> None:
    document = call(create_app(ReferenceLedger(), auth_token=TOKEN), "GET", f"{PREFIX}/openapi.json").json()
    paths = document["paths"]
    manifest = paths[f"{PREFIX}/rollouts/{{rollout_id}}/manifest"]["get"]
    assert {"200", "400", "401", "410"} <= set(manifest["responses"])
    assert manifest["parameters"][0]["schema"] == {
        "type": "string",
        "minLength": 1,
        "maxLength": 200,
        "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*$",  # anchored: JSON Schema patterns are searched
        "title": "Rollout Id",
    }
    for operation in ("retire", "delete"):
        route = paths[f"{PREFIX}/rollouts/{operation}"]["post"]
        assert {"200", "400", "401", "413", "422"} <= set(route["responses"])
        assert route["security"] == [{"HTTPBearer": []}]
        assert route["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
            "RemovalRequest"
        )
    assert "401" in paths[f"{PREFIX}/metrics"]["get"]["responses"]
    schemas = document["components"]["schemas"]
    ids = schemas["RemovalRequest"]["properties"]["rollout_ids"]
    assert (ids["minItems"], ids["maxItems"], ids["items"]["type"]) == (1, 4096, "string")
    rule = {k: v for k, v in manifest["parameters"][0]["schema"].items() if k != "title"}
    assert ids["items"] == rule  # the batch items follow the same rule as the path parameter
    assert schemas["RemovalRequest"]["additionalProperties"] is False
    assert {"ManifestBody", "RemovalBody", "ErrorBody"} <= set(schemas)
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_every_error_body_has_the_error_body_shape() -> None:
    # Found by schemathesis (docs/http.md §OpenAPI): FastAPI answered a body that is not UTF-8 with its own
    # 400 {"detail"}; it is a malformed body (422), and 404 and 405 keep the ErrorBody shape too.
    app = create_app(ReferenceLedger(), auth_token=TOKEN)
    headers = {**AUTH, "Content-Type": "application/json"}
    for method, path, body, status in (
        ("POST", f"{PREFIX}/rollouts/retire", b"C\x16\xff;\x1a\x10(", 422),
        ("POST", f"{PREFIX}/rollouts/delete", b'{"rollout_ids": ["\xff"]}', 422),
        ("GET", f"{PREFIX}/nowhere", b"", 404),
        ("DELETE", f"{PREFIX}/rollouts/retire", b"", 405),
    ):
        answer = call(app, method, path, headers=headers, content=body)
        assert answer.status_code == status, (path, answer.text)
        assert set(answer.json()) == {"detail", "error", "rollout_id"}, answer.text
    assert call(app, "DELETE", f"{PREFIX}/rollouts/retire").headers["allow"] == "POST"


class _Calls(NamedTuple):
    record: int
    retire: float


def test_statistics_fields_read_a_nested_named_tuple_as_a_record() -> None:
    """A field that is itself a record (a named tuple here, as the top level may be) gives its numbers."""
    calls = _Calls(3, 1.5)
    fields = statistics_fields({"calls": calls, "cached_rows": 2, "fence_sync": "file", "flag": True})
    assert fields == {"calls": {"record": 3.0, "retire": 1.5}, "cached_rows": 2.0}


def test_a_scrape_sweeps_rows_another_worker_removed_and_shows_the_resolved_store(tmp_path: Path) -> None:
    # Two handles on one directory, as two workers: the served one caches a rollout that the other retires.
    served = FileLineageStore(tmp_path, fence_sync="syncfs", group_commit=False)
    other = FileLineageStore(tmp_path)
    app = create_app(served, auth_token=TOKEN)
    served.record("a", {"model_call_id": "m0"})
    served.record("b", {"model_call_id": "m0"})
    assert served.statistics().cached_rows == 2
    other.retire(["a"])  # another worker: the served handle's cache still holds a's row
    assert served.statistics().cached_rows == 2
    text = call(app, "GET", f"{PREFIX}/metrics").text
    assert "capture_ledger_store_cached_rows 1.0" in text  # swept before it was read: only b's row
    info = 'capture_ledger_store_info{combine_removals="false",fence_sync="syncfs",group_commit="false"} 1.0'
    assert info in text
    served.close()
    other.close()


def test_metrics_report_latencies_and_the_file_store_statistics(tmp_path: Path) -> None:
    store = FileLineageStore(tmp_path)
    app = create_app(store, auth_token=TOKEN)
    writer = app.state.metrics.instrument(store)  # how a model server records through the same registry
    writer.record("a", {"model_call_id": "m0"})
    call(app, "POST", f"{PREFIX}/rollouts/retire", json={"rollout_ids": ["a", "b"]})
    writer.record("a", {"model_call_id": "m1"})  # discarded: a late write
    call(app, "POST", f"{PREFIX}/rollouts/delete", json={"rollout_ids": ["a"]})
    answer = call(app, "GET", f"{PREFIX}/metrics")
    assert answer.headers["content-type"].startswith("text/plain")
    text = answer.text
    for line in (
        'capture_ledger_operation_seconds_count{operation="record"} 2.0',
        'capture_ledger_operation_seconds_count{operation="retire"} 1.0',
        'capture_ledger_operation_seconds_count{operation="delete"} 1.0',
        'capture_ledger_removed_ids_total{operation="retire",outcome="removed"} 1.0',
        'capture_ledger_removed_ids_total{operation="retire",outcome="absent"} 1.0',
        "capture_ledger_store_fences_written_total 2.0",
        "capture_ledger_store_late_writes_discarded_total 1.0",
        'capture_ledger_cache_size{cache="ledger_rollouts"} 0.0',
        'capture_ledger_cache_size{cache="ledger_rows"} 0.0',
    ):
        assert line in text, line
    assert "capture_ledger_server_worker_info{pid=" in text
    # A second app in the same process has its own registry.
    other = call(create_app(ReferenceLedger(), auth_token=TOKEN), "GET", f"{PREFIX}/metrics").text
    assert 'capture_ledger_operation_seconds_count{operation="retire"} 0.0' in other
    store.close()


# ------------------------------------------------------------------------------------------ async client
class _Counting(httpx.AsyncBaseTransport):
    """Counts the requests that reach the (real, in-process) app."""

    def __init__(self, app: Any) -> None:
        self.inner = httpx.ASGITransport(app=app)
        self.requests: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(f"{request.method} {request.url.path}")
        return await self.inner.handle_async_request(request)


def _client(app: Any, **kw: Any) -> tuple[AsyncRolloutControlClient, _Counting]:
    transport = _Counting(app)
    token = kw.pop("auth_token", TOKEN)
    return AsyncRolloutControlClient("http://test", auth_token=token, transport=transport, **kw), transport


def test_async_client_maps_statuses_and_validates_before_sending() -> None:
    async def go() -> None:
        ledger = ReferenceLedger()
        ledger.record("a", {"model_call_id": "m0"})
        client, transport = _client(create_app(ledger, auth_token=TOKEN), batch_size=2)
        async with client:
            assert (await client.manifest("a"))["records"] == [{"model_call_id": "m0"}]
            assert await client.retire(["a", "b", "a", "c"]) == {"removed": ["a"], "absent": ["b", "c"]}
            with pytest.raises(RolloutRetiredError) as retired:
                await client.manifest("a")
            assert retired.value.rollout_id == "a"
            sent = len(transport.requests)
            with pytest.raises(TypeError):
                await client.delete("a")  # a str is a Sequence[str] to mypy; refused at run time
            with pytest.raises(InvalidRolloutIdError):
                await client.delete(["b", "c", "d", "e", "../x"])  # would be the third batch
            with pytest.raises(InvalidRolloutIdError):
                await client.manifest("../metrics")
            assert await client.delete([]) == {"removed": [], "absent": []}
            assert len(transport.requests) == sent  # nothing was sent for any of these
        wrong, _ = _client(create_app(ledger, auth_token=TOKEN), auth_token="wrong")
        async with wrong:
            with pytest.raises(UnauthorizedError) as refused:
                await wrong.retire(["a"])
            assert (refused.value.status, refused.value.reason) == (401, "missing or wrong bearer token")

    asyncio.run(go())


def test_async_client_refuses_a_manifest_of_another_rollout_and_malformed_answers() -> None:
    liar = FastAPI()

    @liar.get(f"{PREFIX}/rollouts/{{rollout_id}}/manifest")
    async def other(rollout_id: str) -> JSONResponse:
        return JSONResponse({"rollout_id": "someone-else", "records": [], "failures": []})

    @liar.post(f"{PREFIX}/rollouts/retire")
    async def bad_removal() -> JSONResponse:
        return JSONResponse({"removed": ["not-sent"], "absent": []})

    @liar.post(f"{PREFIX}/rollouts/delete")
    async def rejected() -> JSONResponse:
        return JSONResponse({"detail": "nope", "error": "Whatever"}, status_code=409)

    async def go() -> None:
        client, _ = _client(liar)
        async with client:
            with pytest.raises(UnexpectedResponseError, match="someone-else"):
                await client.manifest("mine")
            with pytest.raises(UnexpectedResponseError):
                await client.retire(["a"])
            with pytest.raises(RequestRejectedError) as error:
                await client.delete(["a"])
            assert (error.value.status, error.value.reason, error.value.error) == (409, "nope", "Whatever")
            assert isinstance(error.value, ControlPlaneError)

    asyncio.run(go())


def test_async_client_retries_retire_and_delete_after_server_errors() -> None:
    ledger = ReferenceLedger()
    ledger.record("a", {"model_call_id": "m0"})
    app = create_app(ledger, auth_token=TOKEN)
    failures = {"left": 2}

    async def flaky(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and failures["left"] > 0:
            failures["left"] -= 1
            await JSONResponse({"detail": "busy"}, status_code=503)(scope, receive, send)
            return
        await app(scope, receive, send)

    async def go() -> None:
        client, transport = _client(flaky, retries=2, backoff=0.001)
        async with client:
            assert await client.retire(["a"]) == {"removed": ["a"], "absent": []}
        assert len(transport.requests) == 3
        failures["left"] = 1
        no_retry, _ = _client(flaky)
        async with no_retry:
            with pytest.raises(ServerError) as error:
                await no_retry.delete(["a"])
            assert error.value.status == 503
            failures["left"] = 1
            with pytest.raises(ServerError):
                await no_retry.manifest("a")  # retries=0: not resent either
        failures["left"] = 3
        gives_up, transport = _client(flaky, retries=2, backoff=0.001)
        async with gives_up:
            with pytest.raises(ServerError):
                await gives_up.delete(["a"])
        assert len(transport.requests) == 3  # the first attempt and two resends

    asyncio.run(go())


def test_the_blocking_client_resends_server_errors_but_not_refusals() -> None:
    """Over a real socket: a 503 is resent, a 409 is the caller's to fix and is sent once."""
    ledger = ReferenceLedger()
    ledger.record("a", {"model_call_id": "m0"})
    app = create_app(ledger, auth_token=TOKEN)
    answers: list[int] = []
    script = {"statuses": [503, 503]}

    async def scripted(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and script["statuses"]:
            status = script["statuses"].pop(0)
            answers.append(status)
            await JSONResponse({"detail": "scripted", "error": "Scripted"}, status_code=status)(
                scope, receive, send
            )
            return
        answers.append(200)
        await app(scope, receive, send)

    server = ServerThread(scripted)
    with server, RolloutControlClient(server.url, auth_token=TOKEN, retries=2, backoff=0.001) as client:
        assert client.retire(["a"]) == {"removed": ["a"], "absent": []}
        assert answers == [503, 503, 200]
        answers.clear()
        script["statuses"] = [409, 409]
        with pytest.raises(RequestRejectedError):
            client.delete(["a"])
        assert answers == [409]
