"""A Hypothesis fuzz of the control plane's bodies, paths, methods and headers (R-HTTP-2, R-HTTP-3).

Properties, for every generated request: no answer is a 5xx; a request without the right token is a
401; and a request that is not a successful retire or delete changes nothing in the lineage directory
(the snapshot of every file's name and bytes, lock files aside, is equal before and after). The store
starts each example with rollouts in every state (Live, Live with a failure, Retired, Absent).

Run in process through httpx's ASGI transport (fast, ``5 x max_examples`` of the profile) and against a
real ``capture-ledger serve`` process (``max_examples`` of the profile). Each test prints the number of
requests it sent; the CI profile's counts are in docs/http.md. Invalid IDs and JSON values come from the
spec's strategies (spec/kit/strategies.py), plus two IDs only a URL makes special; valid IDs go beyond the
4-ID pool (any the rule allows, some of exactly 200 characters) and some lists hold 101 to 300 distinct IDs,
which schemathesis never sends (tests/impl/http/test_schemathesis_http.py; docs/http.md §OpenAPI says why both
fuzzers are kept). The meta-test sends the
request that reaches a deliberately broken store's bug as an explicit example, so that it does not depend
on the order in which the strategies produce requests.
"""

from __future__ import annotations

import asyncio
import json
import string
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from capture_ledger.impl.http import PREFIX
from capture_ledger.impl.http.server import PUBLIC_DOCUMENT_PATHS, create_app
from capture_ledger.impl.simulate import ServerProcess
from capture_ledger.impl.store.file_store import FileLineageStore
from capture_ledger.spec.core.ids import MAX_ROLLOUT_ID_LENGTH, ROLLOUT_ID_PATTERN
from capture_ledger.spec.kit import profile_settings
from capture_ledger.spec.kit.sequential import invalid_rollout_id_strings, invalid_rollout_ids
from capture_ledger.spec.kit.sequential import json_values as spec_json_values
from hypothesis import Phase, example, given, reject, settings
from hypothesis import strategies as st

TOKEN = "fuzz-token"
POOL = ["r0", "r1", "r2", "r3"]

#: IDs that only a URL makes special, beyond the spec's invalid IDs: a NUL byte and a percent-escape.
URL_ONLY_IDS = ("r0\x00", "%2F")

# ------------------------------------------------------------------------------------------ strategies
# The spec's invalid IDs and JSON values (spec/kit/strategies.py), with the non-JSON infinities a body may
# carry; raw bytes below cover what is not JSON at all.
json_values = spec_json_values(infinities=True)
bad_ids = st.one_of(invalid_rollout_id_strings(), st.sampled_from(URL_ONLY_IDS))
#: Valid IDs beyond the pool: any the rule allows (with '.', '_', '-'), some of exactly the longest length.
valid_ids = st.one_of(
    st.from_regex(ROLLOUT_ID_PATTERN, fullmatch=True).filter(lambda s: len(s) <= MAX_ROLLOUT_ID_LENGTH),
    st.sampled_from("aZ0").map(lambda c: c * MAX_ROLLOUT_ID_LENGTH),
)
#: Long lists of distinct valid IDs (a bug that needs many distinct IDs is out of schemathesis's reach).
many_ids = st.integers(101, 300).map(lambda n: [f"d{i}.x_{n}" for i in range(n)])
id_elements = st.one_of(
    st.sampled_from(POOL),
    valid_ids,
    invalid_rollout_ids(),
    st.text(max_size=8),
    st.integers(),
    st.booleans(),
    json_values,
)
valid_bodies = st.fixed_dictionaries({"rollout_ids": st.lists(st.sampled_from(POOL), min_size=1, max_size=4)})
bodies = st.one_of(
    valid_bodies,
    valid_bodies,
    valid_bodies,
    st.fixed_dictionaries({"rollout_ids": st.lists(id_elements, max_size=6)}),
    st.fixed_dictionaries(
        {"rollout_ids": st.lists(st.sampled_from(POOL), min_size=1, max_size=3)},
        optional={"extra": json_values, "rollout_id": st.sampled_from(POOL)},
    ),
    st.fixed_dictionaries({"rollout_ids": st.sampled_from(POOL)}),  # a bare string (R-BATCH-1)
    st.fixed_dictionaries({"rollout_ids": many_ids}),
    json_values,
)
json_bodies = bodies.map(lambda b: json.dumps(b).encode())
raw_bodies = st.one_of(json_bodies, json_bodies, json_bodies, st.binary(max_size=40), st.just(b""))
segments = st.one_of(
    st.sampled_from(POOL),
    st.sampled_from(POOL),
    st.sampled_from(POOL),
    valid_ids,
    bad_ids.map(lambda s: quote(s, safe="")),
    st.text(alphabet=string.printable, max_size=12).map(lambda s: quote(s, safe="")),
)
other_paths = st.one_of(
    st.sampled_from([f"{PREFIX}/metrics", f"{PREFIX}/openapi.json", f"{PREFIX}/rollouts", "/", "/docs"]),
    segments.map(lambda s: f"{PREFIX}/{s}"),
    segments.map(lambda s: f"{PREFIX}/rollouts/{s}"),
)
bad_authorizations = st.one_of(
    st.sampled_from(
        [
            None,
            b"",
            b"Bearer",
            b"Bearer wrong",
            f"Basic {TOKEN}".encode(),
            f"Bearer {TOKEN}x".encode(),
            f"Bearer {TOKEN[:-1]}".encode(),
            "Bearer t\u00f6ken".encode(),
        ]
    ),
    st.binary(max_size=20).map(lambda b: b"Bearer " + b),
)
content_types = st.sampled_from(["application/json", None, "text/plain", "application/x-www-form-urlencoded"])


