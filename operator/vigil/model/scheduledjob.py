"""The ScheduledJob resource: when to run something, what to run, and what "healthy" means.

A ScheduledJob fires once (``runAt``), on a cron schedule in an IANA time zone (``cron``), or at a
fixed interval (``every``). Each occurrence runs a pod (``template``) or a workflow
(``workflowTemplate``), or is submitted to a TaskQueue of the volume tier (``task``). The fields that are easy to forget are the ones that make failures
visible: ``expectedMaxInterval`` is what the watchdog asserts, and a suspended job must say why.

Admission (CEL) checks the combinations; the pydantic validators here check them again and
also what CEL cannot: the time zone exists, the cron expression parses and ever fires, the
payload templates parse.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Self
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    Field,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from vigil.core.buckets import Outcome
from vigil.core.chain import CatchUpPolicy as CoreCatchUpPolicy
from vigil.core.dispatch import Priority as CorePriority
from vigil.core.executions import ConcurrencyPolicy as CoreConcurrencyPolicy
from vigil.core.jitter import shortest_cron_interval
from vigil.core.logtail import DEFAULT_LOG_POLICY
from vigil.core.logtail import LogPolicy as CoreLogPolicy
from vigil.core.schedule import GapPolicy as CoreGapPolicy
from vigil.core.schedule import OverlapPolicy as CoreOverlapPolicy
from vigil.core.timeparse import CRON_FIELD_COUNT, CRON_MACROS, parse_cron
from vigil.model.common import (
    AGE_COLUMN,
    DEFAULT_EMPTY_OBJECT,
    IDEMPOTENCY_KEY_MAX_LENGTH,
    CelRule,
    Condition,
    Duration,
    ObjectName,
    PodTemplate,
    PositiveDuration,
    PrinterColumn,
    ResourceKind,
    RetryPolicy,
    SpecModel,
    StatusModel,
    Timestamp,
    cel_rules,
    cel_seconds,
    check_template_syntax,
    check_template_tree,
    conditions_field,
    count_set,
    names_of_set_fields,
)
from vigil.model.durations import format_duration, parse_duration
from vigil.model.names import SCHEDULED_JOBS
from vigil.model.taskqueue import TaskTarget, TenantKey
from vigil.model.workflow import WorkflowTemplate

# --------------------------------------------------------------------------------------------
# Cron and time zones

CRON_MAX_LENGTH = 128
_CRON_FIELD = r"[0-9A-Za-z*?,/-]+"
_CRON_MACRO_NAMES = "|".join(macro.removeprefix("@") for macro in CRON_MACROS)
#: The CRD pattern: one of the core's macros (lowercase), or five space-separated fields.
CRON_PATTERN = (
    rf"^(@({_CRON_MACRO_NAMES})|{_CRON_FIELD}( +{_CRON_FIELD}){{{CRON_FIELD_COUNT - 1}}})$"
)
_CRON_RE = re.compile(CRON_PATTERN)

TIMEZONE_PATTERN = r"^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$"
TIMEZONE_MAX_LENGTH = 64
#: Zone keys that exist on some hosts but name the host's own settings, never a real zone.
HOST_DEPENDENT_ZONES = frozenset({"localtime", "posixrules", "Factory"})
_TIMEZONE_RE = re.compile(TIMEZONE_PATTERN)


def check_cron(expression: str) -> str:
    """Raise ValueError unless the scheduler can run ``expression``.

    The grammar is the core's (``vigil.core.timeparse``): this check and the scheduler cannot
    disagree. It is stricter than the CRD's :data:`CRON_PATTERN` (it knows value ranges, and
    that ``0 0 31 2 *`` never fires) and also requires that pattern, so nothing passes here
    that admission would refuse.
    """
    if len(expression) > CRON_MAX_LENGTH:
        raise ValueError(f"cron expression is longer than {CRON_MAX_LENGTH} characters")
    if expression.startswith("@") and expression not in CRON_MACROS:
        raise ValueError(
            f"unknown cron macro {expression!r}: expected one of {', '.join(CRON_MACROS)}"
        )
    parse_cron(expression)
    if not _CRON_RE.fullmatch(expression):
        raise ValueError(
            f"invalid cron expression {expression!r}: fields must be separated by spaces, "
            "with no space before or after"
        )
    return expression


def check_timezone(name: str) -> str:
    """Raise ValueError unless ``name`` is an IANA time zone known to zoneinfo/tzdata."""
    problem = f"unknown time zone {name!r}: expected an IANA name such as 'Europe/London' or 'UTC'"
    if name in HOST_DEPENDENT_ZONES or not _TIMEZONE_RE.fullmatch(name):
        raise ValueError(problem)
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(problem) from None
    return name


# The checks run as validators rather than pydantic pattern constraints so that the operator's
# messages say what is wrong ("minute value 61 is outside 0-59") instead of quoting a regular expression; the CRD
# still gets the pattern.
CronExpression = Annotated[
    str,
    AfterValidator(check_cron),
    WithJsonSchema({"type": "string", "pattern": CRON_PATTERN, "maxLength": CRON_MAX_LENGTH}),
]
TimezoneName = Annotated[
    str,
    AfterValidator(check_timezone),
    WithJsonSchema(
        {"type": "string", "pattern": TIMEZONE_PATTERN, "maxLength": TIMEZONE_MAX_LENGTH}
    ),
]

# --------------------------------------------------------------------------------------------
# Policies


# The policies are the core's own enums, so a parsed spec hands the core exactly its types.
GapPolicy = CoreGapPolicy
OverlapPolicy = CoreOverlapPolicy
CatchUpPolicy = CoreCatchUpPolicy
ConcurrencyPolicy = CoreConcurrencyPolicy
LogPolicy = CoreLogPolicy
Priority = CorePriority


#: What became of one occurrence: the core's own enum, so status and trigger never disagree.
OccurrenceOutcome = Outcome


class DaylightSaving(SpecModel):
    """How cron times that daylight saving makes ambiguous are handled, in `timezone`."""

    gap: GapPolicy = Field(
        default=GapPolicy.SHIFT,
        description="A time skipped by a spring-forward change: Shift runs it at the first "
        "valid instant after the gap; Skip does not run it (recorded as Skipped).",
    )
    overlap: OverlapPolicy = Field(
        default=OverlapPolicy.ONCE,
        description="A time repeated by a fall-back change: Once runs it at its first "
        "instance; Twice runs both.",
    )


class ConfigMapKeyRef(SpecModel):
    """A key of a ConfigMap in the job's namespace."""

    name: ObjectName = Field(description="The ConfigMap's name.")
    key: Annotated[str, StringConstraints(min_length=1, max_length=253)] = Field(
        description="The key holding an RFC 3339 time."
    )


