"""The trigger pass: walk the due minutes, fire what has come due, mark it once.

The leader calls `Trigger.tick()` when the last pass said its next occurrence comes due
(`TickReport.next_fire`), and at least every few hundred milliseconds. A pass reads
the clock once, then visits every minute from the cursor — the oldest minute
that may still hold an unmarked entry — up to now. For each due entry it asks
`chain.plan_entry` what to do and applies the plan in the one order that makes
a crash anywhere harmless:

1. insert the job's next occurrence (idempotent by key),
2. create each execution (named from its execution id: a repeat gets "exists"),
3. record outcomes on the job (idempotent by nominal time),
4. once the insert is in, write the fired markers with a version precondition (first writer wins).

The insert goes out first and is waited for only at step 4, by the pass rather than by the
worker, which goes on to the next job meanwhile. An insert that fails leaves its entry unmarked:
it comes due again and steps 1-4 are repeated for it.

With a pool of workers, step 4 goes on while the next pass begins: that pass counts the markers
in flight as written. A bucket has one marker write in flight at a time, and in a minute still
open one per `MARK_SPACING` (5 s) at most, as each rewrites the whole bucket; the markers of the
passes in between are queued and go out together in the next. A minute is closed only on its
markers as written. A marker write that fails brings its entries due again, and the next pass
repeats steps 1-4 for them.

A pass that dies between any two steps is repaired by the next pass repeating
them. Two leaders overlapping during a failover both reach step 2 with the same
names, so one execution results; step 4's precondition settles the marker.

The cursor starts at the oldest pending minute found when leadership begins, so
minutes missed while no leader ran are walked, never skipped.

One bad entry harms nothing else. A launch the cluster refuses for good (a
quota, an admission webhook) settles its occurrence as Failed, recorded and
marked, and the walk moves on. A failure that may pass (throttling, a busy or
unreachable server) retries that entry with backoff; the job's later entries
wait behind it (its recorded progress must not pass an unrecorded occurrence),
every other job goes on, and a past minute held only by such entries no longer
holds the cursor: it is revisited on its own until it settles.

A minute is completed (its buckets left out of every scan) on the version of its buckets the
pass read, so an entry inserted since — a job created just as its time passed, entered due at
once, its insert slower than the grace — keeps its bucket pending, and the minute is looked at
again at the next pass. An entry that lands in a minute the walk has passed (the store reports
the minutes it inserted into: `BucketStore.inserted_minutes`) has its minute looked at again at
the next pass too, not at the rescan minutes later.

A clock that goes back (a wall clock stepped back, or one that ran ahead and was set right) is
not trusted for what the passes before decided on it: minutes they closed that are open again at
the present time are walked again from the next pass — an entry inserted into one meanwhile
(a one-off whose time has passed is entered due at the present) is fired there, not left for the
rescan — and the instants held in memory (retries, revisits, the spacing of marker writes) move
back with the clock, so none waits the step out. Nothing fires twice for it: what the passes
before marked stays marked.

While it runs the trigger reports its progress (`vigil.core.progress.TriggerProgress`) to
`on_progress` after each job's entries and at the end of each pass: where its last complete pass
got to, how many due entries the pass in flight has left, and which jobs wait for a retry. The
watchdog reads it to tell a trigger working through a burst from a chain that lost its link.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TypeVar

from vigil.core.buckets import MINUTE, Bucket, BucketEntry, Mark, Outcome, minute_of
from vigil.core.chain import EntryPlan, Reason, Unlaunched, plan_entry, settle_unlaunched
from vigil.core.conflicts import CONFLICT_TRIES, retry_on_conflict
from vigil.core.ports import BucketStore, Clock, Conflict, JobCatalogue, Launcher, Ledger
from vigil.core.progress import RETRYING_PUBLISHED, TriggerProgress, job_key

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_R = TypeVar("_R")

COMPLETE_GRACE = timedelta(seconds=5)  # a minute is closed this long after it ends (late inserts)
#: Seconds from one trigger pass's start to the next one's, at least, in either tier: a pass starts
#: when the last one said an occurrence comes due (`TickReport.next_fire`), so fire times close
#: together are fired by one pass rather than one pass each.
MIN_PASS_GAP = 0.01

#: In a minute still open, a bucket's markers go out at most once per this long (with a pool). A
#: marker write rewrites the whole bucket (64 entries by default: about 20 ms of the API server's
#: CPU on 2 cores), and with jitter the fires of a minute are spread over it, so one write per
#: fire would be one per pass that fired in that bucket. Markers not yet written are counted as
#: written by this process; a leader that stops first repeats steps 1-3 for their entries, which
#: is harmless, and a minute is closed only once they are all written.
MARK_SPACING = timedelta(seconds=5)
MAX_MINUTES_PER_TICK = 120  # a long outage is walked over several ticks, two hours at a time
#: An entry whose handling failed (the API server busy or throttling, a timeout) is retried after
#: this, doubling per failure up to RETRY_MAX; every other job's entries go on meanwhile.
RETRY_INITIAL = timedelta(seconds=1)
RETRY_MAX = timedelta(seconds=60)
#: Past minutes held by failing entries that one pass looks at again, oldest first.
REVISITS_PER_TICK = 8
#: How often a past minute waiting only behind a failing entry elsewhere is read anyway.
REVISIT_IDLE = timedelta(minutes=5)


def seconds_to_next_pass(*, interval: float, next_fire: datetime | None, now: datetime) -> float:
    """How long a trigger loop waits after a pass that ran at `now` (either tier): the interval,
    or less when the pass said an occurrence fires sooner, but never under `MIN_PASS_GAP`."""
    if next_fire is None:
        return interval
    return min(interval, max(MIN_PASS_GAP, (next_fire - now).total_seconds()))


@dataclasses.dataclass
class _Marking:
    """A bucket's markers not yet written, counted as written meanwhile: `sent` in the write
    `done`, begun at `began` on `base`, and `queued` for the next write, which goes out once
    that one is in and `MARK_SPACING` after it began. It is kept that long even with nothing
    queued, so that the next markers queue rather than go out at once."""

    sent: dict[str, Mark]
    done: Future[Bucket]
    began: datetime
    base: Bucket
    queued: dict[str, Mark] = dataclasses.field(default_factory=dict)

    @property
    def marks(self) -> dict[str, Mark]:
        return {**self.sent, **self.queued}

    def over(self, now: datetime) -> bool:
        """Whether this write is in and `MARK_SPACING` has passed since it began: the queued
        markers may go out (until then, new ones queue behind it)."""
        return self.done.done() and now - self.began >= MARK_SPACING


@dataclasses.dataclass
class TickReport:
    """What one pass did; the metrics adapter and benchmarks read it."""

    now: datetime
    minutes: int = 0
    buckets: int = 0
    entries: int = 0
    fired: int = 0
    created: int = 0
    recorded: int = 0
    errors: int = 0
    pending_buckets: int = 0  # buckets left holding occurrences whose fire time has come
    lags: list[float] = dataclasses.field(default_factory=list)  # seconds, creation - fire time
    outcomes: Counter[str] = dataclasses.field(default_factory=Counter)
    #: When the next pass has something to fire: the earliest fire time ahead in the minutes still
    #: open (among them the occurrences this pass inserted), or the next minute's start. None when
    #: this pass did not reach the present (a catch-up walk).
    next_fire: datetime | None = None

    def merge(self, other: TickReport) -> None:
        """Add the counts of a part of this pass (one job's entries) into this report."""
        self.entries += other.entries
        self.fired += other.fired
        self.created += other.created
        self.recorded += other.recorded
        self.errors += other.errors
        self.lags.extend(other.lags)
        self.outcomes.update(other.outcomes)
        if other.next_fire is not None:
            self.expect(other.next_fire)

    def expect(self, fire_at: datetime) -> None:
        """An occurrence ahead fires at `fire_at`: the next pass is due by then."""
        self.next_fire = fire_at if self.next_fire is None else min(self.next_fire, fire_at)


@dataclasses.dataclass
class _Applied:
    """One job's entries as a worker left them: markers, counts, and inserts still in flight."""

    marks: dict[str, Mark]
    report: TickReport
    inserts: list[tuple[BucketEntry, Future[str]]]


class Trigger:
    def __init__(
        self,
        *,
        store: BucketStore,
        catalogue: JobCatalogue,
        launcher: Launcher,
        ledger: Ledger,
        clock: Clock,
        workers: int = 1,
        on_progress: Callable[[TriggerProgress], None] = lambda progress: None,
    ) -> None:
        self._store = store
        self._catalogue = catalogue
        self._launcher = launcher
        self._ledger = ledger
        self._clock = clock
        self._cursor: datetime | None = None
        self._last_now: datetime | None = None  # the time the last pass read: a later one before it means the clock went back
        #: Jobs whose entry failed in this pass: their later entries wait for the next pass. Each
        #: job's entries are applied on one thread, so a job's membership is only ever touched by it.
        self._held: set[tuple[str, str]] = set()
        #: Entries whose handling failed: (failures so far, not retried before), and for each job
        #: with one, that entry's key: the job's other entries wait until it goes through, in
        #: every pass (not only the pass it failed in). In memory: a new leader tries them at once.
        self._retry: dict[str, tuple[int, datetime]] = {}
        self._retry_minutes: dict[str, datetime] = {}  # the minute each failing entry is in
        self._failing: dict[tuple[str, str], str] = {}
        #: Closed minutes behind the cursor still holding a failing entry, and when to look again:
        #: at the retry time of a failing entry in it; else (entries waiting behind one elsewhere)
        #: only when a failing entry goes through, or at the slow safety-net pace.
        self._revisit: dict[datetime, datetime] = {}
        self._retry_lock = threading.Lock()  # the pool's threads share the three maps above
        #: What the trigger reports about itself (see vigil.core.progress): the `now` of the last
        #: pass that walked up to its own minute, and the due entries of the pass in flight not yet
        #: handled (its threads count them down under the lock above).
        self._on_progress = on_progress
        self._handled_before: datetime | None = None
        self._backlog = 0
        # Entries of different jobs are independent, so a hot minute is applied `workers` jobs at a
        # time; one job's entries stay in order on one thread (its ledger is read-modify-write).
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="trigger") if workers > 1 else None
        #: Each bucket's markers in flight (with a pool): only the pass's own thread touches it.
        self._marking: dict[str, _Marking] = {}
        #: Closed minutes an entry came into late (a completion refused: the bucket had moved):
        #: looked at again at the next pass. Only the pass's own thread touches it.
        self._look_again: set[datetime] = set()

    @property
    def cursor(self) -> datetime | None:
        return self._cursor

    def rescan(self) -> None:
        """Move the cursor back to the oldest pending minute (at leadership start, and periodically)."""
        now = self._clock.now()
        pending = [m for m in self._store.pending_minutes(until=minute_of(now)) if m not in self._revisit]
        oldest = pending[0] if pending else minute_of(now)
        if self._cursor is None or oldest < self._cursor:
            log.info("trigger cursor set to %s", oldest.isoformat())
            self._cursor = oldest

    def tick(self) -> TickReport:
        now = self._clock.now()
        if self._last_now is not None and now < self._last_now:
            self._went_back(self._last_now - now, now)
        self._last_now = now
        if self._cursor is None:
            self.rescan()
        assert self._cursor is not None
        report = TickReport(now=now)
        self._held = set()
        self._backlog = 0
        report.errors += self._send_queued(now)
        for minute in self._store.inserted_minutes():  # an entry inserted into a minute walked past
            if minute < self._cursor:
                self._revisit[minute] = now
        due = sorted(m for m, at in self._revisit.items() if m < self._cursor and at <= now)
        for minute in due[:REVISITS_PER_TICK]:
            if self._visit_minute(minute, now, report):
                del self._revisit[minute]
            else:
                self._revisit[minute] = self._next_look(minute, now)
        current = minute_of(now)
        minute = self._cursor
        next_cursor: datetime | None = None
        while minute <= current and report.minutes < MAX_MINUTES_PER_TICK:
            report.minutes += 1
            settled = self._visit_minute(minute, now, report)
            if not settled and _closed(minute, now):
                self._revisit[minute] = self._next_look(minute, now)  # held by failing entries: move on
            elif not settled and next_cursor is None:
                next_cursor = minute
            minute += MINUTE
        self._cursor = next_cursor or minute
        # Every minute up to now was walked (or, cut short, up to the first one not visited).
        self._handled_before = now if minute > current else minute
        if minute > current:
            report.expect(current + MINUTE)
            for marking in self._marking.values():
                if marking.queued:
                    report.expect(marking.began + MARK_SPACING)
        self._backlog = 0
        self._publish()
        return report

    def _went_back(self, by: timedelta, now: datetime) -> None:
        """The clock went back `by` since the last pass: walk again every minute open at `now`
        (the passes before may have closed them, and an entry may be inserted into one), and move
        the instants held in memory back with the clock."""
        log.warning("trigger: the clock went back %.3fs; minutes closed since are walked again", by.total_seconds())
        reopened = minute_of(now - MINUTE - COMPLETE_GRACE)  # the last minute closed at `now`, and those after it
        if self._cursor is not None and reopened < self._cursor:
            self._cursor = reopened
        with self._retry_lock:
            self._retry = {key: (failures, at - by) for key, (failures, at) in self._retry.items()}
            self._revisit = {minute: at - by for minute, at in self._revisit.items()}
        for marking in self._marking.values():
            marking.began -= by

    def drain(self) -> None:
        """Wait for every marker in flight (a leader stopping, a test reading the buckets)."""
        self._land(list(self._marking))

    def progress(self) -> TriggerProgress:
        """What the trigger reports about itself now (see vigil.core.progress)."""
        with self._retry_lock:
            retrying = sorted(job_key(*job) for job in self._failing)
            backlog = self._backlog
        return TriggerProgress(
            at=self._clock.now(),
            handled_before=self._handled_before,
            backlog=backlog,
            retrying=frozenset(retrying[:RETRYING_PUBLISHED]),
            retrying_count=len(retrying),
        )

    def _publish(self) -> None:
        try:
            self._on_progress(self.progress())
        except Exception:  # reporting must never stop firing
            log.exception("trigger: publishing progress failed")

    def _visit_minute(self, minute: datetime, now: datetime, report: TickReport) -> bool:
        """Process one minute; True when every entry in it is marked and it can be left behind."""
        closed = _closed(minute, now)
        settled = closed
        buckets = self._store.read_minute(minute)
        in_flight = [bucket.name for bucket in buckets if bucket.name in self._marking]
        if closed and in_flight:  # a minute is completed on its markers as written, not in flight
            report.errors += self._land(in_flight)
            buckets = self._store.read_minute(minute)
        buckets = [self._with_marks_in_flight(bucket) for bucket in buckets]
        self._release_settled(minute, buckets, now)
        with self._retry_lock:
            self._backlog += sum(len(bucket.due(now)) for bucket in buckets)
        for bucket in self._process(buckets, now, report):
            report.buckets += 1
            pending = bucket.pending()  # one reading of the bucket: passes come as often as fires
            ahead = [e.fire_at for e in pending if e.fire_at > now]
            if ahead and not closed:
                report.expect(min(ahead))
            if len(ahead) < len(pending):  # some of them have come due
                report.pending_buckets += 1
            if pending:
                settled = False
            elif closed and not self._completed(bucket):
                settled = False
                self._look_again.add(minute)
        return settled

    def _completed(self, bucket: Bucket) -> bool:
        """Complete a closed bucket whose every entry is marked, as read; False when an entry
        was inserted since (the completion is conditional on the version read): the minute is
        looked at again at the next pass."""
        try:
            self._store.complete(bucket.name, version=bucket.version)
        except Conflict:
            return False
        return True

    def _process(self, buckets: list[Bucket], now: datetime, report: TickReport) -> list[Bucket]:
        """Apply the minute's due entries, every bucket's at once, then mark each bucket once.

        The jobs' groups go to the pool together, earliest fire time first, and the buckets'
        marks are written side by side, while the next pass begins: a pass costs one launch of
        round trip, not one launch and one mark per bucket (a mark rewrites a large object, and
        a minute has several)."""
        by_job: dict[tuple[str, str], dict[str, BucketEntry]] = {}
        owners: dict[str, list[int]] = {}  # entry key -> the buckets holding it (one, but a key is a key)
        for index, bucket in enumerate(buckets):
            for entry in bucket.due(now):
                by_job.setdefault((entry.namespace, entry.name), {})[entry.key] = entry
                owners.setdefault(entry.key, []).append(index)
        groups = sorted(
            (sorted(entries.values(), key=lambda e: e.fire_at) for entries in by_job.values()),
            key=lambda group: group[0].fire_at,
        )
        parts = self._map(lambda group: self._apply_group(group, now), groups)
        marks: list[dict[str, Mark]] = [{} for _ in buckets]
        for applied in parts:
            self._inserted(applied, now)
            report.merge(applied.report)
            for key, mark in applied.marks.items():
                for index in owners[key]:
                    marks[index][key] = mark
        return [
            self._marked(bucket, marks[index], now) if marks[index] else bucket for index, bucket in enumerate(buckets)
        ]

    def _marked(self, bucket: Bucket, marks: dict[str, Mark], now: datetime) -> Bucket:
        """The bucket with `marks` on it. With a pool, in a minute still open, they go out on it
        and the bucket is returned as it will be; else they are written now. One write per
        bucket is in flight at a time, and one per `MARK_SPACING`: markers that come meanwhile
        are queued for the next (`_send_queued`)."""
        if self._pool is None or _closed(bucket.minute, now):  # a closed minute is completed at once
            if bucket.name in self._marking:  # (its visit landed them already: kept for safety)
                self._land([bucket.name])  # what is in flight and queued first; a stale version re-reads
            return self._mark(bucket, marks)
        marking = self._marking.get(bucket.name)
        if marking is None:
            self._marking[bucket.name] = self._send(bucket, marks, now)
        else:
            marking.queued.update(marks)
        return dataclasses.replace(bucket, marks={**bucket.marks, **marks})

    def _send(self, base: Bucket, marks: dict[str, Mark], now: datetime) -> _Marking:
        assert self._pool is not None
        return _Marking(marks, self._pool.submit(self._mark, base, marks), now, base)

    def _send_queued(self, now: datetime) -> int:
        """Land the marker writes that are over (`_Marking.over`), and send what was queued
        behind them; how many writes failed."""
        errors = 0
        for name, marking in list(self._marking.items()):
            if not marking.over(now):
                continue
            landed = self._landed(marking)
            errors += landed is None
            if marking.queued:
                self._marking[name] = self._send(landed or marking.base, marking.queued, now)
            else:
                del self._marking[name]
        return errors

    def _with_marks_in_flight(self, bucket: Bucket) -> Bucket:
        marking = self._marking.get(bucket.name)
        return dataclasses.replace(bucket, marks={**bucket.marks, **marking.marks}) if marking else bucket

    def _land(self, names: list[str]) -> int:
        """Write these buckets' markers, in flight and queued, and wait for them; how many of
        the writes failed."""
        errors = 0
        for name in names:
            marking = self._marking.pop(name)
            landed = self._landed(marking)
            errors += landed is None
            if marking.queued:
                try:
                    self._mark(landed or marking.base, marking.queued)
                except Exception:
                    log.exception("trigger: %d markers not written; their entries come due again", len(marking.queued))
                    errors += 1
        return errors

    def _landed(self, marking: _Marking) -> Bucket | None:
        """The bucket as marked, once its write is in; None when the write failed (its entries
        come due again: the next pass repeats them, and a repeat is harmless)."""
        try:
            return marking.done.result()
        except Exception:
            log.exception("trigger: %d markers not written; their entries come due again", len(marking.sent))
            return None

    def _map(self, fn: Callable[[_T], _R], items: list[_T]) -> list[_R]:
        """`fn` over `items` in order, on the pool when there is one and more than one item."""
        if self._pool is None or len(items) <= 1:
            return [fn(item) for item in items]
        return list(self._pool.map(fn, items))

    def _apply_group(self, entries: list[BucketEntry], now: datetime) -> _Applied:
        """One job's due entries, in fire-time order; returns their markers, what was done, and
        the inserts of their next occurrences still in flight (the pass waits for those before
        it marks: see `_inserted`).

        When an entry fails, the job's later entries wait for the next pass too, in this minute
        and every later one: applying them would move the job's recorded progress past the
        failed occurrence, which then could never be recorded (dropped without a trace). Other
        jobs go on.
        """
        report = TickReport(now=now)
        marks: dict[str, Mark] = {}
        inserts: list[tuple[BucketEntry, Future[str]]] = []
        for entry in entries:
            job = (entry.namespace, entry.name)
            failing = self._failing.get(job)
            waiting = self._retry.get(entry.key)
            if job in self._held or failing not in (None, entry.key) or (waiting and now < waiting[1]):
                self._held.add(job)
                break
            report.entries += 1
            try:
                lookup = self._catalogue.lookup(entry.namespace, entry.name, uid=entry.uid)
                plan = plan_entry(entry, lookup.job, now=now, invalid=lookup.invalid)
                plan, inserted = self._apply(plan, now, report)
            except Exception:  # one bad entry must not hold up other jobs; it is retried with backoff
                log.exception("trigger: entry %s of %s/%s failed", entry.key, entry.namespace, entry.name)
                report.errors += 1
                self._back_off(entry, now)
                self._held.add(job)
                break
            if entry.key in self._retry:
                self._released(entry.key, now)
            marks[entry.key] = plan.mark
            if inserted is not None:
                inserts.append((entry, inserted))
        with self._retry_lock:
            self._backlog -= len(entries)  # applied, or waiting for a retry (named in `retrying`)
        self._publish()
        return _Applied(marks, report, inserts)

    def _inserted(self, applied: _Applied, now: datetime) -> None:
        """Wait for the group's inserts: an entry is marked only once its next occurrence is in.
        One whose insert failed is left unmarked and retried with backoff, like any failed entry
        (it comes due again, and its repeat inserts, meets "exists" and records idempotently)."""
        for entry, inserted in applied.inserts:
            try:
                inserted.result()
            except Exception:
                log.exception("trigger: the occurrence after %s of %s/%s was not inserted; it comes due again",
                              entry.key, entry.namespace, entry.name)  # fmt: skip
                applied.report.errors += 1
                applied.marks.pop(entry.key, None)
                self._back_off(entry, now)

    def _release_settled(self, minute: datetime, buckets: list[Bucket], now: datetime) -> None:
        """Failing entries of this minute that another pass settled (or that are gone) block no more."""
        with self._retry_lock:
            failing = {key for key, at in self._retry_minutes.items() if at == minute}
        if not failing:
            return
        waiting = {e.key for b in buckets for e in b.entries if e.key not in b.marks}
        for key in failing - waiting:
            self._released(key, now)

    def _released(self, key: str, now: datetime) -> None:
        """A failing entry went through (or was settled elsewhere): its job's entries may go now."""
        with self._retry_lock:
            self._retry.pop(key, None)
            self._retry_minutes.pop(key, None)
            for job in [job for job, k in self._failing.items() if k == key]:
                del self._failing[job]
            self._revisit.update(dict.fromkeys(self._revisit, now))

    def _next_look(self, minute: datetime, now: datetime) -> datetime:
        if minute in self._look_again:  # an entry came in late: at the next pass
            self._look_again.discard(minute)
            return now
        with self._retry_lock:
            retries = [self._retry[k][1] for k, m in self._retry_minutes.items() if m == minute and k in self._retry]
        return min(retries, default=now + REVISIT_IDLE)

    def _back_off(self, entry: BucketEntry, now: datetime) -> None:
        """Hold the failed entry (and its job's others) until a backoff that doubles per failure."""
        with self._retry_lock:
            failures = self._retry.get(entry.key, (0, now))[0] + 1
            delay = min(RETRY_MAX, RETRY_INITIAL * 2 ** min(failures - 1, 16))
            self._retry[entry.key] = (failures, now + delay)
            self._retry_minutes[entry.key] = minute_of(entry.fire_at)
            self._failing[(entry.namespace, entry.name)] = entry.key

    def _apply(self, plan: EntryPlan, now: datetime, report: TickReport) -> tuple[EntryPlan, Future[str] | None]:
        """Launch and record one entry's plan; the insert of its next occurrence goes out first and
        is returned in flight. The worker goes on to the next job without waiting for it: in a
        1,000-job burst, waiting here was 61 % of each trigger worker's time (every insert waits
        for the group commit before it), and held the launches to 50 a second."""
        inserted = self._store.insert_later(plan.insert) if plan.insert is not None else None
        if plan.insert is not None and plan.insert.fire_at > now:
            report.expect(plan.insert.fire_at)
        launched: dict[str, bool] = {}
        unlaunched: dict[str, Unlaunched] = {}
        for fire in plan.fires:
            result = self._launcher.launch(fire)
            if result.skipped:
                unlaunched[fire.execution_id] = Unlaunched(Outcome.SKIPPED, Reason(result.skipped))
                continue
            if result.refused:
                why = Reason(result.refused_reason) if result.refused_reason else Reason.LAUNCH_REFUSED
                unlaunched[fire.execution_id] = Unlaunched(Outcome.FAILED, why, result.refused)
                continue
            launched[fire.execution_id] = result.created
            report.fired += 1
            if result.created:
                report.created += 1
                report.lags.append((self._clock.now() - fire.occurrence.fire_at).total_seconds())
        plan = settle_unlaunched(plan, unlaunched, now=now)
        self._ledger.record(plan, launched=launched, now=now)
        report.recorded += len(plan.records)
        report.outcomes["Fired"] += sum(launched.values())
        for record in plan.records:
            report.outcomes[str(record.outcome)] += 1
        return plan, inserted

    def _mark(self, bucket: Bucket, marks: dict[str, Mark]) -> Bucket:
        """Write `marks` on `bucket`, read again after each conflict (the one retry policy); a
        bucket gone meanwhile raises its Conflict at once."""
        read = bucket
        gone: Conflict | None = None

        def attempt() -> Bucket | None:
            nonlocal read, gone
            try:
                return self._store.mark(read.name, marks, version=read.version)
            except Conflict as conflict:
                fresh = [b for b in self._store.read_minute(read.minute) if b.name == read.name]
                if not fresh:
                    gone = conflict
                    return None
                read = fresh[0]
                raise

        try:
            marked = retry_on_conflict(attempt)
        except Conflict:
            raise Conflict(f"bucket {bucket.name}: markers not written after {CONFLICT_TRIES} conflicts") from None
        if marked is None:
            assert gone is not None
            raise gone
        return marked


def _closed(minute: datetime, now: datetime) -> bool:
    """Whether the minute is closed: no late insert can land in it any more."""
    return now >= minute + MINUTE + COMPLETE_GRACE
