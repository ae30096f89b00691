"""The published contract (vigil.api.openapi): committed as generated, served without a token,
and covering every call the clients make.

The fuzzing from the document, against the real application and stores, is
tests/queue/test_api_fuzz.py; every answer the unit and queue tests of the HTTP API produce is
checked against it as they run (tests/conformance.py).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conformance import conforms, documented
from tests.unit.reviews import LEASE, Reviews
from vigil.api.guards import Guard
from vigil.api.openapi import document, rendered
from vigil.api.router import OPENAPI_PATH, ApiServer
from vigil.cli.operatorapi import HistoryNotShown, OperatorApi
from vigil.client import ApiError, Client

COMMITTED = Path(__file__).parents[2] / "docs" / "reference" / "openapi.json"
REGENERATE = "make openapi  (python -m vigil.api.openapi > docs/reference/openapi.json)"


def test_the_committed_document_is_the_generated_one() -> None:
    assert COMMITTED.read_bytes() == rendered(), f"docs/reference/openapi.json is stale: run {REGENERATE}"


def test_it_is_served_to_anyone_as_json() -> None:
    nobody = Reviews(lambda user, access: False)
    server = ApiServer(
        leader=lambda: None, find_execution=lambda _id: None, timeline=lambda _id: [],
        guard=Guard(authenticator=nobody, authorizer=nobody, leader_lease=LEASE),
    )  # fmt: skip
    status, content_type, body = server.answer(OPENAPI_PATH, token=None)
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body) == document()
    assert nobody.asked == [], "serving the contract asks no review"


def test_paths_not_in_the_document_are_not_matched() -> None:
    assert documented("GET", "/v1/jobs/job-1") == "/v1/jobs/{id}"
    assert documented("PUT", "/v1/jobs/job-1") is None
    assert documented("GET", "/v1/jobz/job-1") is None
    assert documented("GET", "/namespaces/Not_A_Namespace/executions/e-1") is None


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every (method, path with query) the clients send, answered as an unreachable server."""
    sent: list[tuple[str, str]] = []

    def urlopen(request: urllib.request.Request, timeout: float | None = None, context: Any = None) -> Any:
        url = urllib.parse.urlsplit(request.full_url)
        sent.append((request.get_method(), url.path + (f"?{url.query}" if url.query else "")))
        raise urllib.error.URLError("recorded, not sent")

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    return sent


def _each(calls: list[Callable[[], object]], errors: tuple[type[Exception], ...]) -> None:
    for call in calls:
        with pytest.raises(errors):
            call()


def test_every_call_of_the_clients_is_a_documented_operation(calls: list[tuple[str, str]]) -> None:
    client = Client("http://operator.test:8443", token="t")
    q = ("shop", "orders")
    _each([
        lambda: client.submit(namespace="shop", queue="orders", task="t", payload={"a": 1},
                              run_at=datetime(2026, 12, 1, tzinfo=UTC), priority="high", max_attempts=3,
                              idempotency_key="k", tenant="shop"),
        lambda: client.job("job-1"), lambda: client.job("job-1", queue=q),
        lambda: client.delete_job("job-1"), lambda: client.delete_job("job-1", queue=q),
        lambda: client.execution("ex-1"), lambda: client.execution("ex-1", queue=q),
        lambda: client.cancel("ex-1"), lambda: client.cancel("ex-1", queue=q),
        lambda: client.retry("ex-1"), lambda: client.retry("ex-1", queue=q),
        lambda: client.queue_jobs("shop", "orders", limit=5, cont="abc"),
        lambda: client.dead_letters("shop", "orders", limit=5, cont="abc"),
        lambda: client.queue_stats("shop", "orders"),
    ], (ApiError,))  # fmt: skip
    cli = OperatorApi("http://operator.test:8443", "t")
    _each([
        lambda: cli.job_executions("team-a", "nightly", limit=10, cont="abc"),
        lambda: cli.workflow_history("team-a", "release"),
        lambda: cli.attempt_log("team-a", "nightly-1", attempt=2), lambda: cli.attempt_log("team-a", "nightly-1"),
    ], (HistoryNotShown,))  # fmt: skip
    assert len(calls) == 18
    missing = [(m, p) for m, p in calls if documented(m, p.partition("?")[0]) is None]
    assert missing == [], f"the clients call operations the document does not have: {missing}"
    for method, target in calls:
        path, _, query = target.partition("?")
        template = documented(method, path)
        assert template is not None
        operation = document()["paths"][template][method.lower()]
        named = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        sent = set(urllib.parse.parse_qs(query))
        assert sent <= named, f"{method} {template}: undocumented query parameters {sorted(sent - named)}"


# --- answers conform ---------------------------------------------------------------------


def test_a_body_outside_the_document_does_not_conform() -> None:
    """The check can fail: a member the model does not have, or a status not listed."""
    extra = (200, "application/json", json.dumps({"namespace": "a", "queue": "b", "breakdown": [], "x": 1}).encode())
    with pytest.raises(AssertionError, match="x"):
        conforms("GET", "/v1/namespaces/a/taskqueues/b/stats", extra)
    with pytest.raises(AssertionError, match="418"):
        conforms("GET", "/v1/namespaces/a/taskqueues/b/stats", (418, "application/json", b"{}"))
