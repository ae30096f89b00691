"""The bounded store: per-namespace quotas on what a namespace keeps unfinished, and retention.

Quotas. A namespace may keep at most `max_ready_executions` executions unfinished (ready or
leased: a lease is a ready execution being run) and at most `max_payload_bytes` of their
payloads (the JSON text's bytes). Every path that adds an unfinished execution admits it with
`admit` in the transaction that writes it: one conditional UPDATE of the namespace's counter
row in `namespace_quotas` (sql/quotas.sql `quota_admit`), so the check costs one primary-key probe
whatever the namespace holds — at 100,000 ready rows as at none (docs/queue.md has the
EXPLAIN). What ends an execution (a settlement, a cancel, a purge) does not touch the counter:
the workers' statements stay as they were, and no row every worker writes sits in their path.
So the counter runs ahead of the truth as executions finish, and `recount` (the leader's
TaskQueue pass, every `queue.statusIntervalSeconds`) sets it back to the count plus what was
admitted while it counted (running totals read in the count's snapshot): it never holds fewer
than the namespace keeps, at most one pass's finished work more, and it holds no lock over
the count (about 50 ms of reading at 100,000 unfinished rows), so admissions never wait for it. A refusal is
`vigil.core.queue.QuotaExceeded`: the HTTP API's 429 with Retry-After, a fired occurrence's
`Failed` with reason QuotaExceeded.

Retention. `purge` deletes succeeded and cancelled executions past their queue's retention
(with their once_marks, and a one-off job's row with its one execution) and jobs deleted
longer than the default retention ago, in bounded batches through partial indexes; the
migration q0010bounded says why batches and not partitions. Dead letters keep their own
retention (QueueStore.purge_dead).

Several replicas. Only the leader's TaskQueue pass runs `keep_bounded`; every statement is
idempotent and bounded, so a second one at a failover does the same work twice, no harm.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from vigil.core.queue import (
    QUOTA_PAYLOAD_BYTES,
    QUOTA_READY_EXECUTIONS,
    QuotaExceeded,
    QuotaLimits,
    split_queue_key,
)
from vigil.queue.queries import OWNER_STATEMENTS, QUERIES

#: Finished executions deleted per queue and state in one statement, and statements per pass: a
#: pass stays short (it runs in the leader's TaskQueue loop), and a large backlog still goes at
#: 10,000 rows per queue and pass.
PURGE_BATCH = 1000
PURGE_BATCHES = 10
#: The chart's defaults (`queue.quota`, `queue.finishedRetentionDays`): vigil.settings.Queue.
DEFAULT_FINISHED_RETENTION = timedelta(days=7)


@dataclasses.dataclass(frozen=True)
class Admission:
    """What `admit` let in: the first `admitted` of the payloads offered, and the namespace's row after."""

    admitted: int
    admitted_bytes: int
    offered: int
    offered_bytes: int
    executions: int  # the namespace's count after the admission
    payload_bytes: int
    max_executions: int | None
    max_payload_bytes: int | None

    def refusal(self, namespace: str, *, whole: bool) -> QuotaExceeded:
        """The named error for what was not admitted: all that was offered (`whole`: the caller
        rolls the admitted prefix back), or the rest after the admitted prefix (the trigger's)."""
        kept, kept_bytes = (self.admitted, self.admitted_bytes) if whole else (0, 0)
        used, used_bytes = self.executions - kept, self.payload_bytes - kept_bytes
        wanted, wanted_bytes = self.offered - self.admitted + kept, self.offered_bytes - self.admitted_bytes + kept_bytes
        if self.max_executions is not None and used + wanted > self.max_executions:
            return QuotaExceeded(
                namespace, quota=QUOTA_READY_EXECUTIONS, limit=self.max_executions, used=used, wanted=wanted
            )
        return QuotaExceeded(
            namespace, quota=QUOTA_PAYLOAD_BYTES, limit=self.max_payload_bytes or 0, used=used_bytes,
            wanted=wanted_bytes,
        )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Bounded:
    """What one upkeep pass did."""

    purged_finished: int
    purged_jobs: int
    recounted: int  # namespaces recounted


def namespace_of(queue: str) -> str:
    """The namespace of a store queue key ("" for a bare name), as `vigil_queue.namespace_of`."""
    return split_queue_key(queue)[0]


def admit(
    connection: psycopg.Connection[Any], namespace: str, payloads: Sequence[Jsonb],
    *, statements: Mapping[str, str] = OWNER_STATEMENTS,
) -> Admission:
    """Count the longest prefix of `payloads` (new unfinished executions) that fits the quota.

    In the caller's transaction: the counter row stays locked until it ends, and a rollback takes
    the admission back with the rows it admitted.
    """
    connection.execute(statements["quota_ensure"], {"namespace": namespace})
    row = connection.execute(statements["quota_admit"], {"namespace": namespace, "payloads": list(payloads)}).fetchone()
    assert row is not None  # quota_ensure made the row in this transaction or before
    admitted, admitted_bytes, offered_bytes, executions, payload_bytes, max_executions, max_bytes = row
    return Admission(
        admitted=int(admitted), admitted_bytes=int(admitted_bytes), offered=len(payloads),
        offered_bytes=int(offered_bytes), executions=executions, payload_bytes=payload_bytes,
        max_executions=max_executions, max_payload_bytes=max_bytes,
    )  # fmt: skip


