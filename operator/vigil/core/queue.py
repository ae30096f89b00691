"""The volume tier's execution rules: what a lease, a failure and an expired lease decide.

The queue store (vigil.queue) keeps executions in PostgreSQL and the worker SDK
(vigil.worker) runs them; both ask this module what happens next, so the rules
are the same as the declarative tier's and testable without a database:

- a lease lasts `lease` from the moment it is taken or extended (`lease_deadline`);
- a failed attempt with attempts left becomes ready again after the core's own
  full-jitter backoff (`vigil.core.backoff.backoff_delay`, keyed by the stable
  execution id, so every worker computes the same instant); the last allowed one
  is a dead letter;
- an expired lease counts as a spent attempt: the execution becomes leasable at
  once with the same id and attempt + 1, or dead when that was the last;
- a queue's declaration (`QueueDeclaration`, from its TaskQueue) sets the lease,
  retry defaults and caps, and `allowance` decides how many executions of each
  priority a worker may lease so that reserved capacity stays reserved.

It also holds what the HTTP API reads and writes through the store (`JobRecord`,
`ExecutionRecord`, `AttemptRow`, `OneOffJob`, `Submitted`, and a queue's listings: `JobsPage`,
`DeadLettersPage`, `QueueBreakdown`): typed rows, so the routes (vigil.api.queue) never see a
database driver.

Nothing here reads a clock: `now` is passed in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from vigil.core.backoff import Backoff, RetryPolicy, backoff_delay
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


class QueueUndeclared(LookupError):
    """The HTTP API cannot act for `namespace` in the store: it has no TaskQueue, so no database
    role (vigil.queue.roles). The API answers as for an unknown queue (404)."""

    def __init__(self, namespace: str) -> None:
        super().__init__(f"namespace {namespace} has no TaskQueue, so the queue API cannot act for it")
        self.namespace = namespace


@dataclasses.dataclass(frozen=True)
class QuotaLimits:
    """A namespace's limits on what it keeps unfinished in the store (ready or leased executions,
    and the bytes of their payloads' JSON text); None: no limit."""

    max_ready_executions: int | None = None
    max_payload_bytes: int | None = None


class QuotaExceeded(Exception):
    """An admission that would take `namespace` past its quota: nothing of it was written.

    `quota` names the limit ("maxReadyExecutions" or "maxPayloadBytes"), `used` what the
    namespace holds now (counted as the store admits; recounted every TaskQueue pass), `wanted`
    what the refused submission needed of it. Room comes back as the namespace's executions finish.
    """

    def __init__(self, namespace: str, *, quota: str, limit: int, used: int, wanted: int) -> None:
        self.namespace = namespace
        self.quota = quota
        self.limit = limit
        self.used = used
        self.wanted = wanted
        unit = " bytes" if quota == QUOTA_PAYLOAD_BYTES else ""
        super().__init__(
            f"namespace {namespace!r} is at its quota {quota}: it holds {used}{unit} of {limit}{unit} "
            f"in ready or leased executions, and this needs {wanted}{unit} more"
        )


QUOTA_READY_EXECUTIONS = "maxReadyExecutions"
QUOTA_PAYLOAD_BYTES = "maxPayloadBytes"


def namespace_quotas(
    declarations: Mapping[str, QueueDeclaration],
    *,
    default: QuotaLimits,
    granted: Mapping[str, QuotaLimits],
) -> dict[str, QuotaLimits]:
    """Each namespace's limits from its TaskQueues' declarations (keyed "NS/NAME").

    The chart's `default` (or the namespace's own grant in `granted`) is the ceiling: a
    TaskQueue is written by the namespace's own users, so it may lower its namespace's quota
    and never raise it. Several TaskQueues of one namespace: the smallest value wins, limit by
    limit. Namespaces with a grant and no TaskQueue are listed too; any other takes `default`.
    """
    found: dict[str, QuotaLimits] = dict(granted)
    for key, declaration in sorted(declarations.items()):
        namespace = split_queue_key(key)[0]
        current = found.get(namespace, default)
        found[namespace] = QuotaLimits(
            max_ready_executions=_smallest(current.max_ready_executions, declaration.quota.max_ready_executions),
            max_payload_bytes=_smallest(current.max_payload_bytes, declaration.quota.max_payload_bytes),
        )
    return found


def _smallest(ceiling: int | None, lowered: int | None) -> int | None:
    if lowered is None:
        return ceiling
    return lowered if ceiling is None else min(ceiling, lowered)


def queue_key(namespace: str, name: str) -> str:
    """The store's name of the TaskQueue `name` in `namespace`: ``"NS/NAME"``."""
    return f"{namespace}/{name}"


