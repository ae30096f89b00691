"""Behind or broken: the trigger's published progress, and how the watchdog judges late chain heads by it.

Covers what the trigger reports (`Trigger.progress` through `on_progress`) while it works through
a burst whose launches are slow — the backlog counts down, the last complete pass is where it was,
and every head still unmarked is judged *behind*; after the pass, where it got to; a job whose
launch keeps failing named as retrying — then the watchdog's rules over that progress, as a table
of named rows (behind, retrying, passed over, a trigger that stopped publishing, nothing ever
published), the LaunchFailing finding (refused for good, being retried, neither), and hypothesis
properties: a late head is broken exactly when the progress cannot account for it, and publishing
more progress never turns a head the trigger went past into one it is behind on; and the progress
as the Lease carries it (annotations), unreadable ones read as none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_trigger import T0, every_job
from vigil.core.chain import Fire, JobView, first_entry
from vigil.core.memory import (
    FakeClock,
    MemoryBucketStore,
    MemoryCatalogue,
    MemoryLauncher,
    MemoryLedger,
)
from vigil.core.ports import Launch
from vigil.core.progress import HeadState, TriggerProgress, head_state, job_key
from vigil.core.trigger import Trigger
from vigil.core.watchdog import (
    DEFAULT_CHAIN_GRACE,
    FindingKind,
    JobFacts,
    WatchdogReason,
    assess_chain,
    assess_job,
    assess_launch,
)
from vigil.kube.stores.progress import progress_from_annotations, progress_to_annotations

R = WatchdogReason
SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
GRACE = DEFAULT_CHAIN_GRACE


# --- what the trigger publishes ---------------------------------------------------------------


class SlowLauncher(MemoryLauncher):
    """Each launch takes `each` of the fake clock: a burst of due jobs keeps the trigger busy for minutes."""

    def __init__(self, clock: FakeClock, each: timedelta, *, failing: str = "") -> None:
        super().__init__()
        self.clock = clock
        self.each = each
        self.failing = failing

    def launch(self, fire: Fire) -> Launch:
        self.clock.advance(self.each)
        if fire.job.name == self.failing:
            raise RuntimeError("429: too many requests")
        return super().launch(fire)


@dataclasses.dataclass
class Burst:
    clock: FakeClock
    store: MemoryBucketStore
    trigger: Trigger
    published: list[TriggerProgress]
    jobs: list[JobView]

    def unmarked_heads(self) -> list[tuple[str, datetime]]:
        """(job name, fire time) of every unmarked entry whose fire time has come: the late heads."""
        now = self.clock.now()
        out = []
        for minute in self.store.pending_minutes(until=now):
            for bucket in self.store.read_minute(minute):
                out += [(e.name, e.fire_at) for e in bucket.entries if e.key not in bucket.marks and e.fire_at <= now]
        return out


def burst(
    count: int, *, each: timedelta, failing: str = "", on_progress: Callable[[TriggerProgress], None] | None = None
) -> Burst:
    """`count` jobs every hour, all due at T0 + 1h; the first pass (at T0) has nothing to do."""
    clock = FakeClock(T0)
    store = MemoryBucketStore(shards=2)
    catalogue = MemoryCatalogue()
    published: list[TriggerProgress] = []
    launcher = SlowLauncher(clock, each, failing=failing)
    trigger = Trigger(
        store=store, catalogue=catalogue, launcher=launcher, ledger=MemoryLedger(catalogue), clock=clock,
        on_progress=on_progress or published.append,
    )  # fmt: skip
    jobs = [every_job(f"j{i:03}", every=timedelta(hours=1)) for i in range(count)]
    for job in jobs:
        catalogue.put(job)
        head = first_entry(job, now=T0)
        assert head is not None
        store.insert(head)
    trigger.tick()
    return Burst(clock, store, trigger, published, jobs)


def test_a_pass_reports_where_it_got_to_and_nothing_left() -> None:
    b = burst(3, each=SECOND)
    assert b.published[-1] == TriggerProgress(at=T0, handled_before=T0, backlog=0)


def test_while_a_burst_is_worked_through_every_late_head_is_behind_not_broken() -> None:
    judged: list[HeadState] = []

    def watch(progress: TriggerProgress) -> None:
        """The watchdog, looking at the store each time the trigger reports."""
        b.published.append(progress)
        for name, fire_at in b.unmarked_heads():
            judged.append(
                head_state(progress, namespace="ns", name=name, fire_at=fire_at, now=b.clock.now(), alive_within=GRACE)
            )

    b = burst(60, each=5 * SECOND, on_progress=watch)  # 60 launches of 5 s: the last fires five minutes late
    due = T0 + timedelta(hours=1)
    b.clock.set(due)
    first = len(b.published)
    b.trigger.tick()
    assert b.clock.now() - due == 5 * MINUTE, "the pass took five minutes of the clock"
    mid_pass = b.published[first:-1]
    assert [p.backlog for p in mid_pass] == list(range(59, -1, -1)), "the backlog counts down, one job at a time"
    assert {p.handled_before for p in mid_pass} == {T0}, "the last complete pass stays where it was"
    assert len(judged) > 60 and set(judged) == {HeadState.BEHIND}
    assert b.published[-1].handled_before == due
    assert not b.unmarked_heads()


def test_a_head_the_trigger_went_past_is_passed() -> None:
    b = burst(1, each=SECOND)
    b.clock.set(T0 + timedelta(hours=1, minutes=5))
    b.trigger.tick()
    progress = b.trigger.progress()
    assert progress.handled_before == T0 + timedelta(hours=1, minutes=5)
    late = T0 + timedelta(hours=1, minutes=1)  # an entry in a minute the pass already closed
    assert head_state(progress, namespace="ns", name="j000", fire_at=late, now=b.clock.now(), alive_within=GRACE) is (
        HeadState.PASSED
    )


def test_a_job_whose_launch_keeps_failing_is_named_as_retrying() -> None:
    b = burst(3, each=SECOND, failing="j001")
    b.clock.set(T0 + timedelta(hours=1))
    b.trigger.tick()
    progress = b.published[-1]
    assert progress.retrying == {job_key("ns", "j001")} and progress.retrying_count == 1
    [(name, fire_at)] = b.unmarked_heads()
    assert name == "j001"
    state = head_state(progress, namespace="ns", name=name, fire_at=fire_at, now=b.clock.now() + 5 * MINUTE,
                       alive_within=10 * MINUTE)  # fmt: skip
    assert state is HeadState.RETRYING


def test_a_failing_report_never_stops_firing() -> None:
    def broken(progress: TriggerProgress) -> None:
        raise RuntimeError("the API server is gone")

    b = burst(3, each=SECOND, on_progress=broken)
    b.clock.set(T0 + timedelta(hours=1))
    report = b.trigger.tick()
    assert report.fired == 3


# --- the watchdog's verdicts --------------------------------------------------------------------

NOW = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)
HEAD = NOW - 5 * MINUTE  # past the grace


def facts(**changes: object) -> JobFacts:
    base = JobFacts(
        namespace="ns", name="j", recurring=True, enabled_since=NOW - timedelta(days=3), next_occurrence=HEAD
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]  # each test passes the fields it varies, by name


def progress(**changes: object) -> TriggerProgress:
    base = TriggerProgress(at=NOW - 5 * SECOND, handled_before=HEAD - MINUTE, backlog=400)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]  # each test passes the fields it varies, by name


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    progress: TriggerProgress | None
    status: bool
    reason: WatchdogReason
    words: str


ROWS = [
    Row("nothing published (an older operator): stale, as before", None, True, R.STALE_NEXT_OCCURRENCE,
        "published no progress"),
    Row("the trigger has not reached it: behind", progress(), False, R.TRIGGER_BEHIND, "400 due entries left"),
    Row("no pass completed yet: behind", progress(handled_before=None), False, R.TRIGGER_BEHIND,
        "has not completed a pass"),
    Row("its launch is being retried: not broken", progress(retrying=frozenset({"ns/j"}), retrying_count=1), False,
        R.LAUNCH_RETRYING, "LaunchFailing"),
    Row("the trigger went past it: broken", progress(handled_before=NOW), True, R.STALE_NEXT_OCCURRENCE,
        "already closed"),
    Row("the trigger stopped publishing: broken", progress(at=NOW - GRACE - SECOND), True, R.STALE_NEXT_OCCURRENCE,
        "may be down"),
]  # fmt: skip


def test_late_heads_judged_by_progress() -> None:
    for row in ROWS:
        finding = assess_chain(facts(), NOW, progress=row.progress)
        assert (finding.status, finding.reason) == (row.status, row.reason), row.name
        assert finding.repair_needed is row.status, row.name
        assert row.words in finding.message, (row.name, finding.message)


def test_a_missing_head_is_broken_whatever_the_trigger_says() -> None:
    finding = assess_chain(facts(next_occurrence=None), NOW, progress=progress())
    assert (finding.status, finding.reason) == (True, R.NO_FUTURE_OCCURRENCE)


def test_a_job_the_operator_has_not_handled_yet_is_not_scheduled_yet_not_broken() -> None:
    """Onboarding behind: thousands of new jobs wait for the operator's handler, each without a head."""
    waiting = facts(next_occurrence=None, scheduled=False, enabled_since=NOW - timedelta(minutes=10))
    finding = assess_chain(waiting, NOW, progress=None)
    assert (finding.status, finding.reason) == (False, R.NOT_YET_SCHEDULED)
    handled = dataclasses.replace(waiting, scheduled=True)
    assert (assess_chain(handled, NOW).status, assess_chain(handled, NOW).reason) == (True, R.NO_FUTURE_OCCURRENCE)


