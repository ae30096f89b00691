"""The history database as the operator holds it: opened and migrated on first use.

The operator must start, campaign and fire with the database down (the history
is off the firing path), so nothing touches the database until a writer or a
reader needs it; the first use runs the migrations, and a failed first use is
simply tried again by the next one.

The migrations run in a child process (`python -m vigil.history.migrating`, the DSN on its
standard input, never on a command line): alembic brings mako and pygments, about 11 MiB the
operator would otherwise hold for its whole life to use once.
"""

from __future__ import annotations

import logging
import sys
import threading

from vigil import apart
from vigil.core.history import AttemptRecord, WorkflowEventRecord
from vigil.core.logtail import LogTail
from vigil.core.ports import Clock, HistoryUnavailable
from vigil.history.store import SqlHistory

#: How long the migrations may take; on PostgreSQL this includes waiting for another replica's.
MIGRATE_TIMEOUT_SECONDS = 300.0


def migrate_apart(dsn: str, *, timeout: float = MIGRATE_TIMEOUT_SECONDS) -> None:
    """Bring the history database's schema up to date in a child process.

    Raises HistoryUnavailable when the database cannot be reached (tried again on next use),
    RuntimeError when a migration itself fails.
    """
    apart.migrate_apart(
        "vigil.history.migrating", dsn, what="history", unavailable=HistoryUnavailable, timeout=timeout
    )


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
                migrate_apart(self._dsn)
                self._history = SqlHistory(self._dsn, retention_days=self._retention_days)
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

    def write_log_tail(self, tail: LogTail) -> None:
        self.history.write_log_tail(tail)

    def has_log_tail(self, execution_id: str, attempt: int) -> bool:
        return self.history.has_log_tail(execution_id, attempt)


def main() -> int:
    """The child: migrate the database whose DSN is on standard input."""
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    logging.getLogger("alembic.runtime.migration").setLevel(logging.INFO)  # "Running upgrade …" only
    history = SqlHistory(sys.stdin.read().strip())
    try:
        history.migrate()
    except HistoryUnavailable as err:
        print(err, file=sys.stderr)
        return apart.EXIT_UNAVAILABLE
    finally:
        history.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
