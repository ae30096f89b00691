"""The execution state machine: one occurrence, its attempts, retries and dead letter.

An *execution* is one occurrence being carried out. It keeps its stable
`execution_id` through every attempt, so a job can deduplicate on it, and it is
a plain frozen value: each transition is a pure function of (execution, what
was observed, policy, now) returning the next value. Nothing here sleeps or
reads a clock; a retry is a `retry_at` timestamp stored with the execution in
the job's status, and `next_wakeup` tells the caller when to look again — so an
operator restart loses no wait (invariant 6).

Phases and the transitions between them::

    Ready ──start──▶ Running ──finish(Succeeded)──▶ Succeeded
      ▲                 │
      │                 ├──finish(Failed), attempts left──▶ Backoff ──retry_due──▶ Ready
      │                 ├──finish(Failed), none left─────▶ Dead ──manual_retry──▶ Ready
      │                 └──finish(Cancelled)─────────────▶ Cancelled
      └─ cancel from Ready, Running or Backoff ──────────▶ Cancelled

Repeated observations are harmless: `start` with the pod already recorded and
`finish` for an attempt already recorded return the execution unchanged (the
first observation of an attempt wins), because watch events repeat. Anything
else that does not fit the diagram raises `InvalidTransition`.

The retry policy and its full-jitter backoff live in vigil.core.backoff (re-exported
here), shared with the volume tier. Times are kept to the millisecond — the precision
they are stored with (`execution_to_dict`) — so an execution always equals its stored form.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from vigil.core.backoff import Backoff as Backoff
from vigil.core.backoff import RetryPolicy as RetryPolicy
from vigil.core.backoff import backoff_cap as backoff_cap
from vigil.core.backoff import backoff_delay as backoff_delay
from vigil.core.dispatch import Candidate, Priority, Running
from vigil.core.ids import ExecutionId
from vigil.core.timeparse import parse_rfc3339, require_aware

#: Longest message kept per attempt: executions live in the job's status, which etcd bounds.
MESSAGE_MAX_CHARS = 1024
_ELLIPSIS = "…"


class Phase(StrEnum):
    READY = "Ready"  # waiting for a dispatch slot
    RUNNING = "Running"  # a pod exists for the current attempt
    BACKOFF = "Backoff"  # the last attempt failed; the next is due at retry_at
    SUCCEEDED = "Succeeded"
    DEAD = "Dead"  # every attempt failed: a dead letter, until retried by hand
    CANCELLED = "Cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_PHASES


TERMINAL_PHASES = frozenset({Phase.SUCCEEDED, Phase.DEAD, Phase.CANCELLED})


class AttemptOutcome(StrEnum):
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


class ExecutionReason(StrEnum):
    """Reasons this module sets itself; failure reasons come from the attempt (vigil.core.podstatus)."""

    SCHEDULED = "Scheduled"  # new, waiting for its first attempt
    STARTED = "Started"
    RETRY_DUE = "RetryDue"  # backoff elapsed, waiting for a slot
    MANUAL_RETRY = "ManualRetry"  # `kubectl vigil retry` on a dead letter
    REPLACED = "Replaced"  # cancelled by concurrencyPolicy Replace
    CANCELLED_BY_USER = "CancelledByUser"
    # concurrency decisions
    NO_ACTIVE_EXECUTION = "NoActiveExecution"
    ALREADY_CREATED = "AlreadyCreated"
    CONCURRENCY_ALLOW = "ConcurrencyAllow"
    CONCURRENCY_FORBID = "ConcurrencyForbid"
    CONCURRENCY_REPLACE = "ConcurrencyReplace"


class InvalidTransition(ValueError):
    """A transition the state machine does not allow from the execution's phase."""


# --- values -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AttemptResult:
    """How one attempt ended. `reason` is CamelCase: Completed, ExitCode3, OOMKilled, Evicted, …"""

    attempt: int
    outcome: AttemptOutcome
    reason: str
    message: str = ""
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None  # finish() fills in `now` when unknown