def admit_all(
    connection: psycopg.Connection[Any], queue: str, payloads: Sequence[Jsonb],
    *, statements: Mapping[str, str] = OWNER_STATEMENTS,
) -> None:
    """Admit every one of `payloads` into `queue`'s namespace, or raise QuotaExceeded (the caller's
    transaction must then roll back: nothing is admitted unless all are)."""
    if not payloads:
        return
    namespace = namespace_of(queue)
    found = admit(connection, namespace, payloads, statements=statements)
    if found.admitted < len(payloads):
        raise found.refusal(namespace, whole=True)


def set_limits(
    connection: psycopg.Connection[Any], limits: Mapping[str, QuotaLimits], *, default: QuotaLimits
) -> None:
    """Write each namespace's limits (`vigil.core.queue.namespace_quotas`); every other namespace,
    and the row new namespaces copy, take `default`."""
    namespaces = sorted(limits)
    connection.execute(
        QUERIES["quota_limits"],
        {
            "namespaces": namespaces,
            "max_executions": [limits[n].max_ready_executions for n in namespaces],
            "max_payload_bytes": [limits[n].max_payload_bytes for n in namespaces],
            "default_executions": default.max_ready_executions,
            "default_bytes": default.max_payload_bytes,
        },
    )


def recount(connection: psycopg.Connection[Any], *, now: datetime) -> int:
    """Set every namespace's counters to what it keeps unfinished, plus what was admitted while it
    counted (sql/quotas.sql `quota_counts`, `quota_recount`); the namespaces recounted.

    `connection` must be in autocommit mode: each namespace's update is a transaction of its own.
    """
    counted = connection.execute(QUERIES["quota_counts"]).fetchall()
    for namespace, admitted, admitted_bytes, executions, payload_bytes in counted:
        connection.execute(
            QUERIES["quota_recount"],
            {
                "namespace": namespace, "admitted": admitted, "admitted_bytes": admitted_bytes,
                "executions": executions, "bytes": payload_bytes, "now": now,
            },
        )  # fmt: skip
    return len(counted)


def usage(connection: psycopg.Connection[Any], namespace: str) -> tuple[int, int, int | None, int | None] | None:
    """(executions, payload bytes, their limits) as counted for `namespace`; None when it has no row."""
    row = connection.execute(QUERIES["quota_use"], {"namespace": namespace}).fetchone()
    return None if row is None else (row[0], row[1], row[2], row[3])


def purge(
    connection: psycopg.Connection[Any],
    retention: Mapping[str, timedelta],
    *,
    default: timedelta,
    now: datetime,
) -> tuple[int, int]:
    """Delete finished executions past their queue's `retention` (else `default`) and jobs deleted
    before `now - default`, in bounded batches; (executions, jobs) deleted.

    `connection` must be in autocommit mode: each batch is its own transaction, so row locks
    are held for one batch only.
    """
    queues = sorted(retention)
    params = {
        "now": now,
        "queues": queues,
        "keeps": [retention[q] for q in queues],
        "default_keep": default,
        "limit": PURGE_BATCH,
    }
    executions = 0
    for _ in range(PURGE_BATCHES):
        row = connection.execute(QUERIES["purge_finished"], params).fetchone()
        deleted = int(row[0]) if row is not None else 0
        executions += deleted
        if deleted == 0:
            break
    jobs = 0
    for _ in range(PURGE_BATCHES):
        deleted = max(
            connection.execute(QUERIES["purge_deleted_jobs"], {"before": now - default, "limit": PURGE_BATCH}).rowcount, 0
        )
        jobs += deleted
        if deleted < PURGE_BATCH:
            break
    return executions, jobs


def keep_bounded(
    connection: psycopg.Connection[Any],
    *,
    limits: Mapping[str, QuotaLimits],
    default_limits: QuotaLimits,
    retention: Mapping[str, timedelta],
    default_retention: timedelta,
    now: datetime,
) -> Bounded:
    """One upkeep pass: purge what is past its retention, write the limits, recount the use."""
    if not connection.autocommit:
        raise ValueError("keep_bounded() needs an autocommit connection: each step is its own transaction")
    executions, jobs = purge(connection, retention, default=default_retention, now=now)
    set_limits(connection, limits, default=default_limits)
    return Bounded(purged_finished=executions, purged_jobs=jobs, recounted=recount(connection, now=now))
