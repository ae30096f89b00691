"""One error shape, and malformed input refused (issue 37, item 5; vigil/api/problems.py, bodies.py).

Over real sockets against the API as the runtime builds it (the read API, the approval callback,
the volume tier's routes over a store that records every call): every 4xx and 5xx is
``application/problem+json`` with a stable ``type``, ``title``, ``status`` and ``detail``, and
``errors[{field, reason}]`` when a field is at fault. Bodies holding NaN, NUL, a lone surrogate,
nesting 1,000 deep or bytes that are not UTF-8 are 4xx naming the field — they were 500s, or
worse, accepted — and neither the answer nor the log quotes them; the log carries the request id
the answer returns as ``X-Request-Id``.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
from collections.abc import Iterator
from typing import Any, cast

import pytest

from tests.unit.reviews import Reviews
from tests.unit.test_httpapi import LEASE, OBJ, ROW, FakeWorkflows, approval_token, approvals_server
from tests.unit.test_httpapi import Reviews as ExecutionReviews
from vigil.api.app import Application
from vigil.api.guards import Guard
from vigil.api.problems import TYPE_PREFIX, Answer
from vigil.api.queue import JobStore, QueueApi
from vigil.api.router import ApiServer
from vigil.api.transport import Limits, Serving, serve
from vigil.core.memory import FakeClock
from vigil.logs import REQUEST_ID, TextFormatter

#: Written into every hostile body: it must appear in no answer and no log line.
MARKER = "SECRET-7f3a"


class RecordingStore:
    """A queue store that records each call and holds nothing: malformed input must not reach it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> None:
            self.calls.append(name)
            return None

        return call


def api() -> tuple[ApiServer, FakeWorkflows, RecordingStore]:
    """The API as the runtime builds it: executions (alice may read namespace ns), the approval
    callback over one waiting workflow, and the queue routes over a recording store."""
    workflows = FakeWorkflows()
    store = RecordingStore()
    anyone = Reviews(lambda user, access: user.name == "alice")
    queue = QueueApi(cast(JobStore, store), clock=FakeClock(), authenticator=anyone, authorizer=anyone)
    readers = ExecutionReviews()
    built = ApiServer(
        leader=lambda: "op-1",
        find_execution=lambda execution_id: OBJ if execution_id == "ex-abc" else None,
        timeline=lambda execution_id: [ROW] if execution_id == "ex-abc" else [],
        guard=Guard(authenticator=readers, authorizer=readers, leader_lease=LEASE),
        approvals=approvals_server(workflows).approvals,
        queue_api=queue,
    )
    return built, workflows, store


@pytest.fixture
def running() -> Iterator[tuple[int, FakeWorkflows, RecordingStore]]:
    built, workflows, store = api()
    limits = Limits(max_request_bytes=64 * 1024, max_header_bytes=8 * 1024)
    http = built.serve(0, limits)
    try:
        yield http.server_address[1], workflows, store
    finally:
        http.shutdown()
        http.server_close()


