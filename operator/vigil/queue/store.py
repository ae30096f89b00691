"""The queue store's adapter: PostgreSQL through psycopg 3, one named query per operation.

Two faces, because the callers differ:

- `QueueStore` (synchronous) migrates, submits and reads back — what a program
  that enqueues work, a test or the benchmark needs — and holds the HTTP API's
  operations (vigil.api.queue): one-off jobs, timelines, cancel and retry, in typed rows of
  vigil.core.queue, a database that cannot be reached raised as QueueUnavailable. The
  operator's API runs them through vigil.queue.apistore.ApiQueueStore, which sends the same
  blocks as functions, acting as the namespace's API role instead of the owner (`_acting`).
- `WorkerStore` (asynchronous, on one autocommit connection the worker owns:
  a single statement needs no BEGIN/COMMIT round trips, and a settlement's
  statements go in one pipelined transaction) leases a
  batch with FOR UPDATE SKIP LOCKED, extends leases by heartbeat, settles
  attempts in batches, returns expired leases to the queue and takes `once`
  marks. What an attempt's end decides (retry with backoff, dead letter, an
  expired lease's next attempt) is `vigil.core.queue`'s; this module only
  writes it, each write conditional on the lease still being the writer's
  (execution id, attempt and owner), so a worker whose lease was taken can
  never overwrite the new holder's state.

Every time is a parameter: the caller's injected clock. Workers on hosts whose
clocks disagree see leases expire by their own clock; keep them synchronised
(NTP) and the lease several heartbeats long.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.json import Jsonb

from vigil import pgconnect
from vigil.core.executions import Backoff
from vigil.core.ids import execution_id as derive_execution_id
from vigil.core.queue import (
    DEFAULT_MAX_ATTEMPTS,
    JOB_EXECUTIONS_SHOWN,
    QUEUE_PAGE_MAX,
    Allowance,
    AttemptOutcome,
    AttemptRow,
    Change,
    DeadLetter,
    DeadLettersPage,
    ExecutionRecord,
    ExecutionSummary,
    JobRecord,
    JobsPage,
    ListCursor,
    OneOffJob,
    QueueBreakdown,
    QueueDeclaration,
    QueueJob,
    QueueState,
    QueueStats,
    QueueUnavailable,
    QueueUndeclared,
    QueueWatchSummary,
    QuotaLimits,
    Recurrence,
    Settlement,
    Submission,
    Submitted,
    after_expiry,
    cancel_refusal,
    error_shown,
    lease_deadline,
    retry_refusal,
)
from vigil.core.submissions import ExecutionIdTaken, check_submissions, is_same_occurrence
from vigil.core.timeparse import require_aware
from vigil.queue import attempt_days, bounds, partitions
from vigil.queue.functions import CALLS as WORKER
from vigil.queue.queries import QUERIES

if TYPE_CHECKING:  # a worker imports this module: what only the operator and tests use loads on use
    from vigil.core.recurring import AddedJob, RecurringJob

NOTIFY_CHANNEL = "vigil_queue"  # submit notifies it with the queue's name; workers LISTEN
EXPIRY_BATCH = 500  # expired leases returned to the queue per statement
PURGE_BATCH = 1000  # dead executions past their retention deleted per queue and pass




@dataclasses.dataclass(frozen=True)
class Leased:
    """An execution a worker holds: what the task's context is made of."""

    execution_id: str
    task: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    scheduled_for: datetime
    idempotency_key: str | None
    priority: int
    tenant: str
    lease_token: uuid.UUID | None = None  # drawn for this lease; what acknowledges it names it


@dataclasses.dataclass(frozen=True)
class Finished:
    """How a worker's attempt ended, to be settled (in a batch) with the store."""

    leased: Leased
    outcome: AttemptOutcome
    started_at: datetime
    finished_at: datetime
    error: str | None = None
    settlement: Settlement | None = None  # for failures: the next state (vigil.core.queue)


@dataclasses.dataclass(frozen=True)
class SettleReport:
    """What a batch of settlements found: the attempts whose lease had been taken meanwhile.

    An attempt whose execution was cancelled under it is neither settled nor stale: its
    row is recorded and nothing else changes.
    """

    settled: int
    stale: list[Finished]  # ran to the end after their lease expired: duplicates


