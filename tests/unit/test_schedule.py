"""Schedule maths: cron parsing, occurrences, daylight saving, periods — all pure functions of time.

Covers the cron grammar (checked against croniter as an independent oracle, and
every kind of bad expression rejected quoting itself), Schedule validation, a
named table of daylight-saving gaps and overlaps under both policies (London,
New York, Lord Howe's 30-minute shift, Adelaide's half-hour zone), properties
over random crons and instants (strictly increasing, every nominal matches the
cron or is a Shift target, Once/Twice semantics, equality with a brute-force
minute-by-minute oracle around transitions), `every` and `once` schedules,
previous occurrences and contiguous periods, and independence from the host's
time zone.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vigil.core.schedule import (
    GapPolicy,
    OverlapPolicy,
    Schedule,
    ScheduleKind,
    next_occurrence,
    next_occurrences,
    occurrence_at,
    occurrences_after,
    occurrences_between,
    previous_occurrence,
)
from vigil.core.timeparse import CronSpec, CronSyntaxError, parse_cron

LONDON = "Europe/London"
NEW_YORK = "America/New_York"
LORD_HOWE = "Australia/Lord_Howe"  # +10:30 / +11: a 30-minute daylight-saving shift
ADELAIDE = "Australia/Adelaide"  # +9:30 / +10:30: a half-hour zone with a one-hour shift
DST_ZONES = (LONDON, NEW_YORK, LORD_HOWE, ADELAIDE)

ONE_MINUTE = timedelta(minutes=1)
PROPERTY_EXAMPLES = 200
BRUTE_FORCE_EXAMPLES = 120


def utc(text: str) -> datetime:
    """'2024-03-31T01:00' → that minute in UTC."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# --- cron grammar -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param("", id="empty"),
        pytest.param("* * * *", id="four-fields"),
        pytest.param("* * * * * *", id="seconds-field"),
        pytest.param("60 * * * *", id="minute-out-of-range"),
        pytest.param("* 24 * * *", id="hour-out-of-range"),
        pytest.param("* * 0 * *", id="day-zero"),
        pytest.param("* * * 13 *", id="month-out-of-range"),
        pytest.param("* * * * 8", id="weekday-out-of-range"),
        pytest.param("*/0 * * * *", id="zero-step"),
        pytest.param("*/70 * * * *", id="step-beyond-field"),
        pytest.param("5-1 * * * *", id="descending-range"),
        pytest.param("1,,2 * * * *", id="empty-list-item"),
        pytest.param("-5 * * * *", id="negative"),
        pytest.param("? * * * *", id="question-mark-outside-day-fields"),
        pytest.param("0 0 L * *", id="last-day"),
        pytest.param("0 0 15W * *", id="nearest-weekday"),
        pytest.param("0 0 * * 1#2", id="nth-weekday"),
        pytest.param("H * * * *", id="hashed"),
        pytest.param("0 0 * * MON-FOO", id="unknown-name"),
        pytest.param("0 0 * JANUARY *", id="long-name"),
        pytest.param("@reboot", id="reboot-macro"),
        pytest.param("a b c d e", id="words"),
        pytest.param("0 0 30 2 *", id="never-fires-30-february"),
        pytest.param("0 0 31 4,6,9,11 *", id="never-fires-31-in-short-months"),
    ],
)
def test_invalid_cron_is_rejected_quoting_the_expression(expression: str) -> None:
    with pytest.raises(ValueError, match="invalid cron expression") as raised:
        parse_cron(expression)
    assert repr(expression) in str(raised.value)
    assert isinstance(raised.value, CronSyntaxError)


@pytest.mark.parametrize(
    ("expression", "equivalent"),
    [
        pytest.param("@yearly", "0 0 1 1 *", id="yearly"),
        pytest.param("@annually", "0 0 1 1 *", id="annually"),
        pytest.param("@monthly", "0 0 1 * *", id="monthly"),
        pytest.param("@weekly", "0 0 * * 0", id="weekly"),
        pytest.param("@daily", "0 0 * * *", id="daily"),
        pytest.param("@midnight", "0 0 * * *", id="midnight"),
        pytest.param("@hourly", "0 * * * *", id="hourly"),
        pytest.param("0 9 * * mon-fri", "0 9 * * 1-5", id="weekday-names"),
        pytest.param("0 9 * jan,Dec *", "0 9 * 1,12 *", id="month-names"),
        pytest.param("0 9 * * 7", "0 9 * * 0", id="sunday-as-7"),
        pytest.param("0 9 ? * 1", "0 9 * * 1", id="question-mark"),
        pytest.param("5/20 * * * *", "5,25,45 * * * *", id="start-and-step"),
        pytest.param("5-5 * * * 1-1", "5 * * * 1", id="equal-range-is-one-value"),
        pytest.param("0 0 */1 * 1", "0 0 * * 1", id="star-with-step-1-is-unrestricted"),
        pytest.param("0 0 1-31 * 1", "0 0 * * *", id="full-range-restricts-so-days-are-ored"),
    ],
)
def test_cron_notations_that_mean_the_same(expression: str, equivalent: str) -> None:
    parsed, reference = parse_cron(expression), parse_cron(equivalent)
    assert same_schedule_key(parsed) == same_schedule_key(reference)