def call(
    port: int, method: str, path: str, body: bytes | None = None, token: str | None = "t-alice"
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def assert_problem(status: int, headers: dict[str, str], raw: bytes) -> dict[str, Any]:
    assert headers["content-type"] == "application/problem+json", raw
    problem = json.loads(raw)
    assert problem["status"] == status and problem["type"] == TYPE_PREFIX + problem["reason"]
    assert problem["title"] and problem["detail"] and headers["x-request-id"]
    return problem


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


HOSTILE = [
    pytest.param('{"by": "alice", "reason": NaN}', "reason", id="NaN"),
    pytest.param(f'{{"reason": "{MARKER}\\u0000"}}', "reason", id="NUL"),
    pytest.param(f'{{"reason": "{MARKER}\\ud800"}}', "reason", id="a lone surrogate"),
    pytest.param(f'{{"reason": "{MARKER}", "x": {deep(1000)}}}', "body", id="1,000 deep"),
    pytest.param(f'{{"reason": "{MARKER}\xff"}}', "body", id="not UTF-8"),
    pytest.param(f'{{"{MARKER}\\u0000": 1}}', "body", id="NUL in an unknown key"),
]


@pytest.mark.parametrize(("text", "field"), HOSTILE)
def test_a_hostile_decision_is_400_naming_the_field_and_decides_nothing(
    running: tuple[int, FakeWorkflows, RecordingStore], caplog: pytest.LogCaptureFixture, text: str, field: str
) -> None:
    port, workflows, _ = running
    raw = text.encode("utf-8", "surrogatepass") if "\xff" not in text else text.encode("latin-1")
    with caplog.at_level(logging.DEBUG):
        status, headers, answer = call(port, "POST", f"/approvals/{approval_token()}/approve", raw, token=None)
    assert status == 400
    problem = assert_problem(status, headers, answer)
    assert problem["errors"][0]["field"] == field
    assert workflows.submitted == []
    assert MARKER not in answer.decode("utf-8", "replace") and MARKER not in caplog.text


@pytest.mark.parametrize(
    ("text", "field"),
    [
        pytest.param('{"namespace": "shop", "queue": "q", "task": "t", "payload": {"a": NaN}}', "payload.a", id="NaN"),
        pytest.param(f'{{"namespace": "shop", "queue": "q", "task": "t", "payload": {{"a": "{MARKER}\\u0000"}}}}',
                     "payload.a", id="NUL"),
        pytest.param(f'{{"namespace": "shop", "queue": "q", "task": "t", "payload": {{"a": "{MARKER}\\udfff"}}}}',
                     "payload.a", id="a lone surrogate"),
        pytest.param(f'{{"namespace": "shop", "queue": "q", "task": "{MARKER}", "payload": {deep(1000)}}}',
                     "body", id="1,000 deep"),
        pytest.param('{"namespace": "' + MARKER + '!", "queue": "q", "task": "t"}', "namespace", id="a bad name"),
        pytest.param('{"namespace": "shop", "queue": "q", "task": "t", "cron": "0 3 * * *", "payloadTemplate": '
                     '{"t": "' + "{{ job.name }}," * 120 + '"}}', "payloadTemplate.t", id="a template past the code bound"),
    ],
)
def test_a_hostile_submission_is_422_naming_the_field_and_reaches_no_store(
    running: tuple[int, FakeWorkflows, RecordingStore], caplog: pytest.LogCaptureFixture, text: str, field: str
) -> None:
    port, _, store = running
    with caplog.at_level(logging.DEBUG):
        status, headers, answer = call(port, "POST", "/v1/jobs", text.encode("utf-8", "surrogatepass"))
    assert status == 422
    assert assert_problem(status, headers, answer)["errors"][0]["field"] == field
    assert store.calls == []
    assert MARKER not in answer.decode() and MARKER not in caplog.text


@pytest.mark.parametrize(
    ("method", "path", "token", "status"),
    [
        pytest.param("GET", "/executions/ex-abc", None, 401, id="no token"),
        pytest.param("GET", "/executions/ex-abc", "t-bob", 403, id="not allowed"),
        pytest.param("GET", "/no/such/route", "t-alice", 404, id="no route"),
        pytest.param("GET", "/v1/no/such/route", "t-alice", 404, id="no /v1/ route"),
        pytest.param("PUT", "/executions/ex-abc", "t-alice", 405, id="another method"),
        pytest.param("DELETE", "/executions/ex-abc", "t-alice", 405, id="DELETE outside /v1/"),
        pytest.param("GET", "/v1/namespaces/ns/taskqueues/q/jobs?limit=%ff", "t-alice", 422, id="a bad query"),
    ],
)
def test_every_error_of_a_route_is_a_problem(
    running: tuple[int, FakeWorkflows, RecordingStore], method: str, path: str, token: str | None, status: int
) -> None:
    port, _, _ = running
    got, headers, raw = call(port, method, path, token=token)
    assert got == status
    assert_problem(status, headers, raw)


def test_the_transports_refusals_are_problems_too(running: tuple[int, FakeWorkflows, RecordingStore]) -> None:
    port, _, _ = running
    for data, status in [
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"x" * 9000 + b"\r\n\r\n", 431),
        (b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n", 413),
        (b"NOT HTTP AT ALL\r\n\r\n", 400),
    ]:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(data)
            answer = b"".join(iter(lambda: sock.recv(65536), b""))  # each is answered, then closed
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(f"HTTP/1.1 {status}".encode()) and b"application/problem+json" in head, answer
        assert json.loads(body)["status"] == status


def test_a_failing_route_is_a_500_problem_logged_with_its_request_id_not_its_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def failing(method: str, path: str, query: str, token: str | None, body: bytes) -> Answer:
        raise UnicodeEncodeError("utf-8", f"{MARKER}\ud800", 11, 12, "surrogates not allowed")

    limits = Limits()
    app = Application(failing, limits)
    http: Serving = serve(app, 0, limits, host="127.0.0.1")
    try:
        with caplog.at_level(logging.DEBUG):
            status, headers, raw = call(http.server_address[1], "POST", "/x", MARKER.encode())
    finally:
        http.shutdown()
        http.server_close()
        app.close()
    assert status == 500
    problem = assert_problem(status, headers, raw)
    assert headers["x-request-id"] in problem["detail"]
    assert f"[request {headers['x-request-id']}]" in caplog.text and "UnicodeEncodeError" in caplog.text
    assert MARKER not in caplog.text and MARKER not in raw.decode()


def test_a_log_line_written_while_answering_carries_the_request_id() -> None:
    record = logging.LogRecord("vigil.api.queue", logging.INFO, __file__, 1, "submitted", None, None)
    formatter = TextFormatter("%(message)s")
    assert formatter.format(record) == "submitted"
    token = REQUEST_ID.set("abc123")
    try:
        assert formatter.format(record) == "submitted [request abc123]"
        named = logging.LogRecord("vigil.api.app", logging.ERROR, __file__, 1, "HTTP GET /x [request abc123] failed", None, None)
        assert formatter.format(named) == "HTTP GET /x [request abc123] failed"  # named once
    finally:
        REQUEST_ID.reset(token)
