"""The history database: one row per execution attempt and per workflow history entry, off the firing path.

`SqlHistory` (store.py) is the `HistorySink` and `WorkflowHistorySink` adapter
for SQLite and PostgreSQL; `MigratingHistory` (migrating.py) is how the
operator holds it, opened and migrated on first use so an unreachable database
never delays startup; precedence.py is the rule that decides which of two
records of one attempt is kept (workflow history entries never change, so need
no such rule). The schema is in schema.sql, the raw SQL in queries.sql, the
Alembic migrations in migrations/.
"""

from vigil.history.store import SqlHistory

__all__ = ["SqlHistory"]
