"""Alembic's entry point: run the migrations on the connection `SqlHistory.migrate()` hands over.

There is no alembic.ini and no URL here: the adapter builds the Config in code,
opens a transaction (holding the DDL lock on PostgreSQL) and passes that
connection in `config.attributes["connection"]`, so migrations run with exactly
the engine settings the adapter uses.
"""

from __future__ import annotations

from alembic import context

from vigil.history.migrations import VERSION_TABLE


def run_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run the history migrations through SqlHistory.migrate()")
    context.configure(
        connection=connection, version_table=VERSION_TABLE, transaction_per_migration=True
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("offline (--sql) migrations are not supported: read schema.sql instead")
run_online()
