"""Fixtures for the contract suites: every implementation of a port, behind one fixture.

In-memory twins need nothing; the Kubernetes adapters need the real local
control plane, so its `cluster` and per-test `namespace` fixtures are re-exported
from tests/integration and the cases that use them carry the `integration` marker.
The history database's PostgreSQL cases use the session's `postgres` server (a
real one, started from Debian's packages) and carry the `postgres` marker; the
history suites share the `backend`, `history` and `unreachable` fixtures here
(backends and fresh databases in tests/contract/historydb.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.historydb import BACKENDS, RETENTION_DAYS, fresh_dsn
from tests.contract.postgres import PostgresServer, free_port
from tests.integration.conftest import cluster, namespace
from vigil.history.store import SqlHistory

__all__ = ["cluster", "namespace", "postgres"]


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the session (tests/contract/postgres.py); cases get databases of their own."""
    server = PostgresServer.create()
    try:
        yield server
    finally:
        server.drop()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def history(backend: str, request: pytest.FixtureRequest) -> Iterator[SqlHistory]:
    """A migrated history database of the case's own, on each backend."""
    store = SqlHistory(fresh_dsn(backend, request), retention_days=RETENTION_DAYS)
    store.migrate()
    yield store
    store.close()


@pytest.fixture
def unreachable(backend: str, tmp_path: Path) -> Iterator[SqlHistory]:
    """A history store whose database cannot be reached: a missing directory, or a port nobody listens on."""
    if backend == "sqlite":
        dsn = f"sqlite:///{tmp_path / 'no-such-directory' / 'history.db'}"
    else:
        dsn = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres"
    store = SqlHistory(dsn, connect_timeout_seconds=2)
    yield store
    store.close()
