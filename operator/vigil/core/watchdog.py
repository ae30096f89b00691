"""The watchdog's rules: noticing what did not happen.

A job that stops running produces no error, no log line and no failed request,
so error monitoring never sees it (the "eleven days" story). The watchdog
asserts absences instead: a success should have happened by now
(`assess_overdue`), an enabled recurring job has a future occurrence
(`assess_chain`), dead letters are surfaced with their age
(`dead_letter_ages`), a suspension has an owner, a reason and an end
(`assess_suspension`), the job's output is fresh, whatever the scheduler
believes (`assess_freshness`), and its occurrences can be launched at all
(`assess_launch`).

A late chain head is judged by what the trigger publishes about its own
progress (`vigil.core.progress`): a head the trigger has not reached yet is
*behind* (a burst of due jobs takes a while), one whose job the trigger is
retrying is a launch problem, and only a head the trigger went past, or one
late while the trigger publishes nothing, is a broken chain.

Everything here is pure: the adapter reads a ScheduledJob, its executions and
its output into a `JobFacts`, reads the clock once, and turns each `Finding`
into a condition, an Event and a metric. No rule reads a clock or a store, so
each is a row in a table test. The age of the oldest ready execution is a
dispatch concern and lives in `vigil.core.dispatch.oldest_ready_age`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime, timedelta
from enum import StrEnum

from vigil.core.conditions import ConditionType
from vigil.core.progress import HeadState, TriggerProgress, head_state, job_key
from vigil.core.timeparse import format_rfc3339, require_aware

#: How far in the past a chain head may be before it counts as stale: the trigger fires
#: within a tick or two, and a cron job's jitter is already in its fire time.
DEFAULT_CHAIN_GRACE = timedelta(minutes=2)

#: Units for ages in messages, largest first ("11d2h", "26m", "45s").
_AGE_UNITS: tuple[tuple[str, int], ...] = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))


class FindingKind(StrEnum):
    """What a finding is about; each value is the condition type the adapter sets."""

    OVERDUE = ConditionType.OVERDUE.value
    SCHEDULE_CHAIN_BROKEN = ConditionType.SCHEDULE_CHAIN_BROKEN.value
    OUTPUT_STALE = ConditionType.OUTPUT_STALE.value
    SUSPENDED_TOO_LONG = ConditionType.SUSPENDED_TOO_LONG.value
    LAUNCH_FAILING = ConditionType.LAUNCH_FAILING.value

    @property
    def condition_type(self) -> ConditionType:
        return ConditionType(self.value)

    @property
    def watchdog_writes_condition(self) -> bool:
        """False for LaunchFailing: the trigger's ledger owns that condition; the watchdog reports it."""
        return self is not FindingKind.LAUNCH_FAILING