@dataclasses.dataclass(frozen=True)
class Execution:
    """One occurrence being carried out; `attempt` is the current (or last) attempt number.

    `reason` is the CamelCase reason of the last transition: Scheduled, Started,
    RetryDue, ManualRetry, the failed attempt's reason (Backoff, Dead), the
    successful attempt's reason (Succeeded) or the cancellation's (Cancelled).
    `started_at` and `pod` describe the current attempt (None until it starts);
    `finished_at` is set in the terminal phases only.
    """

    execution_id: ExecutionId
    namespace: str
    job: str
    priority: Priority
    scheduled_for: datetime
    attempt: int
    phase: Phase
    ready_since: datetime  # when it last became Ready: queue age is measured from here
    reason: str
    retry_at: datetime | None = None  # set in Backoff only
    started_at: datetime | None = None
    finished_at: datetime | None = None
    pod: str | None = None
    attempts: tuple[AttemptResult, ...] = ()

    def __post_init__(self) -> None:
        if self.attempt < 1:
            raise ValueError(f"{self.execution_id}: attempt must be at least 1, got {self.attempt}")
        if (self.phase is Phase.BACKOFF) != (self.retry_at is not None):
            raise ValueError(
                f"{self.execution_id}: retry_at is set exactly in phase Backoff (phase {self.phase})"
            )
        if self.phase.terminal != (self.finished_at is not None):
            raise ValueError(
                f"{self.execution_id}: finished_at is set exactly in terminal phases (phase {self.phase})"
            )

    def recorded(self, attempt: int) -> bool:
        """Whether the result of `attempt` is already recorded."""
        return any(result.attempt == attempt for result in self.attempts)


@dataclasses.dataclass(frozen=True)
class ConcurrencyDecision:
    start: bool  # whether the new occurrence's execution starts
    replace: tuple[ExecutionId, ...]  # executions to cancel first (reason Replaced)
    reason: ExecutionReason


class ConcurrencyPolicy(StrEnum):
    """What to do when an occurrence fires while an earlier one still runs."""

    ALLOW = "Allow"
    FORBID = "Forbid"
    REPLACE = "Replace"


# --- transitions ------------------------------------------------------------------------------


def new_execution(
    execution_id: ExecutionId,
    *,
    namespace: str,
    job: str,
    scheduled_for: datetime,
    now: datetime,
    priority: Priority = Priority.NORMAL,
) -> Execution:
    """A freshly fired occurrence: Ready for attempt 1 since `now`."""
    return Execution(
        execution_id=execution_id,
        namespace=namespace,
        job=job,
        priority=Priority(priority),
        scheduled_for=_ms(scheduled_for),
        attempt=1,
        phase=Phase.READY,
        ready_since=_ms(now),
        reason=ExecutionReason.SCHEDULED,
    )


def start(ex: Execution, *, pod: str, now: datetime) -> Execution:
    """Ready → Running: the current attempt's pod `pod` was created at `now`."""
    if ex.phase is Phase.RUNNING and ex.pod == pod:
        return ex
    _require(ex, "start", Phase.READY)
    if not pod:
        raise ValueError(f"{ex.execution_id}: start needs the pod's name")
    return dataclasses.replace(
        ex, phase=Phase.RUNNING, pod=pod, started_at=_ms(now), reason=ExecutionReason.STARTED
    )


