"""The operator's HTTP API answers: health, leader, an execution's timeline, not-found, and
the approval callback (a token approves or rejects its step; bad tokens 403, bad bodies 400,
gone workflows 404, steps not waiting 409).

Pure: the collaborators are plain functions (or an in-memory stand-in for the API server), so
every row of the table is one request.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vigil.core.approvaltokens import mint
from vigil.core.history import AttemptRecord, AttemptState
from vigil.core.orchestrator import decide, record_input
from vigil.core.ports import HistoryUnavailable
from vigil.core.workflow import (
    Definition,
    Event,
    Record,
    StepDef,
    StepKind,
    StepPhase,
    WorkflowState,
    fold,
)
from vigil.httpapi import ApiServer, ApprovalCallback, _redacted

WHEN = datetime(2026, 8, 1, 1, 0, tzinfo=UTC)
ROW = AttemptRecord(
    execution_id="ex-abc",
    attempt=1,
    namespace="ns",
    job="reconcile",
    job_uid="u1",
    priority="normal",
    state=AttemptState.FAILED,
    scheduled_for=WHEN,
    reason="ExitCode3",
    pod="ex-abc-1",
)
OBJ = {"metadata": {"namespace": "ns", "name": "ex-abc"}, "spec": {"executionId": "ex-abc"}, "status": {"phase": "Backoff"}}


def server(*, obj: dict[str, Any] | None = OBJ, rows: list[AttemptRecord] | None = None, down: bool = False) -> ApiServer:
    def timeline(execution_id: str) -> list[AttemptRecord]:
        if down:
            raise HistoryUnavailable("connection refused")
        return [r for r in rows or [] if r.execution_id == execution_id]

    return ApiServer(leader=lambda: "op-1", find_execution=lambda i: obj if obj and i == "ex-abc" else None, timeline=timeline)


def test_health_and_leader() -> None:
    assert server().answer("/healthz") == (200, "text/plain", b"ok\n")
    assert server().answer("/leader")[2] == b"op-1\n"


def test_an_execution_is_served_with_its_history() -> None:
    status, kind, body = server(rows=[ROW]).answer("/executions/ex-abc")
    data = json.loads(body)
    assert (status, kind) == (200, "application/json")
    assert data["status"]["phase"] == "Backoff"
    assert [(h["attempt"], h["state"], h["reason"]) for h in data["history"]] == [(1, "failed", "ExitCode3")]


def test_history_outage_still_serves_the_execution() -> None:
    status, _, body = server(down=True).answer("/executions/ex-abc")
    data = json.loads(body)
    assert status == 200 and data["history"] is None and "unavailable" in data["historyError"]


@pytest.mark.parametrize("path", ["/executions/ex-missing", "/executions/NOT_AN_ID", "/nothing"])
def test_unknown_paths_and_ids_are_404(path: str) -> None:
    assert server().answer(path)[0] == 404


def test_it_serves_over_http() -> None:
    http = server(rows=[ROW]).serve(0)
    try:
        port = http.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/executions/ex-abc", timeout=5) as resp:
            assert json.loads(resp.read())["executionId"] == "ex-abc"
    finally:
        http.shutdown()
        http.server_close()


# --- the approval callback ------------------------------------------------------------------
#
# FakeWorkflows stands in for the API server (and WorkflowEngine.submit's conditional write)
# in these unit tests only: it keeps one workflow's history and records inputs with the real
# pure orchestrator, so the fold's own checks (the step must be waiting) apply. The integration
# test tests/integration/test_approval_callback.py runs the same callback against the real
# API server and operator.

KEY = bytes(range(32))
NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


class FixedClock:
    def __init__(self, now: datetime) -> None:
        self.at = now

    def now(self) -> datetime:
        return self.at


class FakeWorkflows:
    """One workflow, `media/publish`, whose approval step `approve` waits (in-memory)."""

    def __init__(self) -> None:
        self.uid = "uid-1"
        self.definition = Definition(
            self.uid,
            (StepDef(id="approve", kind=StepKind.APPROVAL, approvers=("user:alice",)),),
        )
        self.history = record_input(self.definition, fold(self.definition, []), Record(Event.WORKFLOW_STARTED, NOW))
        self.gone = False
        self.submitted: list[Record] = []
        self.refuse_on_write = False
        self.fail_with: Exception | None = None

    @property
    def state(self) -> WorkflowState:
        return fold(self.definition, self.history)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.gone or (namespace, name) != ("media", "publish"):
            return None
        steps = {s: {"phase": str(st.phase), "attempts": st.attempt} for s, st in self.state.steps.items()}
        return {"metadata": {"namespace": namespace, "name": name, "uid": self.uid}, "status": {"steps": steps}}

    def submit(self, namespace: str, name: str, record: Record) -> list[Record]:
        if self.fail_with is not None:
            raise self.fail_with
        self.submitted.append(record)
        if self.refuse_on_write:  # someone decided between the handler's read and its write
            self.history.append(Record(Event.APPROVED, NOW, step="approve", detail={"by": "alice"}))
            self.history += decide(self.definition, self.state, at=NOW)
        added = record_input(self.definition, self.state, record)
        self.history += added
        return added


def approvals_server(
    workflows: FakeWorkflows, *, clock: FixedClock | None = None, key: bytes | None = KEY
) -> ApiServer:
    def current_key() -> bytes:
        if key is None:
            raise RuntimeError("secrets is forbidden")
        return key

    callback = ApprovalCallback(
        key=current_key,
        clock=clock or FixedClock(NOW + timedelta(minutes=5)),
        find_workflow=workflows.get,
        submit=workflows.submit,
    )
    return ApiServer(leader=lambda: None, find_execution=lambda i: None, timeline=lambda i: [], approvals=callback)


def approval_token(
    *, uid: str = "uid-1", attempt: int = 1, level: int = 0, expires: datetime = NOW + timedelta(hours=1)
) -> str:
    return mint(
        KEY, namespace="media", workflow="publish", uid=uid, step="approve", level=level, attempt=attempt, expires=expires
    )


def post(server: ApiServer, action: str, body: Any = None, *, token: str | None = None) -> tuple[int, dict[str, Any]]:
    raw = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    status, kind, answer = server.answer_post(f"/approvals/{token or approval_token()}/{action}", raw)
    assert kind == "application/json"
    return status, json.loads(answer)


def test_a_token_approves_its_step_and_the_decision_is_recorded_as_the_tokens() -> None:
    workflows = FakeWorkflows()
    status, body = post(approvals_server(workflows), "approve", {"by": "jira-bot", "reason": "TICKET-7 done"})
    assert status == 200, body
    assert (body["decision"], body["by"], body["step"], body["tokenLevel"]) == ("approved", "token:jira-bot", "approve", 0)
    assert workflows.submitted == [
        Record(
            Event.APPROVED,
            NOW + timedelta(minutes=5),
            step="approve",
            detail={"by": "token:jira-bot", "via": "token", "tokenLevel": 0, "reason": "TICKET-7 done"},
        )
    ]
    assert workflows.state.steps["approve"].phase is StepPhase.SUCCEEDED  # not an approver: the token is
    assert [r["event"] for r in body["records"]] == ["Approved", "WorkflowSucceeded"]


def test_a_token_rejects_its_step_and_a_body_is_optional() -> None:
    workflows = FakeWorkflows()
    status, body = post(approvals_server(workflows), "reject")
    assert (status, body["decision"], body["by"]) == (200, "rejected", "token")
    assert workflows.state.steps["approve"].phase is StepPhase.FAILED


@pytest.mark.parametrize(
    ("name", "token", "reason"),
    [
        ("expired", approval_token(expires=NOW), "Expired"),
        ("tampered", approval_token().replace(".", "x.", 1)[1:], "BadSignature"),
        ("another key", mint(bytes(32), namespace="media", workflow="publish", uid="uid-1", step="approve", level=0, expires=NOW + timedelta(hours=1)), "BadSignature"),
        ("garbage", "not-a-token", "Malformed"),
    ],
)
def test_a_bad_token_is_403_and_changes_nothing(name: str, token: str, reason: str) -> None:
    workflows = FakeWorkflows()
    status, body = post(approvals_server(workflows), "approve", {"by": "x"}, token=token)
    assert (status, body["reason"]) == (403, reason), name
    assert workflows.submitted == []


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("not JSON", b"{by: x}", "not JSON"),
        ("not an object", b'["x"]', "JSON object"),
        ("unknown field", b'{"by": "x", "approve": true}', "unknown field 'approve'"),
        ("by not text", b'{"by": 7}', "by must be a string"),
        ("by too long", json.dumps({"by": "x" * 254}).encode(), "longer than 253"),
        ("by not printable", b'{"by": "a\\nb"}', "printable"),
        ("reason too long", json.dumps({"reason": "x" * 1025}).encode(), "longer than 1024"),
    ],
)
def test_a_bad_body_is_400_and_changes_nothing(name: str, raw: bytes, message: str) -> None:
    workflows = FakeWorkflows()
    status, body = post(approvals_server(workflows), "approve", raw)
    assert status == 400 and message in body["error"], (name, body)
    assert workflows.submitted == []


def test_a_deleted_or_recreated_workflow_is_404() -> None:
    workflows = FakeWorkflows()
    workflows.gone = True
    assert post(approvals_server(workflows), "approve")[0] == 404
    recreated = FakeWorkflows()
    recreated.uid = "uid-2"
    status, body = post(approvals_server(recreated), "approve", token=approval_token(uid="uid-1"))
    assert status == 404 and "created again" in body["error"]
    engine_says_gone = FakeWorkflows()
    engine_says_gone.fail_with = LookupError("workflow media/publish not found or not started")
    assert post(approvals_server(engine_says_gone), "approve")[0] == 404
    assert workflows.submitted == recreated.submitted == []


def test_a_step_that_is_not_waiting_is_409_and_a_replayed_token_writes_nothing() -> None:
    workflows = FakeWorkflows()
    server = approvals_server(workflows)
    assert post(server, "approve")[0] == 200
    status, body = post(server, "approve")
    assert (status, body["reason"]) == (409, "StepNotWaiting")
    assert len(workflows.submitted) == 1


def test_a_decision_that_loses_the_race_is_409_from_the_engines_refusal() -> None:
    workflows = FakeWorkflows()
    workflows.refuse_on_write = True
    status, body = post(approvals_server(workflows), "reject")
    assert (status, body["reason"]) == (409, "StepNotWaiting")
    assert workflows.state.steps["approve"].phase is StepPhase.SUCCEEDED  # alice's approval stands


def test_a_token_of_an_earlier_attempt_is_409_superseded() -> None:
    workflows = FakeWorkflows()
    server = approvals_server(workflows)
    post(server, "reject")
    workflows.history += record_input(
        workflows.definition, workflows.state, Record(Event.RETRY_REQUESTED, NOW, step="approve", detail={"request": "r"})
    )
    status, body = post(server, "approve", token=approval_token(attempt=1))
    assert (status, body["reason"]) == (409, "Superseded")
    assert post(server, "approve", token=approval_token(attempt=2))[0] == 200


def test_trouble_on_our_side_is_503() -> None:
    assert post(approvals_server(FakeWorkflows(), key=None), "approve")[0] == 503
    busy = FakeWorkflows()
    busy.fail_with = RuntimeError("workflow media/publish kept changing; try again")
    assert post(approvals_server(busy), "approve")[0] == 503


def test_other_methods_and_paths() -> None:
    server = approvals_server(FakeWorkflows())
    assert server.answer(f"/approvals/{approval_token()}/approve")[0] == 405
    assert server.answer_post(f"/approvals/{approval_token()}/delete", b"")[0] == 404
    assert server.answer_post("/executions/ex-abc", b"")[0] == 404
    disabled = ApiServer(leader=lambda: None, find_execution=lambda i: None, timeline=lambda i: [])
    assert disabled.answer_post(f"/approvals/{approval_token()}/approve", b"")[0] == 404


def test_the_callback_is_served_over_http_and_tokens_stay_out_of_logs() -> None:
    workflows = FakeWorkflows()
    http = approvals_server(workflows).serve(0)
    port = http.server_address[1]
    url = f"http://127.0.0.1:{port}/approvals/{approval_token()}/approve"
    try:
        too_big = urllib.request.Request(url, data=b" " * 20_000, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(too_big, timeout=5)
        assert refused.value.code == 400
        refused.value.close()
        request = urllib.request.Request(
            url, data=json.dumps({"by": "slack:@bob"}).encode(), method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=5) as resp:
            assert json.loads(resp.read())["by"] == "token:slack:@bob"
    finally:
        http.shutdown()
        http.server_close()
    assert _redacted(f"/approvals/{approval_token()}/reject") == "/approvals/<token>/reject"