class WatchdogReason(StrEnum):
    """Condition and Event reasons the watchdog sets (CamelCase, stable: users alert on them)."""

    # Overdue: why no success arrived in time, most specific first
    OVERRAN = "Overran"  # an execution runs far longer than expected
    FAILING = "Failing"  # occurrences fire, their attempts fail
    NOT_STARTED = "NotStarted"  # fired, but no execution got to start
    STILL_RUNNING = "StillRunning"  # an execution runs, within its expected duration
    NOT_FIRED = "NotFired"  # nothing fired: the schedule delivered nothing
    ON_SCHEDULE = "OnSchedule"  # a success (or the enable) is within the interval
    # schedule integrity
    NO_FUTURE_OCCURRENCE = "NoFutureOccurrence"
    STALE_NEXT_OCCURRENCE = "StaleNextOccurrence"
    CHAIN_INTACT = "ChainIntact"
    RECENTLY_ENABLED = "RecentlyEnabled"  # the first chain head may not be inserted yet
    NOT_YET_SCHEDULED = "NotYetScheduled"  # the operator has not handled the job's current spec yet
    TRIGGER_BEHIND = "TriggerBehind"  # late, but the trigger has not reached it: a backlog, not a break
    LAUNCH_RETRYING = "LaunchRetrying"  # late because its launch fails and is retried (LaunchFailing)
    # launches
    LAUNCH_REFUSED = "LaunchRefused"  # the cluster refused an occurrence for good (settled Failed)
    LAUNCHING = "Launching"  # nothing refused, nothing being retried
    # suspension
    SUSPENDED_TOO_LONG = "SuspendedTooLong"
    SUSPENDED_WITHIN_LIMIT = "SuspendedWithinLimit"
    SUSPENDED_SINCE_UNKNOWN = "SuspendedSinceUnknown"
    NOT_SUSPENDED = "NotSuspended"
    # output freshness
    OUTPUT_UNREADABLE = "OutputUnreadable"
    OUTPUT_TOO_OLD = "OutputTooOld"
    OUTPUT_FRESH = "OutputFresh"
    # the rule does not apply to this job
    NOT_RECURRING = "NotRecurring"
    NO_EXPECTED_INTERVAL = "NoExpectedInterval"
    JOB_SUSPENDED = "JobSuspended"
    NO_FRESHNESS_CHECK = "NoFreshnessCheck"


#: The reasons an Overdue finding can carry while it is True (the `reason` metric label).
OVERDUE_REASONS = frozenset(
    {
        WatchdogReason.OVERRAN,
        WatchdogReason.FAILING,
        WatchdogReason.NOT_STARTED,
        WatchdogReason.STILL_RUNNING,
        WatchdogReason.NOT_FIRED,
    }
)


# --- input ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class JobFacts:
    """What the watchdog needs to know about one ScheduledJob, filled in by the adapter.

    Every time is timezone-aware. `last_fired` is best the time the occurrence was
    actually fired (the ledger's `at`), else its fire time or nominal time;
    `next_occurrence` is best the chain head's fire time (jitter included).
    """

    namespace: str
    name: str
    recurring: bool
    enabled_since: datetime  # creation or last resume: the baseline before any success
    suspended: bool = False
    suspended_since: datetime | None = None
    suspend_reason: str | None = None
    suspended_by: str | None = None
    expected_max_interval: timedelta | None = None
    expected_duration: timedelta | None = None
    last_success: datetime | None = None
    last_fired: datetime | None = None
    last_failure: datetime | None = None  # the newest failed attempt's finish
    running_since: datetime | None = None  # the oldest Running execution's start
    ready_since: datetime | None = None  # the oldest execution waiting in Ready or Backoff
    next_occurrence: datetime | None = None  # None: the buckets hold no future occurrence
    dead_letters: tuple[tuple[str, datetime], ...] = ()  # (execution id, dead since)
    output_time: datetime | None = None  # when the job's output was last produced
    output_max_age: timedelta | None = None  # None: no freshness check declared
    output_error: str | None = None  # why output_time could not be read
    launch_refused_since: datetime | None = None  # the LaunchFailing condition is True since then
    #: The operator has handled the job's current spec (status.observedGeneration is its
    #: generation): until then its first occurrence may not be in the buckets yet.
    scheduled: bool = True
    launch_refused_message: str = ""  # that condition's message: which occurrence, and the API's words

    def __post_init__(self) -> None:
        for field, value in self._times():
            require_aware(value, name=f"{self.namespace}/{self.name}: {field}")
        for field, span in (
            ("expected_max_interval", self.expected_max_interval),
            ("expected_duration", self.expected_duration),
            ("output_max_age", self.output_max_age),
        ):
            if span is not None and span <= timedelta(0):
                raise ValueError(
                    f"{self.namespace}/{self.name}: {field} must be positive, got {span}"
                )

    def _times(self) -> Iterator[tuple[str, datetime]]:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, datetime):
                yield field.name, value
        for execution_id, dead_since in self.dead_letters:
            yield f"dead letter {execution_id}", dead_since