class Freshness(SpecModel):
    """An output-freshness check, independent of what the scheduler believes ran: the job's
    output records when it was last produced, and the watchdog alarms when that is too old."""

    config_map: ConfigMapKeyRef = Field(
        description="Where the job records when it last produced its output."
    )
    max_age: PositiveDuration = Field(description="How old the output may get before alarming.")


# --------------------------------------------------------------------------------------------
# Spec

MESSAGE_ONE_SCHEDULE = "exactly one of runAt, cron or every must be set"
MESSAGE_ONE_PAYLOAD = "at most one of payload or payloadTemplate may be set"
MESSAGE_ONE_TEMPLATE = "exactly one of template, workflowTemplate or task must be set"
MESSAGE_SUSPEND_REASON = "suspendReason is required when suspend is true"
MESSAGE_JITTER_INTERVAL = "jitter must not be longer than the interval between occurrences (every)"
MESSAGE_EXPECTED_INTERVAL = (
    "expectedMaxInterval must be at least the interval between occurrences (every): a shorter one "
    "is always overdue"
)

_SCHEDULE_FIELDS = ("run_at", "cron", "every")
_TEMPLATE_FIELDS = ("template", "workflow_template", "task")

_SPEC_RULES = cel_rules(
    CelRule(rule=f"{count_set('runAt', 'cron', 'every')} == 1", message=MESSAGE_ONE_SCHEDULE),
    CelRule(
        rule="!(has(self.payload) && has(self.payloadTemplate))",
        message=MESSAGE_ONE_PAYLOAD,
        field_path=".payloadTemplate",
        reason="FieldValueForbidden",
    ),
    CelRule(rule=f"{count_set('template', 'workflowTemplate', 'task')} == 1", message=MESSAGE_ONE_TEMPLATE),
    CelRule(
        rule="!has(self.suspend) || !self.suspend || "
        "(has(self.suspendReason) && self.suspendReason != '')",
        message=MESSAGE_SUSPEND_REASON,
        field_path=".suspendReason",
        reason="FieldValueRequired",
    ),
    # Fields that relate to the interval; a cron's interval is checked by the operator (Invalid).
    CelRule(
        rule=f"!has(self.every) || !has(self.jitter) || {cel_seconds('self.jitter')} <= {cel_seconds('self.every')}",
        message=MESSAGE_JITTER_INTERVAL,
        field_path=".jitter",
    ),
    CelRule(
        rule="!has(self.every) || !has(self.expectedMaxInterval) || "
        f"{cel_seconds('self.expectedMaxInterval')} >= {cel_seconds('self.every')}",
        message=MESSAGE_EXPECTED_INTERVAL,
        field_path=".expectedMaxInterval",
    ),
)


