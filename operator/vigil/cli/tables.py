"""Plain-text tables and durations for `kubectl vigil`, formatted the way kubectl formats them.

Columns are left-aligned and separated by three spaces, an empty cell shows as
"-" (so every row splits into the same number of words up to its last column),
and ages read like kubectl's AGE column: 45s, 3m12s, 5h, 2d4h. Pure functions:
the caller passes `now`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

COLUMN_GAP = "   "
EMPTY_CELL = "-"
_MINUTE = 60
_HOUR = 60 * _MINUTE
_DAY = 24 * _HOUR
#: Below these, a second unit is worth showing (kubectl's HumanDuration keeps the same steps).
_MINUTES_WITH_SECONDS = 10 * _MINUTE
_HOURS_WITH_MINUTES = 8 * _HOUR
_DAYS_WITH_HOURS = 8 * _DAY
_HOURS_ONLY = 2 * _DAY


def cell(value: object) -> str:
    """A value as a table cell: None and "" become "-"."""
    if value is None or value == "":
        return EMPTY_CELL
    return str(value)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Aligned columns; the last column is not padded. Ends without a newline."""
    cells = [list(headers), *([cell(value) for value in row] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(headers))]
    lines = []
    for line in cells:
        padded = [text.ljust(width) for text, width in zip(line[:-1], widths, strict=False)]
        lines.append(COLUMN_GAP.join([*padded, line[-1]]).rstrip())
    return "\n".join(lines)


def human_duration(delta: timedelta) -> str:
    """A duration as kubectl shows ages: 0s, 59s, 9m59s, 42m, 7h59m, 47h, 7d23h, 300d."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < _MINUTE:
        return f"{seconds}s"
    if seconds < _MINUTES_WITH_SECONDS:
        return _two_units(seconds, _MINUTE, "m", 1, "s")
    if seconds < _HOUR:
        return f"{seconds // _MINUTE}m"
    if seconds < _HOURS_WITH_MINUTES:
        return _two_units(seconds, _HOUR, "h", _MINUTE, "m")
    if seconds < _HOURS_ONLY:
        return f"{seconds // _HOUR}h"
    if seconds < _DAYS_WITH_HOURS:
        return _two_units(seconds, _DAY, "d", _HOUR, "h")
    return f"{seconds // _DAY}d"


def precise_duration(delta: timedelta) -> str:
    """How long an attempt ran: tenths of a second under a minute (0.4s, 12.3s), else as an age."""
    if delta < timedelta(minutes=1):
        return f"{max(0.0, delta.total_seconds()):.1f}s"
    return human_duration(delta)


def age(since: datetime | None, now: datetime) -> str:
    """How long ago `since` was, as an AGE column shows it ("-" if unknown)."""
    return EMPTY_CELL if since is None else human_duration(now - since)


def relative(when: datetime, now: datetime) -> str:
    """'in 12s' for a future instant, '3m ago' for a past one."""
    if when > now:
        return f"in {human_duration(when - now)}"
    return f"{human_duration(now - when)} ago"


def _two_units(seconds: int, big: int, big_unit: str, small: int, small_unit: str) -> str:
    whole, rest = divmod(seconds, big)
    rest //= small
    return f"{whole}{big_unit}{rest}{small_unit}" if rest else f"{whole}{big_unit}"