# --- output -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One rule's verdict: a condition (kind, status, reason, message) plus what it measured.

    `applicable` is False when the rule does not apply to the job (a one-off job has
    no interval to keep): the adapter then removes the condition rather than setting it.
    `since` is the instant the measured age counts from; `age` is `now - since`.
    """

    kind: FindingKind
    status: bool
    reason: WatchdogReason
    message: str
    applicable: bool = True
    since: datetime | None = None
    age: timedelta | None = None

    @property
    def age_seconds(self) -> float | None:
        return None if self.age is None else self.age.total_seconds()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Overdue(Finding):
    """The Overdue verdict; `deadline` is when the job is (or became) overdue without a success."""

    kind: FindingKind = FindingKind.OVERDUE
    deadline: datetime | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ChainFinding(Finding):
    """The schedule-integrity verdict; `repair_needed` asks for a chain head to be re-entered."""

    kind: FindingKind = FindingKind.SCHEDULE_CHAIN_BROKEN
    repair_needed: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SuspensionFinding(Finding):
    """The suspended-jobs report; `unowned` when the suspension names no owner or no reason."""

    kind: FindingKind = FindingKind.SUSPENDED_TOO_LONG
    unowned: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetterAge:
    execution_id: str
    age_seconds: float


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class JobReport:
    """Every verdict about one job from one watchdog pass."""

    overdue: Overdue
    chain: ChainFinding
    suspension: SuspensionFinding
    freshness: Finding
    launch: Finding
    dead_letters: tuple[DeadLetterAge, ...]
    seconds_since_success: float

    @property
    def findings(self) -> tuple[Finding, ...]:
        return (self.overdue, self.chain, self.suspension, self.freshness, self.launch)


def assess_job(
    facts: JobFacts,
    now: datetime,
    *,
    suspended_max_age: timedelta,
    chain_grace: timedelta = DEFAULT_CHAIN_GRACE,
    progress: TriggerProgress | None = None,
) -> JobReport:
    """Run every rule on one job: the adapter's one call per job and pass."""
    return JobReport(
        overdue=assess_overdue(facts, now),
        chain=assess_chain(facts, now, grace=chain_grace, progress=progress),
        suspension=assess_suspension(facts, now, max_age=suspended_max_age),
        freshness=assess_freshness(facts, now),
        launch=assess_launch(facts, now, progress=progress, alive_within=chain_grace),
        dead_letters=dead_letter_ages(facts, now),
        seconds_since_success=seconds_since_success(facts, now),
    )


# --- 1. overdue: a success should have happened by now ----------------------------------------


def seconds_since_success(facts: JobFacts, now: datetime) -> float:
    """Seconds since the last success, or since the job was enabled when it never succeeded."""
    start = facts.last_success if facts.last_success is not None else facts.enabled_since
    return max(0.0, (require_aware(now, name="now") - start).total_seconds())


def overdue_baseline(facts: JobFacts) -> datetime:
    """The instant the interval is counted from: the last success, or the enable if later.

    A job resumed after a long suspension gets a full interval from the resume rather
    than being Overdue the moment it is resumed; the suspension report covers the gap.
    """
    if facts.last_success is None:
        return facts.enabled_since
    return max(facts.last_success, facts.enabled_since)


def assess_overdue(facts: JobFacts, now: datetime) -> Overdue:
    """Overdue when more than expectedMaxInterval passed since the baseline without a success."""
    now = require_aware(now, name="now")
    skipped = _overdue_not_applicable(facts)
    if skipped is not None:
        return Overdue(status=False, reason=skipped[0], message=skipped[1], applicable=False)
    assert facts.expected_max_interval is not None  # _overdue_not_applicable checked it
    baseline = overdue_baseline(facts)
    deadline = baseline + facts.expected_max_interval
    interval = format_age(facts.expected_max_interval)
    known = f"{_success_phrase(facts, now)}; expectedMaxInterval is {interval}"
    if now <= deadline:
        reason, message = WatchdogReason.ON_SCHEDULE, known
    else:
        reason, why = _why_overdue(facts, now, baseline=baseline, deadline=deadline)
        message = f"{known}: {why}"
    return Overdue(
        status=reason is not WatchdogReason.ON_SCHEDULE,
        reason=reason,
        message=message,
        since=baseline,
        age=now - baseline,
        deadline=deadline,
    )