@st.composite
def aimed_requests(draw: st.DrawFn) -> tuple[str, str, dict[str, bytes], bytes]:
    """The real routes with the right token and method; fuzzed IDs and bodies."""
    route = draw(st.sampled_from(["retire", "delete", "manifest"]))
    headers = {"Authorization": f"Bearer {TOKEN}".encode(), "Content-Type": b"application/json"}
    if route == "manifest":
        return "GET", f"{PREFIX}/rollouts/{draw(segments)}/manifest", headers, b""
    return "POST", f"{PREFIX}/rollouts/{route}", headers, draw(raw_bodies)


@st.composite
def any_requests(draw: st.DrawFn) -> tuple[str, str, dict[str, bytes], bytes]:
    """Any method on any path, with any token or none, any content type and body."""
    method = draw(st.sampled_from(["POST", "GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]))
    path = draw(
        st.one_of(
            st.sampled_from([f"{PREFIX}/rollouts/retire", f"{PREFIX}/rollouts/delete"]),
            segments.map(lambda s: f"{PREFIX}/rollouts/{s}/manifest"),
            other_paths,
        )
    )
    headers: dict[str, bytes] = {}
    authorization = draw(st.one_of(st.just(f"Bearer {TOKEN}".encode()), bad_authorizations))
    if authorization is not None:
        headers["Authorization"] = authorization
    content_type = draw(content_types)
    if content_type is not None:
        headers["Content-Type"] = content_type.encode()
    return method, path, headers, draw(raw_bodies)


requests = st.one_of(aimed_requests(), any_requests())


# ------------------------------------------------------------------------------------------ harness
def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file of the lineage directory but the lock stripes (created once, never changed)."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if not p.name.startswith(".")}


def seed(store: FileLineageStore) -> None:
    """r0 Live, r1 Live with a failure, r2 Retired, r3 Absent; every other rollout Absent."""
    names = {p.name.split(".lineage.")[0] for p in store.directory.iterdir() if ".lineage." in p.name}
    store.delete(sorted(names | set(POOL)))
    store.record("r0", {"model_call_id": "m0", "value": 1})
    store.record_failure("r1", "m0", "timeout")
    store.retire(["r2"])


def authorized(headers: dict[str, bytes]) -> bool:
    value = headers.get("Authorization")
    if value is None:
        return False
    scheme, _, credentials = value.strip().partition(b" ")
    return scheme.lower() == b"bearer" and credentials.strip() == TOKEN.encode()


class Fuzz:
    """Sends one generated request and checks the three properties; counts requests."""

    def __init__(self, directory: Path, store: FileLineageStore, send: Callable[..., httpx.Response]) -> None:
        self.directory = directory
        self.store = store
        self.send = send
        self.sent = 0
        self.statuses: Counter[int] = Counter()
        seed(store)
        self.seeded = snapshot(directory)

    def check(self, request: tuple[str, str, dict[str, bytes], bytes]) -> None:
        method, path, headers, body = request
        before = snapshot(self.directory)
        if before != self.seeded:
            seed(self.store)
            before = snapshot(self.directory)
        try:
            answer = self.send(method, path, headers=headers, content=body)
        except httpx.LocalProtocolError:
            reject()  # the client refused to send it (e.g. a control character in a header)
        self.sent += 1
        self.statuses[answer.status_code] += 1
        where = f"{method} {path} {headers!r} {body!r:.80} -> {answer.status_code} {answer.text[:200]!r}"
        assert answer.status_code < 500, where
        public = method == "GET" and path in PUBLIC_DOCUMENT_PATHS  # the OpenAPI document and its page
        if not authorized(headers) and not public:
            # 401; or, for a head the HTTP parser itself refuses (httptools refuses control characters in
            # header values that h11 passes on), its 400 in the error shape, before any route or the token.
            parser_refused = answer.status_code == 400 and answer.json().get("error") == "InvalidHTTPRequest"
            assert answer.status_code == 401 or parser_refused, where
        removal = method == "POST" and path.endswith(("/rollouts/retire", "/rollouts/delete"))
        if not (removal and answer.status_code == 200):
            assert snapshot(self.directory) == before, f"a rejected request changed the directory: {where}"


def _examples(factor: float) -> settings:
    profile = profile_settings()
    return settings(profile, max_examples=max(10, int(profile.max_examples * factor)))


Request = tuple[str, str, dict[str, bytes], bytes]


def run(fuzz: Fuzz, budget: settings, *, aimed: Sequence[Request] = ()) -> None:
    """Run the fuzz with ``budget``; Hypothesis shrinks any failing request. ``aimed`` requests are sent
    first, as explicit examples."""

    def one(request: Request) -> None:
        fuzz.check(request)

    test = given(request=requests)(one)
    for request in aimed:
        test = example(request=request)(test)
    settings(budget)(test)()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileLineageStore]:
    handle = FileLineageStore(tmp_path)
    yield handle
    handle.close()


def in_process(app: Any) -> Callable[..., httpx.Response]:
    """Send through httpx's ASGI transport; an exception in the app becomes the 500 a server sends."""

    def send(method: str, path: str, **kw: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                return await client.request(method, path, **kw)

        return asyncio.run(go())

    return send


def test_fuzz_in_process(tmp_path: Path, store: FileLineageStore) -> None:
    fuzz = Fuzz(tmp_path, store, in_process(create_app(store, auth_token=TOKEN)))
    run(fuzz, _examples(5))
    print(f"\nHTTP fuzz (in process): {fuzz.sent} requests, statuses {dict(sorted(fuzz.statuses.items()))}")
    assert fuzz.sent >= 10


def test_fuzz_against_a_real_server(tmp_path: Path, store: FileLineageStore) -> None:
    with (
        ServerProcess(tmp_path, token=TOKEN) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        fuzz = Fuzz(tmp_path, store, http.request)
        run(fuzz, _examples(1))
    print(f"\nHTTP fuzz (real server): {fuzz.sent} requests, statuses {dict(sorted(fuzz.statuses.items()))}")
    assert fuzz.sent >= 10


class _CrashesOnR3(FileLineageStore):
    """Deliberately broken: a ledger bug (an uncaught ``KeyError``) when r3 is retired."""

    def retire(self, rollout_ids: Any) -> Any:
        if "r3" in list(rollout_ids):
            raise KeyError("r3")
        return super().retire(rollout_ids)


#: The request that reaches ``_CrashesOnR3``'s bug.
RETIRE_R3: Request = (
    "POST",
    f"{PREFIX}/rollouts/retire",
    {"Authorization": f"Bearer {TOKEN}".encode(), "Content-Type": b"application/json"},
    b'{"rollout_ids": ["r3"]}',
)


def test_the_fuzz_catches_a_server_error(tmp_path: Path) -> None:
    # Aimed at the broken case (an explicit example), so that the verdict does not depend on which
    # generated request comes when: the strategies promise no order (spec/kit/strategies.py).
    broken = _CrashesOnR3(tmp_path / "broken")
    fuzz = Fuzz(tmp_path / "broken", broken, in_process(create_app(broken, auth_token=TOKEN)))
    with pytest.raises(AssertionError, match="-> 500"):
        run(fuzz, settings(_examples(1), phases=[Phase.explicit]), aimed=[RETIRE_R3])
    broken.close()
    # The same request passes against the correct store, so the 500 is the bug's.
    correct = FileLineageStore(tmp_path / "correct")
    run(
        Fuzz(tmp_path / "correct", correct, in_process(create_app(correct, auth_token=TOKEN))),
        settings(_examples(1), phases=[Phase.explicit]),
        aimed=[RETIRE_R3],
    )
    correct.close()
