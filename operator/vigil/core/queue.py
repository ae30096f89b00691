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

Nothing here reads a clock: `now` is passed in.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from enum import StrEnum

from vigil.core.executions import RetryPolicy, backoff_delay
from vigil.core.timeparse import require_aware

#: Longest error text kept per attempt (the rest is cut): a traceback can be megabytes.
ERROR_MAX_CHARS = 4096


class QueueState(StrEnum):
    READY = "ready"  # waiting for run_after, then for a worker
    LEASED = "leased"  # a worker holds it until lease_expires_at (extended by heartbeats)
    SUCCEEDED = "succeeded"
    DEAD = "dead"  # every attempt failed: a dead letter


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
