"""The queue store as the TaskQueue controller uses it: declarations and each queue's counts.

The operator's leader publishes each TaskQueue's declaration (retry, caps, priorities, retention)
in `vigil_queue.queues`, removes those whose TaskQueue went, and reads each declared queue's
counts, rates and the watchdog's last summary (`watch_summaries`) for the TaskQueue's status.
Workers read a declaration through their own function (vigil.queue.workerstore), parsed here by
`declaration_from_row`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from vigil.core.backoff import Backoff
from vigil.core.queue import QueueDeclaration, QueueStats, QueueWatchSummary
from vigil.queue.queries import QUERIES
from vigil.queue.storebase import StoreBase


class DeclarationStore(StoreBase):
    """Declarations and queue counts (see the module docstring)."""

    def declare(
        self, queue: str, declaration: QueueDeclaration, *, generation: int, now: datetime
    ) -> None:
        """Publish (insert or replace) the declaration of `queue` ("NS/NAME")."""
        with self.connect() as connection:
            connection.execute(QUERIES["declare_queue"], _declaration_params(queue, declaration, generation, now))

    def declared(self) -> dict[str, int]:
        """Every published queue and the TaskQueue generation it was published from."""
        with self.connect() as connection:
            return {queue: int(gen) for queue, gen in connection.execute(QUERIES["declared_queues"]).fetchall()}

    def undeclare(self, queues: Sequence[str]) -> None:
        """Remove the declarations of `queues` (their TaskQueues were deleted)."""
        if queues:
            with self.connect() as connection:
                connection.execute(QUERIES["undeclare_queues"], {"queues": list(queues)})

    def declaration(self, queue: str) -> QueueDeclaration | None:
        with self.connect() as connection:
            row = connection.execute(QUERIES["declared_queue"], {"queue": queue}).fetchone()
        return None if row is None else declaration_from_row(row)

    def stats(self, queues: Sequence[str], *, now: datetime) -> dict[str, QueueStats]:
        """Counts, last-minute rates and the oldest due ready age of each of `queues`."""
        if not queues:
            return {}
        params = {"queues": list(queues), "now": now, "minute_ago": now - timedelta(minutes=1)}
        with self.connect() as connection:
            rows = connection.execute(QUERIES["queue_stats"], params).fetchall()
        return {
            queue: QueueStats(
                ready=ready,
                leased=leased,
                dead=dead,
                succeeded_last_minute=succeeded,
                dead_last_minute=dead_minute,
                oldest_ready_age=None if oldest is None else max(timedelta(0), now - oldest),
                watch=None if watched[0] is None else _watch_summary(*watched),
            )
            for queue, ready, leased, dead, succeeded, dead_minute, oldest, *watched in rows
        }


def _watch_summary(overdue: int, overdue_jobs: Any, broken: int | None, broken_jobs: Any) -> QueueWatchSummary:
    """A `watch_summaries` row (its jobs as JSON [[job id, reason], ...]) as the core's summary."""
    return QueueWatchSummary(
        overdue=overdue,
        overdue_jobs=tuple((str(job), str(reason)) for job, reason in overdue_jobs or []),
        broken=broken,
        broken_jobs=tuple((str(job), str(reason)) for job, reason in broken_jobs or []),
    )


def _declaration_params(
    queue: str, declaration: QueueDeclaration, generation: int, now: datetime
) -> dict[str, Any]:
    d = declaration
    return {
        "queue": queue,
        "lease_seconds": d.lease.total_seconds(),
        "heartbeat_seconds": d.heartbeat.total_seconds(),
        "max_attempts": d.max_attempts,
        "backoff_initial_seconds": d.backoff.initial.total_seconds(),
        "backoff_factor": d.backoff.factor,
        "backoff_max_seconds": d.backoff.max.total_seconds(),
        "dead_retention_seconds": None if d.dead_retention is None else d.dead_retention.total_seconds(),
        "tenant_max_concurrent": d.tenant_max_concurrent,
        "tenant_caps": Jsonb(dict(d.tenant_caps)),
        "priorities": Jsonb({str(value): share for value, share in d.priorities.items()}),
        "objective_seconds": None if d.objective is None else d.objective.total_seconds(),
        "generation": generation,
        "now": now,
    }


def declaration_from_row(row: Sequence[Any]) -> QueueDeclaration:
    """A `declared_queue` row as the core's declaration."""
    (lease, heartbeat, max_attempts, initial, factor, longest, dead, cap, caps, priorities, objective) = row

    def seconds(value: float | None) -> timedelta | None:
        return None if value is None else timedelta(seconds=value)

    return QueueDeclaration(
        lease=timedelta(seconds=lease),
        heartbeat=timedelta(seconds=heartbeat),
        max_attempts=max_attempts,
        backoff=Backoff(initial=timedelta(seconds=initial), factor=factor, max=timedelta(seconds=longest)),
        dead_retention=seconds(dead),
        tenant_max_concurrent=cap,
        tenant_caps={str(tenant): int(limit) for tenant, limit in caps.items()},
        priorities={int(value): float(share) for value, share in priorities.items()},
        objective=seconds(objective),
    )
