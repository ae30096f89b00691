"""Fixtures for the queue tests: the session's real PostgreSQL server, a migrated database per test,
and every HTTP API answer checked against the OpenAPI document.

The server is the contract suite's (tests/contract/postgres.py, Debian's
PostgreSQL, started once per session); each test gets a database of its own with
the queue schema migrated, so tests never see each other's executions.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conformance import check_every_answer
from tests.contract.conftest import postgres
from tests.contract.postgres import PostgresServer
from vigil.queue.apistore import ApiQueueStore
from vigil.queue.roles import RoleLimits, TenantRoles
from vigil.queue.store import QueueStore

__all__ = ["postgres"]


def conninfo(server: PostgresServer, url: str) -> str:
    """The libpq string of the database behind a SQLAlchemy URL from `create_database`."""
    return server.conninfo(url.rsplit("/", 1)[1])


@pytest.fixture(autouse=True)
def answers_conform(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every answer of the HTTP API in these tests held to its published contract (tests/conformance.py)."""
    check_every_answer(monkeypatch)


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the test's own, for tests that stop and start it (the session's is
    shared by every test)."""
    made = PostgresServer.create()
    try:
        yield made
    finally:
        made.drop()


@pytest.fixture
def dsn(postgres: PostgresServer) -> str:
    """A fresh database with the queue schema: its libpq connection string."""
    info = conninfo(postgres, postgres.create_database())
    QueueStore(info).migrate()
    return info


@pytest.fixture
def store(dsn: str) -> QueueStore:
    return QueueStore(dsn)


class ApiStoreBesideOwner(ApiQueueStore):
    """The HTTP API's store (every route's operation as a namespace's API role), with the owner's
    reads a test checks the store by (`execution`, `attempts`, `counts`) and `declare`, which no
    route calls, kept as the owner's."""

    def execution(self, execution_id: str) -> dict[str, Any] | None:
        return QueueStore(self.dsn).execution(execution_id)

    def attempts(self, execution_id: str) -> list[dict[str, Any]]:
        return QueueStore(self.dsn).attempts(execution_id)

    def counts(self, queue: str) -> dict[str, int]:
        return QueueStore(self.dsn).counts(queue)

    def declare(self, queue: str, declaration: Any, *, generation: int, now: Any) -> None:
        QueueStore(self.dsn).declare(queue, declaration, generation=generation, now=now)


STORES = ("owner", "api-roles")  # the route tests run on both: what the API answers is the same


def store_as(kind: str, dsn: str, *, namespaces: tuple[str, ...]) -> QueueStore:
    """The owner's store, or the API's with `namespaces` provisioned (as their TaskQueues would)."""
    if kind == "owner":
        return QueueStore(dsn)
    tenants = TenantRoles(dsn)
    for namespace in namespaces:
        tenants.ensure(namespace, password=f"pw-{namespace}", limits=RoleLimits())
    return ApiStoreBesideOwner(dsn, password="api-pw", migrate_first=False)


def execution_row(store: QueueStore, execution_id: str) -> dict[str, Any]:
    """The store's row of an execution the test made: failing, not None, when it is missing."""
    found = store.execution(execution_id)
    assert found is not None, f"execution {execution_id} is not in the store"
    return found


@pytest.fixture
def old_store(postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, str]:
    """A store the previous version migrated, for the rolling-upgrade tests (tests/queue/previous_version.py):
    (owner's DSN, namespace team-a's worker DSN, the previous version's call of `settle_succeeded`)."""
    from tests.queue.previous_version import (
        previous_store,  # it imports test modules that import this one
    )

    return previous_store(conninfo(postgres, postgres.create_database()), monkeypatch)