class QueueStore:
    """Migrate, submit and inspect (see the module docstring). `dsn`: libpq string or URL."""

    #: What the HTTP API's operations send for each block: the statements themselves, as the
    #: owner; the API's store (vigil.queue.apistore) sends the calls of its functions instead.
    statements: Mapping[str, str] = QUERIES

    def __init__(self, dsn: str, *, migrate_first: bool = False, shards: int = 1) -> None:
        """`migrate_first`: the first of the HTTP API's calls brings the schema up to date (the
        operator's store: it starts whether or not the database is up, and migrates once it is).
        `shards`: the trigger's (`queue.shards`), which a recurring job added here is spread over."""
        self.dsn = dsn
        self.shards = shards
        self._migrated = not migrate_first
        self._migrating = threading.Lock()

    def migrate(self) -> None:
        """Bring the queue schema to the newest migration; a no-op when it is there already.

        In this process: the operator runs it in a child instead (vigil.queue.migrating)."""
        from vigil.queue import migrating  # SQLAlchemy and alembic: never on a worker's path

        migrating.migrate(self.dsn)

    def migrate_apart(self) -> None:
        """`migrate()` in a child process, as the operator migrates: this process never imports alembic.

        Raises QueueUnavailable when the store cannot be reached."""
        from vigil.queue import migrating

        migrating.migrate_apart(self.dsn)

    def connect(self) -> psycopg.Connection[Any]:
        return pgconnect.connect(self.dsn)

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

    def submit(
        self, queue: str, submissions: Sequence[Submission], *, now: datetime
    ) -> list[str]:
        """Enqueue in one transaction; returns each submission's execution id, in order.

        A submission whose (queue, idempotency key) exists already — in the store
        or earlier in the same batch — gets the first one's id and adds nothing.
        Workers listening on the queue are woken when the transaction commits. A database
        that cannot be reached raises QueueUnavailable.

        Refused before anything is written (vigil.core.submissions): SubmissionRefused naming
        the submission's field for what the HTTP API would refuse (the queue key's grammar, a
        task, tenant or key that is not plain text, a payload that is no JSON object, holds a
        value PostgreSQL refuses or is too large), and ExecutionIdTaken, the whole batch rolled
        back, for an execution id already enqueued elsewhere as another occurrence; QuotaExceeded,
        the batch rolled back, when what it adds would take the queue's namespace past its quota
        (vigil.queue.bounds: a known idempotency key adds nothing, and counts nothing).
        """
        now = require_aware(now, name="now")
        check_submissions(queue, submissions)
        if not submissions:
            return []
        ids = [_new_id(s, now) for s in submissions]
        payloads = [Jsonb(s.payload) for s in submissions]
        params: dict[str, Any] = {
            "queue": queue,
            "now": now,
            "execution_ids": ids,
            "tasks": [s.task for s in submissions],
            "payloads": payloads,
            "priorities": [s.priority for s in submissions],
            "tenants": [s.tenant for s in submissions],
            "max_attempts": [s.max_attempts for s in submissions],
            "default_max_attempts": DEFAULT_MAX_ATTEMPTS,
            "run_afters": [s.run_after or now for s in submissions],
            "idempotency_keys": [s.idempotency_key for s in submissions],
        }
        keys = [s.idempotency_key for s in submissions if s.idempotency_key is not None]
        with self._reachable(), self.connect() as connection, connection.transaction():
            added = {row[0] for row in connection.execute(QUERIES["submit"], params).fetchall()}
            _check_brought_ids(connection, queue, submissions, added=added)
            # the namespace's quota: every execution this batch added, or QuotaExceeded and none
            bounds.admit_all(connection, queue, [p for p, own in zip(payloads, ids, strict=True) if own in added])
            existing: dict[str, str] = {}
            if keys:
                rows = connection.execute(
                    QUERIES["existing_by_key"], {"queue": queue, "idempotency_keys": keys}
                ).fetchall()
                existing = {key: execution for key, execution in rows}
            connection.execute(QUERIES["notify"], {"queue": queue})
        return [
            existing.get(s.idempotency_key, own) if s.idempotency_key is not None else own
            for s, own in zip(submissions, ids, strict=True)
        ]

    def execution(self, execution_id: str) -> dict[str, Any] | None:
        with self.connect() as connection:
            cursor = connection.cursor(row_factory=psycopg.rows.dict_row)
            return cursor.execute(QUERIES["execution"], {"execution_id": execution_id}).fetchone()

    def attempts(self, execution_id: str) -> list[dict[str, Any]]:
        with self.connect() as connection:
            cursor = connection.cursor(row_factory=psycopg.rows.dict_row)
            return cursor.execute(QUERIES["attempts_of"], {"execution_id": execution_id}).fetchall()

    def counts(self, queue: str) -> dict[str, int]:
        """Executions of `queue` by state (states with none are 0)."""
        with self.connect() as connection:
            rows = connection.execute(QUERIES["counts"], {"queue": queue}).fetchall()
        found = {state: int(count) for state, count in rows}
        return {state.value: found.get(state.value, 0) for state in QueueState}


    # The HTTP API's operations: typed rows, QueueUnavailable when the database cannot be reached.

    def submit_job(self, job: OneOffJob, *, now: datetime) -> Submitted:
        """A one-off job: its `jobs` row and its one execution, in one transaction.

        A known (queue, idempotency key) adds nothing and returns the first job
        (`created` False); two submits of one key at once make one job. A new one past its
        namespace's quota raises QuotaExceeded, and nothing of it stays (vigil.queue.bounds).
        """
        now = require_aware(now, name="now")
        run_at = require_aware(job.run_at, name="run_at")
        job_id = str(uuid.uuid4())
        execution_id = derive_execution_id(job_id, run_at.replace(microsecond=0))
        payload = Jsonb(job.payload)
        params: dict[str, Any] = {
            "job_id": job_id,
            "execution_id": execution_id,
            "queue": job.queue,
            "task": job.task,
            "payload": payload,
            "priority": job.priority,
            "tenant": job.tenant,
            "max_attempts": job.max_attempts,
            "default_max_attempts": DEFAULT_MAX_ATTEMPTS,
            "run_at": run_at,
            "idempotency_key": job.idempotency_key,
            "now": now,
        }
        q = self.statements
        with self._reachable(), self._acting(queue=job.queue) as connection:
            if connection is None:
                raise QueueUndeclared(bounds.namespace_of(job.queue))
            connection.execute(q["insert_job"], params)
            if connection.execute(q["insert_job_execution"], params).fetchone() is not None:
                bounds.admit_all(connection, job.queue, [payload], statements=q)  # QuotaExceeded: nothing stays
                connection.execute(q["notify"], {"queue": job.queue})
                return Submitted(job_id, execution_id, run_at, created=True)
            connection.execute(q["drop_job"], params)
            first = connection.execute(q["job_of_key"], params).fetchone()
        if first is None:  # the first was deleted meanwhile: nothing else removes executions
            raise QueueUnavailable("the first submission of this idempotency key vanished; try again")
        return Submitted(first[0], first[1], first[2], created=False)

    def add_recurring(self, job: RecurringJob, *, now: datetime) -> AddedJob:
        """Catalogue a recurring job with its first occurrence (`vigil.queue.catalogue`); a
        known (queue, idempotency key) returns the first job, created False."""
        with self._reachable(), self._acting(queue=job.queue) as connection:
            if connection is None:
                raise QueueUndeclared(bounds.namespace_of(job.queue))
            # templates (Jinja): never on a worker's path
            from vigil.queue.catalogue import Catalogue

            return Catalogue(self.dsn, shards=self.shards, statements=self.statements).add_in(connection, job, now=now)

    def job(self, job_id: str) -> JobRecord | None:
        """The job and its newest executions (at most JOB_EXECUTIONS_SHOWN); None if unknown."""
        with self._reachable(), self._acting(job_id=job_id) as connection:
            return None if connection is None else _job(connection, job_id, self.statements)

    def delete_job(self, job_id: str, *, now: datetime, by: str) -> JobRecord | None:
        """Disable the job and cancel its executions that have not finished (ready or leased),
        in one transaction; None if unknown. Deleting a deleted job changes nothing."""
        params = {"job_id": job_id, "execution_id": None, "now": require_aware(now, name="now"), "by": by}
        with self._reachable(), self._acting(job_id=job_id) as connection:
            if connection is None or connection.execute(self.statements["disable_job"], params).fetchone() is None:
                return None
            connection.execute(self.statements["cancel"], params)
            return _job(connection, job_id, self.statements)

    def timeline(self, execution_id: str) -> ExecutionRecord | None:
        """The execution and its attempt rows; None if unknown."""
        with self._reachable(), self._acting(execution_id=execution_id) as connection:
            found = None if connection is None else _timeline(connection, execution_id, self.statements)
        return found[0] if found is not None else None

    def cancel(self, execution_id: str, *, now: datetime, by: str) -> Change | None:
        """Cancel a ready or leased execution (see the `cancel` query); None if unknown."""
        params = {"execution_id": execution_id, "job_id": None, "now": require_aware(now, name="now"), "by": by}
        with self._reachable(), self._acting(execution_id=execution_id) as connection:
            if connection is None:
                return None
            done = connection.execute(self.statements["cancel"], params).fetchone() is not None
            found = _timeline(connection, execution_id, self.statements)
        if found is None:
            return None
        record, _ = found
        return Change(record, None if done else cancel_refusal(record.state))

    def retry(self, execution_id: str, *, now: datetime) -> Change | None:
        """Make a dead or cancelled execution ready again, same id, next attempt; None if unknown.
        QuotaExceeded, nothing changed, when its namespace is at its quota."""
        params = {"execution_id": execution_id, "now": require_aware(now, name="now")}
        q = self.statements
        with self._reachable(), self._acting(execution_id=execution_id) as connection:
            if connection is None:
                return None
            queue = connection.execute(q["retry"], params).fetchone()
            if queue is not None:  # unfinished again: within the namespace's quota, or QuotaExceeded
                bounds.admit_all(connection, queue[0], [Jsonb(queue[1])], statements=q)
                connection.execute(q["notify"], {"queue": queue[0]})
            found = _timeline(connection, execution_id, q)
        if found is None:
            return None
        record, job_enabled = found
        return Change(record, None if queue is not None else retry_refusal(record.state, job_enabled=job_enabled))

    def queue_jobs(self, queue: str, *, limit: int, after: ListCursor | None = None) -> JobsPage:
        """A page of `queue`'s jobs, newest first, after `after` (None: from the newest)."""
        params = {"queue": queue, "limit": limit + 1, **_after_params(after)}
        with self._reachable(), self._acting(queue=queue) as connection:
            rows = [] if connection is None else connection.execute(self.statements["queue_jobs"], params).fetchall()
        jobs = tuple(
            QueueJob(
                job_id=r[0], task=r[1], enabled=r[2], priority=r[3], tenant=r[4], created_at=r[5],
                last_execution_id=r[6], last_state=None if r[7] is None else QueueState(r[7]),
            )
            for r in rows[:limit]
        )  # fmt: skip
        more = len(rows) > limit
        return JobsPage(jobs, ListCursor(jobs[-1].created_at, jobs[-1].job_id) if more else None)

    def dead_letters(self, queue: str, *, limit: int, after: ListCursor | None = None) -> DeadLettersPage:
        """A page of `queue`'s dead executions, the longest dead first, after `after`."""
        params = {"queue": queue, "limit": limit + 1, **_after_params(after)}
        with self._reachable(), self._acting(queue=queue) as connection:
            rows = [] if connection is None else connection.execute(self.statements["dead_letters"], params).fetchall()
        dead = tuple(
            DeadLetter(
                execution_id=r[0], task=r[1], tenant=r[2], priority=r[3], attempt=r[4], max_attempts=r[5],
                scheduled_for=r[6], died_at=r[7], error=error_shown(r[8]),
            )
            for r in rows[:limit]
        )  # fmt: skip
        more = len(rows) > limit
        return DeadLettersPage(dead, ListCursor(dead[-1].died_at, dead[-1].execution_id) if more else None)

    def queue_breakdown(self, queue: str, *, now: datetime, limit: int = QUEUE_PAGE_MAX) -> list[QueueBreakdown]:
        """`queue`'s ready, leased and dead executions per (priority, tenant), the most urgent
        first, at most `limit` rows, with each one's oldest due ready age."""
        now = require_aware(now, name="now")
        params = {"queue": queue, "now": now, "limit": limit}
        with self._reachable(), self._acting(queue=queue) as connection:
            rows = [] if connection is None else connection.execute(self.statements["queue_breakdown"], params).fetchall()
        return [
            QueueBreakdown(
                priority=priority, tenant=tenant, ready=int(ready), leased=int(leased), dead=int(dead),
                oldest_ready_age=None if oldest is None else max(timedelta(0), now - oldest),
            )
            for priority, tenant, ready, leased, dead, oldest in rows
        ]  # fmt: skip

    @contextlib.contextmanager
    def _acting(
        self, *, queue: str | None = None, execution_id: str | None = None, job_id: str | None = None
    ) -> Iterator[psycopg.Connection[Any] | None]:
        """A connection in a transaction for one of the HTTP API's operations on `queue`, or on the
        execution or job of that id: here the owner's, always. The API's store (vigil.queue.apistore)
        acts as the namespace's API role instead, and yields None when it has none (no TaskQueue)
        or the id is nowhere."""
        with self.connect() as connection, connection.transaction():
            yield connection

    @contextlib.contextmanager
    def _reachable(self) -> Iterator[None]:
        try:
            if not self._migrated:
                with self._migrating:
                    if not self._migrated:
                        self.migrate_apart()
                        self._migrated = True
            yield
        except Exception as error:
            if not _unreachable(error):
                raise
            raise QueueUnavailable(str(error).strip().splitlines()[0] or type(error).__name__) from None

    # -- declarations (the operator's leader publishes TaskQueues; workers read them) ---------

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




