"""What every part of the queue store shares: its DSN, its connections, its migrations, and how
the HTTP API's operations open a transaction (`_acting`) and turn an unreachable database into
QueueUnavailable (`_reachable`).

`StoreBase` is the root of the parts vigil.queue.store.QueueStore is composed of (submitstore,
declarestore, upkeepstore); vigil.queue.apistore.ApiQueueStore overrides `connect` and `_acting`
here to act as a namespace's API role, and every part's operations follow.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import psycopg

from vigil import pgconnect
from vigil.core.queue import QueueUnavailable
from vigil.queue.queries import OWNER_STATEMENTS


class StoreBase:
    """The DSN, connections and migrations every part of the queue store shares. `dsn`: libpq string or URL."""

    #: What the HTTP API's operations send for each block: the statements themselves, as the
    #: owner; the API's store (vigil.queue.apistore) sends the calls of its functions instead.
    statements: Mapping[str, str] = OWNER_STATEMENTS

    def __init__(self, dsn: str, *, migrate_first: bool = False, shards: int = 1) -> None:
        """`migrate_first`: the first of the HTTP API's calls brings the schema up to date (the
        operator's store: it starts whether or not the database is up, and migrates once it is).
        `shards`: the trigger's (`queue.shards`), which a recurring job added here is spread over."""
        self.dsn = dsn
        self.shards = shards
        self._migrated = not migrate_first
        self._migrating = threading.Lock()

    def migrate(self) -> None:
        """Bring the queue schema to the newest migration; a no-op when it is there already.

        In this process: the operator runs it in a child instead (vigil.queue.migrating)."""
        from vigil.queue import migrating  # SQLAlchemy and alembic: never on a worker's path

        migrating.migrate(self.dsn)

    def migrate_apart(self) -> None:
        """`migrate()` in a child process, as the operator migrates: this process never imports alembic.

        Raises QueueUnavailable when the store cannot be reached."""
        from vigil.queue import migrating

        migrating.migrate_apart(self.dsn)

    def connect(self) -> psycopg.Connection[Any]:
        return pgconnect.connect(self.dsn)

    @contextlib.contextmanager
    def _acting(
        self, *, queue: str | None = None, execution_id: str | None = None, job_id: str | None = None
    ) -> Iterator[psycopg.Connection[Any] | None]:
        """A connection in a transaction for one of the HTTP API's operations on `queue`, or on the
        execution or job of that id: here the owner's, always. The API's store (vigil.queue.apistore)
        acts as the namespace's API role instead, and yields None when it has none (no TaskQueue)
        or the id is nowhere."""
        with self.connect() as connection, connection.transaction():
            yield connection

    @contextlib.contextmanager
    def _reachable(self) -> Iterator[None]:
        try:
            if not self._migrated:
                with self._migrating:
                    if not self._migrated:
                        self.migrate_apart()
                        self._migrated = True
            yield
        except Exception as error:
            if not _unreachable(error):
                raise
            raise QueueUnavailable(str(error).strip().splitlines()[0] or type(error).__name__) from None


def _unreachable(error: Exception) -> bool:
    """Whether `error` says the database could not be reached: psycopg's, or SQLAlchemy's when a
    migration in this process (which alone imports SQLAlchemy) raised it."""
    if isinstance(error, psycopg.OperationalError):
        return True
    sqlalchemy_errors = sys.modules.get("sqlalchemy.exc")
    return sqlalchemy_errors is not None and isinstance(error, sqlalchemy_errors.OperationalError)
