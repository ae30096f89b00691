"""Alembic's entry point: run the queue migrations on the connection `QueueStore.migrate()` hands over.

As for the history database, there is no alembic.ini and no URL: the store opens
a transaction (holding an advisory lock, so two workers starting together do not
race on the DDL) and passes the connection in `config.attributes["connection"]`.
"""

from __future__ import annotations

from alembic import context

from vigil.queue.migrations import SCHEMA, VERSION_TABLE


def run_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run the queue migrations through QueueStore.migrate()")
    connection.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    context.configure(
        connection=connection,
        version_table=VERSION_TABLE,
        version_table_schema=SCHEMA,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("offline (--sql) migrations are not supported: read migrations/versions instead")
run_online()
