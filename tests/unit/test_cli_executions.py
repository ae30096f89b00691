"""The pure parts of the execution verbs of `kubectl vigil`: backfill ranges and the tables.

Backfill: a --from/--to pair of dates is whole days on the job's clock, --to's
day included, so a daily 02:00 Europe/London cron across the spring-forward
day yields one occurrence per day (02:00Z before, 01:00Z after), each with its
own period and its own execution id; RFC 3339 bounds are exact instants;
reversed ranges, bad dates and ranges over the limit are refused. Tables: the
column layout, kubectl-style ages, a job's executions newest first, dead letters
judged by their status (not a stale label), and an execution's timeline.
Retry: the read-modify-write of spec.retryRequests carries the resourceVersion
it read and, on 409, reads again and decides again (a fake API stands in).
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from vigil.cli.backfill import (
    NominalRange,
    TooManyOccurrences,
    nominal_range,
    nominals_in,
    plan_backfill,
    start_of_day,
)
from vigil.cli.cluster import Cluster
from vigil.cli.errors import BadInput, Contention
from vigil.cli.executions import (
    dead_letter_table,
    describe_lines,
    execution_table,
    phase_since,
)
from vigil.cli.interventions import request_retry, retry_refusal
from vigil.cli.tables import human_duration, precise_duration, relative, render_table
from vigil.core.executions import (
    AttemptOutcome,
    AttemptResult,
    Execution,
    Phase,
    RetryPolicy,
    cancel,
    execution_to_dict,
    finish,
    new_execution,
    retry_due,
    start,
)
from vigil.core.ids import ExecutionId, execution_id
from vigil.core.timeparse import format_rfc3339
from vigil.kube.kits.conflicts import CONFLICT_TRIES
from vigil.model.jobspec import job_view

UID = "3f2c1d4e-0000-4000-8000-00000000abcd"
LONDON = "Europe/London"
NOW = datetime(2026, 4, 10, 12, 0, tzinfo=UTC)
T0 = datetime(2026, 4, 1, 2, 0, 5, tzinfo=UTC)
NO_RETRY = RetryPolicy(max_attempts=1)
TWO_ATTEMPTS = RetryPolicy(max_attempts=2)


def london_daily_job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "vigil.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {
            "name": "nightly",
            "namespace": "shop",
            "uid": UID,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "generation": 1,
        },
        "spec": {
            "cron": "0 2 * * *",
            "timezone": LONDON,
            "template": {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}},
            **spec,
        },
    }


def stamps(instants: list[datetime]) -> list[str]:
    return [format_rfc3339(i) for i in instants]


# --- backfill: the range ----------------------------------------------------------------------


def test_dates_are_whole_days_on_the_jobs_clock_with_the_to_day_included() -> None:
    span = nominal_range("2026-03-28", "2026-03-29", timezone=LONDON)

    assert span.first == datetime(2026, 3, 28, 0, 0, tzinfo=UTC)  # GMT: local midnight is 00:00Z
    assert span.last == datetime(2026, 3, 29, 22, 59, 59, tzinfo=UTC)  # BST by then: 23:59:59 local


def test_start_of_day_follows_the_zone_offset_of_that_day() -> None:
    assert start_of_day(date(2026, 7, 1), LONDON) == datetime(2026, 6, 30, 23, 0, tzinfo=UTC)  # BST
    assert start_of_day(date(2026, 1, 1), LONDON) == datetime(2026, 1, 1, tzinfo=UTC)  # GMT


def test_rfc3339_bounds_are_exact_instants_rounded_inwards_to_whole_seconds() -> None:
    span = nominal_range("2026-03-28T01:59:59.500Z", "2026-03-29T01:00:00.900+00:00", timezone=LONDON)

    assert span == NominalRange(
        first=datetime(2026, 3, 28, 2, 0, 0, tzinfo=UTC),
        last=datetime(2026, 3, 29, 1, 0, 0, tzinfo=UTC),
    )


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        pytest.param("2026-04-05", "2026-04-01", "is after --to", id="reversed-dates"),
        pytest.param("2026-04-01T03:00:00Z", "2026-04-01T02:00:00Z", "is after --to", id="reversed-instants"),
        pytest.param("2026-02-30", "2026-03-01", "invalid date '2026-02-30'", id="no-such-day"),
        pytest.param("yesterday", "2026-03-01", "neither a date (YYYY-MM-DD) nor an RFC 3339", id="words"),
        pytest.param("2026-03-01", "2026/03/02", "neither a date", id="slashes"),
    ],
)
def test_bad_ranges_are_refused_saying_why(start: str, end: str, expected: str) -> None:
    with pytest.raises(ValueError, match=re.escape(expected)):
        nominal_range(start, end, timezone=LONDON)


# --- backfill: occurrences, periods, ids ------------------------------------------------------


def test_a_london_daily_cron_across_spring_forward_gives_one_occurrence_per_local_day() -> None:
    view, _ = job_view(london_daily_job())
    span = nominal_range("2026-03-26", "2026-04-01", timezone=LONDON)

    planned = plan_backfill(view, span, limit=100)

    assert stamps([p.occurrence.nominal for p in planned]) == [
        "2026-03-26T02:00:00Z",
        "2026-03-27T02:00:00Z",
        "2026-03-28T02:00:00Z",
        "2026-03-29T01:00:00Z",  # BST from 01:00Z that day: 02:00 local is 01:00Z
        "2026-03-30T01:00:00Z",
        "2026-03-31T01:00:00Z",
        "2026-04-01T01:00:00Z",
    ]


def test_each_backfilled_occurrence_has_its_own_period_and_execution_id() -> None:
    view, _ = job_view(london_daily_job())
    planned = plan_backfill(view, nominal_range("2026-03-27", "2026-03-30", timezone=LONDON), limit=100)

    periods = [(p.occurrence.period_start, p.occurrence.period_end) for p in planned]
    assert stamps([start for start, _ in periods]) == [
        "2026-03-26T02:00:00Z",  # the previous day's occurrence, also before the range
        "2026-03-27T02:00:00Z",
        "2026-03-28T02:00:00Z",
        "2026-03-29T01:00:00Z",  # a 23-hour day: the period is as long as the local day
    ]
    assert all(end == p.occurrence.nominal for (_, end), p in zip(periods, planned, strict=True))
    assert [p.execution_id for p in planned] == [execution_id(UID, p.occurrence.nominal) for p in planned]
    assert len({p.execution_id for p in planned}) == len(planned)


def test_bounds_are_inclusive_at_both_ends() -> None:
    view, _ = job_view(london_daily_job())
    span = nominal_range("2026-03-28T02:00:00Z", "2026-03-29T01:00:00Z", timezone=LONDON)

    assert stamps(nominals_in(view.schedule, span, limit=10)) == ["2026-03-28T02:00:00Z", "2026-03-29T01:00:00Z"]


def test_a_range_with_no_occurrence_plans_nothing() -> None:
    view, _ = job_view(london_daily_job())
    span = nominal_range("2026-03-28T03:00:00Z", "2026-03-29T00:59:59Z", timezone=LONDON)

    assert plan_backfill(view, span, limit=10) == []


def test_more_occurrences_than_the_limit_are_refused_and_exactly_the_limit_is_not() -> None:
    view, _ = job_view(london_daily_job())
    eleven_days = nominal_range("2026-03-24", "2026-04-03", timezone=LONDON)

    assert len(plan_backfill(view, eleven_days, limit=11)) == 11
    with pytest.raises(TooManyOccurrences, match=r"more than 10 occurrences.*raise --limit"):
        plan_backfill(view, eleven_days, limit=10)


def test_a_fine_grained_schedule_over_a_long_range_stops_counting_at_the_limit() -> None:
    view, _ = job_view(london_daily_job(cron=None, every="1s", timezone="UTC"))
    decade = nominal_range("2020-01-01", "2029-12-31", timezone="UTC")

    with pytest.raises(TooManyOccurrences):
        plan_backfill(view, decade, limit=1000)


# --- tables and durations ---------------------------------------------------------------------


def test_render_table_aligns_columns_and_shows_empty_cells_as_a_dash() -> None:
    out = render_table(["NAME", "PHASE", "REASON"], [["a", "Ready", None], ["longer-name", "", "ExitCode3"]])

    assert out.splitlines() == [
        "NAME          PHASE   REASON",
        "a             Ready   -",
        "longer-name   -       ExitCode3",
    ]


def test_render_table_with_no_rows_is_the_header() -> None:
    assert render_table(["A", "B"], []) == "A   B"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        pytest.param(-5, "0s", id="clock-skew"),
        pytest.param(0, "0s", id="zero"),
        pytest.param(59, "59s", id="seconds"),
        pytest.param(60, "1m", id="one-minute"),
        pytest.param(192, "3m12s", id="minutes-and-seconds"),
        pytest.param(10 * 60 + 30, "10m", id="minutes"),
        pytest.param(2 * 3600 + 5 * 60, "2h5m", id="hours-and-minutes"),
        pytest.param(9 * 3600 + 30 * 60, "9h", id="hours"),
        pytest.param(2 * 86400 + 4 * 3600, "2d4h", id="days-and-hours"),
        pytest.param(300 * 86400, "300d", id="days"),
    ],
)
def test_human_duration_reads_like_kubectl_ages(seconds: int, shown: str) -> None:
    assert human_duration(timedelta(seconds=seconds)) == shown


def test_precise_duration_keeps_tenths_under_a_minute() -> None:
    assert precise_duration(timedelta(milliseconds=4200)) == "4.2s"
    assert precise_duration(timedelta(minutes=3, seconds=12)) == "3m12s"


def test_relative_says_in_for_the_future_and_ago_for_the_past() -> None:
    assert relative(NOW + timedelta(seconds=12), NOW) == "in 12s"
    assert relative(NOW - timedelta(minutes=3), NOW) == "3m ago"


# --- execution objects for the tables ---------------------------------------------------------


def fresh(nominal: datetime, *, namespace: str = "shop") -> Execution:
    return new_execution(
        execution_id(UID, nominal), namespace=namespace, job="nightly", scheduled_for=nominal, now=nominal
    )


def failed(ex: Execution, *, at: datetime, code: int = 3, message: str = "") -> Execution:
    """The current attempt started at `at` and failed 4 s later (a due retry is made Ready first)."""
    if ex.retry_at is not None:
        ex = retry_due(ex, now=ex.retry_at)
    started = start(ex, pod=f"{ex.execution_id}-{ex.attempt}", now=at)
    result = AttemptResult(
        attempt=ex.attempt, outcome=AttemptOutcome.FAILED, reason=f"ExitCode{code}",
        message=message, exit_code=code, started_at=at,
    )  # fmt: skip
    return finish(started, result, policy=TWO_ATTEMPTS, now=at + timedelta(seconds=4))


def as_object(ex: Execution | None, *, nominal: datetime, with_status: bool = True) -> dict[str, Any]:
    """An Execution object as the API server returns it; without status as freshly created."""
    name = execution_id(UID, nominal)
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "shop", "creationTimestamp": "2026-04-10T11:00:00Z"},
        "spec": {
            "job": {"name": "nightly", "uid": UID},
            "executionId": name,
            "scheduledFor": format_rfc3339(nominal),
            "periodStart": format_rfc3339(nominal - timedelta(days=1)),
            "periodEnd": format_rfc3339(nominal),
            "priority": "normal",
            "source": "Backfill",
        },
    }
    if ex is not None and with_status:
        obj["status"] = execution_to_dict(ex)
    return obj


DAY1, DAY2, DAY3 = (datetime(2026, 4, d, 1, 0, tzinfo=UTC) for d in (1, 2, 3))


def test_a_jobs_executions_are_listed_newest_occurrence_first() -> None:
    objs = [
        as_object(failed(fresh(DAY2), at=T0), nominal=DAY2),
        as_object(None, nominal=DAY1),  # no status yet: Ready since creation
        as_object(fresh(DAY3), nominal=DAY3),
    ]

    headers, rows = execution_table(objs, now=NOW)

    assert headers == ["EXECUTION", "SCHEDULED", "PHASE", "ATTEMPT", "REASON", "AGE"]
    assert [row[1] for row in rows] == ["2026-04-03T01:00:00Z", "2026-04-02T01:00:00Z", "2026-04-01T01:00:00Z"]
    assert rows[1][2:] == [Phase.BACKOFF, 2, "ExitCode3", "1h"]
    assert rows[2][2:5] == [Phase.READY, 1, "Scheduled"]


def test_across_namespaces_the_executions_table_leads_with_the_namespace() -> None:
    headers, rows = execution_table([as_object(fresh(DAY1), nominal=DAY1)], now=NOW, with_namespace=True)

    assert headers[0] == "NAMESPACE"
    assert rows[0][0] == "shop"


def test_dead_letters_are_judged_by_status_not_by_a_stale_label() -> None:
    dead = failed(failed(fresh(DAY1), at=T0), at=T0 + timedelta(minutes=1))
    retried = dataclasses.replace(fresh(DAY2), reason="ManualRetry", attempt=3)  # label may still say Dead

    headers, rows = dead_letter_table(
        [as_object(dead, nominal=DAY1), as_object(retried, nominal=DAY2)], now=NOW
    )

    assert headers == ["NAMESPACE", "JOB", "EXECUTION", "ATTEMPTS", "LAST REASON", "DEAD FOR"]
    assert rows == [["shop", "nightly", execution_id(UID, DAY1), 2, "ExitCode3", "9d"]]


# --- describe ---------------------------------------------------------------------------------


def test_phase_since_is_when_the_execution_entered_its_phase() -> None:
    ready = fresh(DAY1)
    running = start(ready, pod="p-1", now=T0)
    backoff = failed(ready, at=T0)
    again = retry_due(backoff, now=NOW)
    dead = failed(again, at=T0 + timedelta(hours=1))
    cancelled = cancel(ready, reason="CancelledByUser", now=T0 + timedelta(hours=2))

    assert phase_since(ready) == DAY1
    assert phase_since(running) == T0
    assert phase_since(backoff) == T0 + timedelta(seconds=4)  # when the failed attempt ended
    assert phase_since(again) == backoff.retry_at
    assert phase_since(dead) == T0 + timedelta(hours=1, seconds=4)
    assert phase_since(cancelled) == T0 + timedelta(hours=2)


def test_describe_shows_the_occurrence_and_one_row_per_attempt() -> None:
    dead = failed(failed(fresh(DAY1), at=T0), at=T0 + timedelta(minutes=1), message="disk\nfull")

    lines = describe_lines(as_object(dead, nominal=DAY1), now=NOW)

    text = "\n".join(lines)
    assert f"Name:          {execution_id(UID, DAY1)}" in lines
    assert "Source:        Backfill" in lines
    assert "Period:        2026-03-31T01:00:00Z → 2026-04-01T01:00:00Z" in lines
    assert "Phase:         Dead since 2026-04-01T02:01:09Z (9d ago), reason ExitCode3" in lines
    assert "Retry at" not in text
    table = lines[lines.index("") + 1 :]
    assert table[0].split() == ["ATTEMPT", "OUTCOME", "REASON", "EXIT", "CODE", "STARTED", "FINISHED", "DURATION", "MESSAGE"]
    assert [row.split()[:4] for row in table[1:]] == [["1", "Failed", "ExitCode3", "3"], ["2", "Failed", "ExitCode3", "3"]]
    assert table[2].split()[-3:] == ["4.0s", "disk", "full"]  # the message on one line


def test_describe_of_a_backoff_shows_when_the_retry_comes() -> None:
    backoff = failed(fresh(DAY1), at=NOW - timedelta(seconds=10))
    assert backoff.retry_at is not None

    lines = describe_lines(as_object(backoff, nominal=DAY1), now=NOW)

    retry_line = next(line for line in lines if line.startswith("Retry at:"))
    assert format_rfc3339(backoff.retry_at)[:19] in retry_line


def test_describe_of_a_running_execution_shows_the_current_attempt() -> None:
    running = start(fresh(DAY1), pod="ex-x-1", now=NOW - timedelta(seconds=30))

    lines = describe_lines(as_object(running, nominal=DAY1), now=NOW)

    assert lines[-1].split()[:2] == ["1", "Running"]
    assert lines[-1].split()[-3:] == ["30.0s", "pod", "ex-x-1"]


def test_describe_of_a_fresh_execution_says_no_attempt_yet() -> None:
    lines = describe_lines(as_object(None, nominal=DAY1), now=NOW)

    assert lines[-1] == "Attempts: none yet"
    assert any(line.startswith("Phase:") and "Ready" in line and "Scheduled" in line for line in lines)


def test_retry_refusals_say_why_for_each_phase() -> None:
    assert "already succeeded" in retry_refusal("ex-a", "shop", Phase.SUCCEEDED)
    assert "never run again" in retry_refusal("ex-a", "shop", Phase.CANCELLED)
    running = retry_refusal("ex-a", "shop", Phase.RUNNING)
    assert "is Running, not Dead" in running
    assert '"ex-a" in namespace "shop"' in running


def test_execution_ids_in_tables_are_the_object_names() -> None:
    _, rows = execution_table([as_object(fresh(DAY1), nominal=DAY1)], now=NOW)

    assert rows[0][0] == ExecutionId(execution_id(UID, DAY1))


def test_an_unreadable_execution_is_named_and_left_out_of_a_list(capsys: pytest.CaptureFixture[str]) -> None:
    broken = as_object(fresh(DAY2), nominal=DAY2)
    broken["status"]["scheduledFor"] = "yesterday"

    _, rows = execution_table([as_object(fresh(DAY1), nominal=DAY1), broken], now=NOW)

    assert [row[0] for row in rows] == [execution_id(UID, DAY1)]
    err = capsys.readouterr().err
    assert execution_id(UID, DAY2) in err
    assert "scheduledFor" in err


# --- retry: the conditional increment ---------------------------------------------------------


class FakeExecutions:
    """Reads of one Execution in the order given; patches recorded, the first `conflicts` refused."""

    def __init__(self, reads: list[dict[str, Any]], *, conflicts: int) -> None:
        self.reads = reads
        self.conflicts = conflicts
        self.patches: list[dict[str, Any]] = []

    def execution(self, name: str, namespace: str) -> dict[str, Any]:
        return self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]

    @property
    def custom(self) -> FakeExecutions:
        return self

    def patch_namespaced_custom_object(self, *args: Any) -> None:
        self.patches.append(args[-1])
        if len(self.patches) <= self.conflicts:
            raise ApiException(status=409, reason="Conflict")


def stored(ex: Execution, *, version: str, requests: int = 0) -> dict[str, Any]:
    obj = as_object(ex, nominal=ex.scheduled_for)
    obj["metadata"]["resourceVersion"] = version
    obj["spec"]["retryRequests"] = requests
    return obj


DEAD_AFTER_TWO = failed(failed(fresh(DAY1), at=T0), at=T0 + timedelta(minutes=1))


def test_retry_after_a_conflict_reads_again_and_adds_one_to_what_it_finds() -> None:
    api = FakeExecutions(
        [stored(DEAD_AFTER_TWO, version="1"), stored(DEAD_AFTER_TWO, version="2", requests=1)], conflicts=1
    )

    attempt = request_retry(cast(Cluster, api), "ex-a", "shop")

    assert attempt == 3
    assert api.patches == [
        {"metadata": {"resourceVersion": "1"}, "spec": {"retryRequests": 1}},  # refused: someone else wrote
        {"metadata": {"resourceVersion": "2"}, "spec": {"retryRequests": 2}},
    ]


def test_retry_refuses_when_the_execution_left_dead_while_it_was_retrying() -> None:
    ready_again = dataclasses.replace(fresh(DAY1), attempt=3, reason="ManualRetry")
    api = FakeExecutions([stored(DEAD_AFTER_TWO, version="1"), stored(ready_again, version="2")], conflicts=1)

    with pytest.raises(BadInput, match="is Ready, not Dead"):
        request_retry(cast(Cluster, api), "ex-a", "shop")
    assert len(api.patches) == 1


def test_retry_gives_up_on_an_execution_that_keeps_changing() -> None:
    api = FakeExecutions([stored(DEAD_AFTER_TWO, version="1")], conflicts=CONFLICT_TRIES)

    with pytest.raises(Contention, match="kept changing"):
        request_retry(cast(Cluster, api), "ex-a", "shop")
    assert len(api.patches) == CONFLICT_TRIES
