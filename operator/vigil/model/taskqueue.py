"""The TaskQueue resource: a volume-tier queue's declaration, and whether it keeps up.

Kubernetes keeps the declaration and PostgreSQL the volume: the executions of a queue live in
the queue store (vigil.queue), never on the API server. A TaskQueue named NAME in namespace NS
is the store's queue ``"NS/NAME"`` (:func:`queue_key`); the operator publishes its spec to the
store's ``queues`` table, where workers read it, and writes back into status what the store
holds (ready, leased, dead, the oldest ready age, rates) every few seconds.

Admission (the schema and CEL) checks every field it can: ranges, the duration grammar, the
heartbeat shorter than the lease, unique priority names and values, reserved shares summing to
at most 1. The pydantic validators repeat those and add what CEL cannot (backoff max not
below initial); the operator reports what fails only here as an ``Invalid`` condition and an
Event naming the field.
"""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, StringConstraints, model_validator

from vigil.core.executions import Backoff as CoreBackoff
from vigil.core.queue import QueueDeclaration, QuotaLimits
from vigil.core.tenancy import TenantBinding as CoreTenantBinding
from vigil.model.common import (
    AGE_COLUMN,
    DEFAULT_EMPTY_OBJECT,
    Backoff,
    CelRule,
    Condition,
    ObjectName,
    PositiveDuration,
    PrinterColumn,
    ResourceKind,
    SpecModel,
    StatusModel,
    cel_rules,
    cel_seconds,
    conditions_field,
)
from vigil.model.names import TASK_QUEUES

#: Most priorities a queue declares, and most per-tenant overrides.
PRIORITIES_MAX_ITEMS = 16
#: A task submitted to a TaskQueue (a `task:` job's, a workflow's task step): the store's
#: priority is a smallint, lower runs first.
TASK_PRIORITY_RANGE = (-32768, 32767)
TASK_NAME_MAX_LENGTH = 253  # as the HTTP API's task names
#: No control characters (NUL above all: PostgreSQL's text refuses it, and the API server takes it).
TASK_NAME_PATTERN = r"^[^\x00-\x1f\x7f]+$"
TENANT_OVERRIDES_MAX_ITEMS = 256
TENANT_BINDINGS_MAX_ITEMS = 64
#: Most ServiceAccounts and groups one tenant binding lists.
TENANT_SUBJECTS_MAX_ITEMS = 256
#: Longest tenant key (the caller's namespace by default, or a tenant bound to it).
TENANT_MAX_LENGTH = 253
#: Leased executions one tenant may hold at once, at most: beyond any worker fleet here.
TENANT_CAP_MAX = 1_000_000
#: The largest quota value a TaskQueue may write (it only lowers the chart's).
QUOTA_MAX = 2**53
#: The rounding slack of the shares' sum (0.1 + 0.2 + 0.7 is 1.0000000000000002 in floating point).
SHARE_SLACK = 1e-9

MESSAGE_HEARTBEAT_LEASE = "heartbeatInterval must be shorter than leaseDuration"
MESSAGE_SHARES = "the priorities' reservedShare values must sum to at most 1"
MESSAGE_PRIORITY_VALUES = "each priority must have a value of its own"

class TaskTarget(SpecModel):
    """A task of a TaskQueue something submits to (a `task:` job's occurrences, a workflow's task
    step): which queue, which task, at which priority."""

    queue: ObjectName = Field(description="The TaskQueue's name, in this object's own namespace.")
    name: Annotated[
        str, StringConstraints(min_length=1, max_length=TASK_NAME_MAX_LENGTH, pattern=TASK_NAME_PATTERN)
    ] = Field(description="The task to run: the name a worker registered with @task (no control characters).")
    priority: int = Field(
        default=0,
        ge=TASK_PRIORITY_RANGE[0],
        le=TASK_PRIORITY_RANGE[1],
        description="The execution's priority in the queue: lower runs first (0 by default).",
    )


PriorityName = Annotated[
    str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
]
TenantKey = Annotated[str, StringConstraints(min_length=1, max_length=TENANT_MAX_LENGTH)]
ServiceAccountRef = Annotated[
    str,
    StringConstraints(
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=63 + 1 + 253
    ),
]


