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


def execution_row(store: QueueStore, execution_id: str) -> dict[str, Any]:
    """The store's row of an execution the test made: failing, not None, when it is missing."""
    found = store.execution(execution_id)
    assert found is not None, f"execution {execution_id} is not in the store"
    return found
