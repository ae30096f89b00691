"""A submission's tenant and priority through the HTTP API (vigil.api.queue), on a real PostgreSQL store.

The tenant is the caller's, never the body's: a ServiceAccount's namespace, or a tenant the
TaskQueue binds to it; naming another is 403 (field `tenant`) and stores nothing, unless the
caller may update the TaskQueue itself. Priorities above normal are 403 outside the chart's
high-priority namespaces. The reviews are stood in for (a ServiceAccount `team-a/worker` and the
user `admin`); tests/integration/test_queue_tenants.py asks the real API server.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from tests.queue.conftest import STORES, store_as
from tests.queue.test_api import Clock
from vigil.api.queue import QueueApi
from vigil.api.router import ApiServer
from vigil.core.access import Access, ReviewUnavailable, User
from vigil.core.tenancy import TenantBinding
from vigil.queue.store import QueueStore

pytestmark = pytest.mark.postgres


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, dsn: str) -> QueueStore:
    """Each test twice: on the owner's store, and on the HTTP API's, which acts as the namespace's
    API role (vigil.queue.apistore): the answers must not differ."""
    return store_as(request.param, dsn, namespaces=("shop", "team-a"))

WORKER = User("system:serviceaccount:team-a:worker", groups=("system:serviceaccounts",))
ADMIN = User("admin", groups=("ops",))
TOKENS = {"t-worker": WORKER, "t-admin": ADMIN}


class Reviews:
    """Everyone known may act on the executions of shop/orders; `editors` may also edit the TaskQueue."""

    def __init__(self, *, editors: frozenset[str] = frozenset()) -> None:
        self._editors = editors

    def authenticate(self, token: str) -> User | None:
        return TOKENS.get(token)

    def allowed(self, user: User, access: Access) -> bool:
        if access.subresource == "executions":
            return (access.namespace, access.name) in {("shop", "orders"), ("", "")}
        return access == Access("update", "vigil.dev", "taskqueues", "shop", "orders") and user.name in self._editors


class Bindings:
    def __init__(self, *bindings: TenantBinding) -> None:
        self._bindings = bindings
        self.asked: list[tuple[str, str]] = []

    def bindings(self, namespace: str, name: str) -> Sequence[TenantBinding]:
        self.asked.append((namespace, name))
        return self._bindings if (namespace, name) == ("shop", "orders") else ()


def serve(
    store: QueueStore, *bindings: TenantBinding, editors: frozenset[str] = frozenset(),
    high: frozenset[str] | None = None,
) -> ApiServer:  # fmt: skip
    reviews = Reviews(editors=editors)
    api = QueueApi(
        store, clock=Clock(), authenticator=reviews, authorizer=reviews, tenants=Bindings(*bindings),
        high_priority_namespaces=high,
    )  # fmt: skip
    return ApiServer(leader=lambda: None, find_execution=lambda execution_id: None, timeline=lambda e: [], queue_api=api)


def submit(server: ApiServer, token: str, **fields: Any) -> tuple[int, Any]:
    data = {"namespace": "shop", "queue": "orders", "task": "record", **fields}
    status, _, raw = server.answer_post("/v1/jobs", json.dumps(data).encode(), token=token)
    return status, json.loads(raw)


def tenant_of(store: QueueStore, made: Any) -> str:
    row = store.execution(made["executionId"])
    assert row is not None
    return str(row["tenant"])


def test_a_service_accounts_tenant_is_its_namespace_and_a_users_the_queues(store: QueueStore) -> None:
    server = serve(store)
    status, made = submit(server, "t-worker")
    assert status == 201 and tenant_of(store, made) == "team-a"
    status, made = submit(server, "t-worker", tenant="team-a", idempotencyKey="named")
    assert status == 201 and tenant_of(store, made) == "team-a"
    status, made = submit(server, "t-admin")
    assert status == 201 and tenant_of(store, made) == "shop"


@pytest.mark.parametrize("tenant", ["team-b", "shop", "invented-7"])
@pytest.mark.parametrize("cron", [None, "0 * * * *"], ids=["one-off", "recurring"])
def test_naming_a_tenant_that_is_not_the_callers_is_403_and_stores_nothing(
    store: QueueStore, tenant: str, cron: str | None
) -> None:
    extra = {} if cron is None else {"cron": cron}
    status, answer = submit(serve(store), "t-worker", tenant=tenant, **extra)
    assert (status, answer["reason"], answer["errors"][0]["field"]) == (403, "Forbidden", "tenant")
    assert tenant in answer["detail"] and "team-a" in answer["detail"]
    assert store.counts("shop/orders")["ready"] == 0


def test_a_tenant_the_taskqueue_binds_replaces_the_namespace(store: QueueStore) -> None:
    batch = TenantBinding("batch", service_accounts=("team-a/worker",))
    ops = TenantBinding("ops-tenant", groups=("ops",))
    server = serve(store, batch, ops)
    status, made = submit(server, "t-worker")
    assert status == 201 and tenant_of(store, made) == "batch"
    assert submit(server, "t-worker", tenant="team-a", idempotencyKey="escape")[0] == 403
    assert submit(server, "t-worker", tenant="ops-tenant", idempotencyKey="other")[0] == 403
    status, made = submit(server, "t-admin")
    assert status == 201 and tenant_of(store, made) == "ops-tenant"


def test_who_may_edit_the_taskqueue_may_name_any_tenant(store: QueueStore) -> None:
    status, made = submit(serve(store, editors=frozenset({"admin"})), "t-admin", tenant="acme")
    assert status == 201 and tenant_of(store, made) == "acme"


@pytest.mark.parametrize("priority", ["high", -1])
@pytest.mark.parametrize("cron", [None, "0 * * * *"], ids=["one-off", "recurring"])
def test_a_priority_above_normal_is_403_outside_the_listed_namespaces(
    store: QueueStore, priority: str | int, cron: str | None
) -> None:
    extra = {} if cron is None else {"cron": cron}
    status, answer = submit(serve(store, high=frozenset({"payments"})), "t-worker", priority=priority, **extra)
    assert (status, answer["reason"], answer["errors"][0]["field"]) == (403, "Forbidden", "priority")
    assert "admission.highPriority.namespaces" in answer["detail"]
    for allowed in ("normal", "low", 0, 5):
        assert submit(serve(store, high=frozenset()), "t-worker", priority=allowed, idempotencyKey=str(allowed))[0] == 201
    assert submit(serve(store, high=frozenset({"shop"})), "t-worker", priority=priority, idempotencyKey="listed")[0] == 201


class Unreachable:
    def bindings(self, namespace: str, name: str) -> Sequence[TenantBinding]:
        raise ReviewUnavailable("connection refused")


def test_bindings_that_cannot_be_read_are_503_never_a_guessed_tenant(store: QueueStore) -> None:
    reviews = Reviews()
    api = QueueApi(store, clock=Clock(), authenticator=reviews, authorizer=reviews, tenants=Unreachable())
    server = ApiServer(leader=lambda: None, find_execution=lambda execution_id: None, timeline=lambda e: [], queue_api=api)
    status, answer = submit(server, "t-worker")
    assert (status, answer["reason"]) == (503, "ReviewUnavailable")
    assert store.counts("shop/orders")["ready"] == 0