def _overdue_not_applicable(facts: JobFacts) -> tuple[WatchdogReason, str] | None:
    if not facts.recurring:
        return WatchdogReason.NOT_RECURRING, "a one-off job has no interval to keep"
    if facts.expected_max_interval is None:
        return (
            WatchdogReason.NO_EXPECTED_INTERVAL,
            "no expectedMaxInterval is set: nothing notices if this job stops running",
        )
    if facts.suspended:
        return WatchdogReason.JOB_SUSPENDED, "the job is suspended: see the SuspendedTooLong report"
    return None


def _why_overdue(
    facts: JobFacts, now: datetime, *, baseline: datetime, deadline: datetime
) -> tuple[WatchdogReason, str]:
    """The most specific explanation of a missing success: Overran, Failing, NotStarted, ..."""
    overran = _overran(facts, now)
    if overran is not None:
        return WatchdogReason.OVERRAN, overran
    fired = _after(facts.last_fired, baseline)
    if fired and _after(facts.last_failure, baseline):
        return WatchdogReason.FAILING, _failing_phrase(facts, now)
    if facts.ready_since is not None and facts.ready_since <= deadline:
        return WatchdogReason.NOT_STARTED, _waiting_phrase(facts.ready_since, now)
    if facts.running_since is not None and facts.running_since > baseline:
        return WatchdogReason.STILL_RUNNING, _still_running_phrase(facts.running_since, now)
    if facts.ready_since is not None:
        return WatchdogReason.NOT_STARTED, _waiting_phrase(facts.ready_since, now)
    if fired:
        assert facts.last_fired is not None
        return (
            WatchdogReason.NOT_STARTED,
            f"an occurrence fired {format_age(now - facts.last_fired)} ago but no execution "
            "started or is waiting: check the job's executions and Events",
        )
    return (
        WatchdogReason.NOT_FIRED,
        f"nothing has fired since {format_rfc3339(baseline)}: check ScheduleChainBroken, "
        "`kubectl vigil occurrences`, and that an operator holds the leader Lease",
    )


def _overran(facts: JobFacts, now: datetime) -> str | None:
    if facts.running_since is None:
        return None
    limit, name = facts.expected_duration, "expectedDuration"
    if limit is None:
        limit, name = facts.expected_max_interval, "expectedMaxInterval (no expectedDuration set)"
    running = now - facts.running_since
    if limit is None or running <= limit:
        return None
    return (
        f"an execution has been running for {format_age(running)} "
        f"(since {format_rfc3339(facts.running_since)}), longer than {name} {format_age(limit)}"
    )


def _failing_phrase(facts: JobFacts, now: datetime) -> str:
    assert facts.last_fired is not None and facts.last_failure is not None
    return (
        f"occurrences fire but fail: the last fired {format_age(now - facts.last_fired)} ago, "
        f"the last attempt failed {format_age(now - facts.last_failure)} ago"
    )


def _waiting_phrase(ready_since: datetime, now: datetime) -> str:
    return (
        f"an execution has waited to start for {format_age(now - ready_since)} "
        f"(since {format_rfc3339(ready_since)}): check dispatch capacity and concurrencyPolicy"
    )


def _still_running_phrase(running_since: datetime, now: datetime) -> str:
    return (
        f"an execution has been running for {format_age(now - running_since)}, within its "
        "expected duration: it started late, or the interval is shorter than schedule plus run"
    )