def _watch_summary(overdue: int, overdue_jobs: Any, broken: int | None, broken_jobs: Any) -> QueueWatchSummary:
    """A `watch_summaries` row (its jobs as JSON [[job id, reason], ...]) as the core's summary."""
    return QueueWatchSummary(
        overdue=overdue,
        overdue_jobs=tuple((str(job), str(reason)) for job, reason in overdue_jobs or []),
        broken=broken,
        broken_jobs=tuple((str(job), str(reason)) for job, reason in broken_jobs or []),
    )


def _after_params(after: ListCursor | None) -> dict[str, Any]:
    return {"after_at": None if after is None else after.at, "after_id": None if after is None else after.ident}


def _job(connection: psycopg.Connection[Any], job_id: str, statements: Mapping[str, str]) -> JobRecord | None:
    row = connection.execute(statements["job"], {"job_id": job_id}).fetchone()
    if row is None:
        return None
    executions = connection.execute(
        statements["job_executions"], {"job_id": job_id, "limit": JOB_EXECUTIONS_SHOWN}
    ).fetchall()
    cron, timezone, template, expected, next_run = row[9:14]
    return JobRecord(
        job_id=row[0], queue=row[1], task=row[2], payload=row[3], priority=row[4], tenant=row[5],
        max_attempts=row[6], enabled=row[7], created_at=row[8],
        executions=tuple(ExecutionSummary(e[0], QueueState(e[1]), e[2], e[3]) for e in executions),
        schedule=None if cron is None else Recurrence(cron, timezone, template or {}, expected, next_run),
    )  # fmt: skip


