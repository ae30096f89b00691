"""The HTTP API's history of a workflow from the history database: who may ask, paging, the
definition on the first page, and its errors.

`GET /namespaces/{ns}/workflows/{wf}/history?limit=&continue=` is authorised like `kubectl get
workflow wf -n ns` (the verb `get` on that name): 401 comes before 403, and 403 before a bad
query string and before 404, so nothing of a name — not even whether it has a history — is
learnt without that access. Pages follow by the `continue` token, of the one workflow (uid) the
first page found; the page holding entry 0 holds the pinned definition (null when it was not
kept); a name without entries is 404; a token this API did not write is 400; an unreachable
database is 503.

Pure, as test_httpapi_job_history.py: the history is a list paged by a plain function (the real
query is contract-tested in tests/contract/test_workflow_history.py) and the reviews are stood in
for; tests/integration/test_cli_timeline_history.py asks the real API server and operator.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.unit.reviews import LEASE, Reviews, body
from vigil.api.guards import Guard
from vigil.api.histories import encode_workflow_cursor
from vigil.api.router import ApiServer
from vigil.core.access import Access, User
from vigil.core.history import (
    DEFAULT_PAGE_SIZE,
    WorkflowCursor,
    WorkflowEventRecord,
    WorkflowHistoryPage,
)
from vigil.core.ports import HistoryUnavailable

WHEN = datetime(2026, 8, 1, 1, 0, tzinfo=UTC)
PATH = "/namespaces/ns/workflows/etl/history"
PINNED = {"source": {"inline": True}, "steps": [{"id": "hold", "type": "wait", "wait": {"duration": "1s"}}]}


def entry(seq: int, *, uid: str = "uid-1", definition: dict[str, Any] | None = None) -> WorkflowEventRecord:
    at = WHEN + timedelta(seconds=seq)
    return WorkflowEventRecord(
        namespace="ns", workflow="etl", workflow_uid=uid, seq=seq, event="StepStarted", step="hold", attempt=1,
        at=at, data={"event": "StepStarted", "at": at.isoformat(), "step": "hold", "attempt": 1},
        definition=definition,
    )  # fmt: skip


class History:
    """ns/etl's entries as a list, paged the way the store pages them (by seq, keyed on the uid)."""

    def __init__(self, count: int, *, definition: dict[str, Any] | None = PINNED) -> None:
        self.rows = [entry(seq, definition=definition if seq == 0 else None) for seq in range(count)]
        self.asked: list[tuple[str, str, int, WorkflowCursor | None]] = []
        self.down = False

    def __call__(self, namespace: str, workflow: str, limit: int, after: WorkflowCursor | None) -> WorkflowHistoryPage:
        self.asked.append((namespace, workflow, limit, after))
        if self.down:
            raise HistoryUnavailable("connection refused")
        mine = [r for r in self.rows if (r.namespace, r.workflow) == (namespace, workflow)]
        if after is not None:
            mine = [r for r in mine if r.workflow_uid == after.workflow_uid and r.seq > after.seq]
        page = mine[:limit]
        more = len(mine) > limit
        return WorkflowHistoryPage(page, WorkflowCursor(page[-1].workflow_uid, page[-1].seq) if more else None)


def reviewer() -> Reviews:
    """alice may get workflow etl in ns; bob may get workflow other there, and list executions;
    nobody else anything."""
    granted = {
        "alice": {("get", "workflows", "ns", "etl"), ("get", "workflows", "ns", "missing")},
        "bob": {("get", "workflows", "ns", "other"), ("list", "executions", "ns", "")},
    }

    def grants(user: User, access: Access) -> bool:
        key = (access.verb, access.resource, access.namespace, access.name)
        return access.group == "vigil.dev" and key in granted.get(user.name, set())

    return Reviews(grants)


def api(history: History | None = None, stand_in: Reviews | None = None) -> ApiServer:
    checks = stand_in or reviewer()
    return ApiServer(
        leader=lambda: "op-1",
        find_execution=lambda _id: None,
        timeline=lambda _id: [],
        guard=Guard(authenticator=checks, authorizer=checks, leader_lease=LEASE),
        workflow_history=history if history is not None else History(3),
    )