def _success_phrase(facts: JobFacts, now: datetime) -> str:
    enabled = f"{format_age(now - facts.enabled_since)} ago ({format_rfc3339(facts.enabled_since)})"
    if facts.last_success is None:
        return f"never succeeded; enabled {enabled}"
    success = facts.last_success
    succeeded = f"last succeeded {format_age(now - success)} ago ({format_rfc3339(success)})"
    if facts.enabled_since > facts.last_success:
        return f"{succeeded}; resumed {enabled}"
    return succeeded


def _after(value: datetime | None, baseline: datetime) -> bool:
    return value is not None and value > baseline


# --- 2. schedule integrity: an enabled recurring job has a future occurrence -------------------


def assess_chain(
    facts: JobFacts,
    now: datetime,
    *,
    grace: timedelta = DEFAULT_CHAIN_GRACE,
    progress: TriggerProgress | None = None,
) -> ChainFinding:
    """Broken when an enabled recurring job has no chain head, or one left unfired past `grace`
    that the trigger's `progress` cannot account for (see `late_head`)."""
    now = require_aware(now, name="now")
    if not facts.recurring:
        return ChainFinding(
            status=False,
            reason=WatchdogReason.NOT_RECURRING,
            message="a one-off job has no chain to keep",
            applicable=False,
        )
    if facts.suspended:
        return ChainFinding(
            status=False,
            reason=WatchdogReason.JOB_SUSPENDED,
            message="a suspended job has no future occurrence until it is resumed",
            applicable=False,
        )
    if facts.next_occurrence is None:
        return _missing_head(facts, now, grace=grace)
    if now - facts.next_occurrence > grace:
        return late_head(facts, now, grace=grace, progress=progress)
    return ChainFinding(
        status=False,
        reason=WatchdogReason.CHAIN_INTACT,
        message=f"next occurrence at {format_rfc3339(facts.next_occurrence)}",
    )


def late_head(
    facts: JobFacts, now: datetime, *, grace: timedelta, progress: TriggerProgress | None
) -> ChainFinding:
    """A head unfired past the grace: behind, retrying, or broken — the trigger's progress decides.

    Behind (not broken) while the trigger publishes progress and has not yet completed a pass
    that began after the head was due; retrying (not broken: LaunchFailing says why) while the
    trigger names the job as waiting for a retry. Broken when the trigger went past it, or has
    published nothing within the grace (down, or an operator too old to publish).
    """
    assert facts.next_occurrence is not None
    head = facts.next_occurrence
    late = f"the next occurrence ({format_rfc3339(head)}) is {format_age(now - head)} past its fire time"
    state = head_state(
        progress, namespace=facts.namespace, name=facts.name, fire_at=head, now=now, alive_within=grace
    )
    if state is HeadState.BEHIND:
        assert progress is not None
        done = (
            f"has handled everything due before {format_rfc3339(progress.handled_before)}"
            if progress.handled_before is not None
            else "has not completed a pass yet"
        )
        return ChainFinding(
            status=False,
            reason=WatchdogReason.TRIGGER_BEHIND,
            message=f"{late}, but the trigger has not reached it: it {done} and has "
            f"{progress.backlog} due entries left in the pass in flight (published "
            f"{format_age(now - progress.at)} ago)",
            since=head,
            age=now - head,
        )
    if state is HeadState.RETRYING:
        return ChainFinding(
            status=False,
            reason=WatchdogReason.LAUNCH_RETRYING,
            message=f"{late}: the trigger is retrying a launch of this job that failed (see LaunchFailing)",
            since=head,
            age=now - head,
        )
    if state is HeadState.PASSED:
        assert progress is not None and progress.handled_before is not None
        why = (
            f"the trigger has handled everything due before {format_rfc3339(progress.handled_before)} "
            "but not this: it sits in a minute the trigger already closed"
        )
    else:
        published = "never" if progress is None else f"last {format_age(now - progress.at)} ago"
        why = f"the trigger has published no progress within {format_age(grace)} ({published}): it may be down"
    return ChainFinding(
        status=True,
        reason=WatchdogReason.STALE_NEXT_OCCURRENCE,
        message=f"the next occurrence ({format_rfc3339(head)}) should have fired "
        f"{format_age(now - head)} ago and has not: {why}",
        since=head,
        age=now - head,
        repair_needed=True,
    )


