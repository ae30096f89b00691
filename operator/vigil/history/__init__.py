"""The history database: one row per execution attempt and per workflow history entry, off the firing path.

`SqlHistory` (store.py) is the `HistorySink` and `WorkflowHistorySink` adapter
for SQLite and PostgreSQL; `BufferedHistory` (buffer.py) sits in front of its
attempt writes so an unreachable database never reaches the caller;
precedence.py is the rule both use to decide which of two records of one
attempt is kept (workflow history entries never change, so need no such rule).
The schema is in schema.sql, the raw SQL in queries.sql, the Alembic migrations
in migrations/.
"""

from vigil.history.buffer import BufferedHistory
from vigil.history.store import SqlHistory

__all__ = ["BufferedHistory", "SqlHistory"]
