"""The operator's HTTP API answers: health, leader, an execution's timeline, not-found, who
may ask (authentication and authorisation of every caller), and the approval callback (a token
approves or rejects its step; bad tokens 403, bad bodies 400, gone workflows 404, steps not
waiting 409). Also the transport's bounds: a worker pool, a deadline, a size cap.

Pure: the collaborators are plain functions (or an in-memory stand-in for the API server), so
every row of the table is one request. The reviews themselves (TokenReview, SubjectAccessReview)
are stood in for by `Reviews`; tests/integration/test_http_access.py asks the real API server.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from vigil.api.approvals import ApprovalCallback
from vigil.api.approvals import redacted as _redacted
from vigil.api.guards import Guard
from vigil.api.router import ApiServer
from vigil.api.transport import Limits, bearer_token
from vigil.core.access import Access, ReviewUnavailable, User
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
LEASE = Access(verb="get", group="coordination.k8s.io", resource="leases", namespace="vigil-system", name="vigil-leader")
ALICE, BOB, ROOT, CAROL = (User("alice"), User("bob"), User("root", groups=("admins",)), User("carol"))


class Reviews:
    """The API server's two answers: tokens by value, and who may get executions where.

    `grants` holds (user name, namespace) pairs allowed `get executions` there; namespace ""
    means every namespace (a ClusterRoleBinding). Every review is counted.
    """

    def __init__(self) -> None:
        self.tokens = {"t-alice": ALICE, "t-bob": BOB, "t-root": ROOT, "t-carol": CAROL}
        self.grants = {("alice", "ns"), ("root", ""), ("carol", "other")}
        self.lease_readers = {"root"}
        self.calls: list[object] = []
        self.down = False

    def authenticate(self, token: str) -> User | None:
        self.calls.append(token)
        if self.down:
            raise ReviewUnavailable("connection refused")
        return self.tokens.get(token)

    def allowed(self, user: User, access: Access) -> bool:
        self.calls.append((user.name, access))
        if self.down:
            raise ReviewUnavailable("connection refused")
        if access == LEASE:
            return user.name in self.lease_readers
        assert (access.verb, access.group, access.resource) == ("get", "vigil.dev", "executions")
        return (user.name, "") in self.grants or ((user.name, access.namespace) in self.grants and access.namespace != "")


def server(
    *,
    obj: dict[str, Any] | None = OBJ,
    objects: list[dict[str, Any]] | None = None,
    rows: list[AttemptRecord] | None = None,
    down: bool = False,
    reviews: Reviews | None = None,
) -> ApiServer:
    """An API over `obj` (or several `objects`, the first one found by id) and history `rows`."""
    stored = objects if objects is not None else [obj] if obj else []

    def timeline(execution_id: str) -> list[AttemptRecord]:
        if down:
            raise HistoryUnavailable("connection refused")
        return [r for r in rows or [] if r.execution_id == execution_id]

    def find(execution_id: str) -> dict[str, Any] | None:
        return next((o for o in stored if o["metadata"]["name"] == execution_id), None)

    def get(namespace: str, execution_id: str) -> dict[str, Any] | None:
        return next((o for o in stored if o["metadata"] == {"namespace": namespace, "name": execution_id}), None)

    def namespaces(execution_id: str) -> list[str]:
        return sorted({o["metadata"]["namespace"] for o in stored if o["metadata"]["name"] == execution_id})

    checks = reviews or Reviews()
    return ApiServer(
        leader=lambda: "op-1",
        find_execution=find,
        get_execution=get,
        execution_namespaces=namespaces,
        timeline=timeline,
        guard=Guard(authenticator=checks, authorizer=checks, leader_lease=LEASE),
    )


def test_health_is_open_and_the_leader_needs_the_lease() -> None:
    assert server().answer("/healthz") == (200, "text/plain", b"ok\n")
    assert server().answer("/readyz")[0] == 200
    assert server().answer("/leader", token="t-root")[2] == b"op-1\n"
    assert server().answer("/leader", token="t-alice")[0] == 403
    assert server().answer("/leader")[0] == 401


def test_an_execution_is_served_with_its_history() -> None:
    status, kind, body = server(rows=[ROW]).answer("/executions/ex-abc", token="t-alice")
    data = json.loads(body)
    assert (status, kind) == (200, "application/json")
    assert data["namespace"] == "ns" and data["status"]["phase"] == "Backoff"
    assert [(h["attempt"], h["state"], h["reason"]) for h in data["history"]] == [(1, "failed", "ExitCode3")]
    assert json.loads(server(rows=[ROW]).answer("/namespaces/ns/executions/ex-abc", token="t-alice")[2]) == data


def test_history_outage_still_serves_the_execution() -> None:
    status, _, body = server(down=True).answer("/executions/ex-abc", token="t-alice")
    data = json.loads(body)
    assert status == 200 and data["history"] is None and "unavailable" in data["historyError"]


def test_an_execution_known_only_to_the_history_is_served_in_its_namespace() -> None:
    """Retention deleted its object; its rows are read in its namespace by whoever may get it
    there, and by id alone only by a ServiceAccount of that namespace or a cluster-wide reader:
    the history is never asked for anyone else (tests/unit/test_api_authorise_first.py)."""
    api = server(obj=None, rows=[ROW])
    status, _, body = api.answer("/namespaces/ns/executions/ex-abc", token="t-alice")
    assert status == 200 and json.loads(body)["namespace"] == "ns" and "spec" not in json.loads(body)
    assert api.answer("/executions/ex-abc", token="t-alice")[0] == 403
    assert api.answer("/executions/ex-abc", token="t-carol")[0] == 403
    assert json.loads(api.answer("/executions/ex-abc", token="t-root")[2])["namespace"] == "ns"
    reviews = Reviews()
    reviews.tokens["t-runner"] = User("system:serviceaccount:ns:runner")
    reviews.grants.add(("system:serviceaccount:ns:runner", "ns"))
    status, _, body = server(obj=None, rows=[ROW], reviews=reviews).answer("/executions/ex-abc", token="t-runner")
    assert status == 200 and [h["attempt"] for h in json.loads(body)["history"]] == [1]


@pytest.mark.parametrize("path", ["/nothing", "/executions/NOT_AN_ID", "/namespaces/ns/executions/", "/executions/"])
def test_unknown_paths_are_404_before_any_review(path: str) -> None:
    reviews = Reviews()
    assert server(reviews=reviews).answer(path, token="t-alice")[0] == 404
    assert reviews.calls == []


# (caller's token, path) -> status. alice may get executions in ns, carol in other, root in
# every namespace, bob nowhere.
ACCESS_TABLE = [
    pytest.param(None, "/executions/ex-abc", 401, id="no-token"),
    pytest.param("forged", "/executions/ex-abc", 401, id="unknown-token"),
    pytest.param(None, "/namespaces/ns/executions/ex-abc", 401, id="no-token-namespaced"),
    pytest.param("t-bob", "/executions/ex-abc", 403, id="authenticated-but-granted-nothing"),
    pytest.param("t-bob", "/namespaces/ns/executions/ex-abc", 403, id="granted-nothing-namespaced"),
    pytest.param("t-carol", "/executions/ex-abc", 403, id="another-namespace-only"),
    pytest.param("t-carol", "/namespaces/ns/executions/ex-abc", 403, id="another-namespace-asking-here"),
    pytest.param("t-carol", "/namespaces/other/executions/ex-abc", 404, id="own-namespace-where-it-is-not"),
    pytest.param("t-alice", "/executions/ex-abc", 200, id="allowed-in-its-namespace"),
    pytest.param("t-alice", "/namespaces/ns/executions/ex-abc", 200, id="allowed-namespaced"),
    pytest.param("t-alice", "/executions/ex-missing", 403, id="missing-looks-like-elsewhere"),
    pytest.param("t-alice", "/namespaces/ns/executions/ex-missing", 404, id="missing-in-own-namespace"),
    pytest.param("t-root", "/executions/ex-missing", 404, id="missing-for-a-cluster-reader"),
    pytest.param("t-root", "/executions/ex-abc", 200, id="cluster-reader"),
]


@pytest.mark.parametrize(("token", "path", "status"), ACCESS_TABLE)
def test_who_may_read_an_execution(token: str | None, path: str, status: int) -> None:
    answer = server(rows=[ROW]).answer(path, token=token)
    assert answer[0] == status, answer
    if status in (401, 403):
        assert b"Backoff" not in answer[2] and b"ExitCode3" not in answer[2]


def test_a_look_alike_made_in_another_namespace_shows_nothing_of_the_original() -> None:
    """carol makes an Execution named like alice's in her own namespace: she sees only hers,
    alice still reads hers by id, and neither answer holds the other namespace's rows."""
    fake = {"metadata": {"namespace": "other", "name": "ex-abc"}, "spec": {"executionId": "ex-abc"}, "status": {}}
    api = server(objects=[fake, OBJ], rows=[ROW])
    carol = json.loads(api.answer("/executions/ex-abc", token="t-carol")[2])
    assert carol["namespace"] == "other" and carol["history"] == [] and carol["status"] == {}
    alice = json.loads(api.answer("/executions/ex-abc", token="t-alice")[2])
    assert alice["namespace"] == "ns" and alice["status"]["phase"] == "Backoff" and len(alice["history"]) == 1


