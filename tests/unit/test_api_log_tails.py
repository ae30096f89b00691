"""The HTTP API's stored log tails: `GET /namespaces/{ns}/executions/{id}/log[?attempt=N]`, what
`kubectl vigil logs` reads once retention has deleted the attempt's pod.

Who may read it is who may `kubectl logs` there (`get pods/log`): 403 comes before any complaint
about the query string and before the database is asked, so nothing is learnt without it. The
tails are read from a real history database (SQLite, migrated); the reviews are stood in for as
in test_httpapi.py (tests/integration/test_http_access.py asks the real API server).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.unit.reviews import LEASE, Reviews, body
from vigil.api.guards import Guard
from vigil.api.router import ApiServer
from vigil.core.access import Access, User
from vigil.core.logtail import LogTail, log_tail_from_json
from vigil.history.store import SqlHistory

SCHEDULED = datetime(2026, 12, 5, 2, 0, tzinfo=UTC)
PATH = "/namespaces/team-a/executions/nightly-29000000/log"


def a_tail(attempt: int, text: str) -> LogTail:
    return LogTail(
        execution_id="nightly-29000000", attempt=attempt, namespace="team-a", job="nightly",
        pod=f"nightly-29000000-{attempt}", scheduled_for=SCHEDULED, captured_at=SCHEDULED + timedelta(minutes=3),
        text=text, truncated=False, log_bytes=len(text),
    )  # fmt: skip


@pytest.fixture
def history(tmp_path: Path) -> Iterator[SqlHistory]:
    store = SqlHistory(f"sqlite:///{tmp_path / 'history.db'}", retention_days=30)
    store.migrate()
    store.write_log_tail(a_tail(1, "first try\nboom\n"))
    store.write_log_tail(a_tail(2, "second try\nboom again\n"))
    yield store
    store.close()


def api(history: SqlHistory, checks: Reviews) -> ApiServer:
    return ApiServer(
        leader=lambda: "op-1",
        find_execution=lambda _id: None,
        timeline=lambda _id: [],
        guard=Guard(authenticator=checks, authorizer=checks, leader_lease=LEASE),
        log_tail=lambda namespace, execution_id, attempt: history.log_tail(namespace, execution_id, attempt=attempt),
    )


def pod_log_readers() -> Reviews:
    """alice may read pod logs in team-a; bob may read executions there, not pod logs."""

    def grants(user: User, access: Access) -> bool:
        if user.name == "alice":
            return (access.resource, access.subresource, access.verb, access.namespace) == ("pods", "log", "get", "team-a")
        return user.name == "bob" and access.resource == "executions"

    return Reviews(grants)


def test_the_latest_stored_attempt_is_read_or_the_one_asked_for(history: SqlHistory) -> None:
    server = api(history, pod_log_readers())
    latest = log_tail_from_json(body(server.answer(PATH, token="t-alice")))
    assert (latest.attempt, latest.text) == (2, "second try\nboom again\n")
    first = log_tail_from_json(body(server.answer(PATH + "?attempt=1", token="t-alice")))
    assert (first.attempt, first.text, first.pod) == (1, "first try\nboom\n", "nightly-29000000-1")


def test_none_stored_is_404_naming_what_was_asked(history: SqlHistory) -> None:
    server = api(history, pod_log_readers())
    status, kind, raw = server.answer(PATH + "?attempt=3", token="t-alice")
    assert (status, kind, json.loads(raw)["reason"]) == (404, "application/problem+json", "NotFound")
    other = "/namespaces/team-a/executions/other-1/log"
    assert server.answer(other, token="t-alice")[0] == 404


def test_a_caller_who_may_not_read_pod_logs_learns_nothing(history: SqlHistory) -> None:
    checks = pod_log_readers()
    server = api(history, checks)
    for query in ("", "?attempt=1", "?attempt=zero", "?other=1"):
        status, _, raw = server.answer(PATH + query, token="t-bob")
        assert status == 403 and "pods" in json.loads(raw)["detail"], query
    assert server.answer(PATH, token=None)[0] == 401
    in_another_namespace = "/namespaces/team-b/executions/nightly-29000000/log"
    assert server.answer(in_another_namespace, token="t-alice")[0] == 403


@pytest.mark.parametrize("query", ["?attempt=0", "?attempt=-1", "?attempt=x", "?attempt=1&attempt=2",
                                   "?attempt=99999", "?tail=5"])  # fmt: skip
def test_a_bad_query_is_400_naming_the_parameter(history: SqlHistory, query: str) -> None:
    status, _, raw = api(history, pod_log_readers()).answer(PATH + query, token="t-alice")
    assert status == 400 and "attempt" in json.loads(raw)["detail"]