class QueueRetry(SpecModel):
    """Retries of a failed execution: the defaults of the executions submitted to this queue."""

    max_attempts: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="Attempts in total, the first included, for executions submitted without "
        "their own; after the last one fails (or its lease expires) the execution is dead.",
    )
    backoff: Backoff = Field(
        default_factory=Backoff,
        json_schema_extra=DEFAULT_EMPTY_OBJECT,
        description="Wait between attempts (full jitter, keyed by the execution id).",
    )


class DeadLetter(SpecModel):
    """What becomes of executions whose every attempt failed."""

    retention: PositiveDuration = Field(
        default=PositiveDuration("7d"),
        description="How long dead executions stay in the store (for inspection and retry) "
        "after their last attempt; the operator deletes older ones.",
    )


class QueueQuota(SpecModel):
    """This queue's say in its namespace's quota of the queue store (docs/queue.md, "Quotas")."""

    max_ready_executions: int | None = Field(
        default=None,
        ge=0,
        le=QUOTA_MAX,
        description="Lowers the namespace's quota of executions kept ready or leased (not finished) "
        "at once; never above the chart's queue.quota. Several TaskQueues of a namespace: the "
        "smallest wins. A submission past it is refused (the API's 429), a recurring occurrence "
        "settles Failed with reason QuotaExceeded.",
    )
    max_payload_bytes: int | None = Field(
        default=None,
        ge=0,
        le=QUOTA_MAX,
        description="Lowers the namespace's quota of those executions' payload bytes (JSON text) "
        "the same way.",
    )


class QueuePriority(SpecModel):
    """A priority of the queue's executions, with the capacity reserved for it."""

    name: PriorityName = Field(description="The priority's name, e.g. high.")
    value: int = Field(
        ge=-32768,
        le=32767,
        description="The executions' priority number this names; lower runs first.",
    )
    reserved_share: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Share of each worker's slots (its concurrency, rounded down) that only "
        "executions of this priority may take: a backfill of other priorities never fills them.",
    )


_PRIORITY_RULES = cel_rules(
    CelRule(
        rule="self.all(p, self.exists_one(q, q.value == p.value))",
        message=MESSAGE_PRIORITY_VALUES,
    ),
    CelRule(
        rule=f"self.map(p, p.reservedShare).sum() <= {1 + SHARE_SLACK}",
        message=MESSAGE_SHARES,
    ),
)


class TenantOverride(SpecModel):
    """One tenant's own cap."""

    name: TenantKey = Field(
        description="The tenant key: a submitter's namespace, or a tenant bound in bindings."
    )
    max_concurrent: int = Field(
        ge=0,
        le=TENANT_CAP_MAX,
        description="Leased executions this tenant may hold at once (0 pauses the tenant).",
    )


class TenantBinding(SpecModel):
    """A tenant the queue declares, and the callers who have it (vigil.core.tenancy)."""

    name: TenantKey = Field(description="The tenant key, as overrides and the queue's stats name it.")
    service_accounts: list[ServiceAccountRef] = Field(
        default_factory=list,
        max_length=TENANT_SUBJECTS_MAX_ITEMS,
        description="ServiceAccounts, as NAMESPACE/NAME, whose submissions are this tenant's.",
    )
    groups: list[Annotated[str, StringConstraints(min_length=1, max_length=TENANT_MAX_LENGTH)]] = Field(
        default_factory=list,
        max_length=TENANT_SUBJECTS_MAX_ITEMS,
        description="Groups (as the API server authenticates them) whose members' submissions are this tenant's.",
    )

    def core(self) -> CoreTenantBinding:
        return CoreTenantBinding(
            name=self.name, service_accounts=tuple(self.service_accounts), groups=tuple(self.groups)
        )


