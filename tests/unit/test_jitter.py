"""Deterministic jitter: the default window per schedule and each job's fixed offset within it.

Covers the default window (60 s for cron, capped at a tenth of the shortest cron interval, zero
for every/once), offsets within [0, window) in whole milliseconds, determinism within and across
processes (a pinned value), and an even spread of offsets over 10,000 uids.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vigil.core.jitter import (
    MAX_DEFAULT_JITTER,
    default_jitter_window,
    jitter_offset,
    shortest_cron_interval,
)
from vigil.core.schedule import Schedule

SPREAD_SAMPLE = 10_000
DECILES = 10
#: Each decile must hold between 7% and 13% of the sample (the expected 10% is ~33 sigma wide).
DECILE_SHARE_RANGE = (0.07, 0.13)
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("schedule", "window"),
    [
        pytest.param(Schedule.from_cron("0 2 * * *"), MAX_DEFAULT_JITTER, id="daily"),
        pytest.param(Schedule.from_cron("@hourly"), MAX_DEFAULT_JITTER, id="hourly"),
        pytest.param(Schedule.from_cron("*/10 * * * *"), MAX_DEFAULT_JITTER, id="every-ten-minutes"),
        pytest.param(Schedule.from_cron("*/5 * * * *"), timedelta(seconds=30), id="every-five-minutes"),
        pytest.param(Schedule.from_cron("* * * * *"), timedelta(seconds=6), id="every-minute"),
        pytest.param(Schedule.from_cron("0,7 * * * *"), timedelta(seconds=42), id="uneven-minutes"),
        pytest.param(Schedule.from_cron(("0 * * * *", "1 * * * *")), timedelta(seconds=6), id="union-of-crons"),
        pytest.param(Schedule.from_cron(("59 23 * * *", "0 0 * * *")), timedelta(seconds=6), id="across-midnight"),
        pytest.param(Schedule.from_interval(timedelta(minutes=5), anchor=ANCHOR), timedelta(0), id="every"),
        pytest.param(Schedule.one_off(ANCHOR), timedelta(0), id="once"),
    ],
)
def test_default_window(schedule: Schedule, window: timedelta) -> None:
    assert default_jitter_window(schedule) == window


def test_shortest_interval_wraps_across_midnight() -> None:
    assert shortest_cron_interval(("0 22 * * *", "0 1 * * *")) == timedelta(hours=3)
    assert shortest_cron_interval(("0 12 * * *",)) == timedelta(days=1)


@settings(max_examples=300, deadline=None)
@given(uid=st.text(min_size=1, max_size=64), window_ms=st.integers(0, 10 * 60 * 1000))
def test_offset_is_whole_milliseconds_within_the_window_and_repeatable(uid: str, window_ms: int) -> None:
    window = timedelta(milliseconds=window_ms)
    offset = jitter_offset(uid, window)
    assert offset == jitter_offset(uid, window)
    assert offset % timedelta(milliseconds=1) == timedelta(0)
    if window_ms == 0:
        assert offset == timedelta(0)
    else:
        assert timedelta(0) <= offset < window


def test_sub_millisecond_window_gives_no_offset() -> None:
    assert jitter_offset("any", timedelta(microseconds=999)) == timedelta(0)


def test_negative_window_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        jitter_offset("any", timedelta(seconds=-1))


def test_offset_is_pinned_so_it_never_drifts_between_versions() -> None:
    # sha256("job-1") begins 0x026ab639c21df8aa...; that fraction of 60,000 ms is 566 ms.
    assert jitter_offset("job-1", timedelta(seconds=60)) == timedelta(milliseconds=566)


def test_offset_is_the_same_in_another_process() -> None:
    uid = "5b0a3f3e-8d0c-4a57-9b7e-7c1d2f0e9a11"
    code = (
        "from datetime import timedelta; from vigil.core.jitter import jitter_offset; "
        f"print(jitter_offset({uid!r}, timedelta(seconds=60)) // timedelta(milliseconds=1))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert int(result.stdout) == jitter_offset(uid, timedelta(seconds=60)) // timedelta(milliseconds=1)


def test_offsets_spread_evenly_over_the_window() -> None:
    window = timedelta(seconds=60)
    uids = [str(uuid.uuid5(uuid.NAMESPACE_URL, f"job-{index}")) for index in range(SPREAD_SAMPLE)]
    deciles = Counter(int(jitter_offset(uid, window) / window * DECILES) for uid in uids)
    assert set(deciles) == set(range(DECILES))
    low, high = DECILE_SHARE_RANGE
    for decile in range(DECILES):
        assert low * SPREAD_SAMPLE <= deciles[decile] <= high * SPREAD_SAMPLE, deciles
