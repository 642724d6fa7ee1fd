"""schemathesis against a real ``capture-ledger serve``: the OpenAPI document says what the server enforces
(R-HTTP-1..4, R-HTTP-6).

schemathesis (the OpenAPI fuzzer built on Hypothesis) reads the served document, behind the token, and sends
every operation positive data (schema-valid: it must be accepted) and negative data (schema-invalid: it
must be rejected), with every built-in check: no 5xx, each status and body declared in the document, the
body matching its schema, content types, 405 with ``Allow``, a missing or unrelated token refused. A
document that leaves a rule undeclared fails here: an ID such as ``""`` sent as valid gets a 400 (the
rollout ID's pattern and length), a body FastAPI cannot read answers outside ``ErrorBody``.

The tests are generated from the document ``create_app`` builds in this process (schemathesis's fixture
loader, ``schemathesis.pytest.from_fixture``, fails under pytest 9 with "'Function' object has no attribute
'_nodeid'"), and a separate test shows that the served document is that same document.

Deterministic: Hypothesis derandomized, no example database, a pinned ``max_examples`` (``EXAMPLES``) for
the fuzzing phase; the coverage phase adds schemathesis's fixed boundary cases (1 and 200 characters; 0, 1,
4095, 4096 and 4097 items). The hand-written fuzz (``tests/impl/http/test_http_fuzz.py``) stays: it checks
what schemathesis cannot (a near-miss token, a rejected request leaving the directory unchanged, state), see
docs/http.md §OpenAPI.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from capture_ledger.impl.http import OPENAPI_ROUTE, PREFIX
from capture_ledger.impl.http.server import create_app
from capture_ledger.impl.simulate import ServerProcess
from capture_ledger.reference import ReferenceLedger
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

TOKEN = "schemathesis-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: Examples of the fuzzing phase per operation; with the coverage phase, about 400 requests in all.
EXAMPLES = 60
#: Statuses per operation, filled as the tests run (printed by the last test).
STATUSES: Counter[tuple[str, int]] = Counter()


def _config() -> SchemathesisConfig:
    return SchemathesisConfig.from_dict(
        {
            "headers": AUTH,
            # A valid ID that an earlier generated retire retired is 410 (R-READ-3): state, not schema.
            "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "410", "5xx"]}},
            "warnings": False,
        }
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory: Path = tmp_path_factory.mktemp("schemathesis")
    with ServerProcess(directory, token=TOKEN) as server:
        yield server


#: The document every ``create_app`` serves, whatever the ledger.
DOCUMENT = create_app(ReferenceLedger(), auth_token=TOKEN).openapi()
schema = schemathesis.openapi.from_dict(DOCUMENT, config=_config())


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_server_does_what_its_document_says(case: schemathesis.Case[Any], served: ServerProcess) -> None:
    response = case.call_and_validate(base_url=served.url)  # every built-in check schemathesis has
    STATUSES[(case.operation.label, response.status_code)] += 1
    assert response.status_code < 500


def test_the_served_document_declares_the_id_rule_and_every_status(served: ServerProcess) -> None:
    document = httpx.get(f"{served.url}{PREFIX}{OPENAPI_ROUTE}", headers=AUTH).json()
    assert document == DOCUMENT  # the tests above were generated from what the server serves
    manifest = document["paths"][f"{PREFIX}/rollouts/{{rollout_id}}/manifest"]["get"]
    (parameter,) = manifest["parameters"]
    rule = parameter["schema"]
    assert (rule["minLength"], rule["maxLength"], rule["pattern"]) == (1, 200, "^[A-Za-z0-9][A-Za-z0-9._-]*$")
    items = document["components"]["schemas"]["RemovalRequest"]["properties"]["rollout_ids"]
    assert items["items"]["pattern"] == rule["pattern"]
    assert (items["minItems"], items["maxItems"]) == (1, 4096)
    for operation in ("retire", "delete"):
        statuses = set(document["paths"][f"{PREFIX}/rollouts/{operation}"]["post"]["responses"])
        assert statuses == {"200", "400", "401", "408", "413", "415", "422", "500", "503"}
    print(f"\nschemathesis: {sum(STATUSES.values())} requests so far, {dict(sorted(STATUSES.items()))}")
