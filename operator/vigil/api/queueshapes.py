"""The volume tier's answers as JSON, and its listings' pages and `continue` tokens."""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse
from datetime import UTC, datetime
from typing import Any

from vigil.api.bodies import field_name
from vigil.api.queuebase import (
    Invalid,
)
from vigil.core.queue import (
    QUEUE_PAGE_DEFAULT,
    QUEUE_PAGE_MAX,
    AttemptRow,
    DeadLetter,
    ExecutionRecord,
    JobRecord,
    ListCursor,
    QueueBreakdown,
    QueueJob,
    Recurrence,
    split_queue_key,
)
from vigil.model.durations import format_duration


def page_request(query: str, kind: str, *, allowed: frozenset[str]) -> tuple[int, ListCursor | None]:
    """(limit, cursor) of a listing's query string; Invalid naming the parameter that is wrong."""
    try:
        params = urllib.parse.parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise Invalid("query", "the query string cannot be read") from None
    unknown = sorted(set(params) - allowed)
    if unknown:
        takes = f"only {' and '.join(sorted(allowed))} are accepted" if allowed else "it takes no parameters"
        raise Invalid(field_name(unknown[0], instead="query"), f"unknown parameter: {takes}")
    for field, values in params.items():
        if len(values) > 1:
            raise Invalid(field, "may be given once")
    limit = params.get("limit", [str(QUEUE_PAGE_DEFAULT)])[0]
    if not (limit.isascii() and limit.isdigit()) or not 1 <= int(limit) <= QUEUE_PAGE_MAX:
        raise Invalid("limit", f"must be a whole number from 1 to {QUEUE_PAGE_MAX}")
    token = params.get("continue", [""])[0]
    return int(limit), decode_cursor(token, kind) if token else None


def encode_cursor(cursor: ListCursor, kind: str) -> str:
    """The `continue` token of the page of listing `kind` after `cursor`: opaque, no secret in it."""
    raw = f"{kind}|{cursor.at.isoformat()}|{cursor.ident}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(token: str, kind: str) -> ListCursor:
    """The cursor a `continue` token of listing `kind` names; Invalid("continue") otherwise."""
    wrong = Invalid("continue", f"is not a token from an earlier page of this queue's {kind}")
    try:
        written, stamp, ident = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode().split("|", 2)
        at = datetime.fromisoformat(stamp)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise wrong from None
    if written != kind or at.tzinfo is None or not re.fullmatch(r"[-a-z0-9]{1,64}", ident):
        raise wrong
    return ListCursor(at, ident)


def paged(body: dict[str, Any], kind: str, after: ListCursor | None) -> dict[str, Any]:
    return body if after is None else body | {"continue": encode_cursor(after, kind)}


def time_of(value: datetime | None) -> str | None:
    """An instant as RFC 3339 with its fractions (leases and attempts are sub-second)."""
    return value.astimezone(UTC).isoformat() if value is not None else None


def job_to_json(job: JobRecord) -> dict[str, Any]:
    namespace, name = split_queue_key(job.queue)
    return {
        "jobId": job.job_id,
        "namespace": namespace,
        "queue": name,
        "task": job.task,
        "payload": job.payload,
        "priority": job.priority,
        "tenant": job.tenant,
        "maxAttempts": job.max_attempts,
        "enabled": job.enabled,
        "createdAt": time_of(job.created_at),
        **_recurrence_to_json(job.schedule),
        "executions": [
            {
                "executionId": e.execution_id,
                "state": str(e.state),
                "attempt": e.attempt,
                "scheduledFor": time_of(e.scheduled_for),
            }
            for e in job.executions
        ],
    }


def _recurrence_to_json(recurrence: Recurrence | None) -> dict[str, Any]:
    if recurrence is None:
        return {}
    expected = recurrence.expected_max_interval
    return {
        "cron": recurrence.cron,
        "timezone": recurrence.timezone,
        "payloadTemplate": recurrence.payload_template,
        "expectedMaxInterval": format_duration(expected) if expected is not None else None,
        "nextRun": time_of(recurrence.next_run),
    }


def attempt_to_json(row: AttemptRow) -> dict[str, Any]:
    return {
        "attempt": row.attempt,
        "worker": row.worker,
        "outcome": str(row.outcome),
        "startedAt": time_of(row.started_at),
        "finishedAt": time_of(row.finished_at),
        "error": row.error,
        "duplicate": row.duplicate,
    }


def execution_to_json(record: ExecutionRecord) -> dict[str, Any]:
    namespace, name = split_queue_key(record.queue)
    return {
        "executionId": record.execution_id,
        "jobId": record.job_id,
        "namespace": namespace,
        "queue": name,
        "task": record.task,
        "payload": record.payload,
        "priority": record.priority,
        "tenant": record.tenant,
        "idempotencyKey": record.idempotency_key,
        "state": str(record.state),
        "attempt": record.attempt,
        "maxAttempts": record.max_attempts,
        "scheduledFor": time_of(record.scheduled_for),
        "runAfter": time_of(record.run_after),
        "leaseOwner": record.lease_owner,
        "leaseExpiresAt": time_of(record.lease_expires_at),
        "finishedAt": time_of(record.finished_at),
        "lastError": record.last_error,
        "cancelledBy": record.cancelled_by,
        "output": record.output,
        "attempts": [attempt_to_json(row) for row in record.attempts],
    }


def queue_job_to_json(job: QueueJob) -> dict[str, Any]:
    return {
        "jobId": job.job_id,
        "task": job.task,
        "enabled": job.enabled,
        "priority": job.priority,
        "tenant": job.tenant,
        "createdAt": time_of(job.created_at),
        "lastExecutionId": job.last_execution_id,
        "lastState": None if job.last_state is None else str(job.last_state),
    }


def dead_letter_to_json(dead: DeadLetter, *, now: datetime) -> dict[str, Any]:
    return {
        "executionId": dead.execution_id,
        "task": dead.task,
        "tenant": dead.tenant,
        "priority": dead.priority,
        "attempt": dead.attempt,
        "maxAttempts": dead.max_attempts,
        "scheduledFor": time_of(dead.scheduled_for),
        "diedAt": time_of(dead.died_at),
        "ageSeconds": max(0, int((now - dead.died_at).total_seconds())),
        "error": dead.error,
    }


def breakdown_to_json(row: QueueBreakdown) -> dict[str, Any]:
    age = row.oldest_ready_age
    return {
        "priority": row.priority,
        "tenant": row.tenant,
        "ready": row.ready,
        "leased": row.leased,
        "dead": row.dead,
        "oldestReadySeconds": None if age is None else int(age.total_seconds()),
    }


