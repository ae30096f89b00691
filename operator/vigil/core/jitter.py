"""Deterministic jitter: spread jobs that share a nominal time across a short window.

People schedule on the hour and at midnight, so without jitter a hundred
thousand jobs fire in the same second. Each job instead fires at its nominal
time plus an offset derived from its uid alone: the same job always gets the
same offset (it never drifts between runs, processes or operator versions),
and different jobs spread evenly across the window.

The offset is a hash (SHA-256, never Python's per-process ``hash()``) mapped to
whole milliseconds in [0, window). Occurrence identity — execution ids, periods,
templated payloads — always uses the nominal time; jitter only moves when the
occurrence fires.
"""

from __future__ import annotations

import hashlib
import itertools
from datetime import timedelta

from vigil.core.schedule import Schedule, ScheduleKind
from vigil.core.timeparse import MINUTES_PER_DAY, parse_cron

#: The default window for cron schedules: sub-minute precision is what jitter costs.
MAX_DEFAULT_JITTER = timedelta(seconds=60)

#: The default window is at most this fraction of the shortest interval between two
#: consecutive wall-clock times of the cron ("* * * * *" gets 6 s, "*/5 * * * *" 30 s).
JITTER_SHARE_OF_INTERVAL = 10

#: Bytes of the digest read as the fraction of the window (64 bits: uniform enough).
_FRACTION_BYTES = 8
_FRACTION_SCALE_BITS = _FRACTION_BYTES * 8
_ONE_MILLISECOND = timedelta(milliseconds=1)


def default_jitter_window(schedule: Schedule) -> timedelta:
    """The jitter window a schedule gets unless its job sets one.

    Cron: 60 s, capped at a tenth of the shortest wall-clock interval between
    consecutive cron times. ``every`` and ``once`` schedules: zero — they are
    not clustered on round times by nature, and their owners chose the instant.
    """
    if schedule.kind is not ScheduleKind.CRON:
        return timedelta(0)
    shortest = shortest_cron_interval(schedule.cron)
    return min(MAX_DEFAULT_JITTER, shortest / JITTER_SHARE_OF_INTERVAL)


def shortest_cron_interval(expressions: tuple[str, ...]) -> timedelta:
    """A lower bound on the wall-clock time between two consecutive cron times.

    Computed from the fields: the smallest gap between the times of day any of
    the expressions fire at, including the wrap from the last time of one day
    to the first of the next. Daylight-saving transitions are ignored (a Shift
    can bring two occurrences closer; the 60 s cap keeps jitter small anyway).
    """
    minutes = sorted(
        {hour * 60 + minute for expression in expressions for hour, minute in parse_cron(expression).times_of_day}
    )
    gaps = [later - earlier for earlier, later in itertools.pairwise(minutes)]
    gaps.append(minutes[0] + MINUTES_PER_DAY - minutes[-1])
    return timedelta(minutes=min(gaps))


def jitter_offset(job_uid: str, window: timedelta) -> timedelta:
    """The job's fixed offset within `window`: whole milliseconds in [0, window); 0 for no window."""
    if window < timedelta(0):
        raise ValueError(f"jitter window must not be negative, got {window}")
    window_ms = window // _ONE_MILLISECOND
    if window_ms == 0:
        return timedelta(0)
    digest = hashlib.sha256(job_uid.encode("utf-8")).digest()
    fraction = int.from_bytes(digest[:_FRACTION_BYTES], "big")  # fraction / 2**64 is in [0, 1)
    return timedelta(milliseconds=(fraction * window_ms) >> _FRACTION_SCALE_BITS)
