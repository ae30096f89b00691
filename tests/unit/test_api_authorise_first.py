"""Authorised before any store is touched (issue 37, item 4; vigil/api/).

A caller whose token the API server accepts but who lacks the verb is refused (403) on every
route — the read API's namespaced routes and its by-id route, the approval callback, and the
volume tier's routes within a queue and by id alone — and no store method is called: not the
history database, not the Execution or Workflow caches, not the queue store. By id alone, the
read API learns the namespaces to authorise from memory (`execution_namespaces`: the operator's
watch-fed cache), and the volume tier authorises the verb in every namespace (or a
ServiceAccount's own) before the store is read. tests/queue/test_authorise_first_sql.py counts
the statements real PostgreSQL receives.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from tests.unit.reviews import Reviews
from tests.unit.test_api_problems import RecordingStore
from tests.unit.test_httpapi import LEASE, FakeWorkflows, approval_token, approvals_server
from vigil.api.guards import Guard
from vigil.api.queue import JobStore, QueueApi
from vigil.api.router import ApiServer
from vigil.core.access import Access, User
from vigil.core.memory import FakeClock

QUEUE = "/v1/namespaces/shop/taskqueues/orders"


class Recorder:
    """Every read the read API may make, recorded; each answers nothing."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> None:
            self.calls.append(name)

        return call


def api(*, may: bool) -> tuple[ApiServer, Recorder, RecordingStore]:
    """The API over recording stores; bob is who calls, holding every verb when `may`."""
    reads, store = Recorder(), RecordingStore()
    reviews = Reviews(lambda user, access: may)
    built = ApiServer(
        leader=lambda: "op-1",
        find_execution=reads.find_execution,
        get_execution=reads.get_execution,
        execution_namespaces=lambda execution_id: ["ns"],  # memory, not a store: the leader's cache
        timeline=reads.timeline,
        job_executions=reads.job_executions,
        workflow_history=reads.workflow_history,
        guard=Guard(authenticator=reviews, authorizer=reviews, leader_lease=LEASE),
        queue_api=QueueApi(cast(JobStore, store), clock=FakeClock(), authenticator=reviews, authorizer=reviews),
    )
    return built, reads, store


ROUTES = [
    pytest.param("GET", "/namespaces/ns/executions/ex-abc", id="an execution in its namespace"),
    pytest.param("GET", "/executions/ex-abc", id="an execution by id alone"),
    pytest.param("GET", "/executions/ex-gone", id="an execution by id alone known only to the history"),
    pytest.param("GET", "/v1/jobs/job-1", id="a job by id alone"),
    pytest.param("DELETE", "/v1/jobs/job-1", id="deleting a job by id alone"),
    pytest.param("GET", "/v1/executions/ex-1", id="a queue's execution by id alone"),
    pytest.param("POST", "/v1/executions/ex-1/cancel", id="cancelling by id alone"),
    pytest.param("POST", "/v1/executions/ex-1/retry", id="retrying by id alone"),
    pytest.param("GET", "/namespaces/ns/scheduledjobs/nightly/executions", id="a job's executions"),
    pytest.param("GET", "/namespaces/ns/workflows/etl/history", id="a workflow's history"),
    pytest.param("POST", "/v1/jobs", id="a submission"),
    pytest.param("GET", f"{QUEUE}/jobs", id="a queue's jobs"),
    pytest.param("GET", f"{QUEUE}/dead-letters", id="a queue's dead letters"),
    pytest.param("GET", f"{QUEUE}/stats", id="a queue's stats"),
    pytest.param("GET", f"{QUEUE}/jobs/job-1", id="a job in its queue"),
    pytest.param("DELETE", f"{QUEUE}/jobs/job-1", id="deleting a job in its queue"),
    pytest.param("GET", f"{QUEUE}/executions/ex-1", id="an execution in its queue"),
    pytest.param("POST", f"{QUEUE}/executions/ex-1/cancel", id="cancelling in its queue"),
    pytest.param("POST", f"{QUEUE}/executions/ex-1/retry", id="retrying in its queue"),
]
SUBMISSION = json.dumps({"namespace": "shop", "queue": "orders", "task": "t", "payload": {}}).encode()


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_a_caller_without_the_verb_is_403_and_no_store_is_asked(method: str, path: str) -> None:
    built, reads, store = api(may=False)
    status, kind, raw = built.dispatch(method, path, "", "t-bob", SUBMISSION if path == "/v1/jobs" else b"")
    assert (status, kind, json.loads(raw)["reason"]) == (403, "application/problem+json", "Forbidden"), raw
    assert reads.calls == [] and store.calls == []


def test_a_service_account_without_the_verb_in_its_own_namespace_is_403_by_id_and_no_store_is_asked() -> None:
    reads, store = Recorder(), RecordingStore()
    reviews = Reviews(lambda user, access: False)
    reviews.tokens = {"t-runner": User("system:serviceaccount:shop:runner")}
    built = ApiServer(
        leader=lambda: None, find_execution=reads.find_execution, timeline=reads.timeline,
        execution_namespaces=lambda execution_id: [],
        guard=Guard(authenticator=reviews, authorizer=reviews, leader_lease=LEASE),
        queue_api=QueueApi(cast(JobStore, store), clock=FakeClock(), authenticator=reviews, authorizer=reviews),
    )  # fmt: skip
    for path in ("/executions/ex-abc", "/v1/jobs/job-1", "/v1/executions/ex-1"):
        status, _, raw = built.dispatch("GET", path, "", "t-runner", b"")
        assert (status, json.loads(raw)["reason"]) == (403, "Forbidden"), path
    assert reads.calls == [] and store.calls == []
    assert Access("get", "vigil.dev", "taskqueues", "shop", "", "executions") in reviews.asked


def test_with_the_verb_the_store_is_asked_and_a_record_of_another_queue_is_not_found() -> None:
    built, _, store = api(may=True)
    status, _, raw = built.dispatch("GET", f"{QUEUE}/jobs/job-1", "", "t-bob", b"")
    assert (status, json.loads(raw)["reason"]) == (404, "NotFound")
    assert store.calls == ["job"]


def test_an_approver_without_the_verb_is_403_before_the_workflow_is_read() -> None:
    workflows = FakeWorkflows()
    read: list[tuple[str, str]] = []

    def find(namespace: str, name: str) -> dict[str, Any] | None:
        read.append((namespace, name))
        return workflows.get(namespace, name)

    callback = approvals_server(workflows, verb_holders=frozenset()).approvals
    assert callback is not None
    built = ApiServer(
        leader=lambda: None, find_execution=lambda i: None, timeline=lambda i: [],
        approvals=type(callback)(
            keys=callback.keys, clock=callback.clock, find_workflow=find, submit=callback.submit,
            may_approve=callback.may_approve,
        ),
    )  # fmt: skip
    status, _, raw = built.answer_post(f"/approvals/{approval_token()}/approve", b"")
    assert (status, json.loads(raw)["reason"]) == (403, "NotAuthorized")
    assert read == [] and workflows.submitted == []