def finish(
    ex: Execution, result: AttemptResult, *, policy: RetryPolicy, now: datetime
) -> Execution:
    """Record how the current attempt ended and move on: Succeeded, Backoff, Dead or Cancelled.

    A failed attempt with attempts left goes to Backoff with the next attempt
    number and ``retry_at = now + backoff_delay(attempt=the failed one)``; the
    last allowed one goes to Dead. A Cancelled outcome is never retried. A
    result for an attempt already recorded changes nothing (first one wins).
    Ready is accepted too: the pod may end before its start was recorded.
    """
    if ex.recorded(result.attempt):
        return ex
    _require(ex, "finish", Phase.RUNNING, Phase.READY)
    if result.attempt != ex.attempt:
        raise InvalidTransition(
            f"{ex.execution_id}: result of attempt {result.attempt} does not match the current attempt {ex.attempt}"
        )
    now = _ms(now)
    kept = _kept(result, started_at=ex.started_at, now=now)
    done = dataclasses.replace(ex, attempts=(*ex.attempts, kept), reason=kept.reason)
    if kept.outcome is AttemptOutcome.SUCCEEDED:
        return dataclasses.replace(done, phase=Phase.SUCCEEDED, finished_at=now)
    if kept.outcome is AttemptOutcome.CANCELLED:
        return dataclasses.replace(done, phase=Phase.CANCELLED, finished_at=now)
    if ex.attempt >= policy.max_attempts:
        return dataclasses.replace(done, phase=Phase.DEAD, finished_at=now)
    delay = backoff_delay(policy, attempt=ex.attempt, execution_id=ex.execution_id)
    return dataclasses.replace(
        done,
        phase=Phase.BACKOFF,
        attempt=ex.attempt + 1,
        retry_at=now + delay,
        started_at=None,
        pod=None,
    )


def is_retry_due(ex: Execution, now: datetime) -> bool:
    """Whether `ex` waits in Backoff and its retry time has come."""
    return ex.phase is Phase.BACKOFF and ex.retry_at is not None and ex.retry_at <= now


def retry_due(ex: Execution, *, now: datetime) -> Execution:
    """Backoff → Ready once retry_at has come; Ready since retry_at (not since it was noticed)."""
    _require(ex, "retry_due", Phase.BACKOFF)
    if not is_retry_due(ex, now):
        raise InvalidTransition(
            f"{ex.execution_id}: retry is due at {ex.retry_at}, not yet at {now}"
        )
    assert ex.retry_at is not None
    return dataclasses.replace(
        ex,
        phase=Phase.READY,
        ready_since=ex.retry_at,
        retry_at=None,
        reason=ExecutionReason.RETRY_DUE,
    )


def cancel(ex: Execution, *, reason: str, now: datetime, message: str = "") -> Execution:
    """Ready, Running or Backoff → Cancelled (the caller deletes the pod). Cancelling twice is a no-op.

    A running attempt is recorded as Cancelled, so its pod's own end, seen later,
    changes nothing.
    """
    if ex.phase is Phase.CANCELLED:
        return ex
    _require(ex, "cancel", Phase.READY, Phase.RUNNING, Phase.BACKOFF)
    now = _ms(now)
    attempts = ex.attempts
    if ex.phase is Phase.RUNNING:
        stopped = AttemptResult(
            attempt=ex.attempt,
            outcome=AttemptOutcome.CANCELLED,
            reason=reason,
            message=_bounded(message),
            started_at=ex.started_at,
            finished_at=now,
        )
        attempts = (*attempts, stopped)
    return dataclasses.replace(
        ex, phase=Phase.CANCELLED, reason=reason, retry_at=None, finished_at=now, attempts=attempts
    )


def manual_retry(ex: Execution, *, now: datetime) -> Execution:
    """Dead → Ready with one more attempt (same execution id), for `kubectl vigil retry`.

    It grants exactly one attempt beyond the policy: if it fails too, the
    execution is dead again.
    """
    _require(ex, "manual_retry", Phase.DEAD)
    return dataclasses.replace(
        ex,
        phase=Phase.READY,
        attempt=ex.attempt + 1,
        ready_since=_ms(now),
        reason=ExecutionReason.MANUAL_RETRY,
        started_at=None,
        finished_at=None,
        pod=None,
    )


def next_wakeup(executions: Iterable[Execution]) -> datetime | None:
    """The earliest retry_at among executions in Backoff: when to look at them again."""
    return min((ex.retry_at for ex in executions if ex.retry_at is not None), default=None)


