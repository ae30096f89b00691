"""Fixtures for the contract suites: every implementation of a port, behind one fixture.

In-memory twins need nothing; the Kubernetes adapters need the real local
control plane, so its `cluster` and per-test `namespace` fixtures are re-exported
from tests/integration and the cases that use them carry the `integration` marker.
The history database's PostgreSQL cases use the session's `postgres` server (a
real one, started from Debian's packages) and carry the `postgres` marker.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.contract.postgres import PostgresServer
from tests.integration.conftest import cluster, namespace

__all__ = ["cluster", "namespace", "postgres"]


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the session (tests/contract/postgres.py); cases get databases of their own."""
    server = PostgresServer.create()
    try:
        yield server
    finally:
        server.drop()
