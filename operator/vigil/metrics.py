"""Every Prometheus metric Vigil exports, defined in one place with typed helpers.

Names carry the `vigil_` prefix and the unit suffixes Prometheus expects
(`_total`, `_seconds`); each help text names its labels. The core never imports
this module: it returns reports (a trigger pass's `TickReport`), and the
composition root hands them to the recording helpers here. Nor does this module
import the kube adapters: what it reads of their reports (the watchdog's
verdicts, a dispatcher pass) is stated as a Protocol here, and the adapters'
types satisfy it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from vigil.core.queue import split_queue_key

if TYPE_CHECKING:  # the reports' types only: `vigil worker` loads this module, and none of them
    from vigil.core.executions import Execution
    from vigil.core.queue import QueueStats
    from vigil.core.queuewatch import QueueWatchReport
    from vigil.core.trigger import TickReport
    from vigil.core.watchdog import JobFacts, JobReport

REGISTRY = CollectorRegistry(auto_describe=True)

LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)

TRIGGER_FIRED = Counter(
    "vigil_trigger_fired_total", "Executions created by the trigger (no labels).", registry=REGISTRY
)
TRIGGER_LAG = Histogram(
    "vigil_trigger_lag_seconds",
    "Seconds from an occurrence's fire time to its execution's creation (no labels).",
    buckets=LAG_BUCKETS,
    registry=REGISTRY,
)
TRIGGER_TICK = Histogram(
    "vigil_trigger_tick_seconds", "Duration of one trigger pass in seconds (no labels).", registry=REGISTRY
)
TRIGGER_ERRORS = Counter(
    "vigil_trigger_errors_total", "Bucket entries whose handling failed and will be retried.", registry=REGISTRY
)
OCCURRENCES = Counter(
    "vigil_occurrences_total",
    "Occurrences by recorded outcome (label outcome: Fired, Missed, Superseded, Skipped, Suspended).",
    ["outcome"],
    registry=REGISTRY,
)
IS_LEADER = Gauge(
    "vigil_leader", "1 while this replica holds the trigger Lease, else 0 (no labels).", registry=REGISTRY
)
CLOCK_AHEAD = Gauge(
    "vigil_clock_ahead_seconds",
    "Seconds this replica's wall clock is past the latest the API server's time can be, at its last "
    "Lease write (0 when not past it); past 1 s the clock is not trusted, and firing follows the API "
    "server's time (no labels).",
    registry=REGISTRY,
)


def record_clock_ahead(seconds: float) -> None:
    CLOCK_AHEAD.set(seconds)


LEADER_TRANSITIONS = Counter(
    "vigil_leader_transitions_total", "Changes of the Lease holder seen by this replica.", registry=REGISTRY
)
API_THROTTLED = Counter(
    "vigil_api_throttled_total",
    "API requests the API server answered 429 Too Many Requests (API Priority and Fairness), each "
    "waited out and retried (label client: operator, or election for the Lease's own requests).",
    ["client"],
    registry=REGISTRY,
)
for _client in ("operator", "election"):
    API_THROTTLED.labels(client=_client)  # both series exist from the start, at 0
OLDEST_READY_AGE = Gauge(
    "vigil_oldest_ready_execution_age_seconds",
    "Age in seconds of the oldest execution waiting to start (label priority: high, normal, low).",
    ["priority"],
    registry=REGISTRY,
)


def record_tick(report: TickReport, *, duration_seconds: float) -> None:
    TRIGGER_TICK.observe(duration_seconds)
    TRIGGER_FIRED.inc(report.created)
    TRIGGER_ERRORS.inc(report.errors)
    for lag in report.lags:
        TRIGGER_LAG.observe(max(0.0, lag))
    for outcome, count in report.outcomes.items():
        OCCURRENCES.labels(outcome=outcome).inc(count)
    BUCKETS_PENDING.set(report.pending_buckets)

# --- executions and history -------------------------------------------------------------------

EXECUTIONS = Counter(
    "vigil_executions_total",
    "Execution attempts that ended, by outcome (label outcome: Succeeded, Failed, Cancelled, Dead).",
    ["outcome"],
    registry=REGISTRY,
)
DUPLICATE_ATTEMPTS = Counter(
    "vigil_duplicate_attempts_total",
    "Times two live pods were seen for one execution id (no labels): the case idempotency must absorb.",
    registry=REGISTRY,
)
HISTORY_BUFFER = Gauge(
    "vigil_history_buffer_depth",
    "Executions whose attempts wait to be written to the history database (no labels).",
    registry=REGISTRY,
)
LOG_TAILS_PENDING = Gauge(
    "vigil_log_tails_pending",
    "Ended pods whose log tail waits to be read or stored in the history database (no labels).",
    registry=REGISTRY,
)
LOG_TAILS_LOST = Counter(
    "vigil_log_tails_lost_total",
    "Ended pods whose wanted log tail was not stored: the backlog was full or the bound ran out (no labels).",
    registry=REGISTRY,
)
BUCKETS_PENDING = Gauge(
    "vigil_buckets_pending",
    "Schedule buckets at or before now that still hold unhandled occurrences (no labels).",
    registry=REGISTRY,
)


class JobSeries:
    """A gauge with a series per job (or namespace), published whole by each watchdog pass and
    turned into samples only when scraped.

    A prometheus_client labelled child is an object with its own lock, about 700 bytes; at
    10,000 jobs the per-job gauges held that many of each. Here a pass's values are one plain
    mapping, replaced at once, so a scrape sees one pass or the next, never a mix, and jobs that
    are gone disappear with the pass that no longer has them.
    """

    def __init__(self, name: str, documentation: str, labels: Sequence[str], *, registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self._labelnames = tuple(labels)  # the attribute prometheus_client's own collectors carry
        self._values: Mapping[tuple[str, ...], float] = {}
        registry.register(self)

    def replace(self, values: Mapping[tuple[str, ...], float]) -> None:
        """Publish exactly `values`: (label values in order) -> value."""
        for labels in values:
            if len(labels) != len(self._labelnames):
                raise ValueError(f"{self.name}: {labels} does not match the labels {self._labelnames}")
        self._values = values

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(self.name, self.documentation, labels=self._labelnames)]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self._labelnames)
        for labels, value in self._values.items():
            family.add_metric(list(labels), value)
        yield family


# --- the watchdog: what did not happen --------------------------------------------------------

SECONDS_SINCE_SUCCESS = JobSeries(
    "vigil_job_seconds_since_last_success",
    "Seconds since the job last succeeded, or since it was enabled if never (labels namespace, job).",
    ["namespace", "job"],
    registry=REGISTRY,
)
OVERDUE = JobSeries(
    "vigil_job_overdue",
    "1 while the job is past its expectedMaxInterval (labels namespace, job, reason: NotFired, NotStarted, "
    "Overran, Failing, StillRunning).",
    ["namespace", "job", "reason"],
    registry=REGISTRY,
)
LAUNCH_FAILING = JobSeries(
    "vigil_job_launch_failing",
    "1 while the job's occurrences cannot be launched (labels namespace, job, reason: LaunchRefused, the "
    "cluster refused one for good; LaunchRetrying, a failed launch is retried with backoff).",
    ["namespace", "job", "reason"],
    registry=REGISTRY,
)
CHAIN_BROKEN = JobSeries(
    "vigil_schedule_chain_broken",
    "1 while an enabled recurring job has no future occurrence scheduled (labels namespace, job).",
    ["namespace", "job"],
    registry=REGISTRY,
)
DEAD_LETTER_AGE = JobSeries(
    "vigil_dead_letter_age_seconds",
    "Seconds since the job's oldest dead letter was dead-lettered (labels namespace, job).",
    ["namespace", "job"],
    registry=REGISTRY,
)
DEAD_LETTERS = JobSeries(
    "vigil_dead_letters", "Dead-lettered executions (label namespace).", ["namespace"], registry=REGISTRY
)
OUTPUT_STALE = JobSeries(
    "vigil_job_output_stale",
    "1 while the job's declared output is older than its freshness maxAge (labels namespace, job).",
    ["namespace", "job"],
    registry=REGISTRY,
)
OUTPUT_AGE = JobSeries(
    "vigil_job_output_age_seconds",
    "Age in seconds of the job's declared output (labels namespace, job).",
    ["namespace", "job"],
    registry=REGISTRY,
)
SUSPENDED_SECONDS = JobSeries(
    "vigil_job_suspended_seconds",
    "Seconds a job has been suspended (labels namespace, job).",
    ["namespace", "job"],
    registry=REGISTRY,
)

def record_dead_letters(ages: Mapping[tuple[str, str], Sequence[float]]) -> None:
    """Publish dead letters from each (namespace, job)'s dead-letter ages: the oldest age per job
    and the count per namespace. Never a series per execution: the label sets stay bounded by the
    live jobs, and an execution id (which names work in a tenant's namespace) is never exported."""
    oldest: dict[tuple[str, ...], float] = {}
    counts: dict[tuple[str, ...], float] = {}
    for (namespace, job), found in ages.items():
        if found:
            oldest[(namespace, job)] = max(found)
            counts[(namespace,)] = counts.get((namespace,), 0.0) + len(found)
    DEAD_LETTER_AGE.replace(oldest)
    DEAD_LETTERS.replace(counts)


def record_execution(phase: str, *, attempt_outcome: str | None) -> None:
    """An execution moved: count the attempt that ended, and the dead letter if it died."""
    if attempt_outcome:
        EXECUTIONS.labels(outcome=attempt_outcome).inc()
    if phase == "Dead":
        EXECUTIONS.labels(outcome="Dead").inc()


def record_transition(before: Execution, after: Execution) -> None:
    """An execution went from `before` to `after`: count it by its new phase and the attempt that ended."""
    ended = after.attempts[len(before.attempts) :]
    record_execution(str(after.phase), attempt_outcome=str(ended[-1].outcome) if ended else None)


class DispatchFigures(Protocol):
    """What a dispatcher pass reports that is exported (`vigil.kube.controllers.dispatcher.DispatchReport`)."""

    @property
    def duplicates(self) -> int: ...
    @property
    def oldest_ready_age(self) -> Mapping[str, float]: ...


def record_dispatch(report: DispatchFigures) -> None:
    DUPLICATE_ATTEMPTS.inc(report.duplicates)
    for priority, age in report.oldest_ready_age.items():
        OLDEST_READY_AGE.labels(priority=priority).set(age)


class Verdict(Protocol):
    """One job's watchdog verdict, as `vigil.kube.controllers.watchdog.Assessed` carries it."""

    @property
    def facts(self) -> JobFacts: ...
    @property
    def report(self) -> JobReport: ...


class WatchdogGauges:
    """One watchdog pass's gauges, gathered a job at a time as the pass goes (so the pass holds
    no job's verdicts once it has moved on) and published together at its end: a scrape sees
    one pass or the next, and jobs gone lose their series."""

    def __init__(self) -> None:
        Series = dict[tuple[str, ...], float]
        self._since: Series = {}
        self._overdue: Series = {}
        self._launch_failing: Series = {}
        self._broken: Series = {}
        self._stale: Series = {}
        self._output_age: Series = {}
        self._suspended: Series = {}
        self._dead_letters: dict[tuple[str, str], list[float]] = {}

    def add(self, item: Verdict) -> None:
        key = (item.facts.namespace, item.facts.name)
        report = item.report
        self._since[key] = report.seconds_since_success
        if report.overdue.applicable and report.overdue.status:
            self._overdue[(*key, str(report.overdue.reason))] = 1.0
        if report.launch.status:
            self._launch_failing[(*key, str(report.launch.reason))] = 1.0
        if report.chain.applicable:
            self._broken[key] = 1.0 if report.chain.status else 0.0
        if report.freshness.applicable:
            self._stale[key] = 1.0 if report.freshness.status else 0.0
            if report.freshness.age_seconds is not None:
                self._output_age[key] = report.freshness.age_seconds
        if item.facts.suspended and report.suspension.age_seconds is not None:
            self._suspended[key] = report.suspension.age_seconds
        self._dead_letters[key] = [dead.age_seconds for dead in report.dead_letters]

    def publish(self) -> None:
        for gauge, values in (
            (SECONDS_SINCE_SUCCESS, self._since),
            (OVERDUE, self._overdue),
            (LAUNCH_FAILING, self._launch_failing),
            (CHAIN_BROKEN, self._broken),
            (OUTPUT_STALE, self._stale),
            (OUTPUT_AGE, self._output_age),
            (SUSPENDED_SECONDS, self._suspended),
        ):
            gauge.replace(values)
        record_dead_letters(self._dead_letters)

# --- workflows --------------------------------------------------------------------------------

WORKFLOW_EVENTS = Counter(
    "vigil_workflow_events_total",
    "Workflow history entries recorded (label event: StepStarted, StepFailed, Escalated, "
    "WorkflowSucceeded, ... — inputs and decisions alike).",
    ["event"],
    registry=REGISTRY,
)
WORKFLOW_STEPS_STUCK = Gauge(
    "vigil_workflow_steps_stuck",
    "Steps running past their expectedDuration (labels namespace, workflow).",
    ["namespace", "workflow"],
    registry=REGISTRY,
)


def record_workflow_pass(*, namespace: str, workflow: str, events: list[str], stuck: int) -> None:
    for event in events:
        WORKFLOW_EVENTS.labels(event=event).inc()
    if stuck:
        WORKFLOW_STEPS_STUCK.labels(namespace=namespace, workflow=workflow).set(stuck)
    else:
        with contextlib.suppress(KeyError):
            WORKFLOW_STEPS_STUCK.remove(namespace, workflow)


# --- approval notifications (vigil.kube.controllers.approvals, vigil.kube.kits.outbox) -------------------------

APPROVAL_OUTBOX_DEPTH = Gauge(
    "vigil_approval_outbox_workflows",
    "Workflows whose approval tokens wait to be sent to the notifier: ready, backing off after a "
    "failure, or being sent (no labels).",
    registry=REGISTRY,
)
APPROVAL_DELIVERY_FAILURES = Counter(
    "vigil_approval_delivery_failures_total",
    "Deliveries to the notifier that failed and will be retried with backoff: a token not "
    "accepted, or the workflow or key not readable (no labels).",
    registry=REGISTRY,
)
APPROVAL_OUTBOX_REFUSED = Counter(
    "vigil_approval_outbox_refused_total",
    "Workflows refused by the full approval outbox; each is offered again on its next pass (no labels).",
    registry=REGISTRY,
)


# --- the volume tier's workers (vigil.worker) -------------------------------------------------

# Labelled as the operator's per-queue gauges are: the TaskQueue's namespace and name.
QUEUE_ATTEMPTS = Counter(
    "vigil_queue_attempts_total",
    "Attempts a worker finished (labels namespace, queue: the TaskQueue's; outcome: succeeded, failed).",
    ["namespace", "queue", "outcome"],
    registry=REGISTRY,
)
QUEUE_LEASE_EXPIRIES = Counter(
    "vigil_queue_lease_expiries_total",
    "Leases past their deadline that a worker returned to the queue or the dead letters (labels namespace, queue).",
    ["namespace", "queue"],
    registry=REGISTRY,
)
QUEUE_DUPLICATES = Counter(
    "vigil_queue_duplicate_executions_total",
    "Attempts whose lease was taken while their worker still ran them: two copies of one execution "
    "may have run at once (labels namespace, queue).",
    ["namespace", "queue"],
    registry=REGISTRY,
)


QUEUE_TRIGGER_OCCURRENCES = Counter(
    "vigil_queue_trigger_occurrences_total",
    "Occurrences of recurring volume-tier jobs the trigger settled, by outcome (label outcome: Fired, "
    "Missed, Skipped, Failed).",
    ["outcome"],
    registry=REGISTRY,
)
for _outcome in ("Fired", "Missed", "Skipped", "Failed"):
    QUEUE_TRIGGER_OCCURRENCES.labels(outcome=_outcome)  # every series exists from the start, at 0
QUEUE_TRIGGER_LAG = Histogram(
    "vigil_queue_trigger_lag_seconds",
    "Seconds from a volume-tier occurrence's own (jittered) fire time to the pass that fired it (no labels).",
    buckets=LAG_BUCKETS,
    registry=REGISTRY,
)
QUEUE_TRIGGER_REFUSED = Counter(
    "vigil_queue_trigger_refused_total",
    "Volume-tier occurrences whose execution row PostgreSQL refused (a DataError: a value jsonb or text "
    "cannot hold), each settled Failed alone while the rest of its batch fired (no labels; also counted "
    "Failed in vigil_queue_trigger_occurrences_total).",
    registry=REGISTRY,
)
QUEUE_TRIGGER_ERRORS = Counter(
    "vigil_queue_trigger_pass_errors_total",
    "Volume-tier trigger passes that failed and were retried on a fresh connection (no labels): "
    "the queue store down or refusing.",
    registry=REGISTRY,
)


class TriggerPass(Protocol):
    """What the metrics read of a volume-tier trigger pass (`vigil.queue.trigger.PassReport`)."""

    @property
    def fired(self) -> Sequence[str]: ...
    @property
    def missed(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def refused(self) -> int: ...
    @property
    def lags(self) -> Sequence[float]: ...


def record_queue_trigger_pass(report: TriggerPass) -> None:
    counts = (("Fired", len(report.fired)), ("Missed", report.missed), ("Skipped", report.skipped), ("Failed", report.failed))
    for outcome, count in counts:
        if count:
            QUEUE_TRIGGER_OCCURRENCES.labels(outcome=outcome).inc(count)
    if report.refused:
        QUEUE_TRIGGER_REFUSED.inc(report.refused)
    for lag in report.lags:
        QUEUE_TRIGGER_LAG.observe(max(0.0, lag))


def record_queue_trigger_error() -> None:
    QUEUE_TRIGGER_ERRORS.inc()


def record_queue_attempt(queue: str, outcome: str) -> None:
    """`queue` is the store's key, NS/NAME. Once per attempt on a worker's loop: the labelled
    counter is looked up once per (queue, outcome), not at every attempt (the lookup cost ten
    times the increment)."""
    _queue_attempts(queue, outcome).inc()


@functools.cache
def _queue_attempts(queue: str, outcome: str) -> Any:
    namespace, name = split_queue_key(queue)
    return QUEUE_ATTEMPTS.labels(namespace=namespace, queue=name, outcome=outcome)


def record_queue_lease_expiries(queue: str, count: int) -> None:
    namespace, name = split_queue_key(queue)
    QUEUE_LEASE_EXPIRIES.labels(namespace=namespace, queue=name).inc(count)


def record_queue_duplicate(queue: str) -> None:
    namespace, name = split_queue_key(queue)
    QUEUE_DUPLICATES.labels(namespace=namespace, queue=name).inc()


# --- the volume tier's queues (the leader's TaskQueue pass) -------------------------------------

QUEUE_OLDEST_READY_AGE = JobSeries(
    "vigil_queue_oldest_ready_age_seconds",
    "Seconds the oldest due ready execution of a TaskQueue has waited, 0 when none waits (labels "
    "namespace, queue: the TaskQueue's name): the figure to autoscale its workers on.",
    ["namespace", "queue"],
    registry=REGISTRY,
)
QUEUE_READY = JobSeries(
    "vigil_queue_ready",
    "Executions of a TaskQueue in state ready, due or waiting for a retry's backoff (labels namespace, queue).",
    ["namespace", "queue"],
    registry=REGISTRY,
)
QUEUE_LEASED = JobSeries(
    "vigil_queue_leased",
    "Executions of a TaskQueue leased by a worker now (labels namespace, queue).",
    ["namespace", "queue"],
    registry=REGISTRY,
)


def record_queue_stats(stats: Mapping[tuple[str, str], QueueStats]) -> None:
    """Publish one TaskQueue pass's counts, (namespace, TaskQueue name) -> what the store counted:
    exactly these queues, so a deleted TaskQueue loses its series."""
    QUEUE_OLDEST_READY_AGE.replace(
        {key: (s.oldest_ready_age or timedelta(0)).total_seconds() for key, s in stats.items()}
    )
    QUEUE_READY.replace({key: float(s.ready) for key, s in stats.items()})
    QUEUE_LEASED.replace({key: float(s.leased) for key, s in stats.items()})


# --- the volume tier's watchdog (vigil.queue.watchdog) -----------------------------------------

QUEUE_JOB_OVERDUE = JobSeries(
    "vigil_queue_job_overdue",
    "1 while a catalogued recurring job is past its expected interval without a success (labels "
    "namespace, queue, job: its id, reason); at most the watchdog's cap of jobs a pass.",
    ["namespace", "queue", "job", "reason"],
    registry=REGISTRY,
)
QUEUE_JOBS_OVERDUE = JobSeries(
    "vigil_queue_jobs_overdue",
    "Catalogued recurring jobs of a queue past their expected interval, all of them (labels namespace, queue).",
    ["namespace", "queue"],
    registry=REGISTRY,
)
QUEUE_CHAIN_BROKEN = JobSeries(
    "vigil_queue_chain_broken",
    "1 while an enabled catalogued recurring job has no pending occurrence (labels namespace, queue, "
    "job); at most the watchdog's cap of jobs a pass.",
    ["namespace", "queue", "job"],
    registry=REGISTRY,
)
QUEUE_CHAINS_BROKEN = JobSeries(
    "vigil_queue_chains_broken",
    "Enabled catalogued recurring jobs of a queue with no pending occurrence, all of them (labels namespace, queue).",
    ["namespace", "queue"],
    registry=REGISTRY,
)
QUEUE_DEAD_LETTERS = JobSeries(
    "vigil_queue_dead_letters",
    "Dead executions of a queue still kept (labels namespace, queue).",
    ["namespace", "queue"],
    registry=REGISTRY,
)
QUEUE_DEAD_LETTER_AGE = JobSeries(
    "vigil_queue_dead_letter_oldest_age_seconds",
    "Seconds since a queue's oldest dead execution still kept died (labels namespace, queue).",
    ["namespace", "queue"],
    registry=REGISTRY,
)
QUEUE_OLDEST_READY_BY = JobSeries(
    "vigil_queue_oldest_ready_age_seconds_by",
    "Seconds the oldest due ready execution of a queue's priority and tenant has waited, 0 while its "
    "ready work waits out a retry's backoff (labels namespace, queue, priority, tenant); at most the "
    "watchdog's cap of groups, the oldest first.",
    ["namespace", "queue", "priority", "tenant"],
    registry=REGISTRY,
)


def record_queue_watchdog(report: QueueWatchReport) -> None:
    """Publish one volume-tier watchdog pass: exactly what it found, so a job that recovers or is
    deleted loses its series. A pass without the audit leaves the broken-chain series as they were."""
    QUEUE_JOB_OVERDUE.replace(
        {(*split_queue_key(v.queue), v.job_id, str(v.finding.reason)): 1.0 for v in report.overdue}
    )
    QUEUE_JOBS_OVERDUE.replace({split_queue_key(q): float(n) for q, n in report.overdue_counts.items()})
    if report.broken is not None and report.broken_counts is not None:
        QUEUE_CHAIN_BROKEN.replace({(*split_queue_key(v.queue), v.job_id): 1.0 for v in report.broken})
        QUEUE_CHAINS_BROKEN.replace({split_queue_key(q): float(n) for q, n in report.broken_counts.items()})
    QUEUE_DEAD_LETTERS.replace({split_queue_key(q): float(d.count) for q, d in report.dead_letters.items()})
    QUEUE_DEAD_LETTER_AGE.replace({split_queue_key(q): d.oldest_age_seconds for q, d in report.dead_letters.items()})
    QUEUE_OLDEST_READY_BY.replace(
        {(*split_queue_key(q), str(priority), tenant): age for (q, priority, tenant), age in report.oldest_ready.items()}
    )