def test_a_review_that_cannot_be_made_is_503_never_access() -> None:
    reviews = Reviews()
    reviews.down = True
    status, _, body = server(reviews=reviews).answer("/executions/ex-abc", token="t-alice")
    assert status == 503 and b"Backoff" not in body


def test_without_a_guard_every_guarded_endpoint_is_401() -> None:
    unguarded = ApiServer(leader=lambda: "op-1", find_execution=lambda i: OBJ, timeline=lambda i: [ROW])
    assert unguarded.answer("/executions/ex-abc", token="t-alice")[0] == 401
    assert unguarded.answer("/leader", token="t-root")[0] == 401
    assert unguarded.answer("/healthz")[0] == 200


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.def", "abc.def"),
        ("bearer abc", "abc"),
        ("  Bearer   abc  ", "abc"),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer", None),
        ("Bearer a b", None),
        ("", None),
        (None, None),
    ],
)
def test_the_bearer_token_is_read_from_the_authorization_header(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


# --- over HTTP: the token travels in the header, and the transport is bounded ---------------


def get(port: int, path: str, token: str | None = None) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read(), dict(error.headers)


def test_it_serves_over_http_with_the_callers_token() -> None:
    http = server(rows=[ROW]).serve(0)
    try:
        port = http.server_address[1]
        status, body, _ = get(port, "/executions/ex-abc", "t-alice")
        assert status == 200 and json.loads(body)["executionId"] == "ex-abc"
        status, _, headers = get(port, "/executions/ex-abc")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
        assert get(port, "/executions/ex-abc", "t-bob")[0] == 403
    finally:
        http.shutdown()
        http.server_close()


def raw_request(port: int, data: bytes, *, timeout: float = 5) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_a_request_beyond_the_size_caps_is_refused_and_the_server_still_serves() -> None:
    """Headers past their cap are 431, a body past its cap 413, both problems; the transport's
    own bounds are tested in tests/unit/test_api_transport.py."""
    http = server().serve(0, Limits(max_header_bytes=4096, max_request_bytes=1024))
    try:
        port = http.server_address[1]
        padded = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"x" * 8192 + b"\r\n\r\n"
        answer = raw_request(port, padded)
        assert answer.startswith(b"HTTP/1.1 431") and b"application/problem+json" in answer
        big = b"POST /approvals/t/approve HTTP/1.1\r\nHost: x\r\nContent-Length: 2048\r\n\r\n" + b"x" * 2048
        answer = raw_request(port, big)
        assert answer.startswith(b"HTTP/1.1 413") and b"application/problem+json" in answer
        assert raw_request(port, b"GET /healthz HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200")
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
#: The key KEY replaced: verifies while the callback still offers it (a rotation's overlap).
PREVIOUS_KEY = bytes(range(1, 33))
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
    workflows: FakeWorkflows,
    *,
    clock: FixedClock | None = None,
    keys: tuple[bytes, ...] | None = (KEY,),
    verb_holders: frozenset[str] = frozenset({"user:alice", "user:erin"}),
    may_approve: Any = None,
) -> ApiServer:
    """The callback over `workflows`; `verb_holders` hold the RBAC verb `approve` (erin is no
    approver of the step), `keys` verify (None: the key Secret cannot be read)."""

    def current_keys() -> list[bytes]:
        if keys is None:
            raise RuntimeError("secrets is forbidden")
        return list(keys)

    def holds_verb(namespace: str, workflow: str, approver: str) -> bool:
        return approver in verb_holders

    callback = ApprovalCallback(
        keys=current_keys,
        clock=clock or FixedClock(NOW + timedelta(minutes=5)),
        find_workflow=workflows.get,
        submit=workflows.submit,
        may_approve=may_approve or holds_verb,
    )
    return ApiServer(leader=lambda: None, find_execution=lambda i: None, timeline=lambda i: [], approvals=callback)


