"""The volume tier's recurring-job catalogue: jobs with a cron, each with its next occurrence waiting.

A recurring job lives as one row of `jobs` and one unfired row of
`schedule_buckets` (its next occurrence, in the partition of the minute it fires
in). Adding a job writes both in one statement, so a job is never catalogued
without its chain head; from then on the trigger (vigil.queue.trigger) inserts
each next occurrence in the transaction that fires the current one.

Validation happens on construction of `RecurringJob` (vigil.core.recurring, which the HTTP API
builds too), with the core's own
parsers (cron, IANA zones, jitter, payload templates), and every error names
the field. The schedule maths, jitter and catch-up are the declarative tier's
(vigil.core.schedule, jitter, chain): one job, one answer, whichever tier runs it.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from vigil import pgconnect
from vigil.core.buckets import base_shard, minute_of
from vigil.core.chain import JobView, first_entry
from vigil.core.jitter import jitter_offset
from vigil.core.queue import DEFAULT_MAX_ATTEMPTS
from vigil.core.recurring import AddedJob, RecurringJob, field_error
from vigil.core.timeparse import require_aware
from vigil.queue.queries import QUERIES

#: A batch of `add_many` is one transaction and one statement; larger lists are cut into batches.
ADD_BATCH = 5000


def job_view(job_id: str, job: RecurringJob) -> JobView:
    """The core's view of a catalogued job (what plan_entry and first_entry take)."""
    namespace, _, _ = job.queue.partition("/")
    return JobView(
        namespace=namespace,
        name=job_id,
        uid=job_id,
        generation=1,
        schedule=job.schedule,
        schedule_hash="",  # a catalogued job's schedule never changes: delete it and add another
        jitter=job.jitter_window,
        catch_up=job.catch_up,
    )


@dataclasses.dataclass(frozen=True)
class _Row:
    job_id: str
    job: RecurringJob
    shard: int
    nominal: datetime
    fire_at: datetime


