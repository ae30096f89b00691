"""The watchdog's rules for the volume tier: the same rules, fed from the queue store.

A recurring job of the catalogue (`vigil.queue.catalogue`) is judged by the
declarative tier's own rules (`vigil.core.watchdog`): its facts go into a
`JobFacts` (its queue's namespace, its job id as the name, its creation as the
enable, since the catalogue has no suspension) and `assess_overdue` /
`assess_chain` give the verdicts and their reasons. What is new here is only the
volume tier's shape: facts arrive for the jobs in trouble only (the store's
statements select them), a pass reports a bounded number of them plus each
queue's count, and `Episodes` says which verdicts are new since the last pass,
so a job in trouble is logged once per episode, not once per pass. `chain_restart` says
where a broken chain starts again when the audit repairs it (`vigil.queue.repair`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from vigil.core.chain import JobView, chain_head
from vigil.core.conditions import ConditionReason, ConditionType
from vigil.core.queue import QueueWatchSummary, split_queue_key
from vigil.core.timeparse import require_aware
from vigil.core.watchdog import (
    DEFAULT_CHAIN_GRACE,
    ChainFinding,
    JobFacts,
    Overdue,
    age_seconds,
    assess_chain,
    assess_overdue,
)

#: At most this many jobs a pass get a series (and a log line) of their own per verdict; each
#: queue's count of them is published whatever their number.
DEFAULT_SERIES_CAP = 1000

#: The newest executions of an overdue job whose facts explain why (fired, failing, waiting, ...).
RECENT_EXECUTIONS = 100


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class QueueJobFacts:
    """What the store knows of one catalogued recurring job the watchdog looks at."""

    job_id: str
    queue: str  # the store's key, "NS/NAME"
    created_at: datetime
    expected_max_interval: timedelta | None = None
    last_success: datetime | None = None
    last_fired: datetime | None = None
    last_failure: datetime | None = None
    ready_since: datetime | None = None  # the oldest ready execution's due time
    #: The oldest lease's start (`executions.leased_at`): a running execution runs since a worker
    #: took it, not since it became due, so a long wait for a worker reads NotStarted while it
    #: waits and never Overran once a worker has it; only a long-held lease is Overran.
    running_since: datetime | None = None

    def job_facts(self) -> JobFacts:
        """The declarative rules' input. No next occurrence: the store asks for the facts of a
        job's chain only when it holds none (`assess_chain` never sees an intact one)."""
        namespace, _ = split_queue_key(self.queue)
        return JobFacts(
            namespace=namespace,
            name=self.job_id,
            recurring=True,
            enabled_since=self.created_at,
            expected_max_interval=self.expected_max_interval,
            last_success=self.last_success,
            last_fired=self.last_fired,
            last_failure=self.last_failure,
            running_since=self.running_since,
            ready_since=self.ready_since,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class JobVerdict:
    job_id: str
    queue: str
    finding: Overdue | ChainFinding


def overdue_verdicts(facts: Iterable[QueueJobFacts], now: datetime) -> list[JobVerdict]:
    """The overdue ones among `facts` (the store's candidates), each with its reason."""
    verdicts = []
    for job in facts:
        finding = assess_overdue(job.job_facts(), now)
        if finding.applicable and finding.status:
            verdicts.append(JobVerdict(job.job_id, job.queue, finding))
    return verdicts


def broken_chain_verdicts(
    facts: Iterable[QueueJobFacts], now: datetime, *, grace: timedelta = DEFAULT_CHAIN_GRACE
) -> list[JobVerdict]:
    """The broken ones among jobs the audit found without an unfired occurrence."""
    verdicts = []
    for job in facts:
        finding = assess_chain(job.job_facts(), now, grace=grace)
        if finding.applicable and finding.status:
            verdicts.append(JobVerdict(job.job_id, job.queue, finding))
    return verdicts


@dataclasses.dataclass(frozen=True, slots=True)
class ChainRestart:
    """Where a broken chain starts again: its head's nominal time and (jittered) fire time."""

    job_id: str
    nominal: datetime
    fire_at: datetime


def chain_restart(
    job: JobView, *, next_run: datetime | None, last_handled: datetime | None, enabled_since: datetime
) -> ChainRestart | None:
    """The head a broken chain gets back, as the declarative tier's repair re-enters one: the
    first occurrence the job has not handled, with its own fire time, so when that is past the
    trigger takes it at once and the job's catch-up policy fires the gap or records it Missed
    (never skipped). That occurrence is the one the job row last named pending (`next_run`), or,
    when the buckets show it handled or it is unknown, the first after the newest handled (after
    the job's creation when none is). None when the schedule has no occurrence left."""
    if next_run is not None and (last_handled is None or next_run > last_handled):
        return ChainRestart(job.uid, next_run, next_run + job.offset)
    head = chain_head(job, after=last_handled if last_handled is not None else enabled_since)
    return None if head is None else ChainRestart(job.uid, head.nominal, head.fire_at)


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetters:
    count: int
    oldest_age_seconds: float


def dead_letters(rows: Iterable[tuple[str, int, datetime]], now: datetime) -> dict[str, DeadLetters]:
    """queue -> its dead letters' count and oldest age, from (queue, count, oldest death)."""
    now = require_aware(now, name="now")
    return {queue: DeadLetters(count, age_seconds(oldest, now)) for queue, count, oldest in rows}


def oldest_ready_ages(
    rows: Iterable[tuple[str, str, int, datetime]], now: datetime
) -> dict[tuple[str, int, str], float]:
    """(queue, priority, tenant) -> seconds its oldest *due* ready execution has waited (0 when
    its ready work waits out a retry's backoff), from (queue, tenant, priority, oldest run_after)."""
    now = require_aware(now, name="now")
    return {(queue, priority, tenant): age_seconds(since, now) for queue, tenant, priority, since in rows}


@dataclasses.dataclass(frozen=True, kw_only=True)
class QueueWatchReport:
    """One pass's verdicts. `overdue` and `broken` hold at most the cap's jobs; the counts,
    per queue key, are complete. `broken` is None in a pass that did not run the audit."""

    now: datetime
    overdue: list[JobVerdict]
    overdue_counts: dict[str, int]
    broken: list[JobVerdict] | None
    broken_counts: dict[str, int] | None
    dead_letters: dict[str, DeadLetters]
    oldest_ready: dict[tuple[str, int, str], float]  # (queue, priority, tenant) -> seconds
    #: The broken chains this pass re-entered (`audit.repair`); they stay in `broken`, as found.
    repaired: list[ChainRestart] = dataclasses.field(default_factory=list)


#: The jobs a TaskQueue's condition names; its count covers them all.
SUMMARY_JOBS = 3


def summarise(report: QueueWatchReport, *, shown: int = SUMMARY_JOBS) -> dict[str, QueueWatchSummary]:
    """queue -> its share of `report`, for the queues with jobs in trouble (the others have none:
    the store writes them as such). `broken` stays None in a pass that did not audit."""
    audited = report.broken is not None and report.broken_counts is not None
    queues = set(report.overdue_counts) | set(report.broken_counts or {})
    return {
        queue: QueueWatchSummary(
            overdue=report.overdue_counts.get(queue, 0),
            overdue_jobs=_first(report.overdue, queue, shown),
            broken=(report.broken_counts or {}).get(queue, 0) if audited else None,
            broken_jobs=_first(report.broken or [], queue, shown),
        )
        for queue in queues
    }


def _first(verdicts: Iterable[JobVerdict], queue: str, shown: int) -> tuple[tuple[str, str], ...]:
    return tuple((v.job_id, str(v.finding.reason)) for v in verdicts if v.queue == queue)[:shown]


@dataclasses.dataclass(frozen=True)
class QueueCondition:
    """A TaskQueue condition the watchdog's summary decides (written by the TaskQueue pass)."""

    type: ConditionType
    status: bool
    reason: ConditionReason
    message: str


def watch_conditions(summary: QueueWatchSummary) -> list[QueueCondition]:
    """`JobsOverdue`, and once an audit has run `ChainBroken`, from the queue's summary."""
    overdue = QueueCondition(
        ConditionType.JOBS_OVERDUE, summary.overdue > 0,
        ConditionReason.OVERDUE_JOBS if summary.overdue else ConditionReason.NO_OVERDUE_JOBS,
        _named(summary.overdue, summary.overdue_jobs, "overdue (no success within expectedMaxInterval)")
        if summary.overdue else "every recurring job with expectedMaxInterval succeeded within it",
    )  # fmt: skip
    if summary.broken is None:
        return [overdue]
    broken = QueueCondition(
        ConditionType.CHAIN_BROKEN, summary.broken > 0,
        ConditionReason.BROKEN_CHAINS if summary.broken else ConditionReason.CHAINS_INTACT,
        _named(summary.broken, summary.broken_jobs, "without a next occurrence (a broken chain; audit.repair re-enters it)")
        if summary.broken else "every enabled recurring job has its next occurrence",
    )  # fmt: skip
    return [overdue, broken]


def _named(count: int, jobs: Sequence[tuple[str, str]], what: str) -> str:
    noun = "job" if count == 1 else "jobs"
    if not jobs:  # counted, none judged yet (a chain within its grace)
        return f"{count} {noun} {what}"
    listed = ", ".join(f"{job} ({reason})" for job, reason in jobs)
    more = f" and {count - len(jobs)} more" if count > len(jobs) else ""
    return f"{count} {noun} {what}: {listed}{more}"


@dataclasses.dataclass
class Episodes:
    """Which verdicts are new since the last pass: one log line when a job's trouble starts and
    one when it ends, not one per pass (the declarative watchdog's LaunchFailing episodes)."""

    current: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)  # (kind, job) -> reason

    def advance(
        self, verdicts: Mapping[tuple[str, str], str], *, judged: Iterable[str]
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(started, ended) keys. Only kinds in `judged` can end: a pass that did not run
        the audit keeps the audit's episodes open."""
        kinds = set(judged)
        started = [key for key in verdicts if key not in self.current]
        ended = [key for key in self.current if key[0] in kinds and key not in verdicts]
        kept = {key: reason for key, reason in self.current.items() if key[0] not in kinds}
        self.current = {**kept, **verdicts}
        return started, ended
