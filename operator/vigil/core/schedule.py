"""When a schedule fires: occurrences, periods and daylight saving, as pure functions of time.

Everything here is arithmetic on instants passed in by the caller — no clock is
read, nothing is stored — so the trigger, the watchdog and the tests all get
the same answer for the same inputs. Results are NOMINAL times: the instant an
occurrence is due, in UTC, before any jitter (see jitter.py).

Three kinds of schedule:

* ``once``: a single instant, ``run_at``.
* ``every``: the lattice ``anchor + k * every`` for every integer k — plain UTC
  arithmetic, so daylight saving never moves it.
* ``cron``: one or more cron expressions, evaluated on the local wall clock of
  an IANA time zone. A wall time can be missing (the clock springs forward over
  it) or happen twice (the clock falls back over it); `GapPolicy` and
  `OverlapPolicy` say what to do, and docs/schedules.md explains them to users.

How the cron walk works. For each local date, the matching wall times are
placed on the UTC time line (`_place_wall`). Every wall time W has an
*earliest* instant: the first instant at which the clock reads W or later. For
an ordinary time that is the instant itself; for a repeated time it is the
first (fold=0) instant; for a missing time it is the instant the clock jumps
over it — exactly the Shift target. The earliest instant never decreases as W
increases, so it bounds everything still to come, and instants found so far
(including second, fold=1 instants, which can come later than the next wall
time's) wait in a small heap until that bound passes them.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from vigil.core.timeparse import CronSpec, parse_cron, require_aware


class ScheduleKind(StrEnum):
    ONCE = "once"
    CRON = "cron"
    EVERY = "every"


class GapPolicy(StrEnum):
    """What a cron does with a wall time the clock springs forward over (it never happens)."""

    SHIFT = "Shift"  # fire at the instant the clock jumps to (London 01:30 → 02:00 BST)
    SKIP = "Skip"  # no occurrence for that wall time


class OverlapPolicy(StrEnum):
    """What a cron does with a wall time the clock falls back over (it happens twice)."""

    ONCE = "Once"  # only the first of the two instants
    TWICE = "Twice"  # both instants


DEFAULT_TIMEZONE = "UTC"

#: Schedules have one-second resolution: execution ids are derived from the nominal
#: time to the second (ids.py), so two occurrences must never share a second.
RESOLUTION = timedelta(seconds=1)

#: How many local dates a cron walk scans without finding an occurrence before it
#: gives up. Eight years and a month: a cron for 29 February waits eight years
#: across a skipped leap year (2096 → 2104).
MAX_SCAN_DAYS = 8 * 366 + 31

#: Zone keys that name the host's zone rather than a place: never used.
_HOST_DEPENDENT_ZONE_KEYS = frozenset({"localtime", "posixrules"})

#: Python requires every UTC offset to lie strictly within ±24 h.
_MAX_UTC_OFFSET = timedelta(hours=24)

#: Offsets in force in the next two days, sampled hourly, bound how far back a
#: repeated wall time can lie (tzdata has no offset that lasts under an hour).
_OFFSET_SAMPLE_STEP = timedelta(hours=1)
_OFFSET_SAMPLE_COUNT = 49

#: The searches for a previous occurrence start with this window and widen 4x each time.
_FIRST_LOOKBACK = timedelta(hours=1)
_LOOKBACK_GROWTH = 4
_MAX_LOOKBACK = timedelta(days=MAX_SCAN_DAYS)

#: Step results remembered (next and previous occurrence per schedule and instant). The trigger
#: plans many jobs that share a schedule and a nominal time (everyone's "0 * * * *" at 12:00):
#: one walk serves them all. Bounded, so memory follows the schedules in use, not the catalogue.
STEP_CACHE_SIZE = 4096

_ONE_SECOND = timedelta(seconds=1)
_ONE_MICROSECOND = timedelta(microseconds=1)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """When a job runs; validated on construction (a bad field raises ValueError naming it).

    ``timezone`` matters only to cron schedules; ``gap`` and ``overlap`` only to
    cron schedules in zones with daylight saving. Instants must be
    timezone-aware and whole seconds.
    """

    kind: ScheduleKind
    run_at: datetime | None = None
    cron: tuple[str, ...] = ()
    every: timedelta | None = None
    anchor: datetime | None = None
    timezone: str = DEFAULT_TIMEZONE
    gap: GapPolicy = GapPolicy.SHIFT
    overlap: OverlapPolicy = OverlapPolicy.ONCE

    def __post_init__(self) -> None:
        load_zone(self.timezone)
        _VALIDATORS[ScheduleKind(self.kind)](self)

    @classmethod
    def one_off(cls, run_at: datetime) -> Schedule:
        return cls(kind=ScheduleKind.ONCE, run_at=run_at)

    @classmethod
    def from_cron(
        cls,
        expressions: str | Iterable[str],
        *,
        timezone: str = DEFAULT_TIMEZONE,
        gap: GapPolicy = GapPolicy.SHIFT,
        overlap: OverlapPolicy = OverlapPolicy.ONCE,
    ) -> Schedule:
        crons = (expressions,) if isinstance(expressions, str) else tuple(expressions)
        return cls(kind=ScheduleKind.CRON, cron=crons, timezone=timezone, gap=gap, overlap=overlap)

    @classmethod
    def from_interval(cls, every: timedelta, *, anchor: datetime) -> Schedule:
        return cls(kind=ScheduleKind.EVERY, every=every, anchor=anchor)

    @property
    def zone(self) -> ZoneInfo:
        return load_zone(self.timezone)

    @property
    def cron_specs(self) -> tuple[CronSpec, ...]:
        return tuple(parse_cron(expression) for expression in self.cron)

    @property
    def run_at_utc(self) -> datetime:
        if self.run_at is None:
            raise ValueError(f"a {self.kind} schedule has no run_at")
        return self.run_at.astimezone(UTC)

    @property
    def lattice(self) -> tuple[datetime, timedelta]:
        """The anchor (UTC) and interval of an ``every`` schedule."""
        if self.anchor is None or self.every is None:
            raise ValueError(f"a {self.kind} schedule has no interval")
        return self.anchor.astimezone(UTC), self.every


@dataclasses.dataclass(frozen=True)
class Occurrence:
    """One occurrence of a schedule, with the period of time it stands for.

    The period is [period_start, period_end): from the previous nominal time to
    this one, so consecutive periods tile the time line with no gap and no
    overlap. A one-off schedule has no previous occurrence; its period is the
    empty [nominal, nominal].
    """

    nominal: datetime
    fire_at: datetime
    period_start: datetime
    period_end: datetime


def load_zone(name: str) -> ZoneInfo:
    """The IANA zone called `name`; ValueError for unknown names and for the host's own zone."""
    if name.rsplit("/", 1)[-1] in _HOST_DEPENDENT_ZONE_KEYS:
        raise ValueError(f"time zone {name!r} means the host's zone; use an IANA name like 'Europe/London'")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"unknown time zone {name!r}: use an IANA name like 'Europe/London'") from None