def _timeline(
    connection: psycopg.Connection[Any], execution_id: str, statements: Mapping[str, str]
) -> tuple[ExecutionRecord, bool] | None:
    """The execution with its attempts, and whether its job (if any) is enabled."""
    cursor = connection.cursor(row_factory=psycopg.rows.dict_row)
    row = cursor.execute(statements["timeline"], {"execution_id": execution_id}).fetchone()
    if row is None:
        return None
    attempts = cursor.execute(statements["attempts_of"], {"execution_id": execution_id}).fetchall()
    job_enabled = bool(row.pop("job_enabled"))
    record = ExecutionRecord(
        **{**row, "state": QueueState(row["state"])},
        attempts=tuple(
            AttemptRow(
                attempt=a["attempt"], worker=a["worker"], outcome=AttemptOutcome(a["outcome"]),
                started_at=a["started_at"], finished_at=a["finished_at"], error=a["error"],
                duplicate=a["duplicate"],
            )
            for a in attempts
        ),
    )  # fmt: skip
    return record, job_enabled




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


def _check_brought_ids(
    connection: psycopg.Connection[Any], queue: str, submissions: Sequence[Submission], *, added: set[str]
) -> None:
    """ExecutionIdTaken for a brought execution id that was not added because another
    occurrence holds it (vigil.core.submissions.is_same_occurrence); raised inside the
    transaction, so nothing of the batch stays."""
    brought = {s.execution_id: s for s in submissions if s.execution_id is not None and s.execution_id not in added}
    if not brought:
        return
    found = connection.execute(QUERIES["existing_by_id"], {"execution_ids": list(brought)}).fetchall()
    for execution_id, found_queue, found_key in found:
        if not is_same_occurrence(queue, brought[execution_id], found_queue=found_queue, found_key=found_key):
            raise ExecutionIdTaken(
                f"execution id {execution_id} is enqueued already in queue {found_queue} as another occurrence"
            )


