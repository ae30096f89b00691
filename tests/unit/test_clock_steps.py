"""A leader's wall clock stepped ahead of the API server's and back, on injected clocks (no sleeps).

Covers `vigil.core.servertime` — what a `Date` reading says of the API server's time, the time
`bounded_now` decides (a table of named rows, and a property: a clock found ahead never yields
a time the API server's has not reached; a clock not ahead is the time as it is), and
`ServerBoundedClock` (it logs once when it stops trusting the own clock and once when it trusts
it again, reports each reading's skew, moves on with the API server's time while the clock is
ahead) — and the
trigger's side (`vigil.core.trigger`): a clock that goes back reopens the minutes the passes
before closed, so a one-off entered into one of them meanwhile fires at the next pass, not at
the rescan minutes later; nothing fires twice; retries keep their backoff, not the step; an
entry inserted late into a minute the trigger is completing, or has completed, fires at the next
pass (the completion is conditional on the version read, and the store says which minutes it
inserted into). Last,
the two together: the trigger on a `ServerBoundedClock` whose own clock steps a minute ahead and
back fires each occurrence once, none before the API server's time reaches it.

The API server's clock here is the test's `Server`: its time is `START` plus the monotonic
seconds, and it stamps a reading as the `Date` header does (whole seconds).
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vigil.core.buckets import BucketEntry, minute_of
from vigil.core.chain import CatchUp, CatchUpPolicy, Fire, JobView, first_entry
from vigil.core.memory import (
    FakeClock,
    MemoryBucketStore,
    MemoryCatalogue,
    MemoryLauncher,
    MemoryLedger,
)
from vigil.core.ports import Launch
from vigil.core.schedule import Schedule
from vigil.core.servertime import TOLERANCE, ServerBoundedClock, ServerTimeReading, bounded_now
from vigil.core.trigger import RETRY_INITIAL, Trigger

START = datetime(2026, 12, 6, 12, 0, 30, tzinfo=UTC)
SECOND = timedelta(seconds=1)
STEP = timedelta(seconds=60)


@dataclasses.dataclass
class Server:
    """The API server's clock, `START` at monotonic 0, and a monotonic clock the test moves."""

    at: float = 0.0  # monotonic seconds

    def monotonic(self) -> float:
        return self.at

    def time(self) -> datetime:
        return START + timedelta(seconds=self.at)

    def advance(self, seconds: float) -> None:
        self.at += seconds

    def reading(self, *, round_trip: float = 0.0) -> ServerTimeReading:
        """A write sent now and answered `round_trip` later, stamped halfway (whole seconds)."""
        sent = self.at
        self.advance(round_trip / 2)
        date = self.time().replace(microsecond=0)
        self.advance(round_trip / 2)
        return ServerTimeReading(date, sent=sent, received=self.at)


# --- what one reading says ---


def test_a_reading_brackets_the_api_servers_time_within_a_second_and_the_round_trip() -> None:
    server = Server(at=0.7)  # the server's time is 12:00:30.7: the header says 12:00:30
    reading = server.reading(round_trip=0.2)
    server.advance(3.0)
    assert reading.earliest(server.at) <= server.time() <= reading.latest(server.at)
    assert reading.latest(server.at) - reading.earliest(server.at) == timedelta(seconds=1.2)


# --- the time decided: a table ---


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    own: timedelta  # the own clock's offset from the API server's time
    fraction: float = 0.5  # where in its second the API server's time was when it stamped the reading
    expect: str = "own"  # "own" or "earliest"
    trusted: bool = True