def test_launch_failing_when_refused_for_good() -> None:
    since = NOW - timedelta(minutes=7)
    finding = assess_launch(
        facts(launch_refused_since=since, launch_refused_message="2026-08-01T11:53:00Z was refused: exceeded quota"),
        NOW, progress=None, alive_within=GRACE,
    )  # fmt: skip
    assert (finding.kind, finding.status, finding.reason) == (FindingKind.LAUNCH_FAILING, True, R.LAUNCH_REFUSED)
    assert finding.message == "launches refused for 7m: 2026-08-01T11:53:00Z was refused: exceeded quota"
    assert finding.age == timedelta(minutes=7)


def test_launch_failing_while_retried_and_clear_otherwise() -> None:
    retrying = progress(retrying=frozenset({"ns/j"}), retrying_count=1)
    finding = assess_launch(facts(), NOW, progress=retrying, alive_within=GRACE)
    assert (finding.status, finding.reason) == (True, R.LAUNCH_RETRYING)
    stale = dataclasses.replace(retrying, at=NOW - GRACE - SECOND)
    for p in (None, progress(), stale):
        finding = assess_launch(facts(), NOW, progress=p, alive_within=GRACE)
        assert (finding.status, finding.reason, finding.applicable) == (False, R.LAUNCHING, True)


