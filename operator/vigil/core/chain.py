"""What the trigger decides for one due occurrence: the pure heart of firing.

A recurring job propagates itself: each occurrence, when handled, names the
next one. `plan_entry` takes a due bucket entry, the job as it is now, and the
time, and returns every decision — which occurrences fire, which are recorded
as Missed/Superseded/Skipped/Suspended, the marker for the entry, and the next
chain head to insert. Nothing here reads a clock or touches a store, so every
rule is a row in a table test.

After an outage the bucket holds only the chain head that was due when the
trigger stopped; the occurrences after it were never inserted. So a late entry
is expanded into every occurrence due since its nominal time, and the job's
catch-up policy decides about each — skipping straight to now is the one thing
this module must never do.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from datetime import datetime, timedelta
from enum import StrEnum

from vigil.core.buckets import BucketEntry, Mark, Outcome, entry_key
from vigil.core.ids import ExecutionId, execution_id
from vigil.core.jitter import jitter_offset
from vigil.core.schedule import (
    Occurrence,
    Schedule,
    ScheduleKind,
    next_occurrence,
    occurrence_at,
    occurrences_between,
)

EXPANSION_CAP = 10_000  # occurrences enumerated for one late entry; catchUpLimit tops out here too


class CatchUpPolicy(StrEnum):
    """What to do with occurrences missed while nothing could fire them."""

    ALL = "All"
    LATEST = "Latest"
    NONE = "None"


class Reason(StrEnum):
    """Reasons recorded with non-fired outcomes (also Event reasons)."""

    JOB_DELETED = "JobDeleted"
    JOB_INVALID = "JobInvalid"
    SCHEDULE_CHANGED = "ScheduleChanged"
    ALREADY_HANDLED = "AlreadyHandled"
    SUSPENDED = "JobSuspended"
    CATCH_UP_NONE = "CatchUpPolicyNone"
    CATCH_UP_LATEST = "CatchUpPolicyLatest"
    CATCH_UP_LIMIT = "CatchUpLimitReached"
    GAP_TOO_LONG = "GapTooLong"
    CONCURRENCY_FORBID = "ConcurrencyForbid"
    LAUNCH_REFUSED = "LaunchRefused"
    QUOTA_EXCEEDED = "QuotaExceeded"  # the volume tier's namespace quota (vigil.core.queue.QuotaExceeded)


@dataclasses.dataclass(frozen=True)
class CatchUp:
    policy: CatchUpPolicy = CatchUpPolicy.ALL
    window: timedelta = timedelta(minutes=5)
    limit: int = 100


@dataclasses.dataclass(frozen=True)
class JobView:
    """The trigger's view of a ScheduledJob: only what firing needs."""

    namespace: str
    name: str
    uid: str
    generation: int
    schedule: Schedule
    schedule_hash: str
    jitter: timedelta
    catch_up: CatchUp
    suspended: bool = False
    last_nominal: datetime | None = None

    @property
    def offset(self) -> timedelta:
        return jitter_offset(self.uid, self.jitter)


@dataclasses.dataclass(frozen=True)
class JobLookup:
    """A job as found in the catalogue: absent, present and valid, or present but invalid."""

    job: JobView | None
    invalid: bool = False


@dataclasses.dataclass(frozen=True)
class Fire:
    job: JobView
    occurrence: Occurrence
    execution_id: ExecutionId
    late: bool


@dataclasses.dataclass(frozen=True)
class Record:
    """An occurrence that ends without firing, with the reason a user will read."""

    job_namespace: str
    job_name: str
    occurrence: Occurrence
    outcome: Outcome
    reason: Reason
    message: str = ""


@dataclasses.dataclass(frozen=True)
class EntryPlan:
    """Everything decided about one entry; the trigger applies it in a fixed order."""

    namespace: str
    name: str
    mark: Mark
    fires: tuple[Fire, ...] = ()
    records: tuple[Record, ...] = ()
    insert: BucketEntry | None = None
    pause_at: datetime | None = None  # the chain stops here until the job is resumed

    @property
    def handled_through(self) -> datetime | None:
        """The newest nominal time this plan disposed of (fired or missed)."""
        fired = [f.occurrence.nominal for f in self.fires]
        missed = [r.occurrence.nominal for r in self.records if r.outcome is Outcome.MISSED]
        return max(fired + missed, default=None)