def approval_token(
    *,
    uid: str = "uid-1",
    attempt: int = 1,
    level: int = 0,
    approver: str = "user:alice",
    expires: datetime = NOW + timedelta(hours=1),
    key: bytes = KEY,
) -> str:
    return mint(
        key, namespace="media", workflow="publish", uid=uid, step="approve", approver=approver, level=level,
        attempt=attempt, expires=expires,
    )  # fmt: skip


def post(server: ApiServer, action: str, body: Any = None, *, token: str | None = None) -> tuple[int, dict[str, Any]]:
    raw = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    status, kind, answer = server.answer_post(f"/approvals/{token or approval_token()}/{action}", raw)
    assert kind == ("application/json" if status < 400 else "application/problem+json")
    return status, json.loads(answer)


def test_a_token_approves_its_step_in_its_approvers_name() -> None:
    workflows = FakeWorkflows()
    status, body = post(approvals_server(workflows), "approve", {"by": "alice", "reason": "TICKET-7 done"})
    assert status == 200, body
    assert (body["decision"], body["by"], body["approver"], body["step"], body["tokenLevel"]) == (
        "approved", "alice", "user:alice", "approve", 0,
    )  # fmt: skip
    assert workflows.submitted == [
        Record(
            Event.APPROVED,
            NOW + timedelta(minutes=5),
            step="approve",
            detail={"by": "alice", "via": "token", "approver": "user:alice", "tokenLevel": 0, "rules": 2,
                    "reason": "TICKET-7 done"},
        )
    ]
    assert workflows.state.steps["approve"].phase is StepPhase.SUCCEEDED
    assert workflows.state.steps["approve"].decided_by == "alice"
    assert [r["event"] for r in body["records"]] == ["Approved", "WorkflowSucceeded"]


