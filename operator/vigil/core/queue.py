"""The volume tier's execution rules: what a lease, a failure and an expired lease decide.

The queue store (vigil.queue) keeps executions in PostgreSQL and the worker SDK
(vigil.worker) runs them; both ask this module what happens next, so the rules
are the same as the declarative tier's and testable without a database:

- a lease lasts `lease` from the moment it is taken or extended (`lease_deadline`);
- a failed attempt with attempts left becomes ready again after the core's own
  full-jitter backoff (`vigil.core.executions.backoff_delay`, keyed by the stable
  execution id, so every worker computes the same instant); the last allowed one
  is a dead letter;
- an expired lease counts as a spent attempt: the execution becomes leasable at
  once with the same id and attempt + 1, or dead when that was the last.

It also holds what the HTTP API reads and writes through the store (`JobRecord`,
`ExecutionRecord`, `AttemptRow`, `OneOffJob`, `Submitted`): typed rows, so the
routes (vigil.queueapi) never see a database driver.

Nothing here reads a clock: `now` is passed in.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from vigil.core.executions import RetryPolicy, backoff_delay
from vigil.core.timeparse import require_aware

#: Attempts an execution gets when its submission names none.
DEFAULT_MAX_ATTEMPTS = 3
#: Longest error text kept per attempt (the rest is cut): a traceback can be megabytes.
ERROR_MAX_CHARS = 4096


class QueueState(StrEnum):
    READY = "ready"  # waiting for run_after, then for a worker
    LEASED = "leased"  # a worker holds it until lease_expires_at (extended by heartbeats)
    SUCCEEDED = "succeeded"
    DEAD = "dead"  # every attempt failed: a dead letter
    CANCELLED = "cancelled"  # cancelled through the API (or its job deleted): never run, never retried


class AttemptOutcome(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    LEASE_EXPIRED = "lease_expired"  # the holder stopped heartbeating (crashed, frozen, cut off)


@dataclasses.dataclass(frozen=True)
class Settlement:
    """Where an execution goes after an attempt ends: its next state, attempt and run_after."""

    state: QueueState
    attempt: int
    run_after: datetime | None  # when a READY execution may be leased again; None otherwise


def lease_deadline(now: datetime, lease: timedelta) -> datetime:
    """When a lease taken or extended at `now` expires."""
    if lease <= timedelta(0):
        raise ValueError(f"lease must be positive, got {lease}")
    return require_aware(now, name="now") + lease


def after_failure(
    *, execution_id: str, attempt: int, max_attempts: int, backoff: RetryPolicy, now: datetime
) -> Settlement:
    """A failed attempt: retried after the core's backoff, or dead after `max_attempts`.

    `backoff.max_attempts` is ignored: each execution carries its own `max_attempts`.
    """
    if attempt >= max_attempts:
        return Settlement(QueueState.DEAD, attempt, None)
    delay = backoff_delay(backoff, attempt=attempt, execution_id=execution_id)
    return Settlement(QueueState.READY, attempt + 1, require_aware(now, name="now") + delay)


def after_expiry(*, attempt: int, max_attempts: int, now: datetime) -> Settlement:
    """An expired lease: leasable again at once (same id, attempt + 1), or dead if it was the last."""
    if attempt >= max_attempts:
        return Settlement(QueueState.DEAD, attempt, None)
    return Settlement(QueueState.READY, attempt + 1, require_aware(now, name="now"))


def bounded_error(text: str) -> str:
    """The error text as stored: at most ERROR_MAX_CHARS, the end kept (where a traceback says what)."""
    if len(text) <= ERROR_MAX_CHARS:
        return text
    return "…" + text[-(ERROR_MAX_CHARS - 1) :]


#: States an execution leaves only through the API's retry (cancelled, dead) or never (succeeded).
FINISHED_STATES = frozenset({QueueState.SUCCEEDED, QueueState.DEAD, QueueState.CANCELLED})
#: States the API's cancel applies to: not yet finished.
CANCELLABLE_STATES = frozenset({QueueState.READY, QueueState.LEASED})
#: States the API's retry applies to: finished without success.
RETRYABLE_STATES = frozenset({QueueState.DEAD, QueueState.CANCELLED})


class QueueUnavailable(Exception):
    """The queue store could not be reached (down, restarting, refused): try again later."""


def queue_key(namespace: str, name: str) -> str:
    """The store's name of the TaskQueue `name` in `namespace`: ``"NS/NAME"``."""
    return f"{namespace}/{name}"


