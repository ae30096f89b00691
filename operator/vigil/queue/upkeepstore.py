"""The queue store as the operator's upkeep uses it: partitions, retention and quotas.

Hourly partitions of `schedule_buckets` and daily ones of `attempts` made ahead and dropped
behind (vigil.queue.partitions, vigil.queue.attempt_days); dead letters past their queue's
retention purged; the bounded store's pass (vigil.queue.bounds): finished executions and deleted
jobs past retention, each namespace's quota limits and counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from vigil import pgconnect
from vigil.core.queue import QuotaLimits
from vigil.core.timeparse import require_aware
from vigil.queue import attempt_days, bounds, partitions
from vigil.queue.queries import QUERIES
from vigil.queue.storebase import StoreBase

PURGE_BATCH = 1000  # dead executions past their retention deleted per queue and pass


class UpkeepStore(StoreBase):
    """Partitions, retention and quotas (see the module docstring)."""

    def maintain_partitions(
        self, *, now: datetime, ahead: timedelta = partitions.DEFAULT_AHEAD
    ) -> partitions.Maintenance:
        """Make schedule_buckets' hourly partitions up to `ahead`, drop fully fired past ones.

        Idempotent, and safe from several replicas at once (vigil.queue.partitions).
        """
        with pgconnect.connect(self.dsn, autocommit=True) as connection:
            return partitions.maintain(connection, now=require_aware(now, name="now"), ahead=ahead)

    def maintain_attempts(
        self, *, now: datetime, retention_days: int = attempt_days.DEFAULT_RETENTION_DAYS
    ) -> partitions.Maintenance:
        """Make the daily partitions of attempts, drop those past `retention_days`, purge old DEFAULT rows.

        Idempotent, and safe from several replicas at once (vigil.queue.attempt_days).
        """
        with pgconnect.connect(self.dsn, autocommit=True) as connection:
            return attempt_days.maintain(connection, now=require_aware(now, name="now"), retention_days=retention_days)

    def purge_dead(self, retention: dict[str, timedelta], *, now: datetime) -> int:
        """Delete dead executions older than their queue's retention (a bounded batch per queue)."""
        if not retention:
            return 0
        params = {
            "queues": list(retention),
            "before": [now - keep for keep in retention.values()],
            "limit": PURGE_BATCH,
        }
        with self.connect() as connection:
            row = connection.execute(QUERIES["purge_dead"], params).fetchone()
        return int(row[0]) if row is not None else 0

    def keep_bounded(
        self,
        *,
        limits: Mapping[str, QuotaLimits],
        default_limits: QuotaLimits,
        retention: Mapping[str, timedelta],
        default_retention: timedelta,
        now: datetime,
    ) -> bounds.Bounded:
        """One upkeep pass of the bounded store (vigil.queue.bounds): purge succeeded and cancelled
        executions past their queue's `retention` (else `default_retention`) and jobs deleted longer
        ago, write each namespace's quota `limits` (others: `default_limits`), recount their use."""
        with pgconnect.connect(self.dsn, autocommit=True) as connection:
            return bounds.keep_bounded(
                connection, limits=limits, default_limits=default_limits, retention=retention,
                default_retention=default_retention, now=require_aware(now, name="now"),
            )  # fmt: skip

    def quota_use(self, namespace: str) -> tuple[int, int, int | None, int | None] | None:
        """(executions, payload bytes, max executions, max bytes) as counted for `namespace`."""
        with self.connect() as connection:
            return bounds.usage(connection, namespace)
