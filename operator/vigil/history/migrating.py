"""The history database as the operator holds it: opened and migrated on first use.

The operator must start, campaign and fire with the database down (the history
is off the firing path), so nothing touches the database until a writer or a
reader needs it; the first use runs the migrations, and a failed first use is
simply tried again by the next one.
"""

from __future__ import annotations

import threading

from vigil.core.history import AttemptRecord, WorkflowEventRecord
from vigil.core.ports import Clock
from vigil.history.store import SqlHistory


class MigratingHistory:
    """The history database, migrated on first use: an unreachable database never delays startup."""

    def __init__(self, dsn: str, *, retention_days: int) -> None:
        self._dsn = dsn
        self._retention_days = retention_days
        self._history: SqlHistory | None = None
        self._lock = threading.Lock()

    @property
    def history(self) -> SqlHistory:
        with self._lock:
            if self._history is None:
                history = SqlHistory(self._dsn, retention_days=self._retention_days)
                try:
                    history.migrate()
                except Exception:
                    history.close()
                    raise
                self._history = history
            return self._history

    def expire(self, clock: Clock) -> None:
        """Drop history older than the retention (whole days; partitions on PostgreSQL)."""
        self.history.drop_expired_partitions(clock.now())

    def write(self, records: list[AttemptRecord]) -> None:
        self.history.write(records)

    def write_workflow_events(self, records: list[WorkflowEventRecord]) -> None:
        self.history.write_workflow_events(records)

    def workflow_event(self, workflow_uid: str, seq: int) -> WorkflowEventRecord | None:
        return self.history.workflow_event(workflow_uid, seq)