def test_the_first_page_holds_the_entries_in_order_and_the_definition() -> None:
    status, kind, raw = api(History(3)).answer(PATH, token="t-alice")

    data = json.loads(raw)
    assert (status, kind) == (200, "application/json")
    assert (data["namespace"], data["workflow"], data["uid"], "continue" in data) == ("ns", "etl", "uid-1", False)
    assert data["definition"] == PINNED
    assert [e["seq"] for e in data["entries"]] == [0, 1, 2]
    assert data["entries"][1] == {"seq": 1, "entry": dict(entry(1).data)}


def test_continue_walks_every_page_and_only_the_first_holds_the_definition() -> None:
    history = History(7)
    server, seen, definitions = api(history), [], []
    query = "?limit=3"
    while True:
        data = body(server.answer(PATH + query, token="t-alice"))
        seen += [e["seq"] for e in data["entries"]]
        definitions.append(data.get("definition", "absent"))
        if "continue" not in data:
            break
        query = f"?limit=3&continue={data['continue']}"
    assert seen == list(range(7))
    assert definitions == [PINNED, "absent", "absent"]
    assert [after for *_, after in history.asked] == [None, WorkflowCursor("uid-1", 2), WorkflowCursor("uid-1", 5)]


def test_a_definition_not_kept_is_null_and_the_page_size_defaults() -> None:
    history = History(2, definition=None)
    data = body(api(history).answer(PATH, token="t-alice"))
    assert data["definition"] is None
    assert history.asked == [("ns", "etl", DEFAULT_PAGE_SIZE, None)]


def test_a_name_without_history_is_404_only_for_who_may_get_it() -> None:
    status, _, raw = api(History(3)).answer("/namespaces/ns/workflows/missing/history", token="t-alice")
    assert status == 404 and json.loads(raw)["reason"] == "NotFound"
    status, _, raw = api(History(3)).answer("/namespaces/ns/workflows/missing/history", token="t-bob")
    assert status == 403 and json.loads(raw)["detail"] == "bob may not get workflows.vigil.dev missing in namespace ns"


# (token, path) -> status: 404 for what is not a route, before any review; then 401, then 403
# (bob may get another workflow and list executions, not get this one), then the query string.
ACCESS_TABLE = [
    pytest.param(None, PATH, 401, id="no-token"),
    pytest.param("forged", PATH, 401, id="unknown-token"),
    pytest.param("t-bob", PATH, 403, id="another-workflow-is-not-this-one"),
    pytest.param("t-bob", PATH + "?limit=0", 403, id="forbidden-bad-query"),
    pytest.param("t-alice", "/namespaces/other/workflows/etl/history", 403, id="another-namespace"),
    pytest.param("t-alice", PATH + "/", 200, id="trailing-slash"),
    pytest.param("t-alice", PATH + "?limit=0", 400, id="bad-limit"),
    pytest.param("t-alice", PATH + "?continue=bm90LWEtdG9rZW4", 400, id="continue-garbage"),
    pytest.param("t-alice", PATH + "?continue=" + encode_workflow_cursor(WorkflowCursor("a b", 1)), 400, id="continue-bad-uid"),
    pytest.param("t-alice", "/namespaces/ns/workflows/ETL/history", 404, id="not-an-object-name"),
    pytest.param("t-alice", "/namespaces/ns/workflows/etl", 404, id="not-a-route"),
]  # fmt: skip


@pytest.mark.parametrize(("token", "path", "status"), ACCESS_TABLE)
def test_who_may_read_a_workflows_history(token: str | None, path: str, status: int) -> None:
    history, reviews = History(3), reviewer()
    answer = api(history, reviews).answer(path, token=token)
    assert answer[0] == status, answer
    if status != 200:
        assert history.asked == [] and b"StepStarted" not in answer[2]
    if status == 404:
        assert reviews.asked == []
    if status in (200, 400, 403) and token is not None and token != "forged":
        assert (reviews.asked[-1].verb, reviews.asked[-1].resource) == ("get", "workflows")


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