def _new_id(submission: Submission, now: datetime) -> str:
    """A stable id for a new execution: the core's (occurrence uid, nominal second) derivation.

    A one-off submission is its own occurrence: a fresh uid, its run_after to the second. A
    submission that brings its occurrence's id (a ScheduledJob's) keeps it.
    """
    if submission.execution_id is not None:
        return submission.execution_id
    nominal = (submission.run_after or now).replace(microsecond=0)
    return derive_execution_id(str(uuid.uuid4()), nominal)


class WorkerStore:
    """A worker's operations on its own async connection (autocommit; each call one transaction)."""

    def __init__(self, connection: psycopg.AsyncConnection[Any], *, queue: str, worker: str) -> None:
        self.connection = connection
        self.queue = queue
        self.worker = worker
        # One connection, many coroutines: a transaction must not take in another's statements.
        self._lock = asyncio.Lock()

    async def lease(
        self,
        tasks: Sequence[str],
        *,
        limit: int,
        lease: timedelta,
        now: datetime,
        declaration: QueueDeclaration | None = None,
        allowance: Allowance | None = None,
    ) -> list[Leased]:
        """Up to `limit` due executions of `tasks`, leased to this worker until now + lease.

        Within the tenants' caps of `declaration` and, when given, the `allowance` of this
        worker's slots (vigil.core.queue.allowance): reserved slots go only to their priority.
        One statement, or, when tenants are capped, the queue's tenant lock and the statement in
        one pipelined transaction (one round trip), so leasers count each other's leases.
        """
        caps = declaration or QueueDeclaration()
        reserved = dict(allowance.reserved_free) if allowance is not None else {}
        params = {
            "queue": self.queue,
            "tasks": list(tasks),
            "limit": limit,
            "now": now,
            "worker": self.worker,
            "expires": lease_deadline(now, lease),
            "tenant_cap": caps.tenant_max_concurrent,
            "tenant_caps": Jsonb(dict(caps.tenant_caps)),
            "reserved_priorities": list(reserved),
            "reserved_free": list(reserved.values()),
            "shared_free": allowance.shared_free if allowance is not None else limit,
        }
        if caps.capped:
            async with self._lock, self.connection.pipeline(), self.connection.transaction():
                await self.connection.execute(WORKER["lock_tenants"], {"queue": self.queue})
                cursor = await self.connection.execute(WORKER["lease"], params)
                rows = await cursor.fetchall()
            return [_leased(row) for row in rows]
        async with self._lock:  # one statement: atomic in autocommit, no BEGIN/COMMIT round trips
            cursor = await self.connection.execute(WORKER["lease"], params)
            rows = await cursor.fetchall()
        return [_leased(row) for row in rows]

    async def declaration(self) -> QueueDeclaration | None:
        """This queue's published declaration (its TaskQueue), or None when there is none."""
        async with self._lock:
            cursor = await self.connection.execute(WORKER["declared_queue"], {"queue": self.queue})
            row = await cursor.fetchone()
        return None if row is None else declaration_from_row(row)

    async def heartbeat(
        self, held: Sequence[Leased], *, lease: timedelta, now: datetime
    ) -> set[str]:
        """Extend the leases of `held`; returns the ids whose lease this worker no longer has."""
        if not held:
            return set()
        params = {
            **self._held(held),
            "worker": self.worker,
            "expires": lease_deadline(now, lease),
        }
        async with self._lock:  # one statement: atomic in autocommit, no BEGIN/COMMIT round trips
            cursor = await self.connection.execute(WORKER["heartbeat"], params)
            kept = {row[0] for row in await cursor.fetchall()}
        return {h.execution_id for h in held} - kept

    async def expire(self, *, now: datetime) -> list[tuple[str, int, Settlement]]:
        """Return leases past their deadline to the queue (attempt + 1) or the dead letters.

        Each gets an attempt row `lease_expired`, naming the holder that lost it.
        """
        async with self._lock, self.connection.transaction():
            cursor = await self.connection.execute(
                WORKER["expired"], {"queue": self.queue, "now": now, "limit": EXPIRY_BATCH}
            )
            rows = await cursor.fetchall()
            done: list[tuple[str, int, Settlement]] = []
            history: list[tuple[str, int, str, str, datetime | None, datetime, str | None]] = []
            for execution_id, attempt, max_attempts, owner, expired_at, token in rows:
                settlement = after_expiry(attempt=attempt, max_attempts=max_attempts, now=now)
                await self.connection.execute(
                    WORKER["settle"],
                    self._settle_params(execution_id, attempt, token, owner, settlement, now, "lease expired"),
                )
                done.append((execution_id, attempt, settlement))
                why = f"lease held by {owner} expired"
                outcome = AttemptOutcome.LEASE_EXPIRED.value
                history.append((execution_id, attempt, owner, outcome, None, expired_at, why))
            await self._record(history)
        return done

    async def settle(self, finished: Sequence[Finished], *, now: datetime) -> SettleReport:
        """Acknowledge a batch of attempts in one transaction and write their attempt rows.

        Successes go in one statement; failures one statement each (their next
        run_after differs). An attempt whose lease was taken meanwhile changes
        nothing but its attempt row, marked duplicate: it ran while another copy could.
        An attempt this worker had acknowledged already (the reply to that commit was lost, and
        the acknowledgement is sent again) counts as settled, and is no duplicate.
        """
        if not finished:
            return SettleReport(0, [])
        wins = [f for f in finished if f.outcome is AttemptOutcome.SUCCEEDED]
        settled: set[tuple[str, int]] = set()
        async with self._lock, self.connection.pipeline(), self.connection.transaction():
            if wins:
                cursor = await self.connection.execute(
                    WORKER["settle_succeeded"],
                    {**self._held([f.leased for f in wins]), "worker": self.worker, "now": now},
                )
                ok = {row[0] for row in await cursor.fetchall()}
                settled |= {(f.leased.execution_id, f.leased.attempt) for f in wins if f.leased.execution_id in ok}
            for f in finished:
                if f.outcome is AttemptOutcome.SUCCEEDED or f.settlement is None:
                    continue
                params = self._settle_params(
                    f.leased.execution_id, f.leased.attempt, f.leased.lease_token,
                    self.worker, f.settlement, now, f.error,
                )
                cursor = await self.connection.execute(WORKER["settle"], params)
                if await cursor.fetchone() is not None:
                    settled.add((f.leased.execution_id, f.leased.attempt))
            # before this batch's own attempt rows are written: a row already there is an earlier commit's
            pending = [f for f in finished if (f.leased.execution_id, f.leased.attempt) not in settled]
            settled |= await self._acknowledged_among(pending)
            await self._record(
                [
                    (
                        f.leased.execution_id, f.leased.attempt, self.worker,
                        f.outcome.value, f.started_at, f.finished_at, f.error,
                    )
                    for f in finished
                ]
            )
            unsettled = [f for f in finished if (f.leased.execution_id, f.leased.attempt) not in settled]
            cancelled = await self._cancelled_among([f.leased for f in unsettled]) if unsettled else set()
            stale = [f for f in unsettled if f.leased.execution_id not in cancelled]
            if stale:
                await self.connection.execute(WORKER["mark_duplicates"], self._held([f.leased for f in stale]))
        return SettleReport(len(settled), stale)

    async def cancelled(self, held: Sequence[Leased]) -> set[str]:
        """The ids among `held` whose lease was taken by a cancel (the API's), not by another copy."""
        if not held:
            return set()
        async with self._lock:
            return await self._cancelled_among(held)

    async def _acknowledged_among(self, finished: Sequence[Finished]) -> set[tuple[str, int]]:
        if not finished:
            return set()
        params = {
            **self._held([f.leased for f in finished]),
            "outcomes": [f.outcome.value for f in finished],
            "worker": self.worker,
        }
        cursor = await self.connection.execute(WORKER["acknowledged_among"], params)
        return {(str(row[0]), int(row[1])) for row in await cursor.fetchall()}

    async def _cancelled_among(self, held: Sequence[Leased]) -> set[str]:
        cursor = await self.connection.execute(WORKER["cancelled_among"], self._held(held))
        return {row[0] for row in await cursor.fetchall()}

    async def mark_duplicates(self, held: Sequence[Leased]) -> None:
        """Mark attempts whose lease was taken while their holder still ran them."""
        if not held:
            return
        async with self._lock:  # one statement: atomic in autocommit, no BEGIN/COMMIT round trips
            await self.connection.execute(WORKER["mark_duplicates"], self._held(held))

    async def once(self, leased: Leased, key: str, *, now: datetime) -> bool:
        """Claim `key` for this execution: True for the first copy to ask, False for any other."""
        params = {
            "queue": self.queue,
            "execution_id": leased.execution_id,
            "token": leased.lease_token,
            "key": key,
            "attempt": leased.attempt,
            "worker": self.worker,
            "now": now,
        }
        async with self._lock:  # one statement: atomic in autocommit, no BEGIN/COMMIT round trips
            cursor = await self.connection.execute(WORKER["once"], params)
            return await cursor.fetchone() is not None

    async def _record(
        self, rows: Sequence[tuple[str, int, str, str, datetime | None, datetime, str | None]]
    ) -> None:
        if not rows:
            return
        columns = list(zip(*rows, strict=True))
        names = ("execution_ids", "attempts", "workers", "outcomes", "started", "finished", "errors")
        params: dict[str, Any] = {"queue": self.queue, **dict(zip(names, map(list, columns), strict=True))}
        await self.connection.execute(WORKER["record_attempts"], params)

    def _held(self, held: Sequence[Leased]) -> dict[str, Any]:
        """The parameters naming leases: this queue, and each one's execution, attempt and token."""
        return {
            "queue": self.queue,
            "execution_ids": [h.execution_id for h in held],
            "attempts": [h.attempt for h in held],
            "tokens": [h.lease_token for h in held],
        }

    def _settle_params(
        self, execution_id: str, attempt: int, token: uuid.UUID | None, owner: str,
        settlement: Settlement, now: datetime, error: str | None,
    ) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "execution_id": execution_id,
            "attempt": attempt,
            "token": token,
            "worker": owner,
            "state": settlement.state.value,
            "next_attempt": settlement.attempt,
            "run_after": settlement.run_after,
            "error": error,
            "now": now,
        }


def _leased(row: Sequence[Any]) -> Leased:
    return Leased(
        execution_id=row[0],
        task=row[1],
        payload=row[2],
        attempt=row[3],
        max_attempts=row[4],
        scheduled_for=row[5],
        idempotency_key=row[6],
        priority=row[7],
        tenant=row[8],
        lease_token=row[9],
    )


def _unreachable(error: Exception) -> bool:
    """Whether `error` says the database could not be reached: psycopg's, or SQLAlchemy's when a
    migration in this process (which alone imports SQLAlchemy) raised it."""
    if isinstance(error, psycopg.OperationalError):
        return True
    sqlalchemy_errors = sys.modules.get("sqlalchemy.exc")
    return sqlalchemy_errors is not None and isinstance(error, sqlalchemy_errors.OperationalError)