def same_schedule_key(spec: CronSpec) -> tuple[object, ...]:
    days = {day for day in _A_LEAP_YEAR if spec.matches_date(day)}
    return (spec.times_of_day, spec.months, frozenset(days))


_A_LEAP_YEAR = [date(2024, 1, 1) + timedelta(days=offset) for offset in range(366)]


def test_day_fields_are_ored_only_when_both_restrict() -> None:
    both = parse_cron("0 0 13 * 5")  # the 13th, or any Friday
    assert both.matches_date(date(2024, 9, 13))  # a Friday the 13th
    assert both.matches_date(date(2024, 8, 13))  # a Tuesday the 13th
    assert both.matches_date(date(2024, 8, 16))  # a Friday the 16th
    assert not both.matches_date(date(2024, 8, 15))
    star_weekdays = parse_cron("0 0 13 * */1")  # '*' (step 1): only the day of month counts
    assert star_weekdays.matches_date(date(2024, 8, 13))
    assert not star_weekdays.matches_date(date(2024, 8, 16))
    range_weekdays = parse_cron("0 0 13 * 0-6")  # a range restricts, even a full one: every day
    assert range_weekdays.matches_date(date(2024, 8, 16))


def _field(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    named = st.sampled_from(names) if names else st.nothing()
    single = st.one_of(value.map(str), named)
    # Strictly ascending: croniter reads an equal range like "5-5" as the whole cycle (Vigil: just 5).
    ascending = st.tuples(value, value).filter(lambda pair: pair[0] != pair[1]).map(sorted).map(
        lambda pair: f"{pair[0]}-{pair[1]}"
    )
    step = st.integers(1, high - low + 1)
    item = st.one_of(
        st.just("*"),
        single,
        ascending,
        step.map(lambda s: f"*/{s}"),
        st.tuples(ascending, step).map(lambda pair: f"{pair[0]}/{pair[1]}"),
        st.tuples(value, step).map(lambda pair: f"{pair[0]}/{pair[1]}"),
    )
    return st.lists(item, min_size=1, max_size=3).map(",".join)


MONTH_NAMES = ("jan", "FEB", "Mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
WEEKDAY_NAMES = ("sun", "MON", "Tue", "wed", "thu", "fri", "sat")


def _fires(expression: str) -> bool:
    try:
        parse_cron(expression)
    except CronSyntaxError:
        return False
    return True


ANY_CRON = st.tuples(
    _field(0, 59),
    _field(0, 23),
    _field(1, 31),
    _field(1, 12, MONTH_NAMES),
    _field(0, 7, WEEKDAY_NAMES),
).map(" ".join).filter(_fires)

WALL_MINUTES = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2040, 12, 31)).map(  # noqa: DTZ001 - cron matches naive wall-clock times; hypothesis takes naive bounds
    lambda moment: moment.replace(second=0, microsecond=0)
)


def _croniter_reads_days_differently(expression: str) -> bool:
    """Day fields whose restricted-ness the two readers decide differently.

    Vigil, like Kubernetes, counts a day field as unrestricted only when it is
    written '*' or '?'; croniter also when it expands to the whole range ('0-6',
    '0/1', '*/1'). That changes how day-of-month and day-of-week combine, so
    such expressions are left out of the comparison.
    """
    spec = parse_cron(expression)
    whole_month = spec.days_of_month == frozenset(range(1, 32))
    whole_week = spec.days_of_week == frozenset(range(7))
    day_fields = expression.split()[2:5:2]
    sunday_stepped = any(item.startswith("7/") for item in expression.split()[4].split(","))
    return (
        sunday_stepped  # croniter reads `7/2` as 6,0,2,4; Vigil as Sunday alone (7 is Sunday)
        or any(item.endswith("/1") for field in day_fields for item in field.split(","))
        or (spec.day_of_month_restricted and whole_month)
        or (spec.day_of_week_restricted and whole_week)
    )


def test_sunday_as_7_with_a_step_is_sunday_alone() -> None:
    """`7` is Sunday; stepping from it past the field's end leaves Sunday, not an empty set
    that would never fire."""
    assert parse_cron("0 0 * * 7/2").days_of_week == frozenset({0})
    assert parse_cron("0 0 * * 7/2").days_of_week == parse_cron("0 0 * * 7").days_of_week


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(expression=ANY_CRON, walls=st.lists(WALL_MINUTES, min_size=1, max_size=4))
def test_cron_matching_agrees_with_croniter(expression: str, walls: list[datetime]) -> None:
    assume(not _croniter_reads_days_differently(expression))
    spec = parse_cron(expression)
    for wall in walls:
        assert spec.matches(wall) == croniter.match(expression, wall), (expression, wall)


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(expression=ANY_CRON)
def test_croniter_accepts_every_expression_vigil_accepts(expression: str) -> None:
    assert croniter.is_valid(expression)


