"""A caller's tenant on the volume tier is who it is, through a real operator, the real API server
and a real PostgreSQL queue store.

The TaskQueue `orders` caps each tenant at one leased execution and binds the tenant `batch` to
the ServiceAccount `bound`. The operator (the chart's identity) publishes it to the store and
reads its bindings from the API server when a submission arrives:

* `worker` (ServiceAccount, may submit) sends many invented tenant names: each is 403 and stores
  nothing; its own submissions are its namespace's tenant, so a lease within the queue's caps
  takes one of them, however many names it tried: its effective cap did not grow;
* `bound` submits as `batch` without naming it, and may not escape to its namespace's tenant;
* the operator's config lists no namespace for high priority (as the chart renders it from
  admission.highPriority.namespaces), so a priority above normal is 403 and normal is taken.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from tests.contract.conftest import postgres
from tests.contract.postgres import PostgresServer
from tests.integration.conftest import KubeCluster
from tests.integration.operators import OperatorFleet
from tests.integration.test_http_access import GROUP, serving, token_of
from tests.integration.test_queue_access import on_orders, status_of
from tests.queue.conftest import conninfo
from tests.waiting import wait_for
from vigil.client import ApiError, Client
from vigil.core.queue import QueueDeclaration
from vigil.queue.store import QueueStore, WorkerStore

__all__ = ["postgres"]

pytestmark = pytest.mark.postgres

INVENTED = 12  # tenant names the worker tries


@pytest.fixture
def served(
    cluster: KubeCluster, tmp_path: Path, postgres: PostgresServer, request: pytest.FixtureRequest
) -> Iterator[tuple[str, str]]:
    """(the operator's HTTP API URL, the queue store's DSN)."""
    dsn = conninfo(postgres, postgres.create_database())
    fleet = OperatorFleet(
        cluster, tmp_path, queue={"dsn": dsn, "statusIntervalSeconds": 0.5, "highPriorityNamespaces": []}
    )
    with serving(fleet, request) as api:
        yield f"http://127.0.0.1:{api.port}", dsn


def declare(cluster: KubeCluster, namespace: str, dsn: str) -> QueueDeclaration:
    """TaskQueue `orders` (one leased execution per tenant, `batch` bound to `bound`), as published."""
    body = {
        "apiVersion": f"{GROUP}/v1alpha1", "kind": "TaskQueue", "metadata": {"name": "orders"},
        "spec": {"tenants": {"maxConcurrent": 1, "bindings": [{"name": "batch", "serviceAccounts": [f"{namespace}/bound"]}]}},
    }  # fmt: skip
    cluster.custom.create_namespaced_custom_object(GROUP, "v1alpha1", namespace, "taskqueues", body)
    found: list[QueueDeclaration] = []

    def published() -> bool:
        try:
            declaration = QueueStore(dsn).declaration(f"{namespace}/orders")
        except psycopg.Error:  # not migrated yet: the operator migrates at its first use
            return False
        found[:] = [declaration] if declaration is not None else []
        return bool(found)

    wait_for(published, timeout=60, what="the operator to publish TaskQueue orders")
    return found[0]


def lease_all(dsn: str, queue: str, declaration: QueueDeclaration) -> list[str]:
    """The executions one worker leases at once within `declaration`'s caps (asking for many)."""

    async def run() -> list[str]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            store = WorkerStore(connection, queue=queue, worker="w1")
            now = datetime.now(UTC) + timedelta(seconds=1)
            held = await store.lease(["record"], limit=50, lease=timedelta(minutes=5), now=now, declaration=declaration)
            return [h.execution_id for h in held]

    return asyncio.run(run())


def test_invented_tenant_names_do_not_grow_a_callers_cap(
    cluster: KubeCluster, namespace: str, served: tuple[str, str]
) -> None:
    url, dsn = served
    declaration = declare(cluster, namespace, dsn)
    assert declaration.tenant_max_concurrent == 1
    worker = Client(url, token=token_of(cluster, namespace, "worker", on_orders("create", "get")))

    def submit(key: str, tenant: str | None = None) -> Callable[[], object]:
        return lambda: worker.submit(namespace=namespace, queue="orders", task="record", idempotency_key=key, tenant=tenant)

    answers = [status_of(submit(f"i{n}", tenant=f"invented-{n}")) for n in range(INVENTED)]
    made = [worker.submit(namespace=namespace, queue="orders", task="record", idempotency_key=f"own{n}") for n in range(3)]

    held = lease_all(dsn, f"{namespace}/orders", declaration)
    assert len(held) == 1, f"one caller, one tenant, one lease at a time: {len(held)} leased"
    assert answers == [403] * INVENTED
    # read within the queue: its grant names one TaskQueue, and reading by id alone needs more
    assert {worker.execution(m.execution_id, queue=(namespace, "orders")).tenant for m in made} == {namespace}
    assert sum(QueueStore(dsn).counts(f"{namespace}/orders").values()) == 3


def test_a_bound_service_account_submits_as_its_tenant_and_cannot_escape_it(
    cluster: KubeCluster, namespace: str, served: tuple[str, str]
) -> None:
    url, dsn = served
    declare(cluster, namespace, dsn)
    bound = Client(url, token=token_of(cluster, namespace, "bound", on_orders("create", "get")))
    made = bound.submit(namespace=namespace, queue="orders", task="record", idempotency_key="b1")
    assert bound.execution(made.execution_id, queue=(namespace, "orders")).tenant == "batch"
    def escape() -> object:
        return bound.submit(namespace=namespace, queue="orders", task="record", idempotency_key="b2", tenant=namespace)

    assert status_of(escape) == 403


def test_a_priority_above_normal_needs_a_listed_namespace(
    cluster: KubeCluster, namespace: str, served: tuple[str, str]
) -> None:
    url, _ = served
    worker = Client(url, token=token_of(cluster, namespace, "worker", on_orders("create", "get")))
    for priority in ("high", -1):
        with pytest.raises(ApiError) as refused:
            worker.submit(namespace=namespace, queue="orders", task="record", priority=priority)
        assert (refused.value.status, refused.value.field) == (403, "priority")
    assert worker.submit(namespace=namespace, queue="orders", task="record", priority="normal").created