def concurrency(
    policy: ConcurrencyPolicy,
    active: Sequence[Execution],
    *,
    incoming: ExecutionId | None = None,
) -> ConcurrencyDecision:
    """Whether a new occurrence of a job starts, given the job's other executions.

    In flight means Ready, Running or Backoff: an execution waiting to retry
    still counts. `incoming` is the new execution's id: when it is among
    `active`, the occurrence was already handled (a repeated firing after a
    crash) and it simply proceeds — never skipping or cancelling itself.
    """
    policy = ConcurrencyPolicy(policy)
    if incoming is not None and any(ex.execution_id == incoming for ex in active):
        return ConcurrencyDecision(start=True, replace=(), reason=ExecutionReason.ALREADY_CREATED)
    in_flight = tuple(ex.execution_id for ex in active if not ex.phase.terminal)
    if not in_flight:
        return ConcurrencyDecision(
            start=True, replace=(), reason=ExecutionReason.NO_ACTIVE_EXECUTION
        )
    if policy is ConcurrencyPolicy.FORBID:
        return ConcurrencyDecision(
            start=False, replace=(), reason=ExecutionReason.CONCURRENCY_FORBID
        )
    if policy is ConcurrencyPolicy.REPLACE:
        return ConcurrencyDecision(
            start=True, replace=in_flight, reason=ExecutionReason.CONCURRENCY_REPLACE
        )
    return ConcurrencyDecision(start=True, replace=(), reason=ExecutionReason.CONCURRENCY_ALLOW)


# --- dispatch views ---------------------------------------------------------------------------


def as_candidate(ex: Execution) -> Candidate:
    """A Ready execution as the dispatcher sees it."""
    _require(ex, "as_candidate", Phase.READY)
    return Candidate(
        execution_id=ex.execution_id,
        namespace=ex.namespace,
        priority=ex.priority,
        ready_since=ex.ready_since,
    )


def running_counts(executions: Iterable[Execution]) -> Running:
    """What occupies dispatch slots: the executions in phase Running."""
    by_namespace: dict[str, int] = {}
    total = high = 0
    for ex in executions:
        if ex.phase is Phase.RUNNING:
            total += 1
            high += ex.priority is Priority.HIGH
            by_namespace[ex.namespace] = by_namespace.get(ex.namespace, 0) + 1
    return Running(total=total, high=high, by_namespace=by_namespace)


# --- helpers ----------------------------------------------------------------------------------


def _require(ex: Execution, transition: str, *phases: Phase) -> None:
    if ex.phase not in phases:
        allowed = ", ".join(phases)
        raise InvalidTransition(
            f"{ex.execution_id}: cannot {transition} an execution in phase {ex.phase} (only from {allowed})"
        )


def _kept(result: AttemptResult, *, started_at: datetime | None, now: datetime) -> AttemptResult:
    """The result as stored: times to the millisecond, finish time known, message bounded."""
    started = result.started_at or started_at
    return dataclasses.replace(
        result,
        outcome=AttemptOutcome(result.outcome),
        message=_bounded(result.message),
        started_at=_ms(started) if started is not None else None,
        finished_at=_ms(result.finished_at) if result.finished_at is not None else now,
    )


def _bounded(message: str) -> str:
    if len(message) <= MESSAGE_MAX_CHARS:
        return message
    return message[: MESSAGE_MAX_CHARS - len(_ELLIPSIS)] + _ELLIPSIS


def _ms(value: datetime) -> datetime:
    """`value` in UTC, truncated to the millisecond (the stored precision)."""
    value = require_aware(value)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


# --- serialisation ----------------------------------------------------------------------------


def format_time(value: datetime) -> str:
    """RFC 3339 UTC to the millisecond: ``2026-08-01T02:00:00.250Z`` (no fraction when it is 0)."""
    value = _ms(value)
    whole = value.strftime("%Y-%m-%dT%H:%M:%S")
    millis = value.microsecond // 1000
    return f"{whole}.{millis:03d}Z" if millis else f"{whole}Z"


