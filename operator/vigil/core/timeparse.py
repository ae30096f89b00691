"""Parse and format the textual time notations Vigil accepts: RFC 3339 timestamps and cron.

Both notations reach the core from users (a ScheduledJob's ``runAt`` and ``cron``)
and from stored state (bucket entries, status fields), so each has exactly one
parser here and every error is a ``ValueError`` that quotes the offending text.

The cron parser is Vigil's own rather than croniter's: the schedule maths needs
the expanded fields (which minutes, hours, days) to walk local wall-clock time
with an explicit daylight-saving policy, and owning the grammar keeps it small
and documented (docs/schedules.md). The unit tests check it against croniter
as an independent oracle.

Grammar (five fields: minute hour day-of-month month day-of-week):

* each field is a comma-separated list of items; an item is ``*``, a value
  ``n``, or a range ``a-b`` (ascending), optionally followed by ``/step``;
  ``n/step`` means ``n-max/step``;
* months accept ``JAN``..``DEC`` and days of week ``SUN``..``SAT``
  (case-insensitive); Sunday is 0 or 7;
* ``?`` is accepted in the two day fields as a synonym of ``*``;
* when both day fields are restricted a date matches if EITHER matches, as in
  every classic cron; otherwise both must match. A day field is unrestricted
  when one of its items is ``*`` or ``?`` without a step other than 1; anything
  else restricts, even a range covering every day (``1-31``, ``0-6``). This is
  the rule of Kubernetes CronJobs (robfig/cron); croniter counts ``*/1`` as
  restricted, and reads an equal range like ``5-5`` as the whole cycle (here: 5);
* a step may not exceed the field's range (``*/70`` in the minute field is an
  error, not "minute 0");
* macros: ``@yearly``, ``@annually``, ``@monthly``, ``@weekly``, ``@daily``,
  ``@midnight``, ``@hourly``.

Not supported (rejected with a clear message): seconds or year fields, ``L``,
``W``, ``#``, hashed ``H`` values, ``@reboot`` and descending ranges.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from datetime import UTC, date, datetime

#: Cron macros and the five-field expressions they stand for.
CRON_MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

CRON_FIELD_COUNT = 5
MINUTES_PER_DAY = 24 * 60

_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
#: Longest possible month, by month number: a day-of-month only fires if some month has it.
_LONGEST_MONTH_DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}


@dataclasses.dataclass(frozen=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] is the value low + i
    allows_question_mark: bool = False
    #: Where an open-ended stepped item (``N/step``) stops, when not at ``high``: the
    #: day-of-week field accepts 7 as Sunday but, as in Kubernetes, ``1/2`` means 1,3,5.
    stepped_high: int | None = None


_MINUTE = _FieldSpec("minute", 0, 59)
_HOUR = _FieldSpec("hour", 0, 23)
_DAY_OF_MONTH = _FieldSpec("day-of-month", 1, 31, allows_question_mark=True)
_MONTH = _FieldSpec("month", 1, 12, names=_MONTH_NAMES)
_DAY_OF_WEEK = _FieldSpec(
    "day-of-week", 0, 7, names=_WEEKDAY_NAMES, allows_question_mark=True, stepped_high=6
)
_SUNDAY_ALIAS = 7
#: Items that leave a day field unrestricted (the field then defers to the other one).
_STAR_ITEMS = frozenset({"*", "?", "*/1", "?/1"})


class CronSyntaxError(ValueError):
    """A cron expression that Vigil cannot run; the message quotes the expression."""


@dataclasses.dataclass(frozen=True)
class CronSpec:
    """One parsed cron expression: the sets of values each field allows.

    ``times_of_day`` is every (hour, minute) the expression fires at on a
    matching date, ascending. Days of week use 0 = Sunday .. 6 = Saturday.
    """

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    times_of_day: tuple[tuple[int, int], ...]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    day_of_month_restricted: bool
    day_of_week_restricted: bool

    def matches_date(self, day: date) -> bool:
        """Whether the expression fires on this calendar date (at some time of day)."""
        if day.month not in self.months:
            return False
        dom = day.day in self.days_of_month
        dow = day.isoweekday() % 7 in self.days_of_week
        if self.day_of_month_restricted and self.day_of_week_restricted:
            return dom or dow
        return dom and dow

    def matches(self, wall: datetime) -> bool:
        """Whether a wall-clock time (its date, hour and minute; seconds must be 0) matches."""
        on_the_minute = wall.second == 0 and wall.microsecond == 0
        at_a_listed_time = wall.hour in self.hours and wall.minute in self.minutes
        return on_the_minute and at_a_listed_time and self.matches_date(wall.date())

    @property
    def ever_fires(self) -> bool:
        """False for expressions naming only dates that never exist, like ``0 0 30 2 *``."""
        if not self.day_of_month_restricted or self.day_of_week_restricted:
            return True
        return any(day <= _LONGEST_MONTH_DAYS[month] for month in self.months for day in self.days_of_month)


@functools.lru_cache(maxsize=4096)
def parse_cron(expression: str) -> CronSpec:
    """Parse one cron expression (five fields or a macro); raise CronSyntaxError if invalid."""
    text = expression.strip()
    if text.startswith("@"):
        if text.lower() not in CRON_MACROS:
            raise CronSyntaxError(f"invalid cron expression {expression!r}: unknown macro {text!r}")
        text = CRON_MACROS[text.lower()]
    fields = text.split()
    if len(fields) != CRON_FIELD_COUNT:
        raise CronSyntaxError(
            f"invalid cron expression {expression!r}: expected {CRON_FIELD_COUNT} fields "
            f"(minute hour day-of-month month day-of-week), got {len(fields)}"
        )
    try:
        spec = _build_spec(expression, fields)
    except ValueError as error:
        raise CronSyntaxError(f"invalid cron expression {expression!r}: {error}") from None
    if not spec.ever_fires:
        raise CronSyntaxError(f"invalid cron expression {expression!r}: it names no date that exists")
    return spec


def _build_spec(expression: str, fields: list[str]) -> CronSpec:
    minute, hour, dom, month, dow = fields
    minutes = sorted(_parse_field(minute, _MINUTE))
    hours = sorted(_parse_field(hour, _HOUR))
    days_of_month = frozenset(_parse_field(dom, _DAY_OF_MONTH))
    weekdays = frozenset(0 if d == _SUNDAY_ALIAS else d for d in _parse_field(dow, _DAY_OF_WEEK))
    return CronSpec(
        expression=expression,
        minutes=frozenset(minutes),
        hours=frozenset(hours),
        times_of_day=tuple((h, m) for h in hours for m in minutes),
        days_of_month=days_of_month,
        months=frozenset(_parse_field(month, _MONTH)),
        days_of_week=weekdays,
        day_of_month_restricted=not _written_as_star(dom),
        day_of_week_restricted=not _written_as_star(dow),
    )


def _written_as_star(field: str) -> bool:
    return any(item in _STAR_ITEMS for item in field.split(","))


def _parse_field(text: str, spec: _FieldSpec) -> set[int]:
    values: set[int] = set()
    for item in text.split(","):
        values |= _parse_item(item, spec)
    return values


def _parse_item(item: str, spec: _FieldSpec) -> set[int]:
    range_text, slash, step_text = item.partition("/")
    step = _parse_step(step_text, spec) if slash else 1
    if range_text == "*" or (range_text == "?" and spec.allows_question_mark):
        low, high = spec.low, spec.high
    elif "-" in range_text:
        first, _, last = range_text.partition("-")
        low, high = _parse_value(first, spec), _parse_value(last, spec)
        if low > high:
            raise ValueError(f"{spec.name} range {range_text!r} must ascend")
    else:
        low = _parse_value(range_text, spec)
        # `7/2` in day-of-week starts past where stepping stops: it is Sunday alone, not nothing.
        high = max(low, spec.stepped_high or spec.high) if slash else low
    return set(range(low, high + 1, step))


def _parse_step(text: str, spec: _FieldSpec) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise ValueError(f"{spec.name} step {text!r} must be a positive whole number")
    span = spec.high - spec.low + 1
    if int(text) > span:
        raise ValueError(f"{spec.name} step {text} exceeds the field's {span} values")
    return int(text)


def _parse_value(text: str, spec: _FieldSpec) -> int:
    upper = text.upper()
    if upper in spec.names:
        return spec.low + spec.names.index(upper)
    if not text.isascii() or not text.isdigit():
        raise ValueError(f"{spec.name} value {text!r} is not a number{_names_hint(spec)}")
    value = int(text)
    if not spec.low <= value <= spec.high:
        raise ValueError(f"{spec.name} value {value} is outside {spec.low}-{spec.high}")
    return value


def _names_hint(spec: _FieldSpec) -> str:
    return f" or one of {', '.join(spec.names)}" if spec.names else ""


# --- RFC 3339 ---------------------------------------------------------------------------------

_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})",
    re.ASCII,
)


def require_aware(value: datetime, *, name: str = "time") -> datetime:
    """Return `value` converted to UTC; refuse naive datetimes, whose zone would be a guess."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware, got naive {value.isoformat()}")
    return value.astimezone(UTC)


def format_rfc3339(value: datetime) -> str:
    """Format an aware datetime as RFC 3339 UTC with second precision: ``2026-08-01T02:00:00Z``.

    Fractions of a second are dropped (Kubernetes timestamps have none either).
    """
    return require_aware(value).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 timestamp (``Z`` or a numeric offset) into an aware UTC datetime."""
    if not _RFC3339.fullmatch(text):
        raise ValueError(f"invalid RFC 3339 timestamp {text!r}: expected like '2026-08-01T02:00:00Z'")
    normalised = text.upper().replace(" ", "T").replace("Z", "+00:00")
    try:
        parsed = datetime.fromisoformat(normalised)
    except ValueError as error:
        raise ValueError(f"invalid RFC 3339 timestamp {text!r}: {error}") from None
    return parsed.astimezone(UTC)
