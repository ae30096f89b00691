"""The history database both history contract suites run against: which backends, and a fresh database on each.

`BACKENDS` parametrizes the `backend` fixture (tests/contract/conftest.py), so
every case that asks for `history` runs once on SQLite and once on a real
PostgreSQL (marked `postgres`). `fresh_dsn` gives a case an empty database of its
own on either; `RETENTION_DAYS` is the retention the `history` fixture's store
keeps, which the retention cases compute their cutoffs from.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contract.postgres import PostgresServer

RETENTION_DAYS = 7

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def fresh_dsn(backend: str, request: pytest.FixtureRequest, *, name: str = "history") -> str:
    """The URL of an empty database on ``backend``: a file in the case's tmp_path, or a new PostgreSQL database."""
    if backend == "sqlite":
        tmp_path: Path = request.getfixturevalue("tmp_path")
        return f"sqlite:///{tmp_path / name}.db"
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.create_database()