# --- public functions -------------------------------------------------------------------------


def occurrences_after(schedule: Schedule, after: datetime) -> Iterator[datetime]:
    """Every nominal time strictly after `after`, in UTC, strictly increasing (lazily)."""
    return _GENERATORS[schedule.kind](schedule, _instant(after, "after"), None)


def next_occurrences(schedule: Schedule, after: datetime, *, count: int) -> list[datetime]:
    """The first `count` nominal times strictly after `after` (fewer if the schedule ends)."""
    if count < 0:
        raise ValueError(f"count must not be negative, got {count}")
    return list(itertools.islice(occurrences_after(schedule, after), count))


def next_occurrence(schedule: Schedule, after: datetime) -> datetime | None:
    """The first nominal time strictly after `after`, or None when the schedule has ended."""
    return _next_step(schedule, _instant(after, "after"))


@functools.lru_cache(maxsize=STEP_CACHE_SIZE)
def _next_step(schedule: Schedule, after: datetime) -> datetime | None:
    return next(occurrences_after(schedule, after), None)


def occurrences_between(schedule: Schedule, start: datetime, end: datetime) -> Iterator[datetime]:
    """Nominal times in (start, end]: after `start`, up to and including `end`.

    The half-open interval composes: (a, b] followed by (b, c] is (a, c].
    """
    start, end = _instant(start, "start"), _instant(end, "end")
    found = _GENERATORS[schedule.kind](schedule, start, end)
    return itertools.takewhile(lambda nominal: nominal <= end, found)


