"""The HTTP API's list of a job's executions from the history database: routing, who may ask,
paging and its errors.

`GET /namespaces/{ns}/scheduledjobs/{job}/executions?limit=&continue=` is authorised like
`kubectl get executions -n ns` (the verb `list`); 401 comes before 403, and 403 before any
complaint about the query string, so nothing is learnt without access. Pages follow each other
by the `continue` token to the end; a bad limit, an unknown parameter or a token this API did
not write is 400; a history database that cannot be reached is 503.

Pure: the history is a list paged by a plain function (the real query is contract-tested in
tests/contract/test_job_history.py), and the reviews are stood in for as in test_httpapi.py;
tests/integration/test_http_access.py asks the real API server. One case goes through the real
transport, to see the query string reach the route.
"""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from tests.unit.reviews import LEASE, Reviews, body
from vigil.api.guards import Guard
from vigil.api.histories import encode_cursor
from vigil.api.router import ApiServer
from vigil.core.access import Access, User
from vigil.core.history import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    AttemptState,
    ExecutionPage,
    ExecutionSummary,
    HistoryCursor,
)
from vigil.core.ports import HistoryUnavailable

WHEN = datetime(2026, 8, 1, 1, 0, tzinfo=UTC)
PATH = "/namespaces/ns/scheduledjobs/reconcile/executions"


def summary(index: int) -> ExecutionSummary:
    return ExecutionSummary(
        execution_id=f"ex-{index:03d}", namespace="ns", job="reconcile", job_uid="u1", priority="normal",
        scheduled_for=WHEN + timedelta(minutes=index), state=AttemptState.SUCCEEDED, attempts=1,
        reason="Completed", started_at=WHEN + timedelta(minutes=index, seconds=1), pod=f"ex-{index:03d}-1",
    )  # fmt: skip


class History:
    """A job's history as a list, paged the way the store pages it (newest first, keyset)."""

    def __init__(self, count: int) -> None:
        self.rows = sorted((summary(i) for i in range(count)), key=lambda s: s.scheduled_for, reverse=True)
        self.asked: list[tuple[str, str, int, HistoryCursor | None]] = []
        self.down = False

    def __call__(self, namespace: str, job: str, limit: int, after: HistoryCursor | None) -> ExecutionPage:
        self.asked.append((namespace, job, limit, after))
        if self.down:
            raise HistoryUnavailable("connection refused")
        mine = [s for s in self.rows if (s.namespace, s.job) == (namespace, job)]
        if after is not None:
            mine = [s for s in mine if (s.scheduled_for, s.execution_id) < (after.scheduled_for, after.execution_id)]
        page = mine[:limit]
        more = len(mine) > limit
        return ExecutionPage(page, HistoryCursor(page[-1].scheduled_for, page[-1].execution_id) if more else None)


def reviewer() -> Reviews:
    """alice may list executions in ns; bob may only get them there; nobody else anything."""

    def grants(user: User, access: Access) -> bool:
        verb = {"alice": "list", "bob": "get"}.get(user.name)
        return (access.verb, access.group, access.resource, access.namespace) == (verb, "vigil.dev", "executions", "ns")

    return Reviews(grants)


def api(history: History | None = None, stand_in: Reviews | None = None) -> ApiServer:
    checks = stand_in or reviewer()
    return ApiServer(
        leader=lambda: "op-1",
        find_execution=lambda _id: None,
        timeline=lambda _id: [],
        guard=Guard(authenticator=checks, authorizer=checks, leader_lease=LEASE),
        job_executions=history if history is not None else History(3),
    )


def test_a_page_holds_the_jobs_executions_newest_first_with_their_outcome() -> None:
    status, kind, raw = api(History(3)).answer(PATH, token="t-alice")

    data = json.loads(raw)
    assert (status, kind) == (200, "application/json")
    assert (data["namespace"], data["job"], "continue" in data) == ("ns", "reconcile", False)
    assert [e["executionId"] for e in data["executions"]] == ["ex-002", "ex-001", "ex-000"]
    assert data["executions"][0] == {
        "executionId": "ex-002", "jobUid": "u1", "priority": "normal", "scheduledFor": "2026-08-01T01:02:00+00:00",
        "state": "succeeded", "attempts": 1, "reason": "Completed", "startedAt": "2026-08-01T01:02:01+00:00",
        "finishedAt": None, "pod": "ex-002-1", "error": "",
    }  # fmt: skip


def test_continue_walks_every_page_to_the_end_without_a_repeat() -> None:
    server, seen, pages = api(History(7)), [], 0
    query = "?limit=3"
    while True:
        data = body(server.answer(PATH + query, token="t-alice"))
        seen += [e["executionId"] for e in data["executions"]]
        pages += 1
        if "continue" not in data:
            break
        query = f"?limit=3&continue={data['continue']}"
    assert seen == [f"ex-{i:03d}" for i in reversed(range(7))] and pages == 3


def test_the_page_size_defaults_and_is_capped() -> None:
    history = History(1)
    server = api(history)
    for query, limit in (("", DEFAULT_PAGE_SIZE), (f"?limit={MAX_PAGE_SIZE}", MAX_PAGE_SIZE), ("?limit=1", 1)):
        assert server.answer(PATH + query, token="t-alice")[0] == 200
        assert history.asked[-1] == ("ns", "reconcile", limit, None)