def _entry(job: JobView, nominal: datetime, fire_at: datetime, *, resume: bool = False) -> BucketEntry:
    return BucketEntry(
        key=entry_key(
            job.uid, nominal, job.schedule_hash, resume_generation=job.generation if resume else None
        ),
        namespace=job.namespace,
        name=job.name,
        uid=job.uid,
        generation=job.generation,
        schedule_hash=job.schedule_hash,
        nominal=nominal,
        fire_at=fire_at,
        resume=resume,
    )


def chain_head(job: JobView, *, after: datetime) -> BucketEntry | None:
    """The job's first occurrence strictly after `after`, as a bucket entry (None if none)."""
    upcoming = next_occurrence(job.schedule, after)
    if upcoming is None:
        return None
    return _entry(job, upcoming, upcoming + job.offset)


def first_entry(job: JobView, *, now: datetime) -> BucketEntry | None:
    """The head a newly (re)scheduled job starts from: its next occurrence after now.

    Never earlier, so editing a schedule fires nothing retroactively. The one
    exception is a one-off whose time has already passed: it is entered due at
    once, and the catch-up policy — not silence — decides whether it runs.
    """
    run_at = job.schedule.run_at
    if job.schedule.kind is ScheduleKind.ONCE and run_at is not None:
        if job.last_nominal is not None and job.last_nominal >= run_at:
            return None
        return _entry(job, run_at, max(run_at + job.offset, now))
    return chain_head(job, after=now)


def resume_entry(job: JobView, *, paused_at: datetime, now: datetime) -> BucketEntry:
    """An entry that restarts a chain paused at `paused_at`, due at once.

    Its key carries the job generation of the resume, so a later suspend and
    resume of the same nominal is a new intent, never a clash with the old mark.
    """
    return _entry(job, paused_at, now, resume=True)


def plan_entry(entry: BucketEntry, job: JobView | None, *, now: datetime, invalid: bool = False) -> EntryPlan:
    """Decide everything about one due entry."""
    if invalid:
        return _ended(entry, None, now, Outcome.SKIPPED, Reason.JOB_INVALID)
    if job is None or job.uid != entry.uid:
        return _ended(entry, None, now, Outcome.SKIPPED, Reason.JOB_DELETED)
    if job.schedule_hash != entry.schedule_hash:
        return _ended(entry, job, now, Outcome.SUPERSEDED, Reason.SCHEDULE_CHANGED)
    if job.suspended:
        plan = _ended(entry, job, now, Outcome.SUSPENDED, Reason.SUSPENDED)
        return dataclasses.replace(plan, pause_at=entry.nominal)
    return _plan_due(entry, job, now)


def _occurrence(job: JobView, nominal: datetime) -> Occurrence:
    return occurrence_at(job.schedule, nominal, jitter=job.offset)


def _ended(
    entry: BucketEntry, job: JobView | None, now: datetime, outcome: Outcome, reason: Reason
) -> EntryPlan:
    occurrence = Occurrence(
        nominal=entry.nominal, fire_at=entry.fire_at, period_start=entry.nominal, period_end=entry.nominal
    )
    if job is not None:
        occurrence = _occurrence(job, entry.nominal)
    record = Record(
        job_namespace=entry.namespace,
        job_name=entry.name,
        occurrence=occurrence,
        outcome=outcome,
        reason=reason,
    )
    return EntryPlan(
        namespace=entry.namespace,
        name=entry.name,
        mark=Mark(outcome=outcome, at=now, reason=reason),
        records=(record,),
    )


def _due_nominals(entry: BucketEntry, job: JobView, now: datetime) -> tuple[list[datetime], bool]:
    """Every nominal from the entry's up to the last one whose fire time has come.

    Returns the nominals (oldest first, at most EXPANSION_CAP) and whether the
    enumeration stopped at the cap with more still due.
    """
    horizon = now - job.offset
    if entry.nominal > horizon:
        return [], False
    following = next_occurrence(job.schedule, entry.nominal)  # memoised: one walk for many jobs
    if following is None or following > horizon:  # the usual case: on time, nothing more due
        nominals = [entry.nominal]
        truncated = False
    else:  # late: enumerate lazily, one past the cap to know whether it was reached
        later = occurrences_between(job.schedule, entry.nominal, horizon)
        nominals = [entry.nominal, *itertools.islice(later, EXPANSION_CAP)]
        truncated = len(nominals) > EXPANSION_CAP
        nominals = nominals[:EXPANSION_CAP]
    if job.last_nominal is not None:
        nominals = [n for n in nominals if n > job.last_nominal]
    return nominals, truncated


