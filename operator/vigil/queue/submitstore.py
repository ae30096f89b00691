"""The queue store as submitters and the HTTP API use it: submit, read back, and the API's operations.

`SubmitStore.submit` is what a program that enqueues work, the operator's task submitter (a
ScheduledJob's `task:`), a test or the benchmark calls; the rest are the HTTP API's operations
(vigil.api.queue): one-off and recurring jobs, timelines, cancel and retry, a queue's listings,
in typed rows of vigil.core.queue, a database that cannot be reached raised as QueueUnavailable.
Each of the API's operations runs in `_acting` with the blocks of `statements`, so the API's
store (vigil.queue.apistore) sends the same blocks as functions, as a namespace's API role.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.json import Jsonb

from vigil.core.ids import DIGEST_BYTES, one_off_execution_id
from vigil.core.ids import execution_id as derive_execution_id
from vigil.core.queue import (
    DEFAULT_MAX_ATTEMPTS,
    JOB_EXECUTIONS_SHOWN,
    QUEUE_PAGE_MAX,
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
    QueueJob,
    QueueState,
    QueueUnavailable,
    QueueUndeclared,
    Recurrence,
    Submission,
    Submitted,
    TaskState,
    cancel_refusal,
    error_shown,
    retry_refusal,
)
from vigil.core.submissions import ExecutionIdTaken, checked_submissions, is_same_occurrence
from vigil.core.timeparse import require_aware
from vigil.queue import bounds
from vigil.queue.queries import OWNER_STATEMENTS, QUERIES, checked_json
from vigil.queue.storebase import StoreBase

if TYPE_CHECKING:  # a worker imports this module: what only the operator and tests use loads on use
    from vigil.core.recurring import AddedJob, RecurringJob


class SubmitStore(StoreBase):
    """Submit and inspect, and the HTTP API's operations (see the module docstring)."""

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
        texts = checked_submissions(queue, submissions)
        if not submissions:
            return []
        ids = [_new_id(s) for s in submissions]
        payloads = [checked_json(text) for text in texts]
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
            added = {row[0] for row in connection.execute(OWNER_STATEMENTS["submit"], params).fetchall()}
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

    def states(self, execution_ids: Sequence[str]) -> dict[str, TaskState]:
        """Where each of these executions is, by id, with a succeeded one's output, in one statement
        (ids not enqueued are left out): what the workflow engine reads of its running task steps.
        A database that cannot be reached raises QueueUnavailable."""
        if not execution_ids:
            return {}
        with self._reachable(), self.connect() as connection:
            rows = connection.execute(QUERIES["states_of"], {"execution_ids": list(execution_ids)}).fetchall()
        return {row[0]: TaskState(QueueState(row[1]), int(row[2]), row[3], row[4]) for row in rows}

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
        payload = checked_json(job.payload_text)  # the text measured, for its three statements
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
    """The execution with its attempts and output, and whether its job (if any) is enabled."""
    cursor = connection.cursor(row_factory=psycopg.rows.dict_row)
    row = cursor.execute(statements["timeline"], {"execution_id": execution_id}).fetchone()
    if row is None:
        return None
    attempts = cursor.execute(statements["attempts_of"], {"execution_id": execution_id}).fetchall()
    job_enabled = bool(row.pop("job_enabled"))
    state = QueueState(row["state"])
    record = ExecutionRecord(
        **{**row, "state": state},
        output=_output(cursor, execution_id, statements) if state is QueueState.SUCCEEDED else None,
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


def _output(cursor: psycopg.Cursor[dict[str, Any]], execution_id: str, statements: Mapping[str, str]) -> Any:
    """A succeeded execution's output, read after its timeline row said it succeeded: the state and
    the output are written by one statement and neither changes after, so the two reads agree (an
    execution retention deleted in between reads as null)."""
    found = cursor.execute(statements["execution_output"], {"execution_id": execution_id}).fetchone()
    return None if found is None else found["output"]


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


def _new_id(submission: Submission) -> str:
    """A new execution's id. A submission that brings its occurrence's id (a ScheduledJob's) keeps
    it; a one-off submission is its own occurrence, named from fresh random bytes."""
    if submission.execution_id is not None:
        return submission.execution_id
    return one_off_execution_id(os.urandom(DIGEST_BYTES))
