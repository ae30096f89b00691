"""The HTTP API fuzzed from its own OpenAPI document (vigil.api.openapi) with schemathesis.

The real server (ApiServer.serve: uvicorn and the ASGI application, on a free port) over a real
PostgreSQL queue store (a migrated database per test) and a real SQLite history database. The
API server's TokenReview and SubjectAccessReview are stood in for (tests/unit/reviews.py):
`t-alice` may do everything everywhere, `t-bob` is authenticated and may do nothing, any other
token is nobody; tests/integration/test_http_access.py and test_queue_access.py ask the real
API server. The approval callback is served with a key no fuzzed token is signed with (every
decision is 403 or 400: the token and body parsing are what is fuzzed there);
tests/unit/test_httpapi.py and tests/integration/test_approval_callback.py decide real ones.

For every operation, requests that fit the document and requests that do not:

* no answer is a 5xx (the server's 503s need a dependency down, which none is here);
* every answer is one the document describes: a listed status, its content type, its schema,
  its headers;
* with no token (or one that is nobody's) the queue store is never called; with a token lacking
  the verb it is not called either, by id alone (/v1/jobs/ID, /v1/executions/ID...) included.

A few hundred requests in all; `stress` runs the long variant.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from typing import Any, cast

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conformance import conforms
from tests.contract.postgres import PostgresServer
from tests.queue.conftest import conninfo
from tests.queue.test_api import Clock
from tests.unit.reviews import LEASE, Reviews
from vigil.api.approvals import ApprovalCallback
from vigil.api.guards import Guard
from vigil.api.openapi import document
from vigil.api.queue import JobStore, QueueApi
from vigil.api.router import ApiServer
from vigil.api.transport import Serving
from vigil.history.store import SqlHistory
from vigil.queue.store import QueueStore

pytestmark = pytest.mark.postgres

SCHEMA = schemathesis.openapi.from_dict(document())
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]
CHECKS = [
    not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
    response_headers_conformance,
]  # fmt: skip
#: Examples per operation and token: about 26 operations, so a few hundred requests in all.
SHORT = 12
LONG = 300


class CountingStore:
    """The queue store, every method call counted by name."""

    def __init__(self, store: QueueStore) -> None:
        self._store = store
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if not callable(found):
            return found

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return found(*args, **kwargs)

        return counted


class Served:
    def __init__(self, serving: Serving, store: CountingStore) -> None:
        self.base_url = f"http://127.0.0.1:{serving.server_address[1]}"
        self.store = store
        self.session = requests.Session()


@pytest.fixture(scope="module")
def server(postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server, database and history for the module (each test resets the count): what
    earlier tests submitted is there for later ones to find."""
    store = QueueStore(conninfo(postgres, postgres.create_database()))
    store.migrate()
    history = SqlHistory(f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'history.db'}", retention_days=30)
    history.migrate()
    reviews = Reviews(lambda user, access: user.name == "alice")
    counting = CountingStore(store)
    server = ApiServer(
        leader=lambda: "op-1",
        find_execution=lambda _id: None,
        timeline=history.timeline,
        guard=Guard(authenticator=reviews, authorizer=reviews, leader_lease=LEASE),
        job_executions=lambda ns, job, limit, after: history.job_executions(ns, job, limit=limit, after=after),
        workflow_history=lambda ns, wf, limit, after: history.workflow_history(ns, wf, limit=limit, after=after),
        log_tail=lambda ns, execution_id, attempt: history.log_tail(ns, execution_id, attempt=attempt),
        queue_api=QueueApi(cast(JobStore, counting), clock=Clock(), authenticator=reviews, authorizer=reviews),
        approvals=ApprovalCallback(
            keys=lambda: [bytes(range(32))], clock=Clock(), find_workflow=lambda namespace, name: None,
            submit=lambda namespace, name, record: [], may_approve=lambda namespace, workflow, approver: False,
        ),
    )
    serving = server.serve(0)
    try:
        yield Served(serving, counting)
    finally:
        serving.shutdown()
        serving.server_close()
        history.close()


@pytest.fixture
def served(server: Served) -> Served:
    server.store.calls.clear()
    return server