def split_queue_key(key: str) -> tuple[str, str]:
    """(namespace, name) of a store queue key; ("", key) for one that names no namespace
    (a queue filled directly through the store, not declared by a TaskQueue)."""
    namespace, slash, name = key.partition("/")
    return (namespace, name) if slash else ("", key)


@dataclasses.dataclass(frozen=True)
class Submission:
    """One execution to enqueue. Lower `priority` runs first; `tenant` defaults to none."""

    task: str
    payload: dict[str, Any] = dataclasses.field(default_factory=dict)
    run_after: datetime | None = None  # None: at once (the submit's `now`)
    priority: int = 0
    tenant: str = ""
    max_attempts: int | None = None  # None: the queue's retry.maxAttempts, else DEFAULT_MAX_ATTEMPTS
    idempotency_key: str | None = None
    #: None: a new id (a one-off submission is its own occurrence); a ScheduledJob's occurrence
    #: brings its own stable id, the one the declarative tier would give its Execution.
    execution_id: str | None = None

    def __post_init__(self) -> None:
        if not self.task:
            raise ValueError("task must not be empty")
        if self.max_attempts is not None and not 1 <= self.max_attempts <= 1000:
            raise ValueError(f"max_attempts must be within 1..1000, got {self.max_attempts}")
        if not -32768 <= self.priority <= 32767:
            raise ValueError(f"priority must fit a smallint, got {self.priority}")


@dataclasses.dataclass(frozen=True)
class OneOffJob:
    """A one-off job, as the API submits it: one `jobs` row and its one execution.

    Its payload comes as the JSON text that was checked and measured against the bound
    (`vigil.core.jsonvalues.checked_text`), and the store writes that text as it is: it is
    serialised once, and what is stored is what was measured."""

    queue: str  # the store key, "NS/NAME"
    task: str
    payload_text: str  # a JSON object as compact JSON, ASCII-escaped: sizes are counted on it
    run_at: datetime
    priority: int
    tenant: str
    max_attempts: int | None  # None: the queue's retry.maxAttempts, else DEFAULT_MAX_ATTEMPTS
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
class TaskState:
    """Where one execution is, as the workflow engine reads a task step's: its state, the attempt
    it is at, the last attempt's error, and a succeeded one's output (what its task returned;
    None when it returned None, or something the worker could not keep: vigil.worker.outputs)."""

    state: QueueState
    attempt: int
    error: str | None = None
    output: Any = None


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
    schedule: Recurrence | None = None  # a recurring job's; None for a one-off


@dataclasses.dataclass(frozen=True)
class Recurrence:
    """What a recurring job's record adds: its schedule and its next occurrence."""

    cron: str
    timezone: str
    payload_template: dict[str, Any]
    expected_max_interval: timedelta | None
    next_run: datetime | None  # None once deleted


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
    #: What the task returned, kept when the execution succeeded (null for none, and for every
    #: execution that has not succeeded); at most 32 KiB as compact JSON (vigil.worker.outputs).
    output: Any = None


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


# -- a queue's listings (kubectl vigil queue jobs|dead-letters|stats, through the HTTP API) --------

#: The longest page of a queue's jobs or dead letters (and of its stats' rows): one indexed query.
QUEUE_PAGE_MAX = 500
QUEUE_PAGE_DEFAULT = 50
#: A dead letter's error as listed: its last line, at most this many characters (the timeline
#: route answers the whole of it).
ERROR_SHOWN_CHARS = 200


@dataclasses.dataclass(frozen=True)
class ListCursor:
    """Where a page of a listing ended: the last row's sort time and id (the next page starts
    strictly after it, so rows added meanwhile are neither repeated nor skipped before it)."""

    at: datetime
    ident: str


@dataclasses.dataclass(frozen=True)
class QueueJob:
    """One job of a queue's listing, with the state of its newest execution (None: it has none)."""

    job_id: str
    task: str
    enabled: bool
    priority: int
    tenant: str
    created_at: datetime
    last_execution_id: str | None
    last_state: QueueState | None


@dataclasses.dataclass(frozen=True)
class DeadLetter:
    """A dead execution as the dead-letter listing shows it (`error`: its last line, cut)."""

    execution_id: str
    task: str
    tenant: str
    priority: int
    attempt: int
    max_attempts: int
    scheduled_for: datetime
    died_at: datetime
    error: str


@dataclasses.dataclass(frozen=True)
class JobsPage:
    jobs: tuple[QueueJob, ...]
    after: ListCursor | None  # None: the last page


@dataclasses.dataclass(frozen=True)
class DeadLettersPage:
    dead: tuple[DeadLetter, ...]
    after: ListCursor | None  # None: the last page