def test_a_token_rejects_its_step_and_a_body_is_optional() -> None:
    workflows = FakeWorkflows()
    status, body = post(approvals_server(workflows), "reject")
    assert (status, body["decision"], body["by"]) == (200, "rejected", "alice")
    assert workflows.state.steps["approve"].phase is StepPhase.FAILED


@pytest.mark.parametrize("by", ["mallory", "erin", "user:erin", "token", "token:alice", "group:alice"])
def test_a_token_decides_in_no_other_name_than_its_approvers(by: str) -> None:
    workflows = FakeWorkflows()
    status, body = post(approvals_server(workflows), "approve", {"by": by})
    assert (status, body["reason"]) == (403, "IdentityMismatch"), body
    assert workflows.submitted == []


@pytest.mark.parametrize("by", ["alice", "user:alice"])
def test_the_approvers_own_name_in_either_spelling_is_accepted(by: str) -> None:
    assert post(approvals_server(FakeWorkflows()), "approve", {"by": by})[0] == 200


def test_an_approver_without_the_approve_verb_is_403_and_changes_nothing() -> None:
    workflows = FakeWorkflows()
    status, body = post(approvals_server(workflows, verb_holders=frozenset()), "approve")
    assert (status, body["reason"]) == (403, "NotAuthorized"), body
    assert "'approve' verb" in body["detail"] and "user:alice" in body["detail"]
    assert workflows.submitted == []


def test_a_token_of_someone_no_longer_an_approver_is_refused_by_the_fold() -> None:
    """erin holds the verb, and her token is genuine, but the step's approvers do not name her."""
    workflows = FakeWorkflows()
    status, body = post(approvals_server(workflows), "approve", token=approval_token(approver="user:erin"))
    assert (status, body["reason"]) == (409, "NotAnApprover"), body
    assert workflows.state.steps["approve"].phase is StepPhase.RUNNING