def execution_to_dict(ex: Execution) -> dict[str, Any]:
    """The execution as stored in a job's status: camelCase keys, unset times omitted.

    Keys whose value is unset are left out rather than written as null, so a
    stored list element is replaced whole. Store executions in a list, not a
    map merged key by key, or an omitted key would keep its old value.
    """
    out: dict[str, Any] = {
        "executionId": str(ex.execution_id),
        "namespace": ex.namespace,
        "job": ex.job,
        "priority": str(ex.priority),
        "scheduledFor": format_time(ex.scheduled_for),
        "attempt": ex.attempt,
        "phase": str(ex.phase),
        "readySince": format_time(ex.ready_since),
        "reason": str(ex.reason),
    }
    _put_time(out, "retryAt", ex.retry_at)
    _put_time(out, "startedAt", ex.started_at)
    _put_time(out, "finishedAt", ex.finished_at)
    if ex.pod is not None:
        out["pod"] = ex.pod
    out["attempts"] = [_attempt_to_dict(result) for result in ex.attempts]
    return out


def execution_from_dict(data: Mapping[str, Any]) -> Execution:
    """Read an execution written by `execution_to_dict`; ValueError naming the key if malformed."""
    try:
        return Execution(
            execution_id=ExecutionId(_text(data, "executionId")),
            namespace=_text(data, "namespace"),
            job=_text(data, "job"),
            priority=Priority(_text(data, "priority")),
            scheduled_for=_time(data, "scheduledFor"),
            attempt=_int(data, "attempt"),
            phase=Phase(_text(data, "phase")),
            ready_since=_time(data, "readySince"),
            reason=_text(data, "reason", default=""),
            retry_at=_optional_time(data, "retryAt"),
            started_at=_optional_time(data, "startedAt"),
            finished_at=_optional_time(data, "finishedAt"),
            pod=_optional_text(data, "pod"),
            attempts=tuple(_attempt_from_dict(item) for item in data.get("attempts") or ()),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"invalid stored execution {data.get('executionId')!r}: {error}") from None


def _attempt_to_dict(result: AttemptResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "attempt": result.attempt,
        "outcome": str(result.outcome),
        "reason": str(result.reason),
    }
    if result.message:
        out["message"] = result.message
    if result.exit_code is not None:
        out["exitCode"] = result.exit_code
    _put_time(out, "startedAt", result.started_at)
    _put_time(out, "finishedAt", result.finished_at)
    return out


def _attempt_from_dict(data: Mapping[str, Any]) -> AttemptResult:
    exit_code = data.get("exitCode")
    return AttemptResult(
        attempt=_int(data, "attempt"),
        outcome=AttemptOutcome(_text(data, "outcome")),
        reason=_text(data, "reason", default=""),
        message=_text(data, "message", default=""),
        exit_code=None if exit_code is None else _int(data, "exitCode"),
        started_at=_optional_time(data, "startedAt"),
        finished_at=_optional_time(data, "finishedAt"),
    )


def _put_time(out: dict[str, Any], key: str, value: datetime | None) -> None:
    if value is not None:
        out[key] = format_time(value)


def _text(data: Mapping[str, Any], key: str, *, default: str | None = None) -> str:
    value = data.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string, got {value!r}")
    return value


def _optional_text(data: Mapping[str, Any], key: str) -> str | None:
    return None if data.get(key) is None else _text(data, key)


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    return value


def _time(data: Mapping[str, Any], key: str) -> datetime:
    try:
        return _ms(parse_rfc3339(_text(data, key)))
    except ValueError as error:
        raise ValueError(f"{key}: {error}") from None


def _optional_time(data: Mapping[str, Any], key: str) -> datetime | None:
    return None if data.get(key) is None else _time(data, key)