@dataclasses.dataclass(frozen=True)
class QueueBreakdown:
    """A queue's executions of one (priority, tenant): what a TaskQueue's status sums up."""

    priority: int
    tenant: str
    ready: int
    leased: int
    dead: int
    oldest_ready_age: timedelta | None  # of the oldest *due* ready one; None when none is due


def error_shown(text: str | None) -> str:
    """A dead letter's error as listed: the last non-empty line (a traceback's exception), cut."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= ERROR_SHOWN_CHARS else last[: ERROR_SHOWN_CHARS - 1] + "…"


# -- a queue's declaration (a TaskQueue, as the store holds it) ---------------------------------


@dataclasses.dataclass(frozen=True)
class QueueDeclaration:
    """What a TaskQueue declares, in plain values: published by the operator, read by workers.

    `priorities` maps a priority value (the executions' smallint; lower runs first) to the share
    of each worker's slots reserved for it; `tenant_caps` maps a tenant to its own cap on leased
    executions, overriding `tenant_max_concurrent` (None: no cap).
    """

    lease: timedelta = timedelta(seconds=30)
    heartbeat: timedelta = timedelta(seconds=10)
    max_attempts: int = 3
    backoff: Backoff = dataclasses.field(default_factory=Backoff)
    dead_retention: timedelta | None = None
    tenant_max_concurrent: int | None = None
    tenant_caps: Mapping[str, int] = dataclasses.field(default_factory=dict)
    priorities: Mapping[int, float] = dataclasses.field(default_factory=dict)
    objective: timedelta | None = None
    #: The TaskQueue's `quota`: what it lowers its namespace's quota to (`namespace_quotas`).
    quota: QuotaLimits = dataclasses.field(default_factory=QuotaLimits)
    #: How long succeeded and cancelled executions stay; None: the chart's `queue.finishedRetentionDays`.
    finished_retention: timedelta | None = None

    @property
    def capped(self) -> bool:
        """Whether any tenant has a cap (leasing then takes the queue's tenant lock)."""
        return self.tenant_max_concurrent is not None or bool(self.tenant_caps)


@dataclasses.dataclass(frozen=True)
class QueueStats:
    """What a TaskQueue's status shows, as the store counts it."""

    ready: int
    leased: int
    dead: int
    succeeded_last_minute: int
    dead_last_minute: int
    oldest_ready_age: timedelta | None  # of the oldest *due* ready execution; None when none is due
    #: The volume watchdog's latest verdicts on the queue's jobs; None until it has watched it.
    watch: QueueWatchSummary | None = None


@dataclasses.dataclass(frozen=True)
class QueueWatchSummary:
    """One queue's share of the volume watchdog's latest pass (`vigil.core.queuewatch.summarise`),
    kept in the store for its TaskQueue's `JobsOverdue` and `ChainBroken` conditions: how many
    jobs are in trouble, and the first few of them as (job id, reason)."""

    overdue: int
    overdue_jobs: tuple[tuple[str, str], ...] = ()
    broken: int | None = None  # None until an integrity audit has run
    broken_jobs: tuple[tuple[str, str], ...] = ()


# -- reserved capacity ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Allowance:
    """What one lease may take: per reserved priority, its free reserved slots; and the shared ones."""

    reserved_free: Mapping[int, int]
    shared_free: int

    @property
    def total(self) -> int:
        return self.shared_free + sum(self.reserved_free.values())


def reserved_slots(concurrency: int, priorities: Mapping[int, float]) -> dict[int, int]:
    """The slots of a worker of `concurrency` reserved for each priority: its share, rounded down.

    Rounding down keeps the reserved slots within the worker's (shares sum to at most 1), so a
    worker of concurrency 4 reserves nothing for a share of 0.2: give such queues larger workers.
    """
    slots = {value: int(share * concurrency + 1e-9) for value, share in priorities.items()}
    return {value: count for value, count in slots.items() if count > 0}


def allowance(*, concurrency: int, priorities: Mapping[int, float], held: Mapping[int, int]) -> Allowance:
    """How many executions of each priority a worker may lease now.

    Capacity is the worker's `concurrency` (its slots). A priority's reserved slots are taken only
    by executions of exactly that priority; the rest of the slots are shared by every priority,
    most urgent first. A priority's running executions fill its reserved slots first and then the
    shared ones, so a backfill of low-priority work can fill every shared slot but never a slot
    reserved for another priority. `held` counts the worker's running executions by priority.
    """
    reserved = reserved_slots(concurrency, priorities)
    shared = concurrency - sum(reserved.values())
    for value, count in held.items():
        shared -= max(0, count - reserved.get(value, 0))
    return Allowance(
        reserved_free={value: max(0, slots - held.get(value, 0)) for value, slots in reserved.items()},
        shared_free=max(0, shared),
    )