def test_a_group_token_decides_as_the_group() -> None:
    workflows = FakeWorkflows()
    workflows.definition = Definition(
        workflows.uid, (StepDef(id="approve", kind=StepKind.APPROVAL, approvers=("group:editors",)),)
    )
    workflows.history = record_input(workflows.definition, fold(workflows.definition, []), Record(Event.WORKFLOW_STARTED, NOW))
    server = approvals_server(workflows, verb_holders=frozenset({"group:editors"}))
    status, body = post(server, "approve", token=approval_token(approver="group:editors"))
    assert (status, body["by"]) == (200, "group:editors"), body
    assert workflows.submitted[0].detail["byGroups"] == ["editors"]
    assert workflows.state.steps["approve"].decided_by == "group:editors"


def test_the_previous_key_verifies_only_while_it_is_offered() -> None:
    old = approval_token(key=PREVIOUS_KEY)
    status, body = post(approvals_server(FakeWorkflows(), keys=(KEY,)), "approve", token=old)
    assert (status, body["reason"]) == (403, "BadSignature")
    assert post(approvals_server(FakeWorkflows(), keys=(KEY, PREVIOUS_KEY)), "approve", token=old)[0] == 200


@pytest.mark.parametrize(
    ("name", "token", "reason"),
    [
        ("expired", approval_token(expires=NOW), "Expired"),
        ("tampered", approval_token().replace(".", "x.", 1)[1:], "BadSignature"),
        ("another key", approval_token(key=bytes(32)), "BadSignature"),
        ("garbage", "not-a-token", "Malformed"),
    ],
)
def test_a_bad_token_is_403_and_changes_nothing(name: str, token: str, reason: str) -> None:
    workflows = FakeWorkflows()
    status, body = post(approvals_server(workflows), "approve", {"by": "alice"}, token=token)
    assert (status, body["reason"]) == (403, reason), name
    assert workflows.submitted == []


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("not JSON", b"{by: x}", "not JSON"),
        ("not an object", b'["x"]', "JSON object"),
        ("unknown field", b'{"by": "x", "approve": true}', "approve: is not a field"),
        ("by not text", b'{"by": 7}', "by: must be a string"),
        ("by too long", json.dumps({"by": "x" * 254}).encode(), "longer than 253"),
        ("by not printable", b'{"by": "a\\nb"}', "printable"),
        ("reason too long", json.dumps({"reason": "x" * 1025}).encode(), "longer than 1024"),
    ],
)
def test_a_bad_body_is_400_and_changes_nothing(name: str, raw: bytes, message: str) -> None:
    workflows = FakeWorkflows()
    status, body = post(approvals_server(workflows), "approve", raw)
    assert status == 400 and message in body["detail"], (name, body)
    assert workflows.submitted == []


def test_a_deleted_or_recreated_workflow_is_404() -> None:
    workflows = FakeWorkflows()
    workflows.gone = True
    assert post(approvals_server(workflows), "approve")[0] == 404
    recreated = FakeWorkflows()
    recreated.uid = "uid-2"
    status, body = post(approvals_server(recreated), "approve", token=approval_token(uid="uid-1"))
    assert status == 404 and "created again" in body["detail"]
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
    assert post(approvals_server(FakeWorkflows(), keys=None), "approve")[0] == 503

    def no_answer(namespace: str, workflow: str, approver: str) -> bool:
        raise ReviewUnavailable("SubjectAccessReview failed: 500")

    workflows = FakeWorkflows()
    status, body = post(approvals_server(workflows, may_approve=no_answer), "approve")
    assert (status, body["reason"]) == (503, "AuthorizationUnavailable")
    assert workflows.submitted == []
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
            url, data=json.dumps({"by": "alice"}).encode(), method="POST", headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=5) as resp:
            assert json.loads(resp.read())["by"] == "alice"
    finally:
        http.shutdown()
        http.server_close()
    assert _redacted(f"/approvals/{approval_token()}/reject") == "/approvals/<token>/reject"