def split_queue_key(key: str) -> tuple[str, str]:
    """(namespace, name) of a store queue key; ("", key) for one that names no namespace
    (a queue filled directly through the store, not declared by a TaskQueue)."""
    namespace, slash, name = key.partition("/")
    return (namespace, name) if slash else ("", key)


@dataclasses.dataclass(frozen=True)
class OneOffJob:
    """A one-off job, as the API submits it: one `jobs` row and its one execution."""

    queue: str  # the store key, "NS/NAME"
    task: str
    payload: dict[str, Any]
    run_at: datetime
    priority: int
    tenant: str
    max_attempts: int
    idempotency_key: str | None


@dataclasses.dataclass(frozen=True)
class Submitted:
    """What a submit made, or found: `created` is False when the idempotency key was known
    (`job_id` is None only when that key's execution was enqueued without a job, by `submit`)."""

    job_id: str | None
    execution_id: str
    scheduled_for: datetime
    created: bool


@dataclasses.dataclass(frozen=True)
class ExecutionSummary:
    execution_id: str
    state: QueueState
    attempt: int
    scheduled_for: datetime


@dataclasses.dataclass(frozen=True)
class JobRecord:
    job_id: str
    queue: str
    task: str
    payload: dict[str, Any]
    priority: int
    tenant: str
    max_attempts: int
    enabled: bool
    created_at: datetime
    executions: tuple[ExecutionSummary, ...]  # the newest first, at most JOB_EXECUTIONS_SHOWN


#: Executions listed with a job (the newest): a one-off job has one.
JOB_EXECUTIONS_SHOWN = 20


@dataclasses.dataclass(frozen=True)
class AttemptRow:
    attempt: int
    worker: str
    outcome: AttemptOutcome
    started_at: datetime | None
    finished_at: datetime
    error: str | None
    duplicate: bool


@dataclasses.dataclass(frozen=True)
class ExecutionRecord:
    """An execution and its attempts: the timeline the API answers."""

    execution_id: str
    job_id: str | None
    queue: str
    task: str
    payload: dict[str, Any]
    priority: int
    tenant: str
    state: QueueState
    attempt: int
    max_attempts: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    run_after: datetime
    scheduled_for: datetime
    idempotency_key: str | None
    finished_at: datetime | None
    last_error: str | None
    cancelled_by: str | None
    attempts: tuple[AttemptRow, ...]


@dataclasses.dataclass(frozen=True)
class Change:
    """What a cancel or retry did: the execution afterwards, and why nothing changed (None: it did)."""

    record: ExecutionRecord
    refusal: str | None = None


def cancel_refusal(state: QueueState) -> str | None:
    """Why an execution in `state` cannot be cancelled (None: it can)."""
    if state in CANCELLABLE_STATES:
        return None
    return f"it is {state}: only ready or leased executions can be cancelled"


def retry_refusal(state: QueueState, *, job_enabled: bool) -> str | None:
    """Why an execution in `state` cannot be retried (None: it can): only a dead or cancelled
    one can, and not once its job is deleted (nothing of a deleted job runs again)."""
    if state not in RETRYABLE_STATES:
        return f"it is {state}: only dead or cancelled executions can be retried"
    if not job_enabled:
        return "its job was deleted: nothing of it runs again"
    return None
