"""The Execution resource: one occurrence being run, across all of its attempts.

The trigger creates an Execution named from the execution id, so a second
create is a 409 and never a second run. The leader's dispatcher starts its
attempts as pods when capacity allows; a failed attempt moves it to Backoff
with the retry time *stored here*, so an operator restart never loses a wait.
Users act on it through the spec: `cancel` (stop, never retry) and
`retryRequests` (run a dead-lettered execution again with the same id).

Everything else in the spec is immutable once created, by CEL transition rules the API server
checks (so a tenant who may patch an Execution, to cancel or retry it, cannot also move its
occurrence, raise its priority or point it at another job), and `retryRequests` only grows.
Transition rules compare with the stored object, so they have no pydantic twin: a model parsed
alone has nothing to compare with.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from vigil.model.common import (
    AGE_COLUMN,
    DEFAULT_EMPTY_OBJECT,
    CelRule,
    ObjectName,
    PrinterColumn,
    ResourceKind,
    RetryPolicy,
    SpecModel,
    StatusModel,
    Timestamp,
    cel_rules,
)
from vigil.model.names import EXECUTIONS
from vigil.model.scheduledjob import Priority

ATTEMPTS_MAX_ITEMS = 100
ExecutionIdText = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
ShortText = Annotated[str, StringConstraints(max_length=1024)]

#: The API server's words when a write changes a fixed part of an Execution's spec.
MESSAGE_SPEC_IMMUTABLE = "is immutable: only spec.cancel, spec.cancelReason and spec.retryRequests may change"
MESSAGE_RETRY_REQUESTS_GROW = "may only grow: increment it to request one more run"
#: On every spec field but the user's levers: a transition rule, checked on update only.
_IMMUTABLE = cel_rules(CelRule(rule="self == oldSelf", message=MESSAGE_SPEC_IMMUTABLE))


class ExecutionPhase(StrEnum):
    READY = "Ready"
    RUNNING = "Running"
    BACKOFF = "Backoff"
    SUCCEEDED = "Succeeded"
    DEAD = "Dead"
    CANCELLED = "Cancelled"


class ExecutionSource(StrEnum):
    TRIGGER = "Trigger"
    BACKFILL = "Backfill"
    MANUAL = "Manual"  # `kubectl vigil run`: outside the schedule, keyed by its request id


class JobRef(SpecModel):
    """The ScheduledJob this execution belongs to."""

    name: ObjectName = Field(description="The ScheduledJob's name.")
    uid: Annotated[str, StringConstraints(min_length=1, max_length=64)] = Field(
        description="The ScheduledJob's uid when the execution was created."
    )


class ExecutionSpec(SpecModel):
    """What to run and for which occurrence; `cancel` and `retryRequests` are the user's levers."""

    job: JobRef = Field(description="The ScheduledJob this execution belongs to.", json_schema_extra=_IMMUTABLE)
    execution_id: ExecutionIdText = Field(
        description="Stable across every attempt; equals the object name.", json_schema_extra=_IMMUTABLE
    )
    scheduled_for: Timestamp = Field(description="The occurrence's nominal time.", json_schema_extra=_IMMUTABLE)
    period_start: Timestamp = Field(
        description="Start of the period this run stands for.", json_schema_extra=_IMMUTABLE
    )
    period_end: Timestamp = Field(description="End of the period this run stands for.", json_schema_extra=_IMMUTABLE)
    priority: Priority = Field(
        default=Priority.NORMAL,
        description="Dispatch priority. high only in namespaces the chart lists "
        "(admission.highPriority.namespaces).",
        json_schema_extra=_IMMUTABLE,
    )
    retry: RetryPolicy = Field(
        default_factory=RetryPolicy,
        json_schema_extra={**DEFAULT_EMPTY_OBJECT, **_IMMUTABLE},
        description="The job's retry policy when the execution was created.",
    )
    source: ExecutionSource = Field(
        default=ExecutionSource.TRIGGER, description="Trigger, Backfill or Manual (kubectl vigil run).", json_schema_extra=_IMMUTABLE
    )
    cancel: bool = Field(default=False, description="Set true to stop the execution; it is never retried.")
    cancel_reason: ShortText | None = Field(default=None, description="Why it was cancelled.")
    retry_requests: int = Field(
        default=0,
        ge=0,
        description="Increment to run a dead-lettered execution again, same execution id.",
        json_schema_extra=cel_rules(CelRule(rule="self >= oldSelf", message=MESSAGE_RETRY_REQUESTS_GROW)),
    )