class TenantCaps(SpecModel):
    """Per-tenant caps on leased executions; leasing also rotates fairly between tenants."""

    max_concurrent: int | None = Field(
        default=None,
        ge=1,
        le=TENANT_CAP_MAX,
        description="Leased executions one tenant may hold at once, across all workers; a "
        "tenant at its cap gets nothing more until one finishes. Unset: no cap.",
    )
    overrides: list[TenantOverride] = Field(
        default_factory=list,
        max_length=TENANT_OVERRIDES_MAX_ITEMS,
        description="Tenants with a cap of their own instead of maxConcurrent.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    bindings: list[TenantBinding] = Field(
        default_factory=list,
        max_length=TENANT_BINDINGS_MAX_ITEMS,
        description="Tenants bound to callers. A submission's tenant is the caller's: the tenants "
        "bound here to its ServiceAccount or groups (the first unless it names another of them), "
        "else its ServiceAccount's namespace (a caller that is no ServiceAccount: the queue's "
        "namespace). Naming any other tenant is refused (403).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class Objective(SpecModel):
    """What keeping up means for this queue."""

    oldest_ready_age: PositiveDuration = Field(
        description="The oldest ready execution may wait this long for a worker; older, the "
        "queue is Behind."
    )


_SPEC_RULES = cel_rules(
    CelRule(
        rule=f"{cel_seconds('self.heartbeatInterval')} < {cel_seconds('self.leaseDuration')}",
        message=MESSAGE_HEARTBEAT_LEASE,
        field_path=".heartbeatInterval",
    ),
)


class TaskQueueSpec(SpecModel, json_schema_extra=_SPEC_RULES):
    """A queue of the volume tier: leases, retries, priorities, tenant caps, its objective."""

    lease_duration: PositiveDuration = Field(
        default=PositiveDuration("30s"),
        description="How long a lease lasts without a heartbeat: the longest a crashed worker's "
        "execution waits before another worker takes it.",
    )
    heartbeat_interval: PositiveDuration = Field(
        default=PositiveDuration("10s"),
        description="How often workers extend their leases; shorter than leaseDuration (a third "
        "of it survives two missed heartbeats).",
    )
    retry: QueueRetry = Field(
        default_factory=QueueRetry,
        json_schema_extra=DEFAULT_EMPTY_OBJECT,
        description="Retry defaults of the queue's executions.",
    )
    dead_letter: DeadLetter = Field(
        default_factory=DeadLetter,
        json_schema_extra=DEFAULT_EMPTY_OBJECT,
        description="What happens to dead executions.",
    )
    finished_retention: PositiveDuration | None = Field(
        default=None,
        description="How long succeeded and cancelled executions stay in the store after they "
        "finished (their timelines; the history database keeps the record). Unset: the chart's "
        "queue.finishedRetentionDays (7 days).",
    )
    quota: QueueQuota = Field(
        default_factory=QueueQuota,
        description="Lowers the namespace's quota in the queue store (the chart's queue.quota).",
    )
    priorities: list[QueuePriority] = Field(
        default_factory=list,
        max_length=PRIORITIES_MAX_ITEMS,
        description="Named priorities, each with capacity reserved for it. Executions of an "
        "undeclared priority use the shared capacity only.",
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            **_PRIORITY_RULES,
        },
    )
    tenants: TenantCaps = Field(
        default_factory=TenantCaps,
        json_schema_extra=DEFAULT_EMPTY_OBJECT,
        description="Per-tenant caps.",
    )
    objective: Objective | None = Field(
        default=None, description="The age of the oldest ready execution the queue must stay within."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.heartbeat_interval >= self.lease_duration:
            raise ValueError(MESSAGE_HEARTBEAT_LEASE)
        values = [p.value for p in self.priorities]
        if len(set(values)) != len(values):
            raise ValueError(f"priorities: {MESSAGE_PRIORITY_VALUES}")
        if len({p.name for p in self.priorities}) != len(self.priorities):
            raise ValueError("priorities: each priority must have a name of its own")
        if sum(p.reserved_share for p in self.priorities) > 1 + SHARE_SLACK:
            raise ValueError(f"priorities: {MESSAGE_SHARES}")
        if len({t.name for t in self.tenants.overrides}) != len(self.tenants.overrides):
            raise ValueError("tenants.overrides: each tenant may be listed once")
        if len({t.name for t in self.tenants.bindings}) != len(self.tenants.bindings):
            raise ValueError("tenants.bindings: each tenant may be listed once")
        return self

    def declaration(self) -> QueueDeclaration:
        """The spec in the plain values the store and workers use."""
        backoff = self.retry.backoff
        return QueueDeclaration(
            lease=self.lease_duration,
            heartbeat=self.heartbeat_interval,
            max_attempts=self.retry.max_attempts,
            backoff=CoreBackoff(initial=backoff.initial, factor=backoff.factor, max=backoff.max),
            dead_retention=self.dead_letter.retention,
            tenant_max_concurrent=self.tenants.max_concurrent,
            tenant_caps={t.name: t.max_concurrent for t in self.tenants.overrides},
            priorities={p.value: p.reserved_share for p in self.priorities},
            objective=self.objective.oldest_ready_age if self.objective else None,
            quota=QuotaLimits(self.quota.max_ready_executions, self.quota.max_payload_bytes),
            finished_retention=self.finished_retention,
        )


class TaskQueueStatus(StatusModel):
    """What the store holds for the queue, refreshed every few seconds (never per execution).

    Conditions: `Ready` (Published, InvalidSpec, QueueStoreUnavailable), `Invalid`, `Behind`
    (with an objective: OldestReadyTooOld, WithinObjective), and from the volume watchdog's latest
    pass `JobsOverdue` (OverdueJobs, NoOverdueJobs) and `ChainBroken` (BrokenChains,
    ChainsIntact), whose messages count the jobs and name the first few with their reasons.
    """

    ready: int = Field(default=0, ge=0, description="Executions waiting for a worker (due or not).")
    leased: int = Field(default=0, ge=0, description="Executions a worker holds now.")
    dead: int = Field(default=0, ge=0, description="Dead executions still kept (deadLetter.retention).")
    oldest_ready_age: str | None = Field(
        default=None,
        description="How long the oldest due ready execution has waited (a duration); unset when "
        "none waits.",
    )
    oldest_ready_seconds: int | None = Field(
        default=None, ge=0, description="The same in seconds, for programs (an autoscaler)."
    )
    succeeded_per_minute: int = Field(
        default=0, ge=0, description="Executions that succeeded in the last minute."
    )
    dead_per_minute: int = Field(
        default=0, ge=0, description="Executions that became dead in the last minute."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation last published to the store."
    )
    conditions: list[Condition] = conditions_field()


TASK_QUEUE = ResourceKind(
    kind="TaskQueue",
    plural=TASK_QUEUES,
    short_names=("tq",),
    spec_model=TaskQueueSpec,
    status_model=TaskQueueStatus,
    description="A TaskQueue declares a queue of the volume tier: its executions live in "
    "PostgreSQL and are pulled by workers (`vigil worker`); status says whether it keeps up.",
    printer_columns=(
        PrinterColumn(name="Ready", json_path=".status.ready", type="integer", description="Waiting executions."),
        PrinterColumn(name="Leased", json_path=".status.leased", type="integer", description="Running executions."),
        PrinterColumn(name="Dead", json_path=".status.dead", type="integer", description="Dead executions kept."),
        PrinterColumn(
            name="Oldest", json_path=".status.oldestReadyAge", description="Age of the oldest due ready execution."
        ),
        PrinterColumn(
            name="Objective", json_path=".spec.objective.oldestReadyAge", description="Its objective."
        ),
        PrinterColumn(
            name="Behind",
            json_path='.status.conditions[?(@.type=="Behind")].status',
            description="Whether the oldest ready execution is older than the objective.",
        ),
        PrinterColumn(
            name="Jobs Overdue",
            json_path='.status.conditions[?(@.type=="JobsOverdue")].status',
            description="Whether recurring jobs of the queue are overdue (the watchdog's JobsOverdue).",
        ),
        PrinterColumn(
            name="Chain Broken",
            json_path='.status.conditions[?(@.type=="ChainBroken")].status',
            description="Whether recurring jobs of the queue have no next occurrence (the watchdog's ChainBroken).",
        ),
        AGE_COLUMN,
    ),
    operator_checks=("`retry.backoff.max` is not shorter than `retry.backoff.initial`.",),
)