def previous_occurrence(schedule: Schedule, before: datetime) -> datetime:
    """The latest nominal time strictly before `before`; ValueError if there is none."""
    before = _instant(before, "before")
    if schedule.kind is ScheduleKind.ONCE:
        return _previous_one_off(schedule, before)
    if schedule.kind is ScheduleKind.EVERY:
        return _previous_on_lattice(schedule, before)
    return _previous_cron(schedule, before)


def occurrence_at(schedule: Schedule, nominal: datetime, *, jitter: timedelta) -> Occurrence:
    """The occurrence due at `nominal`, firing `jitter` later, with its period.

    `nominal` should be one of the schedule's nominal times; if it is not (the
    schedule changed since it was computed), the period still ends at `nominal`
    and starts at the schedule's latest nominal time before it.
    """
    nominal = _instant(nominal, "nominal")
    if jitter < timedelta(0):
        raise ValueError(f"jitter must not be negative, got {jitter}")
    if schedule.kind is ScheduleKind.ONCE:
        period_start = nominal
    else:
        period_start = previous_occurrence(schedule, nominal)
    return Occurrence(nominal=nominal, fire_at=nominal + jitter, period_start=period_start, period_end=nominal)


# --- validation -------------------------------------------------------------------------------


def _validate_once(schedule: Schedule) -> None:
    _reject_fields(schedule, cron=schedule.cron, every=schedule.every, anchor=schedule.anchor)
    if schedule.run_at is None:
        raise ValueError("a once schedule needs run_at")
    _check_whole_seconds(schedule.run_at, "run_at")


def _validate_cron(schedule: Schedule) -> None:
    _reject_fields(schedule, run_at=schedule.run_at, every=schedule.every, anchor=schedule.anchor)
    if isinstance(schedule.cron, str) or not schedule.cron:
        raise ValueError("a cron schedule needs a tuple of one or more cron expressions")
    for expression in schedule.cron:
        parse_cron(expression)


def _validate_every(schedule: Schedule) -> None:
    _reject_fields(schedule, run_at=schedule.run_at, cron=schedule.cron)
    if schedule.every is None or schedule.anchor is None:
        raise ValueError("an every schedule needs both every and anchor")
    if schedule.every < RESOLUTION or schedule.every % RESOLUTION:
        raise ValueError(f"every must be a positive whole number of seconds, got {schedule.every}")
    _check_whole_seconds(schedule.anchor, "anchor")


def _reject_fields(schedule: Schedule, **fields: object) -> None:
    for name, value in fields.items():
        if value is not None and value != ():
            raise ValueError(f"a {schedule.kind} schedule takes no {name}")


def _check_whole_seconds(value: datetime, name: str) -> None:
    require_aware(value, name=name)
    if value.microsecond:
        raise ValueError(f"{name} must be a whole second (schedules have one-second resolution), got {value}")


_VALIDATORS: dict[ScheduleKind, Callable[[Schedule], None]] = {
    ScheduleKind.ONCE: _validate_once,
    ScheduleKind.CRON: _validate_cron,
    ScheduleKind.EVERY: _validate_every,
}


# --- once and every ---------------------------------------------------------------------------


def _one_off(schedule: Schedule, after: datetime, until: datetime | None) -> Iterator[datetime]:
    if schedule.run_at_utc > after:
        yield schedule.run_at_utc