class AttemptStatus(StatusModel):
    """One attempt's result."""

    attempt: int = Field(ge=1, description="1, 2, ...")
    outcome: ShortText = Field(description="Succeeded, Failed or Cancelled.")
    reason: ShortText | None = Field(default=None, description="ExitCode3, OOMKilled, Evicted, ...")
    message: Annotated[str, StringConstraints(max_length=4096)] | None = Field(
        default=None, description="Details, e.g. the termination message."
    )
    exit_code: int | None = Field(default=None, description="The container's exit code, if it ran.")
    started_at: Timestamp | None = Field(default=None, description="When the attempt started.")
    finished_at: Timestamp | None = Field(default=None, description="When the attempt ended.")


class ExecutionStatus(StatusModel):
    """Where the execution stands (written by the operator from the core's execution record)."""

    execution_id: ExecutionIdText | None = Field(default=None, description="The execution id.")
    namespace: ShortText | None = Field(default=None, description="The job's namespace.")
    job: ShortText | None = Field(default=None, description="The job's name.")
    priority: Priority | None = Field(default=None, description="Dispatch priority.")
    scheduled_for: Timestamp | None = Field(default=None, description="The occurrence's nominal time.")
    phase: ExecutionPhase | None = Field(default=None, description="Ready, Running, Backoff, Succeeded, Dead, Cancelled.")
    attempt: int | None = Field(default=None, ge=1, description="The current (or last) attempt.")
    ready_since: Timestamp | None = Field(default=None, description="Waiting to start since (for fairness).")
    retry_at: Timestamp | None = Field(default=None, description="When the next attempt becomes ready (Backoff).")
    reason: ShortText | None = Field(default=None, description="Why it is in this phase.")
    pod: ShortText | None = Field(default=None, description="The current attempt's pod.")
    started_at: Timestamp | None = Field(default=None, description="First attempt's start.")
    finished_at: Timestamp | None = Field(default=None, description="When it reached a final phase.")
    attempts: list[AttemptStatus] = Field(
        default_factory=list, max_length=ATTEMPTS_MAX_ITEMS, description="Every attempt's result, oldest first."
    )
    observed_retry_requests: int | None = Field(default=None, ge=0, description="spec.retryRequests last acted on.")
    history_written: int | None = Field(
        default=None, ge=0, description="Attempts already written to the history database."
    )


EXECUTION = ResourceKind(
    kind="Execution",
    plural=EXECUTIONS,
    short_names=("ex",),
    spec_model=ExecutionSpec,
    status_model=ExecutionStatus,
    description="One occurrence of a ScheduledJob being run, across all its attempts. Created by the "
    "operator (or `kubectl vigil backfill`); users may set spec.cancel or increment spec.retryRequests.",
    printer_columns=(
        PrinterColumn(name="Job", json_path=".spec.job.name", description="The ScheduledJob."),
        PrinterColumn(name="Phase", json_path=".status.phase", description="Where it stands."),
        PrinterColumn(name="Attempt", json_path=".status.attempt", type="integer", description="Attempt."),
        PrinterColumn(name="Scheduled", json_path=".spec.scheduledFor", description="Nominal time (UTC)."),
        PrinterColumn(name="Reason", json_path=".status.reason", description="Why."),
        AGE_COLUMN,
    ),
)