class TaskRef(TaskTarget):
    """A task of the volume tier each occurrence is submitted to, instead of a pod: one
    execution in the queue store per occurrence, run by a `vigil worker`."""

    max_attempts: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Attempts before a dead letter; unset, the TaskQueue's retry.maxAttempts.",
    )
    tenant: TenantKey | None = Field(
        default=None,
        description="Deprecated: a task's tenant is always the job's namespace (a tenant is who "
        "submits, never what it writes). The chart's task-submit admission policy refuses any other "
        "value; the operator ignores it.",
    )


class Retention(SpecModel):
    """How many finished Executions (and their pods) stay on the API server; the history
    database keeps every attempt."""

    succeeded: int = Field(
        default=3, ge=0, le=1000, description="Newest Succeeded Executions kept (like CronJob's 3)."
    )
    failed: int = Field(
        default=1, ge=0, le=1000, description="Newest Dead or Cancelled Executions kept (like CronJob's 1)."
    )


class ScheduledJobSpec(SpecModel, json_schema_extra=_SPEC_RULES):
    """What to run, when, and what counts as healthy."""

    run_at: Timestamp | None = Field(
        default=None,
        description="Run once at this time (RFC 3339 with an offset, e.g. "
        "2026-08-01T02:00:00Z). One of runAt, cron, every.",
    )
    cron: CronExpression | None = Field(
        default=None,
        description="Run on this cron schedule, evaluated in `timezone`: five fields (minute "
        "hour day-of-month month day-of-week) or a macro (@hourly, @daily, @midnight, "
        "@weekly, @monthly, @yearly, @annually). One of runAt, cron, every.",
    )
    every: PositiveDuration | None = Field(
        default=None,
        description="Run at this fixed interval, e.g. 15m (at least 1s). One of runAt, cron, "
        "every.",
    )
    timezone: TimezoneName = Field(
        default="UTC",
        description="The IANA time zone cron is evaluated in, e.g. Europe/London. Never the "
        "operator host's zone. An unknown name makes the job Invalid.",
    )
    jitter: Duration | None = Field(
        default=None,
        description="Spread fire times deterministically over this window after the nominal "
        "time, so that jobs sharing a schedule do not fire in one burst. Unset: 60s for cron "
        "jobs (at most a tenth of the interval), none otherwise. 0s turns it off.",
    )
    daylight_saving: DaylightSaving = Field(
        default_factory=DaylightSaving,
        json_schema_extra=DEFAULT_EMPTY_OBJECT,
        description="How cron times skipped or repeated by daylight-saving changes are handled.",
    )
    catch_up_policy: CatchUpPolicy = Field(
        default=CatchUpPolicy.ALL,
        description="Occurrences missed (for example while no operator ran): All runs each of "
        "them (up to catchUpLimit); Latest runs only the most recent; None runs none. Every "
        "occurrence not run is recorded as Missed, never dropped silently.",
    )
    catch_up_window: PositiveDuration = Field(
        default=PositiveDuration("5m"),
        description="An occurrence found later than this after its fire time counts as "
        "missed and is handled by catchUpPolicy; a less late one simply runs late.",
    )
    catch_up_limit: int = Field(
        default=100,
        ge=1,
        le=10_000,
        description="Most missed occurrences run by one catch-up; older ones beyond it are "
        "recorded as Missed.",
    )
    concurrency_policy: ConcurrencyPolicy = Field(
        default=ConcurrencyPolicy.ALLOW,
        description="When an occurrence fires while an earlier execution (or, for a "
        "workflowTemplate, an earlier workflow) still runs: Allow runs both; Forbid skips the "
        "new one (recorded as Skipped); Replace stops the running one (a workflow gets a cancel "
        "request) and starts the new one.",
    )
    payload: dict[str, Any] | None = Field(
        default=None,
        description="A JSON object given to every execution as is. At most one of payload, "
        "payloadTemplate.",
    )
    payload_template: dict[str, Any] | None = Field(
        default=None,
        description="A JSON object whose strings are Jinja templates, rendered in a sandbox for "
        "each occurrence with its explicit period: periodStart, periodEnd, scheduledFor. At "
        "most one of payload, payloadTemplate.",
    )
    idempotency_key: (
        Annotated[str, StringConstraints(min_length=1, max_length=IDEMPOTENCY_KEY_MAX_LENGTH)]
        | None
    ) = Field(
        default=None,
        description="A template (same variables as payloadTemplate) for a key the job can "
        "deduplicate on; unset, the execution id serves.",
    )
    priority: Priority = Field(
        default=Priority.NORMAL,
        description="high, normal or low: high has reserved capacity, and is allowed only in the "
        "namespaces the chart lists (admission.highPriority.namespaces).",
    )
    retry: RetryPolicy = Field(
        default_factory=RetryPolicy,
        json_schema_extra=DEFAULT_EMPTY_OBJECT,
        description="Retries of a failed execution; every attempt keeps the execution id.",
    )
    retention: Retention = Field(
        default_factory=Retention,
        json_schema_extra=DEFAULT_EMPTY_OBJECT,
        description="Finished Executions kept, and their pods; older ones are deleted once their "
        "history is in the database, which keeps every attempt (the operator's HTTP API serves it).",
    )
    logs: LogPolicy = Field(
        default=DEFAULT_LOG_POLICY,
        description="Whose log tails the history database keeps once an attempt's pod ends (the "
        "last 64 KiB of the main container's log by default; retention waits for it, within a "
        "bound): all (every attempt), failed (failed attempts only) or none. `kubectl vigil logs` "
        "shows the stored tail once the pod is gone.",
    )
    timeout: PositiveDuration | None = Field(
        default=None,
        description="How long one attempt may run before it is stopped and counted as failed.",
    )
    expected_max_interval: PositiveDuration | None = Field(
        default=None,
        description="The longest acceptable time between two successful runs; the watchdog "
        "marks the job Overdue when it is exceeded. Set it on every recurring job: a job "
        "that stops running produces no error.",
    )
    expected_duration: PositiveDuration | None = Field(
        default=None,
        description="How long an execution normally takes; the watchdog reports ones running "
        "much longer.",
    )
    suspend: bool = Field(
        default=False,
        description="Stop firing new occurrences (running ones continue). Requires suspendReason.",
    )
    suspend_reason: Annotated[str, StringConstraints(max_length=1024)] | None = Field(
        default=None, description="Why the job is suspended: required when suspend is true."
    )
    suspended_by: Annotated[str, StringConstraints(max_length=253)] | None = Field(
        default=None, description="Who suspended the job and owns resuming it."
    )
    template: PodTemplate | None = Field(
        default=None,
        description="The pod to run for each execution. One of template, workflowTemplate, task.",
    )
    workflow_template: WorkflowTemplate | None = Field(
        default=None,
        description="A workflow to start for each occurrence: each occurrence creates one "
        "Workflow named from its execution id, with these steps (or this definitionRef), "
        "onFailure and parameters. One of template, workflowTemplate, task.",
    )
    task: TaskRef | None = Field(
        default=None,
        description="Submit each occurrence to a TaskQueue of the volume tier instead of running a "
        "pod: one execution per occurrence (its payload rendered as for a pod, due at the "
        "occurrence's fire time, keyed by its execution id), run by a vigil worker. Needs the "
        "operator's queue.dsn. concurrencyPolicy, retention and retry do not apply (the queue's "
        "retry does). One of template, workflowTemplate, task.",
    )
    freshness: Freshness | None = Field(
        default=None,
        description="Also watch the age of the job's output, independently of the scheduler.",
    )

    @field_validator("payload_template")
    @classmethod
    def _valid_payload_template(cls, template: dict[str, Any] | None) -> dict[str, Any] | None:
        check_template_tree(template)
        return template

    @field_validator("idempotency_key")
    @classmethod
    def _valid_idempotency_key(cls, key: str | None) -> str | None:
        return None if key is None else check_template_syntax(key)

    @model_validator(mode="after")
    def _combinations(self) -> Self:
        schedules = names_of_set_fields(self, _SCHEDULE_FIELDS)
        if len(schedules) != 1:
            found = ", ".join(schedules) or "none"
            raise ValueError(f"{MESSAGE_ONE_SCHEDULE} (found: {found})")
        if self.payload is not None and self.payload_template is not None:
            raise ValueError(MESSAGE_ONE_PAYLOAD)
        if len(names_of_set_fields(self, _TEMPLATE_FIELDS)) != 1:
            raise ValueError(MESSAGE_ONE_TEMPLATE)
        if self.suspend and not self.suspend_reason:
            raise ValueError(MESSAGE_SUSPEND_REASON)
        self._check_against_interval()
        return self

    def _check_against_interval(self) -> None:
        """jitter and expectedMaxInterval against the shortest time between two occurrences."""
        if self.every is not None:
            interval, source = parse_duration(str(self.every)), f"every is {self.every}"
        elif self.cron is not None:
            interval = shortest_cron_interval((self.cron,))
            source = f"cron {self.cron!r} fires {format_duration(interval)} apart at the closest"
        else:
            return
        if self.jitter is not None and parse_duration(str(self.jitter)) > interval:
            raise ValueError(f"jitter ({self.jitter}) must not be longer than the interval ({source})")
        if self.expected_max_interval is not None and parse_duration(str(self.expected_max_interval)) < interval:
            raise ValueError(
                f"expectedMaxInterval ({self.expected_max_interval}) must be at least the interval "
                f"({source}): a shorter one is always overdue"
            )

    @property
    def recurring(self) -> bool:
        """Whether the job fires more than once (cron or every)."""
        return self.run_at is None