def test_the_report_carries_launch_failing_and_the_watchdog_leaves_its_condition_to_the_ledger() -> None:
    report = assess_job(facts(launch_refused_since=NOW), NOW, suspended_max_age=timedelta(days=7))
    assert report.launch in report.findings and report.launch.status
    assert not FindingKind.LAUNCH_FAILING.watchdog_writes_condition
    assert all(kind.watchdog_writes_condition for kind in FindingKind if kind is not FindingKind.LAUNCH_FAILING)


# --- properties ----------------------------------------------------------------------------------

OFFSETS = st.integers(min_value=-3600, max_value=3600)


@st.composite
def published(draw: st.DrawFn) -> TriggerProgress | None:
    if draw(st.booleans()):
        return None
    handled = draw(st.none() | OFFSETS)
    retrying = frozenset({"ns/j"}) if draw(st.booleans()) else frozenset()
    return TriggerProgress(
        at=NOW + draw(OFFSETS) * SECOND,
        handled_before=None if handled is None else NOW + handled * SECOND,
        backlog=draw(st.integers(min_value=0, max_value=10_000)),
        retrying=retrying,
        retrying_count=len(retrying),
    )


@settings(max_examples=400, deadline=None)
@given(p=published(), head=OFFSETS)
def test_a_late_head_is_broken_exactly_when_progress_cannot_account_for_it(p: TriggerProgress | None, head: int) -> None:
    fire_at = NOW + head * SECOND
    finding = assess_chain(facts(next_occurrence=fire_at), NOW, progress=p)
    late = NOW - fire_at > GRACE
    live = p is not None and NOW - p.at <= GRACE
    accounted = live and p is not None and (
        "ns/j" in p.retrying or p.handled_before is None or fire_at >= p.handled_before
    )
    assert finding.status == (late and not accounted)


@settings(max_examples=400, deadline=None)
@given(p=published(), head=OFFSETS, further=st.integers(min_value=0, max_value=3600))
def test_more_progress_never_excuses_a_head_the_trigger_went_past(
    p: TriggerProgress | None, head: int, further: int
) -> None:
    if p is None or p.handled_before is None:
        return
    fire_at = NOW + head * SECOND
    before = head_state(p, namespace="ns", name="j", fire_at=fire_at, now=NOW, alive_within=GRACE)
    later = dataclasses.replace(p, handled_before=p.handled_before + further * SECOND)
    after = head_state(later, namespace="ns", name="j", fire_at=fire_at, now=NOW, alive_within=GRACE)
    if before is HeadState.PASSED:
        assert after is HeadState.PASSED


# --- the Lease's annotations ---------------------------------------------------------------------


def test_progress_survives_the_lease_annotations() -> None:
    sent = TriggerProgress(
        at=NOW, handled_before=HEAD, backlog=12, retrying=frozenset({"ns/a", "ns/b"}), retrying_count=600
    )
    assert progress_from_annotations(progress_to_annotations(sent)) == sent
    never = TriggerProgress(at=NOW)
    assert progress_from_annotations(progress_to_annotations(never)) == never


def test_unreadable_annotations_read_as_no_progress() -> None:
    assert progress_from_annotations({}) is None
    assert progress_from_annotations({"vigil.dev/published-at": "yesterday"}) is None
    assert progress_from_annotations({"vigil.dev/published-at": "2026-08-01T12:00:00Z", "vigil.dev/backlog": "x"}) is None
