"""The HTTP API fuzzed from its OpenAPI document with the real API server's TokenReviews and
SubjectAccessReviews (vigil.kube.kits.accessreview), a real PostgreSQL queue store and a real SQLite
history: tests/queue/test_api_fuzz.py with the stand-in reviews replaced by the real ones.

Callers are ServiceAccounts with real tokens: `stranger` (granted nothing) and `owner` (every
verb on `taskqueues/executions` and `get`/`list` on executions in the test's namespace, where
its requests are made). No answer is a 5xx, every answer conforms to the document, and
`stranger`'s requests never reach the queue store (by id alone, only the read that finds the
record's queue).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from tests.contract.conftest import postgres
from tests.contract.postgres import PostgresServer
from tests.integration.conftest import KubeCluster
from tests.integration.test_http_access import GROUP, token_of
from tests.queue.conftest import conninfo
from tests.queue.test_api import Clock
from tests.queue.test_api_fuzz import (
    OPERATIONS,
    CountingStore,
    Served,
    fuzz,
    label,
)
from vigil.api.guards import Guard
from vigil.api.queue import JobStore, QueueApi
from vigil.api.router import ApiServer
from vigil.core.access import Access
from vigil.history.store import SqlHistory
from vigil.kube.kits.accessreview import AccessReviews, TokenReviews
from vigil.queue.store import QueueStore

__all__ = ["postgres"]

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

#: Examples per operation and caller: each is one or two reviews by the API server.
EXAMPLES = 4
OWNER_RULES = [
    client.V1PolicyRule(api_groups=[GROUP], resources=["taskqueues/executions"],
                        verbs=["create", "get", "update", "delete"]),
    client.V1PolicyRule(api_groups=[GROUP], resources=["executions", "workflows"], verbs=["get", "list"]),
    client.V1PolicyRule(api_groups=[""], resources=["pods/log"], verbs=["get"]),
]  # fmt: skip


@pytest.fixture
def served(cluster: KubeCluster, postgres: PostgresServer, tmp_path: Path) -> Iterator[Served]:
    store = QueueStore(conninfo(postgres, postgres.create_database()))
    store.migrate()
    history = SqlHistory(f"sqlite:///{tmp_path / 'history.db'}", retention_days=30)
    history.migrate()
    tokens = TokenReviews(cluster.api, timeout_seconds=10)
    access = AccessReviews(cluster.api, timeout_seconds=10)
    counting = CountingStore(store)
    server = ApiServer(
        leader=lambda: "op-1",
        find_execution=lambda _id: None,
        timeline=history.timeline,
        guard=Guard(authenticator=tokens, authorizer=access,
                    leader_lease=Access("get", "coordination.k8s.io", "leases", "default", "vigil")),
        job_executions=lambda ns, job, limit, after: history.job_executions(ns, job, limit=limit, after=after),
        workflow_history=lambda ns, wf, limit, after: history.workflow_history(ns, wf, limit=limit, after=after),
        log_tail=lambda ns, execution_id, attempt: history.log_tail(ns, execution_id, attempt=attempt),
        queue_api=QueueApi(cast(JobStore, counting), clock=Clock(), authenticator=tokens, authorizer=access),
    )  # fmt: skip
    serving = server.serve(0)
    try:
        yield Served(serving, counting)
    finally:
        serving.shutdown()
        serving.server_close()
        history.close()


def test_fuzzed_with_the_api_servers_reviews(cluster: KubeCluster, namespace: str, served: Served) -> None:
    stranger = token_of(cluster, namespace, "stranger")
    owner = token_of(cluster, namespace, "owner", OWNER_RULES)
    touched: dict[str, Any] = {}
    for operation in OPERATIONS:
        served.store.calls.clear()
        fuzz(served, operation, token=stranger, examples=EXAMPLES, namespace=namespace)
        assert not served.store.calls, f"{label(operation)} called {dict(served.store.calls)}"
        served.store.calls.clear()
        fuzz(served, operation, token=owner, examples=EXAMPLES, namespace=namespace)
        touched[label(operation)] = dict(served.store.calls)
    assert any(calls for calls in touched.values()), "the owner's requests reached the store"