# --------------------------------------------------------------------------------------------
# Status

#: Most entries kept in status.active / status.recent / status.occurrences.
ACTIVE_MAX_ITEMS = 100
RECENT_MAX_ITEMS = 50
OCCURRENCES_MAX_ITEMS = 200

ExecutionId = Annotated[str, StringConstraints(min_length=1, max_length=253)]
ShortText = Annotated[str, StringConstraints(max_length=1024)]


class ActiveExecution(StatusModel):
    """An execution that is running or waiting to retry."""

    execution_id: ExecutionId = Field(description="The execution's stable id.")
    attempt: int | None = Field(default=None, ge=1, description="The current attempt.")
    pod: ObjectName | None = Field(default=None, description="The current attempt's pod.")
    scheduled_for: Timestamp | None = Field(
        default=None, description="The occurrence's nominal time."
    )
    started_at: Timestamp | None = Field(default=None, description="When the attempt started.")


class RecentExecution(StatusModel):
    """An execution that finished."""

    execution_id: ExecutionId = Field(description="The execution's stable id.")
    attempt: int | None = Field(default=None, ge=1, description="The last attempt.")
    outcome: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        default=None, description="How it ended, e.g. Succeeded, Failed, DeadLettered."
    )
    scheduled_for: Timestamp | None = Field(
        default=None, description="The occurrence's nominal time."
    )
    finished_at: Timestamp | None = Field(default=None, description="When it finished.")
    reason: ShortText | None = Field(default=None, description="Why, when it did not succeed.")