class Catalogue:
    """Add, read and delete recurring jobs (see the module docstring). `dsn`: libpq string or URL.

    `shards` is the trigger's shard count: each job's shard is its id's hash modulo it,
    fixed when the job is added.
    """

    def __init__(self, dsn: str, *, shards: int, statements: Mapping[str, str] = QUERIES) -> None:
        """`statements`: what `add_in` sends for catalogue_add and catalogue_by_key (the HTTP API's
        store sends the calls of its functions, vigil.queue.functions.API_CALLS)."""
        if shards < 1:
            raise ValueError(f"shards must be at least 1, got {shards}")
        self.dsn = dsn
        self.shards = shards
        self.statements = statements

    def add(self, job: RecurringJob, *, now: datetime) -> AddedJob:
        """Catalogue `job` with its first occurrence, in one transaction.

        A repeated (queue, idempotency key) returns the first job, created False.
        """
        return self.add_many([job], now=now)[0]

    def add_many(self, jobs: Sequence[RecurringJob], *, now: datetime) -> list[AddedJob]:
        """Catalogue many jobs, one transaction per batch of ADD_BATCH; answers in order."""
        now = require_aware(now, name="now")
        answers: list[AddedJob] = []
        with pgconnect.connect(self.dsn) as connection:
            for start in range(0, len(jobs), ADD_BATCH):
                with connection.transaction():
                    answers.extend(self._add_batch(connection, jobs[start : start + ADD_BATCH], now))
        return answers

    def get(self, job_id: str) -> dict[str, Any] | None:
        """The job's row (its schedule, next_run, shard, enabled and deleted_at), or None."""
        with pgconnect.connect(self.dsn) as connection:
            cursor = connection.cursor(row_factory=dict_row)
            return cursor.execute(QUERIES["catalogue_job"], {"job_id": job_id}).fetchone()

    def delete(self, job_id: str, *, now: datetime) -> bool:
        """Disable the job and skip its pending occurrence; False if it was unknown or deleted already.

        The pending bucket row is marked Skipped here; should the trigger be firing it at this
        moment, the occurrence fires (it was due) and the trigger skips the next one it finds
        for a disabled job: either way nothing fires after the delete.
        """
        now = require_aware(now, name="now")
        with pgconnect.connect(self.dsn) as connection, connection.transaction():
            pending = connection.execute(QUERIES["catalogue_next"], {"job_id": job_id}).fetchone()
            if pending is None:
                return False
            next_run, jitter = pending
            if next_run is not None:
                fire_at = next_run + jitter_offset(job_id, jitter)
                connection.execute(
                    QUERIES["catalogue_skip_pending"],
                    {"job_id": job_id, "nominal": next_run, "minute": minute_of(fire_at), "now": now},
                )
            return connection.execute(QUERIES["catalogue_delete"], {"job_id": job_id, "now": now}).fetchone() is not None

    def add_in(self, connection: psycopg.Connection[Any], job: RecurringJob, *, now: datetime) -> AddedJob:
        """`add` in the caller's transaction, on its connection."""
        return self._add_batch(connection, [job], require_aware(now, name="now"))[0]

    def _add_batch(self, connection: psycopg.Connection[Any], jobs: Sequence[RecurringJob], now: datetime) -> list[AddedJob]:
        rows = [self._plan(job, now) for job in jobs]
        added = connection.execute(self.statements["catalogue_add"], _add_params(rows, now)).fetchall()
        inserted = {row[0] for row in added}
        existing: dict[tuple[str, str], tuple[str, datetime | None]] = {}
        for queue in {row.job.queue for row in rows if row.job_id not in inserted}:
            keys = [row.job.idempotency_key for row in rows if row.job.queue == queue and row.job_id not in inserted]
            found = connection.execute(self.statements["catalogue_by_key"], {"queue": queue, "idempotency_keys": keys})
            existing.update({(queue, key): (job_id, next_run) for key, job_id, next_run in found.fetchall()})
        answers = []
        for row in rows:
            if row.job_id in inserted:
                answers.append(AddedJob(row.job_id, row.nominal, created=True))
            else:
                job_id, next_run = existing[(row.job.queue, row.job.idempotency_key or "")]
                answers.append(AddedJob(job_id, next_run, created=False))
        return answers

    def _plan(self, job: RecurringJob, now: datetime) -> _Row:
        job_id = str(uuid.uuid4())
        try:
            head = first_entry(job_view(job_id, job), now=now)
        except ValueError as err:  # a cron that never matches a real date ("0 0 30 2 *")
            raise field_error("cron", str(err)) from None
        if head is None:
            raise field_error("cron", f"{job.cron!r} has no occurrence after {now}")
        return _Row(job_id, job, base_shard(job_id, self.shards), head.nominal, head.fire_at)


def _add_params(rows: Sequence[_Row], now: datetime) -> dict[str, Any]:
    jobs = [row.job for row in rows]
    return {
        "now": now,
        "job_ids": [row.job_id for row in rows],
        "queues": [job.queue for job in jobs],
        "tasks": [job.task for job in jobs],
        "priorities": [job.priority for job in jobs],
        "tenants": [job.tenant for job in jobs],
        "max_attempts": [job.max_attempts for job in jobs],
        "default_max_attempts": DEFAULT_MAX_ATTEMPTS,
        "crons": [job.cron for job in jobs],
        "timezones": [job.timezone for job in jobs],
        "dst_gaps": [str(job.gap) for job in jobs],
        "dst_overlaps": [str(job.overlap) for job in jobs],
        "payload_templates": [Jsonb(job.payload_template) for job in jobs],
        "expected_max_intervals": [job.expected_max_interval for job in jobs],
        "jitters": [job.jitter_window for job in jobs],
        "catch_up_policies": [str(job.catch_up.policy) for job in jobs],
        "catch_up_windows": [job.catch_up.window for job in jobs],
        "catch_up_limits": [job.catch_up.limit for job in jobs],
        "idempotency_keys": [job.idempotency_key for job in jobs],
        "shards": [row.shard for row in rows],
        "next_runs": [row.nominal for row in rows],
        "minutes": [minute_of(row.fire_at) for row in rows],
        "fire_ats": [row.fire_at for row in rows],
    }
