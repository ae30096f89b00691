"""A caller without the verb costs the databases nothing: not a connection, not a statement.

The whole HTTP API (ApiServer.serve: uvicorn and the ASGI application) over a real PostgreSQL
queue store and a real PostgreSQL history database, on a server of this module's own started
with ``pg_stat_statements``, which counts every statement each database executes as it ends.
The connections are counted where the code opens them: `vigil.pgconnect.connect` (every queue
store connection) and the history engine's pool (SQLAlchemy's ``checkout`` and ``connect``
events). The API server's reviews are stood in for (tests/unit/reviews.py): `t-alice` may do
everything, `t-bob` nothing, `t-runner` is a ServiceAccount of namespace `shop` with no verb.

Every guarded route, asked by bob and the runner (by id alone included), leaves both counts
where they were; alice asking the same shows the counts do count.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from tests.contract.postgres import FAST_SETTINGS, PostgresServer
from tests.unit.reviews import LEASE, Reviews
from vigil import pgconnect
from vigil.api.guards import Guard
from vigil.api.queue import QueueApi
from vigil.api.router import ApiServer
from vigil.core.access import User
from vigil.core.history import AttemptRecord, AttemptState
from vigil.core.memory import FakeClock
from vigil.core.queue import OneOffJob
from vigil.history.store import SqlHistory
from vigil.queue.store import QueueStore

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
COUNTING = {**FAST_SETTINGS, "shared_preload_libraries": "'pg_stat_statements'", "pg_stat_statements.track": "all"}
IN_QUEUE = "/v1/namespaces/shop/taskqueues/orders"


@dataclass
class Served:
    base_url: str
    server: PostgresServer
    databases: tuple[str, ...]
    connections: list[str]
    job: str
    execution: str


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    server = PostgresServer.create(settings=COUNTING)
    try:
        with psycopg.connect(server.conninfo(), autocommit=True) as admin:
            admin.execute("CREATE EXTENSION pg_stat_statements")
        queue_db, history_db = (server.create_database().rsplit("/", 1)[1] for _ in range(2))
        store = QueueStore(server.conninfo(queue_db))
        store.migrate()
        made = store.submit_job(OneOffJob(
            queue="shop/orders", task="record", payload_text="{}", run_at=T0, priority=0, tenant="shop", max_attempts=None,
            idempotency_key=None,
        ), now=T0)  # fmt: skip
        assert made.job_id is not None
        history = SqlHistory(server.database_dsn(history_db), retention_days=30)
        history.migrate()
        history.write([AttemptRecord(
            execution_id="ex-abc", attempt=1, namespace="shop", job="nightly", job_uid="u1", priority="normal",
            state=AttemptState.FAILED, scheduled_for=T0, reason="ExitCode3", pod="ex-abc-1",
        )])  # fmt: skip
        connections: list[str] = []
        for event in ("connect", "checkout"):
            sa.event.listen(history.engine, event, lambda *_, e=event: connections.append(f"history {e}"))
        reviews = Reviews(lambda user, access: user.name == "alice")
        reviews.tokens["t-runner"] = User("system:serviceaccount:shop:runner")
        api = ApiServer(
            leader=lambda: "op-1",
            find_execution=lambda execution_id: None,
            execution_namespaces=lambda execution_id: [],  # retention deleted every object: rows only
            timeline=history.timeline,
            job_executions=lambda ns, job, limit, after: history.job_executions(ns, job, limit=limit, after=after),
            workflow_history=lambda ns, wf, limit, after: history.workflow_history(ns, wf, limit=limit, after=after),
            log_tail=lambda ns, execution_id, attempt: history.log_tail(ns, execution_id, attempt=attempt),
            guard=Guard(authenticator=reviews, authorizer=reviews, leader_lease=LEASE),
            queue_api=QueueApi(store, clock=FakeClock(T0), authenticator=reviews, authorizer=reviews),
        )
        serving = api.serve(0)
        try:
            yield Served(
                f"http://127.0.0.1:{serving.server_address[1]}", server, (queue_db, history_db), connections,
                made.job_id, made.execution_id,
            )  # fmt: skip
        finally:
            serving.shutdown()
            serving.server_close()
            history.close()
    finally:
        server.drop()


@pytest.fixture
def counted(served: Served, monkeypatch: pytest.MonkeyPatch) -> Served:
    """`served`, every queue store connection opened from now on counted too."""
    real = pgconnect.connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        served.connections.append("queue connect")
        return real(*args, **kwargs)

    monkeypatch.setattr(pgconnect, "connect", connect)
    served.connections.clear()
    return served


def statements(served: Served) -> int:
    """Statements the two databases have executed, as pg_stat_statements counts them."""
    with psycopg.connect(served.server.conninfo(), autocommit=True) as admin:
        row = admin.execute(
            "SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = ANY(%s)",
            [list(served.databases)],
        ).fetchone()
    assert row is not None
    return int(row[0])


def routes(served: Served) -> list[tuple[str, str]]:
    job, execution = served.job, served.execution
    return [
        ("GET", "/executions/ex-abc"),
        ("GET", "/namespaces/shop/executions/ex-abc"),
        ("GET", "/namespaces/shop/executions/ex-abc/log"),
        ("GET", "/namespaces/shop/scheduledjobs/nightly/executions"),
        ("GET", "/namespaces/shop/workflows/etl/history"),
        ("POST", "/v1/jobs"),
        ("GET", f"/v1/jobs/{job}"),
        ("DELETE", f"/v1/jobs/{job}"),
        ("GET", f"/v1/executions/{execution}"),
        ("POST", f"/v1/executions/{execution}/cancel"),
        ("POST", f"/v1/executions/{execution}/retry"),
        ("GET", f"{IN_QUEUE}/jobs/{job}"),
        ("GET", f"{IN_QUEUE}/executions/{execution}"),
        ("GET", f"{IN_QUEUE}/jobs"),
        ("GET", f"{IN_QUEUE}/dead-letters"),
        ("GET", f"{IN_QUEUE}/stats"),
    ]


def ask(served: Served, method: str, path: str, token: str) -> int:
    body = json.dumps({"namespace": "shop", "queue": "orders", "task": "t"}).encode() if path == "/v1/jobs" else None
    request = urllib.request.Request(served.base_url + path, data=body, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        with error:
            return error.code


@pytest.mark.parametrize("token", ["t-bob", "t-runner"], ids=["a user without any verb", "a ServiceAccount without"])
def test_without_the_verb_no_route_opens_a_connection_or_runs_a_statement(counted: Served, token: str) -> None:
    before = statements(counted)
    for method, path in routes(counted):
        assert ask(counted, method, path, token) == 403, (method, path)
    assert counted.connections == []
    assert statements(counted) == before


def test_the_counts_do_count(counted: Served) -> None:
    """alice may: reading the execution by id and the queue's execution opens connections to
    both databases and runs statements there (else the test above would prove nothing)."""
    before = statements(counted)
    assert ask(counted, "GET", "/executions/ex-abc", "t-alice") == 200
    assert ask(counted, "GET", f"/v1/executions/{counted.execution}", "t-alice") == 200
    assert "queue connect" in counted.connections and "history checkout" in counted.connections
    assert statements(counted) > before