class OccurrenceRecord(StatusModel):
    """One entry of the trigger ledger: what became of one occurrence."""

    nominal: Timestamp = Field(description="The occurrence's time on the schedule.")
    fire_at: Timestamp | None = Field(default=None, description="Its jittered fire time.")
    execution_id: ExecutionId | None = Field(
        default=None, description="The execution it started, if any."
    )
    outcome: OccurrenceOutcome | None = Field(
        default=None,
        description="Fired, Missed, Superseded, Skipped, Suspended or Failed; Manual for a run asked "
        "for by hand (kubectl vigil run), entered when its first attempt ends.",
    )
    at: Timestamp | None = Field(default=None, description="When the outcome was decided.")
    reason: ShortText | None = Field(default=None, description="Why, for Missed and Skipped.")


class ChainState(StatusModel):
    """The operator's bookkeeping of the job's self-propagating schedule chain."""

    last_nominal: Timestamp | None = Field(
        default=None, description="The latest nominal time already handled (fired or recorded)."
    )
    schedule_hash: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        default=None, description="Fingerprint of the schedule fields the chain was built from."
    )
    paused_at: Timestamp | None = Field(
        default=None, description="When suspension stopped the chain, if it is suspended."
    )


class ScheduledJobStatus(StatusModel):
    """What the operator observed: when the job runs next, what ran, and its conditions."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="The metadata.generation last acted on."
    )
    schedule: Annotated[str, StringConstraints(max_length=256)] | None = Field(
        default=None, description="The schedule in words, e.g. '0 2 * * * Europe/London'."
    )
    next_run: Timestamp | None = Field(default=None, description="When it fires next.")
    last_schedule_time: Timestamp | None = Field(default=None, description="When it last fired.")
    last_successful_time: Timestamp | None = Field(
        default=None, description="When an execution last succeeded."
    )
    active: list[ActiveExecution] = Field(
        default_factory=list,
        max_length=ACTIVE_MAX_ITEMS,
        description="Executions running or waiting to retry.",
    )
    recent: list[RecentExecution] = Field(
        default_factory=list,
        max_length=RECENT_MAX_ITEMS,
        description="The most recent finished executions, newest last.",
    )
    occurrences: list[OccurrenceRecord] = Field(
        default_factory=list,
        max_length=OCCURRENCES_MAX_ITEMS,
        description="The trigger ledger: recent occurrences and what became of each.",
    )
    chain: ChainState | None = Field(
        default=None, description="Operator bookkeeping of the schedule chain (not for users)."
    )
    conditions: list[Condition] = conditions_field()


SCHEDULED_JOB = ResourceKind(
    kind="ScheduledJob",
    plural=SCHEDULED_JOBS,
    short_names=("sj",),
    spec_model=ScheduledJobSpec,
    status_model=ScheduledJobStatus,
    description="A ScheduledJob runs a pod or a workflow once, on a cron schedule in a time "
    "zone, or at an interval — and is marked Overdue when it stops succeeding.",
    printer_columns=(
        PrinterColumn(name="Schedule", json_path=".status.schedule", description="When."),
        PrinterColumn(name="Timezone", json_path=".spec.timezone", description="Time zone."),
        PrinterColumn(
            name="Next Run", json_path=".status.nextRun", description="Next fire time (UTC)."
        ),
        PrinterColumn(
            name="Last Scheduled",
            json_path=".status.lastScheduleTime",
            type="date",
            description="Last fire.",
        ),
        PrinterColumn(
            name="Last Success",
            json_path=".status.lastSuccessfulTime",
            type="date",
            description="Last successful execution.",
        ),
        PrinterColumn(
            name="Health",
            json_path='.status.conditions[?(@.type=="Overdue")].reason',
            description="The watchdog's verdict: OnSchedule, or why the job is overdue.",
        ),
        PrinterColumn(
            name="Ready",
            json_path='.status.conditions[?(@.type=="Ready")].status',
            description="The Ready condition.",
        ),
        AGE_COLUMN,
    ),
    operator_checks=(
        "`timezone` is a zone of the IANA database (and not a host alias such as localtime).",
        "`cron` values are in range (minute 0-59, ...) and the expression fires at least once "
        "(`0 0 31 2 *` never does).",
        "`payloadTemplate` strings and `idempotencyKey` are valid Jinja templates.",
        "`retry.backoff.max` is not shorter than `retry.backoff.initial`.",
        "`workflowTemplate` passes the Workflow checks.",
    ),
)