def _plan_due(entry: BucketEntry, job: JobView, now: datetime) -> EntryPlan:
    nominals, truncated = _due_nominals(entry, job, now)
    occurrences = [_occurrence(job, n) for n in nominals]
    fire, miss = _apply_policy(job.catch_up, occurrences, now)
    fires = tuple(
        Fire(job=job, occurrence=o, execution_id=execution_id(job.uid, o.nominal), late=_late(job, o, now))
        for o in fire
    )
    records = [
        Record(
            job_namespace=job.namespace, job_name=job.name, occurrence=o, outcome=Outcome.MISSED, reason=reason
        )
        for o, reason in miss.items()
    ]
    if truncated:
        records.append(
            Record(
                job_namespace=job.namespace,
                job_name=job.name,
                occurrence=occurrences[-1],
                outcome=Outcome.MISSED,
                reason=Reason.GAP_TOO_LONG,
                message=f"more than {EXPANSION_CAP} occurrences were due; the rest were not enumerated",
            )
        )
    last = nominals[-1] if nominals else max(entry.nominal, job.last_nominal or entry.nominal)
    mark = _entry_mark(entry, fires, records, now)
    return EntryPlan(
        namespace=job.namespace,
        name=job.name,
        mark=mark,
        fires=fires,
        records=tuple(records),
        insert=chain_head(job, after=last),
    )


@dataclasses.dataclass(frozen=True)
class Unlaunched:
    """A fire that did not start: skipped by policy, or refused for good by the cluster."""

    outcome: Outcome  # SKIPPED or FAILED
    reason: Reason
    message: str = ""


def settle_unlaunched(plan: EntryPlan, unlaunched: Mapping[str, Unlaunched], *, now: datetime) -> EntryPlan:
    """The plan after some fires did not start, each recorded with its outcome and reason.

    A Forbid skip and a refused launch both end the occurrence: it is marked and recorded, never
    retried, so the walk moves on (a launch that is always refused must not hold up anyone).
    """
    if not unlaunched:
        return plan
    fires = tuple(f for f in plan.fires if f.execution_id not in unlaunched)
    records = plan.records + tuple(
        Record(
            job_namespace=plan.namespace,
            job_name=plan.name,
            occurrence=f.occurrence,
            outcome=unlaunched[f.execution_id].outcome,
            reason=unlaunched[f.execution_id].reason,
            message=unlaunched[f.execution_id].message,
        )
        for f in plan.fires
        if f.execution_id in unlaunched
    )
    mark = plan.mark
    if mark.execution_id is not None and mark.execution_id in unlaunched:
        why = unlaunched[mark.execution_id]
        mark = Mark(outcome=why.outcome, at=now, reason=str(why.reason))
    return dataclasses.replace(plan, fires=fires, records=records, mark=mark)


def _late(job: JobView, occurrence: Occurrence, now: datetime) -> bool:
    return now - occurrence.fire_at > job.catch_up.window


def _apply_policy(
    catch_up: CatchUp, occurrences: list[Occurrence], now: datetime
) -> tuple[list[Occurrence], dict[Occurrence, Reason]]:
    """Split due occurrences into those to fire (oldest first) and those Missed, with why."""
    late = [o for o in occurrences if now - o.fire_at > catch_up.window]
    on_time = [o for o in occurrences if o not in late]
    if catch_up.policy is CatchUpPolicy.LATEST:
        keep = late[-1:] if not on_time else []
        return keep + on_time, {o: Reason.CATCH_UP_LATEST for o in late if o not in keep}
    if catch_up.policy is CatchUpPolicy.NONE:
        return on_time, {o: Reason.CATCH_UP_NONE for o in late}
    # All: fire the newest `limit` late occurrences, oldest first; older excess is Missed.
    excess = max(0, len(late) - catch_up.limit)
    miss = {o: Reason.CATCH_UP_LIMIT for o in late[:excess]}
    return late[excess:] + on_time, miss


def _entry_mark(entry: BucketEntry, fires: tuple[Fire, ...], records: list[Record], now: datetime) -> Mark:
    for fire in fires:
        if fire.occurrence.nominal == entry.nominal:
            return Mark(outcome=Outcome.FIRED, at=now, execution_id=fire.execution_id)
    for record in records:
        if record.occurrence.nominal == entry.nominal:
            return Mark(outcome=record.outcome, at=now, reason=record.reason)
    if fires:  # a resume entry whose own nominal was handled before; the batch still fired
        return Mark(outcome=Outcome.FIRED, at=now, execution_id=fires[-1].execution_id)
    return Mark(outcome=Outcome.SKIPPED, at=now, reason=Reason.ALREADY_HANDLED)