ROWS = [
    Row("no drift: the own clock, nothing waits", own=timedelta(0)),
    Row("no drift, stamped at the end of its second", own=timedelta(0), fraction=0.99),
    Row("a minute behind: taken as it is (late, never early)", own=-STEP),
    Row("ahead, within the tolerance past the latest", own=timedelta(seconds=1.4)),
    Row("a minute ahead: the earliest the API server's time can be", own=STEP, expect="earliest", trusted=False),
    Row("a minute ahead, stamped at the end of its second", own=STEP, fraction=0.99, expect="earliest", trusted=False),
    Row("two seconds ahead: past the tolerance", own=timedelta(seconds=2.1), fraction=0.0, expect="earliest", trusted=False),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_the_time_decided(row: Row) -> None:
    server = Server(at=row.fraction)
    reading = server.reading()
    server.advance(2.0)
    own = server.time() + row.own
    decided = bounded_now(own, [reading], at=server.at)
    expected = {"own": own, "earliest": reading.earliest(server.at)}[row.expect]
    assert (decided.now, decided.trusted) == (expected, row.trusted)
    if not decided.trusted:
        assert decided.now <= server.time(), "a time the API server's has not reached"


def test_without_a_reading_the_own_clock_is_the_time() -> None:
    own = START + STEP
    assert bounded_now(own, [], at=5.0).now == own


@given(
    fraction=st.floats(0.0, 0.999),
    renewals=st.lists(st.tuples(st.floats(0.0, 6.0), st.floats(0.0, 0.5)), min_size=1, max_size=4),
    age=st.floats(0.0, 12.0),
    offset=st.floats(-120.0, 120.0),
)
def test_a_clock_found_ahead_never_gives_a_time_the_api_server_has_not_reached(
    fraction: float, renewals: list[tuple[float, float]], age: float, offset: float
) -> None:
    server = Server(at=fraction)
    readings = []
    for wait, round_trip in renewals:  # a renewal after `wait` seconds, answered after `round_trip`
        server.advance(wait)
        readings.append(server.reading(round_trip=round_trip))
    server.advance(age)
    own = server.time() + timedelta(seconds=offset)
    decided = bounded_now(own, readings, at=server.at)
    newest = readings[-1]
    assert decided.now <= own
    if decided.trusted:
        assert decided.now == own
        assert own <= newest.latest(server.at) + TOLERANCE
    else:
        assert decided.now <= server.time(), "a time the API server's has not reached"
        late = server.time() - decided.now
        assert late <= server.time() - newest.earliest(server.at)  # no later than by the newest alone
        assert late <= timedelta(seconds=1.5)  # the stamp's second and the round trip at most
    if offset <= 0:  # a clock not ahead of the API server's is the time: nothing waits
        assert decided.trusted and decided.now == own


# --- the clock the leader's parts are handed ---


class SteppedClock:
    """The own wall clock: the API server's time plus an offset the test steps."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.offset = timedelta(0)

    def now(self) -> datetime:
        return self.server.time() + self.offset


def test_a_clock_stepped_a_minute_ahead_follows_the_api_server_logs_once_and_trusts_it_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = Server(at=0.3)
    own = SteppedClock(server)
    skews: list[float] = []
    clock = ServerBoundedClock(own, monotonic=server.monotonic, on_skew=skews.append)
    clock.observe(server.reading(round_trip=0.01))
    assert clock.now() == own.now()  # in step: the own clock as it is
    given = [clock.now()]
    caplog.set_level(logging.INFO, logger="vigil.core.servertime")

    own.offset = STEP
    for _ in range(60):  # 6 s ahead, a renewal every 2 s, the time read every 100 ms
        server.advance(0.1)
        if round(server.at * 10) % 20 == 0:
            clock.observe(server.reading(round_trip=0.01))
        given.append(clock.now())
        assert given[-1] <= server.time(), "a time the API server's has not reached"
    assert given[1:] == sorted(given[1:]), "the time went back while the clock was ahead"
    assert server.time() - given[-1] < timedelta(seconds=1.1)  # late by the header's second at most
    assert skews[-1] == pytest.approx(STEP.total_seconds() - 1.0, abs=0.5)

    own.offset = timedelta(0)
    server.advance(0.1)
    assert clock.now() == own.now()  # set right: the own clock again
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "ahead of the API server's" in warnings[0].getMessage()
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
        "the wall clock agrees with the API server's again: it is the time once more"
    ]


def test_readings_bound_the_time_together_and_one_from_a_stepped_api_server_replaces_them() -> None:
    server = Server(at=0.9)
    own = SteppedClock(server)
    clock = ServerBoundedClock(own, monotonic=server.monotonic)
    clock.observe(server.reading())  # stamped late in its second: the earliest is 0.9 s behind
    server.advance(2.2)
    clock.observe(server.reading())  # early in its second: 0.1 s behind
    own.offset = STEP
    assert server.time() - timedelta(seconds=0.11) <= clock.now() <= server.time()  # the tighter of the two
    server.advance(0.7)
    clock.observe(server.reading())  # late again (0.8 s): the time does not go back for it
    assert server.time() - timedelta(seconds=0.11) <= clock.now() <= server.time()

    stepped_back = Server(at=server.at - 30.0)  # the API server's own clock set 30 s back
    reading = stepped_back.reading()
    clock.observe(dataclasses.replace(reading, sent=server.at, received=server.at))  # answered just now
    assert clock.now() == reading.date  # the earliest by the new reading alone


# --- the trigger, on a clock that goes back ---


def one_off(name: str, run_at: datetime) -> JobView:
    return JobView(
        namespace="ns", name=name, uid=f"uid-{name}", generation=1, schedule=Schedule.one_off(run_at),
        schedule_hash="h1", jitter=timedelta(0), catch_up=CatchUp(policy=CatchUpPolicy.ALL),
    )  # fmt: skip


def every_five_seconds(name: str) -> JobView:
    return dataclasses.replace(one_off(name, START), schedule=Schedule.from_interval(5 * SECOND, anchor=START))


@dataclasses.dataclass
class Leader:
    clock: FakeClock
    store: MemoryBucketStore
    catalogue: MemoryCatalogue
    launcher: MemoryLauncher
    trigger: Trigger

    def add(self, job: JobView) -> None:
        """What the job controller does with a new job: its first entry, at the clock's time."""
        self.catalogue.put(job)
        head = first_entry(job, now=self.clock.now())
        assert head is not None
        self.store.insert(head)

    def run(self, seconds: float, *, step: float = 0.25) -> None:
        for _ in range(round(seconds / step)):
            self.clock.advance(timedelta(seconds=step))
            self.trigger.tick()

    def fired(self) -> list[tuple[str, datetime]]:
        return sorted((f.job.name, f.occurrence.nominal) for f in self.launcher.creations)


def leader(start: datetime = START) -> Leader:
    clock = FakeClock(start)
    store = MemoryBucketStore(shards=2)
    catalogue = MemoryCatalogue()
    launcher = MemoryLauncher()
    trigger = Trigger(store=store, catalogue=catalogue, launcher=launcher, ledger=MemoryLedger(catalogue), clock=clock)
    return Leader(clock, store, catalogue, launcher, trigger)


def test_a_one_off_entered_after_the_clock_stepped_back_into_a_minute_closed_ahead_fires_at_once() -> None:
    """The long variant's unfired occurrence: the passes ahead closed the present minute; the
    clock steps back; a job whose time has passed is entered due now, in that minute, behind
    the cursor. It fires at the next pass, not at the rescan (minutes later)."""
    w = leader()
    w.trigger.tick()
    w.clock.advance(STEP)  # stepped ahead: 12:01:30, and the present minute (12:00) is closed
    w.run(6)
    assert w.trigger.cursor is not None and w.trigger.cursor > minute_of(START)
    w.clock.advance(-STEP)  # set right: 12:00:36
    w.add(one_off("late", START))  # due at 12:00:30, entered due now (12:00:36), in minute 12:00
    w.store.inserted_minutes()  # as if another writer had inserted it (a previous leader's late write): unsaid
    w.run(1)
    assert w.fired() == [("late", START)]


def test_a_clock_stepped_back_fires_nothing_twice_and_loses_nothing() -> None:
    w = leader()
    w.add(every_five_seconds("often"))
    w.run(10)
    w.clock.advance(STEP)  # ahead: a raw clock fires the next minute's occurrences early
    w.run(6)
    w.clock.advance(-STEP)
    w.run(90)
    nominals = [nominal for _, nominal in w.fired()]
    assert len(nominals) == len(set(nominals)), "an occurrence fired twice"
    expected = [START + 5 * SECOND * i for i in range(1, 22)]  # every one up to now, 12:02:16
    assert w.clock.now() == START + timedelta(seconds=106) and nominals == expected


class FailingOnce(MemoryLauncher):
    """The in-memory launcher whose first launch fails for now (the API server busy)."""

    failed = False

    def launch(self, fire: Fire) -> Launch:
        if not self.failed:
            self.failed = True
            raise RuntimeError("the API server is busy")
        return super().launch(fire)


def test_a_retry_set_while_the_clock_was_ahead_keeps_its_backoff_not_the_step() -> None:
    w = leader()
    w.launcher = FailingOnce()
    w.trigger = Trigger(store=w.store, catalogue=w.catalogue, launcher=w.launcher,
                        ledger=MemoryLedger(w.catalogue), clock=w.clock)  # fmt: skip
    w.add(one_off("busy", START + 2 * SECOND))
    w.clock.advance(STEP)  # ahead: the raw clock finds it due, and its launch fails (retry in 1 s)
    w.trigger.tick()
    assert w.launcher.failed and not w.fired()
    w.clock.advance(-STEP)  # set right: 12:00:30; the retry is due 1 s after the failure, not 61 s
    w.run(RETRY_INITIAL.total_seconds() + 2)  # and the occurrence's time (12:00:32) comes meanwhile
    assert w.fired() == [("busy", START + 2 * SECOND)]


# --- entries that come late into a minute the trigger closes ---


class RacingStore(MemoryBucketStore):
    """The in-memory store where a late entry lands just before the trigger completes its bucket
    (its insert slower than the minute's grace): between the pass's read and its completion."""

    def __init__(self, late: BucketEntry) -> None:
        super().__init__(shards=1)
        self.late: BucketEntry | None = late

    def complete(self, bucket: str, *, version: str) -> None:
        if self.late is not None:
            self.insert(self.late)
            self.late = None
        super().complete(bucket, version=version)


def test_an_entry_inserted_between_a_passs_read_and_the_completion_fires_at_the_next_pass() -> None:
    """The long variant's second finding: with the API server slow, a job created as its time
    passed was entered due at once into the present minute as the trigger completed it; the
    completion labelled the bucket done with the entry unmarked, and no scan saw it again."""
    on_time, late = one_off("on-time", START), one_off("late", START + 25 * SECOND)
    head, late_head = first_entry(on_time, now=START), first_entry(late, now=START + 29 * SECOND)
    assert head is not None and late_head is not None
    w = leader()
    w.store = RacingStore(late_head)
    w.trigger = Trigger(store=w.store, catalogue=w.catalogue, launcher=w.launcher,
                        ledger=MemoryLedger(w.catalogue), clock=w.clock)  # fmt: skip
    w.catalogue.put(on_time)
    w.catalogue.put(late)
    w.store.insert(head)
    w.run(40)  # past 12:01:05: the minute 12:00 is closed, and completed
    assert w.fired() == [("late", START + 25 * SECOND), ("on-time", START)]
    assert w.store.pending_minutes(until=w.clock.now()) == []


def test_an_entry_inserted_into_a_minute_completed_behind_the_cursor_fires_at_the_next_pass() -> None:
    w = leader()
    w.add(one_off("on-time", START))
    w.run(40)  # the minute 12:00 is completed and the cursor past it
    assert w.trigger.cursor is not None and w.trigger.cursor > minute_of(START)
    late = one_off("late", START + 25 * SECOND)
    w.catalogue.put(late)
    entry = first_entry(late, now=START + 29 * SECOND)  # computed in time, inserted 41 s later
    assert entry is not None
    w.store.insert(entry)
    w.run(0.5)
    assert w.fired() == [("late", START + 25 * SECOND), ("on-time", START)]


# --- the two together ---


class ServerStampedLauncher(MemoryLauncher):
    """The in-memory launcher, noting the API server's time of each creation (its creationTimestamp)."""

    def __init__(self, server: Server) -> None:
        super().__init__()
        self.server = server
        self.created_at: dict[str, list[datetime]] = {}

    def launch(self, fire: Fire) -> Launch:
        result = super().launch(fire)
        if result.created:
            self.created_at.setdefault(fire.job.name, []).append(self.server.time())
        return result


def test_a_leader_whose_clock_steps_a_minute_ahead_and_back_fires_each_once_none_early_none_lost() -> None:
    """The fault scenario's leader case, on injected clocks: 20 one-off jobs due over 15 s; the
    leader's own clock steps 60 s ahead once the first has fired, and back 6 s later; a renewal
    (a reading) every 2 s, a pass every 250 ms."""
    server = Server(at=0.4)
    own = SteppedClock(server)
    clock = ServerBoundedClock(own, monotonic=server.monotonic)
    launcher = ServerStampedLauncher(server)
    catalogue, store = MemoryCatalogue(), MemoryBucketStore(shards=2)
    trigger = Trigger(store=store, catalogue=catalogue, launcher=launcher, ledger=MemoryLedger(catalogue), clock=clock)
    due = {f"burst-{i:02}": (START + timedelta(seconds=8 + 15 * i / 20)).replace(microsecond=0) for i in range(20)}
    for name, run_at in due.items():
        job = one_off(name, run_at)
        catalogue.put(job)
        head = first_entry(job, now=clock.now())
        assert head is not None
        store.insert(head)
    stepped_at: float | None = None
    while server.at < 60:
        server.advance(0.25)
        if round(server.at * 4) % 8 == 0:
            clock.observe(server.reading(round_trip=0.01))
        if stepped_at is None and launcher.created_at:
            own.offset, stepped_at = STEP, server.at
        elif stepped_at is not None and server.at - stepped_at >= 6:
            own.offset = timedelta(0)
        trigger.tick()
    assert stepped_at is not None
    assert sorted(launcher.created_at) == sorted(due), "an occurrence was not fired"
    assert all(len(times) == 1 for times in launcher.created_at.values()), "an occurrence fired twice"
    early = {name: times[0] for name, times in launcher.created_at.items() if times[0] < due[name]}
    assert not early, f"fired before the API server's time reached it: {early}"
    late = max(times[0] - due[name] for name, times in launcher.created_at.items())
    assert late <= timedelta(seconds=1.5)  # the header's second, and the pass's 250 ms