def _on_lattice(schedule: Schedule, after: datetime, until: datetime | None) -> Iterator[datetime]:
    anchor, every = schedule.lattice
    step = (after - anchor) // every + 1
    while True:
        try:
            nominal = anchor + step * every
        except OverflowError:  # past year 9999: the schedule simply ends
            return
        yield nominal
        step += 1


def _previous_one_off(schedule: Schedule, before: datetime) -> datetime:
    if schedule.run_at_utc < before:
        return schedule.run_at_utc
    raise ValueError(f"the one-off schedule at {schedule.run_at_utc} has no occurrence before {before}")


def _previous_on_lattice(schedule: Schedule, before: datetime) -> datetime:
    anchor, every = schedule.lattice
    nominal = anchor + ((before - anchor) // every) * every
    return nominal - every if nominal == before else nominal


# --- cron -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _PlacedWall:
    """Where one local wall-clock time falls on the UTC time line."""

    earliest: datetime  # first instant the clock reads this time or later (the Shift target in a gap)
    repeat: datetime | None  # the second, fold=1 instant when the clock falls back over it
    missing: bool  # the clock springs forward over it


class _Pending:
    """Instants found but not yet released: each is released once, in strictly increasing order."""

    def __init__(self, after: datetime) -> None:
        self._heap: list[datetime] = []
        self._latest = after  # the last instant released (or `after`)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def add(self, instants: Iterable[datetime]) -> None:
        for instant in instants:
            if instant > self._latest:
                heapq.heappush(self._heap, instant)

    def release(self, *, up_to: datetime | None = None) -> list[datetime]:
        released = []
        while self._heap and (up_to is None or self._heap[0] <= up_to):
            instant = heapq.heappop(self._heap)
            if instant > self._latest:  # equal instants (two gap times shifted alike) merge
                self._latest = instant
                released.append(instant)
        return released


def _cron_occurrences(schedule: Schedule, after: datetime, until: datetime | None) -> Iterator[datetime]:
    zone, specs = schedule.zone, schedule.cron_specs
    pending = _Pending(after)
    first_wall = _earliest_wall_that_can_follow(after, zone)
    idle_days = 0
    for day in _dates_from(first_wall.date()):
        if until is not None and _starts_after(day, until):
            break
        released = 0
        for wall in _walls_on(day, specs, later_than=first_wall):
            placed = _place_wall(wall, zone)
            ready = pending.release(up_to=placed.earliest)
            released += len(ready)
            yield from ready
            pending.add(_instants(placed, schedule))
        if pending:
            ready = pending.release(up_to=_place_wall(_midnight(day + timedelta(days=1)), zone).earliest)
            released += len(ready)
            yield from ready
        idle_days = 0 if released else idle_days + 1
        if idle_days > MAX_SCAN_DAYS:
            raise ValueError(f"cron schedule {schedule.cron} has no occurrence in {MAX_SCAN_DAYS} days")
    yield from pending.release()


@functools.lru_cache(maxsize=STEP_CACHE_SIZE)
def _previous_cron(schedule: Schedule, before: datetime) -> datetime:
    window = _FIRST_LOOKBACK
    while True:
        latest = _last(occurrences_between(schedule, before - window, before - _ONE_MICROSECOND))
        if latest is not None:
            return latest
        if window >= _MAX_LOOKBACK:
            raise ValueError(
                f"cron schedule {schedule.cron} has no occurrence in the {MAX_SCAN_DAYS} days before {before}"
            )
        window = min(window * _LOOKBACK_GROWTH, _MAX_LOOKBACK)


def _last(instants: Iterable[datetime]) -> datetime | None:
    remaining = collections.deque(instants, maxlen=1)
    return remaining[0] if remaining else None


def _instants(placed: _PlacedWall, schedule: Schedule) -> tuple[datetime, ...]:
    if placed.missing:
        return (placed.earliest,) if schedule.gap is GapPolicy.SHIFT else ()
    if placed.repeat is not None and schedule.overlap is OverlapPolicy.TWICE:
        return (placed.earliest, placed.repeat)
    return (placed.earliest,)


def _place_wall(wall: datetime, zone: ZoneInfo) -> _PlacedWall:
    """Place a naive local wall time on the UTC time line (PEP 495 folds)."""
    offset_before = _offset(wall.replace(tzinfo=zone))  # fold=0: the offset before a transition
    offset_after = _offset(wall.replace(tzinfo=zone, fold=1))  # fold=1: the offset after it
    if offset_before == offset_after:
        return _PlacedWall(earliest=_utc(wall - offset_before), repeat=None, missing=False)
    if offset_before > offset_after:  # the clock falls back: this wall time happens twice
        return _PlacedWall(earliest=_utc(wall - offset_before), repeat=_utc(wall - offset_after), missing=False)
    jump = _transition(
        zone, not_yet=_utc(wall - offset_after), already=_utc(wall - offset_before), new_offset=offset_after
    )
    return _PlacedWall(earliest=jump, repeat=None, missing=True)


def _transition(zone: ZoneInfo, *, not_yet: datetime, already: datetime, new_offset: timedelta) -> datetime:
    """The instant in (not_yet, already] at which the zone's offset becomes `new_offset`.

    Bisection to the second: tz transitions happen on whole seconds.
    """
    low, high = 0, int((already - not_yet) / _ONE_SECOND)
    while high - low > 1:
        middle = (low + high) // 2
        if _offset((not_yet + timedelta(seconds=middle)).astimezone(zone)) == new_offset:
            high = middle
        else:
            low = middle
    return not_yet + timedelta(seconds=high)


def _earliest_wall_that_can_follow(after: datetime, zone: ZoneInfo) -> datetime:
    """A wall time such that no earlier wall time has an instant after `after`.

    An instant u > `after` reads as wall time u + offset(u), which is later than
    `after` + offset(u); so the smallest offset in force from `after` on bounds
    it. Only offsets in the next two days can matter (|offset| < 24 h).
    """
    samples = (after + step * _OFFSET_SAMPLE_STEP for step in range(_OFFSET_SAMPLE_COUNT))
    smallest = min(_offset(sample.astimezone(zone)) for sample in samples)
    return after.replace(tzinfo=None) + smallest


def _walls_on(day: date, specs: tuple[CronSpec, ...], *, later_than: datetime) -> Iterator[datetime]:
    matching = [spec for spec in specs if spec.matches_date(day)]
    if len(matching) == 1:
        times: Iterable[tuple[int, int]] = matching[0].times_of_day
    else:
        times = sorted(set(itertools.chain.from_iterable(spec.times_of_day for spec in matching)))
    walls = (datetime(day.year, day.month, day.day, hour, minute) for hour, minute in times)  # noqa: DTZ001 - a wall-clock time in the job's zone; the DST policy makes it aware
    return (wall for wall in walls if wall > later_than)


def _dates_from(first: date) -> Iterator[date]:
    day = first
    while day < date.max:
        yield day
        day += timedelta(days=1)


def _starts_after(day: date, until: datetime) -> bool:
    """Whether every instant whose wall time is on `day` or later is after `until`."""
    return _midnight(day) - _MAX_UTC_OFFSET > until.replace(tzinfo=None)


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time())


def _offset(local: datetime) -> timedelta:
    offset = local.utcoffset()
    if offset is None:  # unreachable with a ZoneInfo; keeps the type exact
        raise ValueError(f"no UTC offset for {local!r}")
    return offset


def _utc(naive_utc: datetime) -> datetime:
    return naive_utc.replace(tzinfo=UTC)


def _instant(value: datetime, name: str) -> datetime:
    return require_aware(value, name=name)


_Generator = Callable[[Schedule, datetime, datetime | None], Iterator[datetime]]

_GENERATORS: dict[ScheduleKind, _Generator] = {
    ScheduleKind.ONCE: _one_off,
    ScheduleKind.CRON: _cron_occurrences,
    ScheduleKind.EVERY: _on_lattice,
}
