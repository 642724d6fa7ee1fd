"""The conformance kit over HTTP: the remote path must conform exactly (R-KIT-1..4, R-HTTP-1..5).

Design (docs/http.md, "Conformance over HTTP"): one real uvicorn server for the whole module, in a thread
of this process on a loopback port, serves a small *test-side* dispatcher that routes ``/w<n>/...`` to the
app of handle ``n``. Each handle the kit opens is one model-server worker: a ``FileLineageStore`` on the
example's workspace, served by its own ``create_app`` mounted under a fresh ``/w<n>``, with a blocking
``RolloutControlClient`` pointed at ``http://127.0.0.1:<port>/w<n>``. ``manifest``, ``retire`` and
``delete`` go over HTTP; ``record``, ``record_failure``, ``admit`` and ``has_rows`` go to the worker's
store directly (the model server's capture path). ``close`` unmounts the app and closes the store, so a
``reopen`` is a restarted worker. Production code has no workspace switch: each app serves one store.

The same kit runs an async variant (coroutine methods over ``AsyncRolloutControlClient``, R-KIT-5). A
deliberately broken adapter (a client that drops the manifest's failures) is shown to be caught. Both
variants run the active profile's full example count (60 under ``ci``): the server is started once, and an
example costs its HTTP round trips (about 80 requests, 0.4-1 s on 2 busy cores; docs/http.md).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from capture_ledger.impl.http.client import AsyncRolloutControlClient, RolloutControlClient
from capture_ledger.impl.http.server import create_app
from capture_ledger.impl.simulate import ServerThread
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.spec import Manifest, RolloutRemoval, check_ledger
from capture_ledger.spec.kit import profile_settings
from hypothesis import Phase, settings
from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN = "conformance-token"


class Dispatcher:
    """Test-side ASGI app: ``/w<n>/rest`` goes to mounted app ``n`` with path ``/rest``."""

    def __init__(self) -> None:
        self._apps: dict[str, ASGIApp] = {}
        self._lock = threading.Lock()
        self._names = (f"w{i}" for i in itertools.count())

    def mount(self, app: ASGIApp) -> str:
        with self._lock:
            name = next(self._names)
            self._apps[name] = app
        return name

    def unmount(self, name: str) -> None:
        with self._lock:
            self._apps.pop(name, None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        _, name, rest = scope["path"].partition("/")[2].partition("/")
        app = self._apps.get(_ or name)
        if app is None:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        prefix = f"/{_}"
        inner = dict(scope, path="/" + rest, raw_path=scope["raw_path"][len(prefix) :])
        await app(inner, receive, send)


class HttpWorker:
    """One model-server worker: its store, its app, and a client calling that app over HTTP."""

    def __init__(self, workspace: Path, server: ServerThread, dispatcher: Dispatcher) -> None:
        self.store = FileLineageStore(workspace)
        self._dispatcher = dispatcher
        self._name = dispatcher.mount(create_app(self.store, auth_token=TOKEN))
        self.client = RolloutControlClient(f"{server.url}/{self._name}", auth_token=TOKEN, timeout=30)

    # The capture path: in the worker, on its store.
    def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:
        self.store.record(rollout_id, row)

    def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:
        self.store.record_failure(rollout_id, model_call_id, reason)

    def admit(self, rollout_id: str, model_call_id: str) -> str | None:
        return self.store.admit(rollout_id, model_call_id)

    def has_rows(self, rollout_id: str) -> bool:
        return self.store.has_rows(rollout_id)

    # The control plane: over HTTP.
    def manifest(self, rollout_id: str) -> Manifest:
        return self.client.manifest(rollout_id)

    def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        return self.client.retire(rollout_ids)

    def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:
        return self.client.delete(rollout_ids)

    def close(self) -> None:
        self._dispatcher.unmount(self._name)
        self.client.close()
        self.store.close()


class ForgetfulWorker(HttpWorker):
    """Deliberately broken: its manifest drops the failures. The kit must reject it."""

    def manifest(self, rollout_id: str) -> Manifest:
        manifest = self.client.manifest(rollout_id)
        return {"rollout_id": manifest["rollout_id"], "records": manifest["records"], "failures": []}


class AsyncHttpWorker(HttpWorker):
    """The same worker, with coroutine methods and the async client (as NeMo Gym's ledgers are async)."""

    def __init__(self, workspace: Path, server: ServerThread, dispatcher: Dispatcher) -> None:
        super().__init__(workspace, server, dispatcher)
        self.client.close()
        self.remote = AsyncRolloutControlClient(f"{server.url}/{self._name}", auth_token=TOKEN, timeout=30)

    async def record(self, rollout_id: str, row: Mapping[str, Any]) -> None:  # type: ignore[override]
        self.store.record(rollout_id, row)

    async def record_failure(self, rollout_id: str, model_call_id: str, reason: str) -> None:  # type: ignore[override]
        self.store.record_failure(rollout_id, model_call_id, reason)

    async def admit(self, rollout_id: str, model_call_id: str) -> str | None:  # type: ignore[override]
        return self.store.admit(rollout_id, model_call_id)

    async def has_rows(self, rollout_id: str) -> bool:  # type: ignore[override]
        return self.store.has_rows(rollout_id)

    async def manifest(self, rollout_id: str) -> Manifest:  # type: ignore[override]
        return await self.remote.manifest(rollout_id)

    async def retire(self, rollout_ids: Sequence[str]) -> RolloutRemoval:  # type: ignore[override]
        return await self.remote.retire(rollout_ids)

    async def delete(self, rollout_ids: Sequence[str]) -> RolloutRemoval:  # type: ignore[override]
        return await self.remote.delete(rollout_ids)

    async def close(self) -> None:  # type: ignore[override]
        self._dispatcher.unmount(self._name)
        await self.remote.aclose()
        self.store.close()


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ServerThread, Dispatcher]]:
    dispatcher = Dispatcher()
    with ServerThread(dispatcher) as server:
        yield server, dispatcher


@pytest.mark.slow  # the kit's full run over HTTP (about 13 s alone); the broken remote path below stays fast
def test_the_remote_path_conforms_with_two_workers(served: tuple[ServerThread, Dispatcher]) -> None:
    server, dispatcher = served

    def open_worker(workspace: Path) -> HttpWorker:
        return HttpWorker(workspace, server, dispatcher)

    check_ledger(open_worker, handles=2, settings=profile_settings())


def test_a_broken_remote_path_is_caught(served: tuple[ServerThread, Dispatcher]) -> None:
    server, dispatcher = served

    def open_worker(workspace: Path) -> HttpWorker:
        return ForgetfulWorker(workspace, server, dispatcher)

    with pytest.raises(AssertionError, match="does not conform"):
        # No shrinking: the test only needs the kit to reject the variant, not the smallest example.
        budget = settings(profile_settings(), max_examples=200, phases=[Phase.explicit, Phase.generate])
        check_ledger(open_worker, handles=2, settings=budget)


@pytest.mark.slow  # about 19 s; the sync client's two-worker run above stays in the fast tier
def test_the_async_client_conforms_too(served: tuple[ServerThread, Dispatcher]) -> None:
    server, dispatcher = served

    def open_worker(workspace: Path) -> AsyncHttpWorker:
        return AsyncHttpWorker(workspace, server, dispatcher)

    check_ledger(open_worker, handles=2, settings=profile_settings())