def _missing_head(facts: JobFacts, now: datetime, *, grace: timedelta) -> ChainFinding:
    if not facts.scheduled:  # onboarding behind, like the trigger behind: not a broken chain
        return ChainFinding(
            status=False,
            reason=WatchdogReason.NOT_YET_SCHEDULED,
            message=f"enabled {format_age(now - facts.enabled_since)} ago and not yet handled by the "
            "operator: its first occurrence is not scheduled yet (if this lasts, read the operator's log)",
        )
    if now - facts.enabled_since <= grace:
        return ChainFinding(
            status=False,
            reason=WatchdogReason.RECENTLY_ENABLED,
            message=f"enabled {format_age(now - facts.enabled_since)} ago: its first occurrence "
            "may not be scheduled yet",
        )
    return ChainFinding(
        status=True,
        reason=WatchdogReason.NO_FUTURE_OCCURRENCE,
        message="the job is enabled and recurring but no future occurrence is scheduled: "
        "the chain is broken and the job will never run again until it is repaired",
        repair_needed=True,
    )


# --- 3. dead letters ----------------------------------------------------------------------------


def dead_letter_ages(facts: JobFacts, now: datetime) -> tuple[DeadLetterAge, ...]:
    """Each dead letter's age in seconds (never negative), oldest first."""
    now = require_aware(now, name="now")
    ordered = sorted(facts.dead_letters, key=lambda letter: (letter[1], letter[0]))
    return tuple(
        DeadLetterAge(execution_id=execution_id, age_seconds=age_seconds(since, now))
        for execution_id, since in ordered
    )


def age_seconds(since: datetime, now: datetime) -> float:
    """Seconds from `since` to `now`, never negative (clock skew reads as 0): every age the
    watchdog publishes, in both tiers."""
    return max(0.0, (require_aware(now, name="now") - require_aware(since, name="since")).total_seconds())


# --- 4. suspended jobs: an owner, a reason, and an end ------------------------------------------


def assess_suspension(facts: JobFacts, now: datetime, *, max_age: timedelta) -> SuspensionFinding:
    """SuspendedTooLong past `max_age`; `unowned` when no suspendedBy or no suspendReason."""
    now = require_aware(now, name="now")
    if max_age <= timedelta(0):
        raise ValueError(f"max_age must be positive, got {max_age}")
    if not facts.suspended:
        return SuspensionFinding(
            status=False,
            reason=WatchdogReason.NOT_SUSPENDED,
            message="the job is not suspended",
            applicable=False,
        )
    unowned = not (facts.suspended_by or "").strip() or not (facts.suspend_reason or "").strip()
    who = _suspension_phrase(facts)
    if facts.suspended_since is None:
        return SuspensionFinding(
            status=False,
            reason=WatchdogReason.SUSPENDED_SINCE_UNKNOWN,
            message=f"suspended since an unknown time {who}",
            unowned=unowned,
        )
    age = now - facts.suspended_since
    too_long = age > max_age
    verdict = "longer than" if too_long else "within"
    return SuspensionFinding(
        status=too_long,
        reason=WatchdogReason.SUSPENDED_TOO_LONG
        if too_long
        else WatchdogReason.SUSPENDED_WITHIN_LIMIT,
        message=f"suspended {format_age(age)} ago {who}; {verdict} the {format_age(max_age)} limit",
        since=facts.suspended_since,
        age=age,
        unowned=unowned,
    )


def _suspension_phrase(facts: JobFacts) -> str:
    owner = (facts.suspended_by or "").strip() or "nobody named (set spec.suspendedBy)"
    reason = (facts.suspend_reason or "").strip() or "no reason given (set spec.suspendReason)"
    return f"by {owner}: {reason}"