@pytest.mark.parametrize(
    ("query", "words"),
    [
        pytest.param("?limit=0", "limit must be a whole number from 1 to 500", id="limit-zero"),
        pytest.param(f"?limit={MAX_PAGE_SIZE + 1}", "limit must be", id="limit-over-the-maximum"),
        pytest.param("?limit=-1", "limit must be", id="limit-negative"),
        pytest.param("?limit=ten", "limit must be", id="limit-not-a-number"),
        pytest.param("?limit=%C2%B2", "limit must be", id="limit-a-superscript-digit"),
        pytest.param("?limit=", "limit must be", id="limit-empty"),
        pytest.param("?limit=1&limit=2", "once", id="limit-twice"),
        pytest.param("?page=2", "unknown parameter 'page'", id="unknown-parameter"),
        pytest.param("?continue=not-a-token", "continue is not a token", id="continue-garbage"),
        pytest.param("?continue=" + encode_cursor(HistoryCursor(WHEN, "NOT AN ID")), "continue", id="continue-bad-id"),
        pytest.param("?continue=MjAyNnxleC0x", "continue is not a token", id="continue-no-time"),
    ],
)
def test_a_bad_query_is_400_naming_the_parameter(query: str, words: str) -> None:
    history = History(3)
    status, _, raw = api(history).answer(PATH + query, token="t-alice")
    assert status == 400 and words in json.loads(raw)["detail"], raw
    assert history.asked == []


# (token, path) -> status: 404 for what is not a route, before any review; then 401, then 403
# (bob may get executions but not list them), and only then the query string.
ACCESS_TABLE = [
    pytest.param(None, PATH, 401, id="no-token"),
    pytest.param("forged", PATH, 401, id="unknown-token"),
    pytest.param(None, PATH + "?limit=0", 401, id="no-token-bad-query"),
    pytest.param("t-bob", PATH, 403, id="get-is-not-list"),
    pytest.param("t-bob", PATH + "?limit=0", 403, id="forbidden-bad-query"),
    pytest.param("t-alice", "/namespaces/other/scheduledjobs/reconcile/executions", 403, id="another-namespace"),
    pytest.param("t-alice", PATH + "/", 200, id="trailing-slash"),
    pytest.param("t-alice", "/namespaces/ns/scheduledjobs/Reconcile/executions", 404, id="not-an-object-name"),
    pytest.param("t-alice", "/namespaces/ns/scheduledjobs//executions", 404, id="no-job"),
    pytest.param("t-alice", "/namespaces/ns/scheduledjobs/reconcile", 404, id="not-a-route"),
]


@pytest.mark.parametrize(("token", "path", "status"), ACCESS_TABLE)
def test_who_may_list_a_jobs_history(token: str | None, path: str, status: int) -> None:
    history, reviews = History(3), reviewer()
    answer = api(history, reviews).answer(path, token=token)
    assert answer[0] == status, answer
    if status != 200:
        assert history.asked == [] and b"ex-00" not in answer[2]
    if status == 404:
        assert reviews.asked == []
    if status in (200, 403) and token == "t-alice":
        assert reviews.asked[-1].verb == "list" and reviews.asked[-1].name == ""


def test_the_forbidden_answer_names_the_permission_missing() -> None:
    status, _, raw = api().answer(PATH, token="t-bob")
    assert status == 403 and json.loads(raw)["detail"] == "bob may not list executions.vigil.dev in namespace ns"


def test_an_unreachable_history_is_503_and_a_review_that_cannot_be_made_too() -> None:
    history = History(3)
    history.down = True
    status, _, raw = api(history).answer(PATH, token="t-alice")
    assert status == 503 and json.loads(raw)["reason"] == "HistoryUnavailable"
    reviews = reviewer()
    reviews.down = True
    assert api(History(3), reviews).answer(PATH, token="t-alice")[0] == 503


def test_without_a_history_the_route_does_not_exist() -> None:
    checks = reviewer()
    server = ApiServer(
        leader=lambda: None, find_execution=lambda _id: None, timeline=lambda _id: [],
        guard=Guard(authenticator=checks, authorizer=checks, leader_lease=LEASE),
    )  # fmt: skip
    assert server.answer(PATH, token="t-alice")[0] == 404 and checks.asked == []


def test_the_query_string_reaches_the_route_through_the_transport() -> None:
    history = History(5)
    served = api(history).serve(0)
    try:
        port = served.server_address[1]
        request = urllib.request.Request(f"http://127.0.0.1:{port}{PATH}?limit=2")
        request.add_header("Authorization", "Bearer t-alice")
        with urllib.request.urlopen(request, timeout=10) as response:
            data = json.loads(response.read())
    finally:
        served.shutdown()
        served.server_close()
    assert len(data["executions"]) == 2 and "continue" in data
    assert history.asked == [("ns", "reconcile", 2, None)]


def test_the_other_routes_ignore_a_query_string_as_before() -> None:
    server = api()
    assert server.answer("/healthz?probe=1") == (200, "text/plain", b"ok\n")
    assert server.answer("/nothing?limit=5", token="t-alice")[0] == 404
    assert server.answer("/leader?x", token="t-alice")[0] == 403