# --- schedule validation ----------------------------------------------------------------------

AWARE = datetime(2026, 8, 1, 2, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        pytest.param(lambda: Schedule(kind=ScheduleKind.CRON), "one or more", id="cron-without-expressions"),
        pytest.param(lambda: Schedule(kind=ScheduleKind.CRON, cron="0 0 * * *"), "tuple", id="cron-as-string"),  # type: ignore[arg-type]  # the wrong type on purpose: it must be refused
        pytest.param(lambda: Schedule.from_cron("0 0 30 2 *"), "no date", id="cron-never-fires"),
        pytest.param(lambda: Schedule.from_cron("0 2 * * *", timezone="Mars/Olympus"), "unknown time zone", id="bad-zone"),
        pytest.param(lambda: Schedule.from_cron("0 2 * * *", timezone="localtime"), "host", id="host-zone"),
        pytest.param(lambda: Schedule.from_cron("0 2 * * *", timezone=""), "unknown time zone", id="empty-zone"),
        pytest.param(lambda: Schedule.from_cron("0 2 * * *", timezone="Europe"), "unknown time zone", id="zone-dir"),
        pytest.param(lambda: Schedule(kind=ScheduleKind.ONCE), "needs run_at", id="once-without-run-at"),
        pytest.param(lambda: Schedule.one_off(datetime(2026, 8, 1)), "timezone-aware", id="naive-run-at"),  # noqa: DTZ001 - a naive time on purpose: the call must refuse it
        pytest.param(lambda: Schedule.one_off(AWARE.replace(microsecond=5)), "whole second", id="sub-second-run-at"),
        pytest.param(
            lambda: Schedule(kind=ScheduleKind.ONCE, run_at=AWARE, cron=("0 0 * * *",)), "takes no cron", id="once-with-cron"
        ),
        pytest.param(
            lambda: Schedule(kind=ScheduleKind.CRON, cron=("0 0 * * *",), every=ONE_MINUTE), "takes no every", id="cron-with-every"
        ),
        pytest.param(lambda: Schedule(kind=ScheduleKind.EVERY, every=ONE_MINUTE), "needs both", id="every-without-anchor"),
        pytest.param(lambda: Schedule.from_interval(timedelta(0), anchor=AWARE), "positive", id="every-zero"),
        pytest.param(lambda: Schedule.from_interval(-ONE_MINUTE, anchor=AWARE), "positive", id="every-negative"),
        pytest.param(lambda: Schedule.from_interval(timedelta(seconds=1.5), anchor=AWARE), "whole number", id="every-fraction"),
    ],
)
def test_invalid_schedules_are_rejected_naming_the_problem(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_naive_times_are_refused_everywhere() -> None:
    schedule = Schedule.from_cron("0 2 * * *")
    naive = datetime(2026, 8, 1)  # noqa: DTZ001 - a naive time on purpose: the call must refuse it
    for call in (
        lambda: next_occurrences(schedule, naive, count=1),
        lambda: previous_occurrence(schedule, naive),
        lambda: list(occurrences_between(schedule, naive, AWARE)),
        lambda: occurrence_at(schedule, naive, jitter=timedelta(0)),
    ):
        with pytest.raises(ValueError, match="timezone-aware"):
            call()


def test_count_zero_is_empty_and_negative_count_is_refused() -> None:
    schedule = Schedule.from_cron("0 2 * * *")
    assert next_occurrences(schedule, AWARE, count=0) == []
    with pytest.raises(ValueError, match="count"):
        next_occurrences(schedule, AWARE, count=-1)


# --- daylight saving: named examples ----------------------------------------------------------

SHIFT, SKIP = GapPolicy.SHIFT, GapPolicy.SKIP
ONE_MICROSECOND = timedelta(microseconds=1)
ONCE, TWICE = OverlapPolicy.ONCE, OverlapPolicy.TWICE


def _dst_row(
    row_id: str, cron: str, zone: str, policy: GapPolicy | OverlapPolicy, after: str, expected: list[str]
) -> object:
    return pytest.param(cron, zone, policy, after, expected, id=row_id)


DST_TABLE = [
    # London 2024: clocks go forward at 01:00 UTC on 31 March (01:00 GMT → 02:00 BST) and back at
    # 01:00 UTC on 27 October (02:00 BST → 01:00 GMT).
    _dst_row("london-daily-gap-shift", "30 1 * * *", LONDON, SHIFT, "2024-03-30T12:00",
             ["2024-03-31T01:00", "2024-04-01T00:30"]),
    _dst_row("london-daily-gap-skip", "30 1 * * *", LONDON, SKIP, "2024-03-30T12:00",
             ["2024-04-01T00:30", "2024-04-02T00:30"]),
    _dst_row("london-daily-overlap-once", "30 1 * * *", LONDON, ONCE, "2024-10-26T12:00",
             ["2024-10-27T00:30", "2024-10-28T01:30"]),
    _dst_row("london-daily-overlap-twice", "30 1 * * *", LONDON, TWICE, "2024-10-26T12:00",
             ["2024-10-27T00:30", "2024-10-27T01:30", "2024-10-28T01:30"]),
    _dst_row("london-hourly-gap-shift", "30 * * * *", LONDON, SHIFT, "2024-03-30T23:45",
             ["2024-03-31T00:30", "2024-03-31T01:00", "2024-03-31T01:30", "2024-03-31T02:30"]),
    _dst_row("london-hourly-gap-skip", "30 * * * *", LONDON, SKIP, "2024-03-30T23:45",
             ["2024-03-31T00:30", "2024-03-31T01:30", "2024-03-31T02:30", "2024-03-31T03:30"]),
    _dst_row("london-hourly-overlap-once", "30 * * * *", LONDON, ONCE, "2024-10-26T22:45",
             ["2024-10-26T23:30", "2024-10-27T00:30", "2024-10-27T02:30"]),
    _dst_row("london-hourly-overlap-twice", "30 * * * *", LONDON, TWICE, "2024-10-26T22:45",
             ["2024-10-26T23:30", "2024-10-27T00:30", "2024-10-27T01:30", "2024-10-27T02:30"]),
    _dst_row("london-gap-times-shift-to-one-instant", "0,20,40 1 * * *", LONDON, SHIFT, "2024-03-30T12:00",
             ["2024-03-31T01:00", "2024-04-01T00:00"]),
    # New York 2024: forward at 07:00 UTC on 10 March (02:00 EST → 03:00 EDT), back at 06:00 UTC
    # on 3 November (02:00 EDT → 01:00 EST).
    _dst_row("new-york-daily-gap-shift", "30 2 * * *", NEW_YORK, SHIFT, "2024-03-09T12:00",
             ["2024-03-10T07:00", "2024-03-11T06:30"]),
    _dst_row("new-york-daily-gap-skip", "30 2 * * *", NEW_YORK, SKIP, "2024-03-09T12:00",
             ["2024-03-11T06:30", "2024-03-12T06:30"]),
    _dst_row("new-york-daily-overlap-once", "30 1 * * *", NEW_YORK, ONCE, "2024-11-02T12:00",
             ["2024-11-03T05:30", "2024-11-04T06:30"]),
    _dst_row("new-york-daily-overlap-twice", "30 1 * * *", NEW_YORK, TWICE, "2024-11-02T12:00",
             ["2024-11-03T05:30", "2024-11-03T06:30", "2024-11-04T06:30"]),
    _dst_row("new-york-hourly-gap-shift-merges-with-03:00", "0 * * * *", NEW_YORK, SHIFT, "2024-03-10T05:30",
             ["2024-03-10T06:00", "2024-03-10T07:00", "2024-03-10T08:00"]),
    _dst_row("new-york-hourly-gap-shift", "15 * * * *", NEW_YORK, SHIFT, "2024-03-10T05:30",
             ["2024-03-10T06:15", "2024-03-10T07:00", "2024-03-10T07:15", "2024-03-10T08:15"]),
    _dst_row("new-york-hourly-gap-skip", "15 * * * *", NEW_YORK, SKIP, "2024-03-10T05:30",
             ["2024-03-10T06:15", "2024-03-10T07:15", "2024-03-10T08:15"]),
    # Lord Howe 2024: back 30 minutes at 15:00 UTC on 6 April (02:00 +11 → 01:30 +10:30), forward
    # 30 minutes at 15:30 UTC on 5 October (02:00 +10:30 → 02:30 +11).
    _dst_row("lord-howe-daily-overlap-once", "45 1 * * *", LORD_HOWE, ONCE, "2024-04-06T00:00",
             ["2024-04-06T14:45", "2024-04-07T15:15"]),
    _dst_row("lord-howe-daily-overlap-twice", "45 1 * * *", LORD_HOWE, TWICE, "2024-04-06T00:00",
             ["2024-04-06T14:45", "2024-04-06T15:15", "2024-04-07T15:15"]),
    _dst_row("lord-howe-daily-gap-shift", "15 2 * * *", LORD_HOWE, SHIFT, "2024-10-05T00:00",
             ["2024-10-05T15:30", "2024-10-06T15:15"]),
    _dst_row("lord-howe-daily-gap-skip", "15 2 * * *", LORD_HOWE, SKIP, "2024-10-05T00:00",
             ["2024-10-06T15:15", "2024-10-07T15:15"]),
    _dst_row("lord-howe-20-minutely-overlap-once", "*/20 * * * *", LORD_HOWE, ONCE, "2024-04-06T13:50",
             ["2024-04-06T14:00", "2024-04-06T14:20", "2024-04-06T14:40", "2024-04-06T15:30", "2024-04-06T15:50"]),
    _dst_row("lord-howe-20-minutely-overlap-twice", "*/20 * * * *", LORD_HOWE, TWICE, "2024-04-06T13:50",
             ["2024-04-06T14:00", "2024-04-06T14:20", "2024-04-06T14:40", "2024-04-06T15:10", "2024-04-06T15:30"]),
    # Adelaide 2024: back at 16:30 UTC on 6 April (03:00 +10:30 → 02:00 +9:30), forward at 16:30 UTC
    # on 5 October (02:00 +9:30 → 03:00 +10:30).
    _dst_row("adelaide-daily-gap-shift", "30 2 * * *", ADELAIDE, SHIFT, "2024-10-05T00:00",
             ["2024-10-05T16:30", "2024-10-06T16:00"]),
    _dst_row("adelaide-daily-gap-skip", "30 2 * * *", ADELAIDE, SKIP, "2024-10-05T00:00",
             ["2024-10-06T16:00", "2024-10-07T16:00"]),
    _dst_row("adelaide-daily-overlap-once", "30 2 * * *", ADELAIDE, ONCE, "2024-04-06T00:00",
             ["2024-04-06T16:00", "2024-04-07T17:00"]),
    _dst_row("adelaide-daily-overlap-twice", "30 2 * * *", ADELAIDE, TWICE, "2024-04-06T00:00",
             ["2024-04-06T16:00", "2024-04-06T17:00", "2024-04-07T17:00"]),
]  # fmt: skip


@pytest.mark.parametrize(("cron", "zone", "policy", "after", "expected"), DST_TABLE)
def test_daylight_saving_examples(
    cron: str, zone: str, policy: GapPolicy | OverlapPolicy, after: str, expected: list[str]
) -> None:
    if isinstance(policy, GapPolicy):
        schedule = Schedule.from_cron(cron, timezone=zone, gap=policy)
    else:
        schedule = Schedule.from_cron(cron, timezone=zone, overlap=policy)
    found = next_occurrences(schedule, utc(after), count=len(expected))
    assert found == [utc(text) for text in expected]
    assert all(nominal.tzinfo is UTC for nominal in found)


@pytest.mark.parametrize(
    ("crons", "zone", "after", "expected"),
    [
        pytest.param(("0 9 * * 1-5", "0 9 * * *"), "UTC", "2024-08-02T00:00",
                     ["2024-08-02T09:00", "2024-08-03T09:00", "2024-08-04T09:00"], id="overlapping-crons-once-each"),
        pytest.param(("0 9 * * *", "30 8 * * 6,0"), "UTC", "2024-08-02T00:00",
                     ["2024-08-02T09:00", "2024-08-03T08:30", "2024-08-03T09:00"], id="interleaved-crons"),
        pytest.param(("0 2 * * *",), LONDON, "2026-07-31T12:00",
                     ["2026-08-01T01:00"], id="summer-london-02:00-is-01:00-utc"),
        pytest.param(("0 0 29 2 *",), "UTC", "2097-01-01T00:00",
                     ["2104-02-29T00:00"], id="leap-day-across-2100"),
    ],
)  # fmt: skip
def test_cron_examples(crons: tuple[str, ...], zone: str, after: str, expected: list[str]) -> None:
    schedule = Schedule.from_cron(crons, timezone=zone)
    assert next_occurrences(schedule, utc(after), count=len(expected)) == [utc(text) for text in expected]


def test_the_host_time_zone_is_never_used(monkeypatch: pytest.MonkeyPatch) -> None:
    schedule = Schedule.from_cron("30 1 * * *", timezone=LONDON)
    expected = [utc("2024-03-31T01:00"), utc("2024-04-01T00:30")]
    for host_zone in ("America/New_York", "Asia/Kolkata"):
        monkeypatch.setenv("TZ", host_zone)
        time.tzset()
        try:
            assert next_occurrences(schedule, utc("2024-03-30T12:00"), count=2) == expected
        finally:
            monkeypatch.undo()
            time.tzset()


# --- daylight saving: properties --------------------------------------------------------------


@functools.cache
def transitions(zone_name: str) -> tuple[datetime, ...]:
    """Every instant (to the minute) in 2020-2030 at which the zone's UTC offset changes."""
    zone = ZoneInfo(zone_name)
    found = []
    step = timedelta(hours=6)
    moment = datetime(2020, 1, 1, tzinfo=UTC)
    while moment.year < 2031:
        if moment.astimezone(zone).utcoffset() != (moment + step).astimezone(zone).utcoffset():
            found.append(_first_minute_with_new_offset(zone, moment, moment + step))
        moment += step
    return tuple(found)


def _first_minute_with_new_offset(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    old = before.astimezone(zone).utcoffset()
    minute = before
    while minute.astimezone(zone).utcoffset() == old:
        minute += ONE_MINUTE
    assert minute <= after
    return minute


def _offset(instant: datetime, zone: ZoneInfo) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _missing_walls(instant: datetime, zone: ZoneInfo) -> Iterator[datetime]:
    """The wall times the clock skips when it springs forward at `instant` (none if it does not)."""
    old, new = _offset(instant - timedelta(seconds=1), zone), _offset(instant, zone)
    naive = instant.replace(tzinfo=None)
    wall = naive + old
    while wall < naive + new:
        yield wall
        wall += ONE_MINUTE


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None, fold=0)


def brute_force(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """The schedule's occurrences in (start, end], by testing every UTC minute — no wall-time walk.

    A minute is an occurrence when its wall time matches (and, under Once, it is the first
    instant with that wall time), or, under Shift, when the clock springs forward at it over a
    matching wall time.
    """
    zone = ZoneInfo(schedule.timezone)
    found = []
    instant = start.replace(second=0, microsecond=0) + ONE_MINUTE
    while instant <= end:
        if _fires_at(schedule, instant, zone):
            found.append(instant)
        instant += ONE_MINUTE
    return found


def _fires_at(schedule: Schedule, instant: datetime, zone: ZoneInfo) -> bool:
    def matches(wall: datetime) -> bool:
        return any(spec.matches(wall) for spec in schedule.cron_specs)

    first_time = instant.astimezone(zone).fold == 0
    if matches(_wall(instant, zone)) and (first_time or schedule.overlap is TWICE):
        return True
    return schedule.gap is SHIFT and any(matches(wall) for wall in _missing_walls(instant, zone))


# Crons that stress transitions: small hours, sub-hourly steps, a few day restrictions.
DST_MINUTES = st.one_of(
    st.sampled_from(["*", "*/5", "*/15", "*/20", "0", "30", "45", "0,30", "10-50/20"]), _field(0, 59)
)
DST_HOURS = st.one_of(st.sampled_from(["*", "0-4", "1", "2", "1,2", "*/2", "3", "23,0,1"]), _field(0, 23))
DST_DAYS = st.sampled_from(["* * *", "* * *", "* * 0", "1-7 * *", "* 3,4,10,11 *", "* * 6,0"])
DST_CRONS = st.lists(
    st.tuples(DST_MINUTES, DST_HOURS, DST_DAYS).map(" ".join), min_size=1, max_size=2
).map(tuple)
POLICIES = st.tuples(st.sampled_from(GapPolicy), st.sampled_from(OverlapPolicy))


@st.composite
def near_a_transition(draw: st.DrawFn) -> datetime:
    zone_transitions = transitions(draw(st.sampled_from(DST_ZONES)))
    transition = draw(st.sampled_from(zone_transitions))
    return transition - draw(st.integers(0, 60 * 60)) * ONE_MINUTE


@settings(max_examples=BRUTE_FORCE_EXAMPLES, deadline=None)
@given(zone=st.sampled_from(DST_ZONES), crons=DST_CRONS, policies=POLICIES, data=st.data())
def test_occurrences_equal_a_minute_by_minute_brute_force_around_transitions(
    zone: str, crons: tuple[str, ...], policies: tuple[GapPolicy, OverlapPolicy], data: st.DataObject
) -> None:
    transition = data.draw(st.sampled_from(transitions(zone)))
    start = transition - data.draw(st.integers(0, 36 * 60)) * ONE_MINUTE - data.draw(st.integers(0, 59)) * timedelta(
        seconds=1
    )
    end = start + timedelta(hours=48)
    schedule = Schedule.from_cron(crons, timezone=zone, gap=policies[0], overlap=policies[1])
    assert list(occurrences_between(schedule, start, end)) == brute_force(schedule, start, end)


YEARS = st.datetimes(
    min_value=datetime(2020, 1, 1),  # noqa: DTZ001 - hypothesis requires naive bounds; timezones= makes the values aware
    max_value=datetime(2030, 12, 31),  # noqa: DTZ001 - hypothesis requires naive bounds; timezones= makes the values aware
    timezones=st.just(UTC),
)


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(zone=st.sampled_from(DST_ZONES), crons=DST_CRONS, policies=POLICIES, after=st.one_of(YEARS, near_a_transition()))
def test_random_crons_over_years_keep_the_invariants(
    zone: str, crons: tuple[str, ...], policies: tuple[GapPolicy, OverlapPolicy], after: datetime
) -> None:
    schedule = Schedule.from_cron(crons, timezone=zone, gap=policies[0], overlap=policies[1])
    found = next_occurrences(schedule, after, count=40)
    tz = ZoneInfo(zone)
    assert len(found) == 40
    assert found[0] > after
    assert all(earlier < later for earlier, later in itertools.pairwise(found))
    for nominal in found:
        _assert_matches_or_is_shift_target(schedule, nominal, tz)
    walls = [_wall(nominal, tz) for nominal in found]
    if schedule.overlap is ONCE:
        assert len(set(walls)) == len(walls), "Once yielded a wall time twice"
    else:
        _assert_both_folds_present(schedule, found, tz)


def _assert_matches_or_is_shift_target(schedule: Schedule, nominal: datetime, zone: ZoneInfo) -> None:
    specs = schedule.cron_specs
    if any(spec.matches(_wall(nominal, zone)) for spec in specs):
        return
    assert schedule.gap is SHIFT, f"{nominal} matches no cron"
    missing = list(_missing_walls(nominal, zone))
    assert any(spec.matches(wall) for wall in missing for spec in specs), f"{nominal} is not a Shift target"


def _assert_both_folds_present(schedule: Schedule, found: list[datetime], zone: ZoneInfo) -> None:
    present = set(found)
    for nominal in found:
        wall = _wall(nominal, zone)
        first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
        if first == second or not any(spec.matches(wall) for spec in schedule.cron_specs):
            continue
        for fold in (first, second):
            if found[0] <= fold <= found[-1]:
                assert fold in present, f"Twice missed {fold} (wall {wall})"


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(zone=st.sampled_from(DST_ZONES), crons=DST_CRONS, policies=POLICIES, after=st.one_of(YEARS, near_a_transition()),
       split=st.integers(1, 30))  # fmt: skip
def test_windows_compose_and_agree_with_next_occurrences(
    zone: str, crons: tuple[str, ...], policies: tuple[GapPolicy, OverlapPolicy], after: datetime, split: int
) -> None:
    schedule = Schedule.from_cron(crons, timezone=zone, gap=policies[0], overlap=policies[1])
    found = next_occurrences(schedule, after, count=30)
    middle, end = found[split - 1], found[-1]
    assert list(occurrences_between(schedule, after, end)) == found
    assert list(occurrences_between(schedule, after, middle)) + list(occurrences_between(schedule, middle, end)) == found
    assert next_occurrences(schedule, middle, count=30 - split) == found[split:]


# --- previous occurrences and periods ---------------------------------------------------------


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(zone=st.sampled_from(DST_ZONES), crons=DST_CRONS, policies=POLICIES, after=st.one_of(YEARS, near_a_transition()))
def test_cron_periods_are_contiguous(
    zone: str, crons: tuple[str, ...], policies: tuple[GapPolicy, OverlapPolicy], after: datetime
) -> None:
    schedule = Schedule.from_cron(crons, timezone=zone, gap=policies[0], overlap=policies[1])
    _assert_periods_contiguous(schedule, after)


@settings(max_examples=PROPERTY_EXAMPLES, deadline=None)
@given(
    every=st.integers(1, 10 * 24 * 3600).map(lambda seconds: timedelta(seconds=seconds)),
    anchor=YEARS.map(lambda moment: moment.replace(microsecond=0)),
    after=YEARS,
)
def test_every_schedules_are_a_utc_lattice_with_contiguous_periods(
    every: timedelta, anchor: datetime, after: datetime
) -> None:
    schedule = Schedule.from_interval(every, anchor=anchor)
    found = next_occurrences(schedule, after, count=5)
    assert after < found[0] <= after + every
    assert all((nominal - anchor) % every == timedelta(0) for nominal in found)
    assert all(later - earlier == every for earlier, later in itertools.pairwise(found))
    _assert_periods_contiguous(schedule, after)


def _assert_periods_contiguous(schedule: Schedule, after: datetime) -> None:
    found = next_occurrences(schedule, after, count=6)
    occurrences = [occurrence_at(schedule, nominal, jitter=timedelta(seconds=7)) for nominal in found]
    first = occurrences[0]
    assert first.period_start <= after < first.period_end == found[0]
    assert next_occurrence(schedule, first.period_start) == found[0]
    for previous, current in itertools.pairwise(occurrences):
        assert current.period_start == previous.nominal
        assert current.period_end == current.nominal
        assert current.fire_at == current.nominal + timedelta(seconds=7)
    assert all(next_occurrence(schedule, nominal - ONE_MICROSECOND) == nominal for nominal in found)
    just_before = found[0] - timedelta(seconds=1)
    if first.period_start < just_before:
        assert next_occurrence(schedule, just_before - ONE_MICROSECOND) != just_before  # not an occurrence


@pytest.mark.parametrize(
    ("cron", "zone", "before", "expected"),
    [
        pytest.param("0 2 * * *", "UTC", "2026-08-01T02:00", "2026-07-31T02:00", id="daily-yesterday"),
        pytest.param("0 2 * * *", "UTC", "2026-08-01T02:01", "2026-08-01T02:00", id="daily-today"),
        pytest.param("0 0 29 2 *", "UTC", "2024-05-01T00:00", "2024-02-29T00:00", id="leap-day"),
        pytest.param("0 0 29 2 *", "UTC", "2024-02-29T00:00", "2020-02-29T00:00", id="leap-day-four-years"),
        pytest.param("0 0 29 2 *", "UTC", "2104-01-01T00:00", "2096-02-29T00:00", id="leap-day-eight-years"),
        pytest.param("@yearly", LONDON, "2026-06-01T00:00", "2026-01-01T00:00", id="yearly"),
        pytest.param("30 1 * * *", LONDON, "2024-04-01T00:00", "2024-03-31T01:00", id="shift-target"),
    ],
)
def test_previous_cron_occurrence_examples(cron: str, zone: str, before: str, expected: str) -> None:
    schedule = Schedule.from_cron(cron, timezone=zone)
    assert previous_occurrence(schedule, utc(before)) == utc(expected)


def test_first_period_of_a_daily_cron_starts_at_yesterdays_time() -> None:
    schedule = Schedule.from_cron("0 2 * * *", timezone=LONDON)
    nominal = utc("2026-08-01T01:00")  # 02:00 BST
    occurrence = occurrence_at(schedule, nominal, jitter=timedelta(milliseconds=1500))
    assert occurrence.period_start == utc("2026-07-31T01:00")
    assert occurrence.period_end == nominal
    assert occurrence.fire_at == nominal + timedelta(milliseconds=1500)


def test_twice_previous_occurrence_is_the_second_fold() -> None:
    schedule = Schedule.from_cron("30 1 * * *", timezone=LONDON, overlap=TWICE)
    assert previous_occurrence(schedule, utc("2024-10-28T01:30")) == utc("2024-10-27T01:30")
    assert previous_occurrence(schedule, utc("2024-10-27T01:30")) == utc("2024-10-27T00:30")


def test_negative_jitter_is_refused() -> None:
    schedule = Schedule.from_cron("0 2 * * *")
    with pytest.raises(ValueError, match="jitter"):
        occurrence_at(schedule, utc("2026-08-01T02:00"), jitter=-ONE_MINUTE)


# --- every and once ---------------------------------------------------------------------------


def test_every_is_anchored_and_strictly_after() -> None:
    schedule = Schedule.from_interval(timedelta(minutes=15), anchor=utc("2024-01-01T00:00") + timedelta(seconds=7))
    assert next_occurrences(schedule, utc("2024-01-01T00:20"), count=2) == [
        utc("2024-01-01T00:30") + timedelta(seconds=7),
        utc("2024-01-01T00:45") + timedelta(seconds=7),
    ]
    on_the_lattice = utc("2024-01-01T00:30") + timedelta(seconds=7)
    assert next_occurrence(schedule, on_the_lattice) == on_the_lattice + timedelta(minutes=15)
    assert previous_occurrence(schedule, on_the_lattice) == on_the_lattice - timedelta(minutes=15)


def test_every_lattice_extends_before_the_anchor() -> None:
    anchor = utc("2024-01-01T00:00")
    schedule = Schedule.from_interval(timedelta(minutes=15), anchor=anchor)
    assert next_occurrence(schedule, anchor - timedelta(hours=1)) == anchor - timedelta(minutes=45)
    assert occurrence_at(schedule, anchor + timedelta(minutes=15), jitter=timedelta(0)).period_start == anchor


def test_every_ignores_daylight_saving() -> None:
    schedule = Schedule.from_interval(timedelta(hours=24), anchor=utc("2024-03-30T12:00"))
    found = next_occurrences(schedule, utc("2024-03-30T12:00"), count=2)
    assert found == [utc("2024-03-31T12:00"), utc("2024-04-01T12:00")]
    london = ZoneInfo(LONDON)
    assert [nominal.astimezone(london).hour for nominal in found] == [13, 13]  # BST: the wall time moved


def test_every_ends_quietly_at_the_end_of_time() -> None:
    schedule = Schedule.from_interval(timedelta(days=365), anchor=utc("9999-01-01T00:00"))
    assert next_occurrences(schedule, utc("9999-06-01T00:00"), count=3) == []


def test_once_fires_only_after_its_time_and_has_an_empty_period() -> None:
    run_at = datetime(2026, 8, 1, 4, 0, tzinfo=ZoneInfo(LONDON))  # 03:00 UTC
    schedule = Schedule.one_off(run_at)
    assert next_occurrences(schedule, utc("2026-08-01T02:59"), count=3) == [utc("2026-08-01T03:00")]
    assert next_occurrences(schedule, utc("2026-08-01T03:00"), count=3) == []
    assert list(occurrences_after(schedule, utc("2026-08-01T03:00"))) == []
    occurrence = occurrence_at(schedule, utc("2026-08-01T03:00"), jitter=timedelta(0))
    assert occurrence.period_start == occurrence.period_end == utc("2026-08-01T03:00")
    assert previous_occurrence(schedule, utc("2026-08-01T03:01")) == utc("2026-08-01T03:00")
    with pytest.raises(ValueError, match="no occurrence before"):
        previous_occurrence(schedule, utc("2026-08-01T03:00"))


@pytest.mark.parametrize(
    ("expression", "days"),
    [("* * * * 1/2", {1, 3, 5}), ("* * * * 0/3", {0, 3, 6}), ("* * * * 5-7", {5, 6, 0})],
)
def test_day_of_week_steps_stop_at_saturday_as_in_kubernetes(expression: str, days: set[int]) -> None:
    assert set(parse_cron(expression).days_of_week) == days
