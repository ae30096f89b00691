"""The queue store's migrations in a child process, as the operator runs them.

`python -m vigil.queue.migrating` reads the DSN on its standard input (never a command line,
where `ps` shows it) and brings the `vigil_queue` schema up to date. Alembic brings mako and
pygments, megabytes the operator would otherwise hold for its whole life to use once; tests and
`vigil worker --migrate` call `QueueStore.migrate()` (`migrate` here) in their own process instead.
"""

from __future__ import annotations

import logging
import sys

import psycopg
import sqlalchemy as sa

from vigil import apart, pgconnect
from vigil.core.queue import QueueUnavailable
from vigil.queue import functions
from vigil.queue.migrations import SCRIPT_LOCATION
from vigil.queue.queries import QUERIES

MIGRATE_TIMEOUT_SECONDS = 300.0  # includes waiting for another replica's migrations (a DDL lock)


def migrate(dsn: str) -> None:
    """Bring the queue schema to the newest migration in this process; a no-op when it is there
    already. Another replica migrating meanwhile is waited for (a DDL lock)."""
    import alembic.command  # here only: alembic brings mako and pygments, megabytes held for life
    import alembic.config

    config = alembic.config.Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    limits = pgconnect.MIGRATION_LIMITS
    engine = sa.create_engine("postgresql+psycopg://", creator=lambda: pgconnect.connect(dsn, limits=limits))
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql(QUERIES["lock_ddl"])
            config.attributes["connection"] = connection
            alembic.command.upgrade(config, "head")
            # the workers' functions, replaced to this version's statements (vigil.queue.functions);
            # sent on the driver's connection as it is: no parameters, so no placeholder parsing
            driver = connection.connection.driver_connection
            if driver is None:
                raise RuntimeError("the migration's connection has no psycopg connection under it")
            driver.execute(functions.install_sql())
    finally:
        engine.dispose()


def migrate_apart(dsn: str, *, timeout: float = MIGRATE_TIMEOUT_SECONDS) -> None:
    """Bring the queue store's schema up to date in a child process.

    Raises QueueUnavailable when the store cannot be reached, RuntimeError when a migration fails.
    """
    apart.migrate_apart("vigil.queue.migrating", dsn, what="queue", unavailable=QueueUnavailable, timeout=timeout)


def main() -> int:
    """The child: migrate the store whose DSN is on standard input."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("alembic.runtime.migration").setLevel(logging.INFO)  # "Running upgrade …" only
    try:
        migrate(sys.stdin.read().strip())
    except (psycopg.OperationalError, sa.exc.OperationalError) as err:
        print(err, file=sys.stderr)
        return apart.EXIT_UNAVAILABLE
    return 0


if __name__ == "__main__":
    sys.exit(main())