def fuzz(
    served: Served, operation: Any, *, token: str | None, examples: int, namespace: str | None = None
) -> None:
    """`examples` requests that fit the document and that do not, each answer checked; in
    `namespace` when given (for the operations that name one)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    named = "{namespace}" in operation.path and namespace is not None
    fixed = {"path_parameters": {"namespace": namespace}} if named else {}
    cases = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE, **fixed), operation.as_strategy(GenerationMode.NEGATIVE, **fixed)
    )

    @given(case=cases)
    @settings(
        max_examples=examples, deadline=None, database=None, derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )  # fmt: skip
    def one(case: Any) -> None:
        response = case.call(base_url=served.base_url, session=served.session, headers=headers, timeout=30)
        case.validate_response(response, checks=CHECKS)

    one()


def label(operation: Any) -> str:
    return f"{operation.method.upper()} {operation.path}"


@pytest.mark.parametrize("operation", OPERATIONS, ids=label)
def test_every_answer_conforms_and_none_is_a_server_error(served: Served, operation: Any) -> None:
    fuzz(served, operation, token="t-alice", examples=SHORT)


@pytest.mark.parametrize("operation", OPERATIONS, ids=label)
def test_without_a_token_the_store_is_never_called(served: Served, operation: Any) -> None:
    for token in (None, "t-nobody"):
        fuzz(served, operation, token=token, examples=max(2, SHORT // 2))
    assert served.store.calls == collections.Counter()


@pytest.mark.parametrize("operation", OPERATIONS, ids=label)
def test_without_the_verb_the_store_is_not_called(served: Served, operation: Any) -> None:
    """Within a queue, by id alone, for a submission or a listing: not at all."""
    fuzz(served, operation, token="t-bob", examples=SHORT)
    assert served.store.calls == collections.Counter(), f"{label(operation)} called {dict(served.store.calls)}"


def call(served: Served, method: str, path: str, body: Any = None) -> tuple[int, str, bytes]:
    """`method` on `path` as alice, checked against the document (conforms), then its answer."""
    got = served.session.request(
        method, served.base_url + path, json=body, headers={"Authorization": "Bearer t-alice"}, timeout=30
    )
    answer = (got.status_code, got.headers["Content-Type"].partition(";")[0], got.content)
    conforms(method, path, answer)
    return answer


def test_the_answers_about_records_conform(served: Served) -> None:
    """What fuzzing rarely reaches (ids that exist): a job's life through every route, each answer
    checked against the document."""
    submitted = json.loads(call(served, "POST", "/v1/jobs", {
        "namespace": "shop", "queue": "orders", "task": "ship", "payload": {"order": 7}, "priority": "low",
        "maxAttempts": 2, "idempotencyKey": "order-7",
    })[2])  # fmt: skip
    assert call(served, "POST", "/v1/jobs", {"namespace": "shop", "queue": "orders", "task": "ship",
                                             "payload": {"order": 7}, "priority": "low", "maxAttempts": 2,
                                             "idempotencyKey": "order-7"})[0] == 200  # fmt: skip
    recurring = call(served, "POST", "/v1/jobs", {"namespace": "shop", "queue": "orders", "task": "tally",
                                                  "cron": "0 3 * * *", "expectedMaxInterval": "26h"})  # fmt: skip
    assert recurring[0] == 201
    job, execution = submitted["jobId"], submitted["executionId"]
    in_queue = "/v1/namespaces/shop/taskqueues/orders"
    for path in (f"/v1/jobs/{job}", f"{in_queue}/jobs/{job}", f"/v1/executions/{execution}",
                 f"{in_queue}/executions/{execution}", f"{in_queue}/jobs?limit=1", f"{in_queue}/dead-letters",
                 f"{in_queue}/stats"):  # fmt: skip
        assert call(served, "GET", path)[0] == 200, path
    page = json.loads(call(served, "GET", f"{in_queue}/jobs?limit=1")[2])
    assert call(served, "GET", f"{in_queue}/jobs?limit=1&continue={page['continue']}")[0] == 200
    assert call(served, "POST", f"/v1/executions/{execution}/cancel", {})[0] == 200
    assert call(served, "POST", f"{in_queue}/executions/{execution}/cancel")[0] == 409
    assert call(served, "POST", f"{in_queue}/executions/{execution}/retry", {})[0] == 200
    assert call(served, "DELETE", f"{in_queue}/jobs/{job}")[0] == 200


def test_the_store_count_sees_a_call(served: Served) -> None:
    """The counter the check above relies on does count: one allowed listing calls the store."""
    got = served.session.get(
        f"{served.base_url}/v1/namespaces/shop/taskqueues/orders/jobs", headers={"Authorization": "Bearer t-alice"}
    )
    assert got.status_code == 200
    assert served.store.calls == collections.Counter({"queue_jobs": 1})


@pytest.mark.stress
@pytest.mark.parametrize("operation", OPERATIONS, ids=label)
def test_long_fuzz(served: Served, operation: Any) -> None:
    fuzz(served, operation, token="t-bob", examples=LONG)
    assert served.store.calls == collections.Counter(), f"{label(operation)} called {dict(served.store.calls)}"
    fuzz(served, operation, token="t-alice", examples=LONG)