# --- 5. output freshness: a second detector without the scheduler's blind spots -----------------


def assess_freshness(facts: JobFacts, now: datetime) -> Finding:
    """OutputStale when the output's time is unknown or older than its max age.

    Deliberately ignores what the scheduler recorded (successes, suspension): the
    output is judged on its own, so a job that "succeeds" without producing is caught.
    """
    now = require_aware(now, name="now")
    max_age = facts.output_max_age
    if max_age is None:
        return Finding(
            kind=FindingKind.OUTPUT_STALE,
            status=False,
            reason=WatchdogReason.NO_FRESHNESS_CHECK,
            message="no freshness check is declared (spec.freshness)",
            applicable=False,
        )
    if facts.output_time is None:
        why = (facts.output_error or "").strip() or "no output time was found"
        return Finding(
            kind=FindingKind.OUTPUT_STALE,
            status=True,
            reason=WatchdogReason.OUTPUT_UNREADABLE,
            message=f"the output's time could not be read: {why}",
        )
    age = max(timedelta(0), now - facts.output_time)
    stale = age > max_age
    return Finding(
        kind=FindingKind.OUTPUT_STALE,
        status=stale,
        reason=WatchdogReason.OUTPUT_TOO_OLD if stale else WatchdogReason.OUTPUT_FRESH,
        message=f"output produced {format_age(age)} ago ({format_rfc3339(facts.output_time)}); "
        f"maxAge is {format_age(max_age)}",
        since=facts.output_time,
        age=age,
    )


# --- 6. launches: the cluster accepts what fires ------------------------------------------------


def assess_launch(
    facts: JobFacts, now: datetime, *, progress: TriggerProgress | None = None, alive_within: timedelta
) -> Finding:
    """LaunchFailing while an occurrence was refused for good (the ledger's LaunchFailing
    condition: a quota, an admission webhook) or the trigger retries a failed launch of the job.

    The refusal wins: it is settled and says why in the API server's words; a retry may pass.
    """
    now = require_aware(now, name="now")
    if facts.launch_refused_since is not None:
        since = facts.launch_refused_since
        return Finding(
            kind=FindingKind.LAUNCH_FAILING,
            status=True,
            reason=WatchdogReason.LAUNCH_REFUSED,
            message=f"launches refused for {format_age(now - since)}: {facts.launch_refused_message}".rstrip(": "),
            since=since,
            age=max(timedelta(0), now - since),
        )
    live = progress is not None and now - progress.at <= alive_within
    if live and progress is not None and job_key(facts.namespace, facts.name) in progress.retrying:
        return Finding(
            kind=FindingKind.LAUNCH_FAILING,
            status=True,
            reason=WatchdogReason.LAUNCH_RETRYING,
            message="a launch of this job failed (throttled, a busy or unreachable API server, a timeout) "
            "and is retried with backoff; its later occurrences wait behind it: see the operator's log",
        )
    return Finding(
        kind=FindingKind.LAUNCH_FAILING,
        status=False,
        reason=WatchdogReason.LAUNCHING,
        message="no launch refused or being retried",
    )


# --- helpers ------------------------------------------------------------------------------------


def format_age(delta: timedelta) -> str:
    """A span for people: its largest unit and the next one, truncated ("11d2h", "1h30m", "45s").

    Negative spans (clock skew) read as "0s".
    """
    remaining = max(0, int(delta.total_seconds()))
    for index, (unit, size) in enumerate(_AGE_UNITS):
        if remaining >= size or size == 1:
            count, rest = divmod(remaining, size)
            text = f"{count}{unit}"
            if index + 1 < len(_AGE_UNITS):
                next_unit, next_size = _AGE_UNITS[index + 1]
                if rest // next_size:
                    text += f"{rest // next_size}{next_unit}"
            return text
    raise AssertionError("unreachable: the last unit is one second")
