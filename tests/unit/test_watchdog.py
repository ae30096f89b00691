"""The watchdog's pure rules: what they notice when something did not happen.

Covers each rule as a table of named scenarios — Overdue with the eleven-days story as rows
(succeeded then the chain broke: NotFired; pods keep failing while the scheduler fires:
Failing; running too long: Overran; fired but never started: NotStarted; within the interval:
clears), the reason precedence, the interval boundary, the rules that do not apply (one-off,
no interval, suspended); schedule integrity (no future occurrence, a stale one, the grace, a
suspended job); dead-letter ages; the suspended-jobs report (too long, unowned, unknown
start); output freshness (unreadable, too old, fresh, independent of the scheduler's view);
the input checks and the message texts. Hypothesis properties: Overdue is monotone in now,
clears exactly when a success (or the enable) is within the interval, carries an Overdue
reason exactly when True; the chain verdict and freshness depend only on what they should.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vigil.core.conditions import ConditionType
from vigil.core.ids import ExecutionId
from vigil.core.watchdog import (
    DEFAULT_CHAIN_GRACE,
    OVERDUE_REASONS,
    ChainFinding,
    DeadLetterAge,
    FindingKind,
    JobFacts,
    Overdue,
    WatchdogReason,
    assess_chain,
    assess_freshness,
    assess_job,
    assess_overdue,
    assess_suspension,
    dead_letter_ages,
    format_age,
    overdue_baseline,
    seconds_since_success,
)

R = WatchdogReason
SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
#: The nightly reconciliation's last success: 2026-08-01 02:30 UTC.
T0 = datetime(2026, 8, 1, 2, 30, tzinfo=UTC)
INTERVAL = 26 * HOUR
WEEK = 7 * DAY


def nightly(**changes: Any) -> JobFacts:
    """The story's job: nightly at 02:00, succeeded at T0, expected every 26h, runs ~30m."""
    facts = JobFacts(
        namespace="finance",
        name="reconcile-daily",
        recurring=True,
        enabled_since=T0 - 30 * DAY,
        expected_max_interval=INTERVAL,
        expected_duration=HOUR,
        last_success=T0,
        last_fired=T0 - 30 * MINUTE,
        next_occurrence=T0 + DAY - 30 * MINUTE,
    )
    return dataclasses.replace(facts, **changes)


# --- 1. overdue ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OverdueRow:
    name: str
    facts: JobFacts
    now: datetime
    status: bool
    reason: WatchdogReason


OVERDUE_ROWS = [
    OverdueRow("within the interval: clears", nightly(), T0 + 25 * HOUR, False, R.ON_SCHEDULE),
    OverdueRow(
        "exactly at the interval: not yet overdue", nightly(), T0 + INTERVAL, False, R.ON_SCHEDULE
    ),
    OverdueRow(
        "a second past the interval, nothing fired: NotFired",
        nightly(next_occurrence=None),
        T0 + INTERVAL + SECOND,
        True,
        R.NOT_FIRED,
    ),
    OverdueRow(
        "eleven days: succeeded, then the chain broke: NotFired",
        nightly(next_occurrence=None),
        T0 + 11 * DAY,
        True,
        R.NOT_FIRED,
    ),
    OverdueRow(
        "eleven days: pods keep failing while the scheduler fires: Failing",
        nightly(last_fired=T0 + 10 * DAY - 30 * MINUTE, last_failure=T0 + 10 * DAY - 20 * MINUTE),
        T0 + 11 * DAY,
        True,
        R.FAILING,
    ),
    OverdueRow(
        "failing with a retry waiting: Failing, not NotStarted",
        nightly(
            last_fired=T0 + DAY - 30 * MINUTE,
            last_failure=T0 + DAY - 20 * MINUTE,
            ready_since=T0 + DAY - 10 * MINUTE,
        ),
        T0 + 2 * DAY,
        True,
        R.FAILING,
    ),
    OverdueRow(
        "eleven days: running far longer than expectedDuration: Overran",
        nightly(last_fired=T0 + DAY - 30 * MINUTE, running_since=T0 + DAY - 29 * MINUTE),
        T0 + 11 * DAY,
        True,
        R.OVERRAN,
    ),
    OverdueRow(
        "overran beats failing",
        nightly(
            last_fired=T0 + 2 * DAY,
            last_failure=T0 + 2 * DAY + MINUTE,
            running_since=T0 + DAY,
        ),
        T0 + 3 * DAY,
        True,
        R.OVERRAN,
    ),
    OverdueRow(
        "no expectedDuration: running longer than the interval is Overran",
        nightly(expected_duration=None, last_fired=T0 + HOUR, running_since=T0 + HOUR),
        T0 + HOUR + INTERVAL + SECOND,
        True,
        R.OVERRAN,
    ),
    OverdueRow(
        "no expectedDuration: a run shorter than the interval is StillRunning",
        nightly(expected_duration=None, last_fired=T0 + 20 * HOUR, running_since=T0 + 20 * HOUR),
        T0 + 27 * HOUR,
        True,
        R.STILL_RUNNING,
    ),
    OverdueRow(
        "started late, running within expectedDuration: StillRunning",
        nightly(last_fired=T0 + DAY - 30 * MINUTE, running_since=T0 + INTERVAL + MINUTE),
        T0 + INTERVAL + 10 * MINUTE,
        True,
        R.STILL_RUNNING,
    ),
    OverdueRow(
        "eleven days: fired, waiting in Ready since before the deadline: NotStarted",
        nightly(last_fired=T0 + DAY - 30 * MINUTE, ready_since=T0 + DAY - 30 * MINUTE),
        T0 + 11 * DAY,
        True,
        R.NOT_STARTED,
    ),
    OverdueRow(
        "waiting since before the deadline while another runs: NotStarted",
        nightly(
            last_fired=T0 + DAY,
            ready_since=T0 + DAY,
            running_since=T0 + INTERVAL + MINUTE,
        ),
        T0 + INTERVAL + 10 * MINUTE,
        True,
        R.NOT_STARTED,
    ),
    OverdueRow(
        "fired after the deadline, waiting to start: NotStarted",
        nightly(last_fired=T0 + INTERVAL + MINUTE, ready_since=T0 + INTERVAL + MINUTE),
        T0 + INTERVAL + 5 * MINUTE,
        True,
        R.NOT_STARTED,
    ),
    OverdueRow(
        "fired without any execution starting or waiting: NotStarted",
        nightly(last_fired=T0 + DAY - 30 * MINUTE),
        T0 + 2 * DAY,
        True,
        R.NOT_STARTED,
    ),
    OverdueRow(
        "a failure before the last success does not count: NotFired",
        nightly(last_failure=T0 - 10 * MINUTE),
        T0 + 2 * DAY,
        True,
        R.NOT_FIRED,
    ),
    OverdueRow(
        "an execution running since before the success, within its duration: NotFired",
        nightly(expected_duration=3 * DAY, running_since=T0 - HOUR),
        T0 + 2 * DAY,
        True,
        R.NOT_FIRED,
    ),
    OverdueRow(
        "a success after old failures: clears",
        nightly(last_failure=T0 - HOUR, last_fired=T0 - 2 * HOUR),
        T0 + HOUR,
        False,
        R.ON_SCHEDULE,
    ),
    OverdueRow(
        "never succeeded, enabled within the interval: clears",
        nightly(last_success=None, enabled_since=T0, last_fired=None),
        T0 + 25 * HOUR,
        False,
        R.ON_SCHEDULE,
    ),
    OverdueRow(
        "never succeeded, enabled longer ago than the interval, nothing fired: NotFired",
        nightly(last_success=None, enabled_since=T0, last_fired=None),
        T0 + 27 * HOUR,
        True,
        R.NOT_FIRED,
    ),
    OverdueRow(
        "never succeeded, every attempt fails: Failing",
        nightly(
            last_success=None,
            enabled_since=T0,
            last_fired=T0 + HOUR,
            last_failure=T0 + 2 * HOUR,
        ),
        T0 + 27 * HOUR,
        True,
        R.FAILING,
    ),
    OverdueRow(
        "resumed after a long suspension: a fresh interval from the resume",
        nightly(enabled_since=T0 + 9 * DAY),
        T0 + 9 * DAY + HOUR,
        False,
        R.ON_SCHEDULE,
    ),
    OverdueRow(
        "resumed, and nothing fired for an interval since: NotFired",
        nightly(enabled_since=T0 + 9 * DAY),
        T0 + 9 * DAY + INTERVAL + SECOND,
        True,
        R.NOT_FIRED,
    ),
]


@pytest.mark.parametrize("row", OVERDUE_ROWS, ids=lambda row: row.name)
def test_overdue_scenarios(row: OverdueRow) -> None:
    finding = assess_overdue(row.facts, row.now)
    assert (finding.status, finding.reason) == (row.status, row.reason)
    assert finding.kind is FindingKind.OVERDUE
    assert finding.applicable
    assert finding.since == overdue_baseline(row.facts)
    assert finding.age == row.now - overdue_baseline(row.facts)
    assert row.facts.expected_max_interval is not None
    assert finding.deadline == overdue_baseline(row.facts) + row.facts.expected_max_interval


@pytest.mark.parametrize(
    ("name", "facts", "reason"),
    [
        ("one-off job", nightly(recurring=False), R.NOT_RECURRING),
        ("no expectedMaxInterval", nightly(expected_max_interval=None), R.NO_EXPECTED_INTERVAL),
        ("suspended", nightly(suspended=True, suspended_since=T0 + HOUR), R.JOB_SUSPENDED),
    ],
)
def test_overdue_does_not_apply(name: str, facts: JobFacts, reason: WatchdogReason) -> None:
    finding = assess_overdue(facts, T0 + 30 * DAY)
    assert (finding.status, finding.applicable, finding.reason) == (False, False, reason), name
    assert finding.message


def test_overdue_message_says_since_when_and_the_interval() -> None:
    finding = assess_overdue(nightly(next_occurrence=None), T0 + 11 * DAY + 2 * HOUR)
    assert finding.message.startswith("last succeeded 11d2h ago (2026-08-01T02:30:00Z)")
    assert "expectedMaxInterval is 1d2h" in finding.message
    assert "nothing has fired since 2026-08-01T02:30:00Z" in finding.message


def test_overdue_message_for_a_job_that_never_succeeded() -> None:
    facts = nightly(last_success=None, enabled_since=T0, last_fired=None)
    finding = assess_overdue(facts, T0 + 3 * DAY)
    assert finding.message.startswith("never succeeded; enabled 3d ago (2026-08-01T02:30:00Z)")


def test_overdue_message_for_a_resumed_job_names_both() -> None:
    finding = assess_overdue(nightly(enabled_since=T0 + 9 * DAY), T0 + 9 * DAY + HOUR)
    assert "last succeeded 9d1h ago" in finding.message
    assert "resumed 1h ago" in finding.message


@pytest.mark.parametrize(
    ("facts", "words"),
    [
        (nightly(last_fired=T0 + DAY, running_since=T0 + DAY), "longer than expectedDuration 1h"),
        (
            nightly(expected_duration=None, last_fired=T0, running_since=T0),
            "longer than expectedMaxInterval (no expectedDuration set) 1d2h",
        ),
        (nightly(last_fired=T0 + DAY, last_failure=T0 + DAY + HOUR), "occurrences fire but fail"),
        (nightly(last_fired=T0 + DAY, ready_since=T0 + DAY), "waited to start for 2d"),
        (nightly(last_fired=T0 + DAY), "no execution started or is waiting"),
    ],
)
def test_overdue_message_explains_the_reason(facts: JobFacts, words: str) -> None:
    assert words in assess_overdue(facts, T0 + 3 * DAY).message


def test_seconds_since_success() -> None:
    assert seconds_since_success(nightly(), T0 + 11 * DAY) == 11 * DAY.total_seconds()
    never = nightly(last_success=None, enabled_since=T0 - HOUR)
    assert seconds_since_success(never, T0) == HOUR.total_seconds()
    resumed = nightly(enabled_since=T0 + 9 * DAY)  # the metric still counts from the success
    assert seconds_since_success(resumed, T0 + 10 * DAY) == 10 * DAY.total_seconds()
    assert seconds_since_success(nightly(), T0 - MINUTE) == 0.0  # a skewed clock, never negative


# --- 2. schedule integrity ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ChainRow:
    name: str
    facts: JobFacts
    now: datetime
    status: bool
    reason: WatchdogReason
    applicable: bool = True


NOW = T0 + 12 * HOUR
CHAIN_ROWS = [
    ChainRow("next occurrence in the future", nightly(), NOW, False, R.CHAIN_INTACT),
    ChainRow(
        "next occurrence just due, within the grace",
        nightly(next_occurrence=NOW - MINUTE),
        NOW,
        False,
        R.CHAIN_INTACT,
    ),
    ChainRow(
        "exactly the grace past",
        nightly(next_occurrence=NOW - DEFAULT_CHAIN_GRACE),
        NOW,
        False,
        R.CHAIN_INTACT,
    ),
    ChainRow(
        "past the grace and unfired: stale",
        nightly(next_occurrence=NOW - DEFAULT_CHAIN_GRACE - SECOND),
        NOW,
        True,
        R.STALE_NEXT_OCCURRENCE,
    ),
    ChainRow(
        "eleven days: no future occurrence",
        nightly(next_occurrence=None),
        T0 + 11 * DAY,
        True,
        R.NO_FUTURE_OCCURRENCE,
    ),
    ChainRow(
        "just created, head not yet inserted",
        nightly(next_occurrence=None, enabled_since=NOW - MINUTE),
        NOW,
        False,
        R.RECENTLY_ENABLED,
    ),
    ChainRow(
        "enabled longer ago than the grace, no head",
        nightly(next_occurrence=None, enabled_since=NOW - DEFAULT_CHAIN_GRACE - SECOND),
        NOW,
        True,
        R.NO_FUTURE_OCCURRENCE,
    ),
    ChainRow(
        "suspended jobs legitimately have none",
        nightly(next_occurrence=None, suspended=True),
        NOW,
        False,
        R.JOB_SUSPENDED,
        applicable=False,
    ),
    ChainRow(
        "a one-off job has no chain",
        nightly(next_occurrence=None, recurring=False),
        NOW,
        False,
        R.NOT_RECURRING,
        applicable=False,
    ),
]


@pytest.mark.parametrize("row", CHAIN_ROWS, ids=lambda row: row.name)
def test_chain_scenarios(row: ChainRow) -> None:
    finding = assess_chain(row.facts, row.now)
    assert (finding.status, finding.reason, finding.applicable) == (
        row.status,
        row.reason,
        row.applicable,
    )
    assert finding.kind is FindingKind.SCHEDULE_CHAIN_BROKEN
    assert finding.repair_needed is row.status


def test_chain_grace_is_a_parameter() -> None:
    facts = nightly(next_occurrence=NOW - 5 * MINUTE)
    assert assess_chain(facts, NOW).status
    assert not assess_chain(facts, NOW, grace=10 * MINUTE).status


def test_stale_chain_reports_how_long_overdue_the_head_is() -> None:
    head = NOW - HOUR
    finding = assess_chain(nightly(next_occurrence=head), NOW)
    assert (finding.since, finding.age, finding.age_seconds) == (head, HOUR, 3600.0)
    assert "should have fired 1h ago" in finding.message


# --- 3. dead letters ----------------------------------------------------------------------------


def test_dead_letter_ages_oldest_first() -> None:
    letters = (
        (ExecutionId("ex-b"), T0 - HOUR),
        (ExecutionId("ex-c"), T0 - DAY),
        (ExecutionId("ex-a"), T0 - HOUR),  # same age as ex-b: ordered by id
        (ExecutionId("ex-d"), T0 + MINUTE),  # a skewed clock: age 0, not negative
    )
    ages = dead_letter_ages(nightly(dead_letters=letters), T0)
    assert ages == (
        DeadLetterAge(ExecutionId("ex-c"), DAY.total_seconds()),
        DeadLetterAge(ExecutionId("ex-a"), HOUR.total_seconds()),
        DeadLetterAge(ExecutionId("ex-b"), HOUR.total_seconds()),
        DeadLetterAge(ExecutionId("ex-d"), 0.0),
    )


def test_no_dead_letters() -> None:
    assert dead_letter_ages(nightly(), T0) == ()


# --- 4. suspended jobs --------------------------------------------------------------------------


SUSPENDED = nightly(
    suspended=True,
    suspended_since=T0,
    suspended_by="alice@example.com",
    suspend_reason="INC-4711: upstream ledger migration",
)


@pytest.mark.parametrize(
    ("name", "facts", "now", "status", "reason", "unowned"),
    [
        ("suspended for a day", SUSPENDED, T0 + DAY, False, R.SUSPENDED_WITHIN_LIMIT, False),
        ("exactly the limit", SUSPENDED, T0 + WEEK, False, R.SUSPENDED_WITHIN_LIMIT, False),
        ("eleven days: forgotten", SUSPENDED, T0 + 11 * DAY, True, R.SUSPENDED_TOO_LONG, False),
        (
            "no owner",
            dataclasses.replace(SUSPENDED, suspended_by=None),
            T0 + DAY,
            False,
            R.SUSPENDED_WITHIN_LIMIT,
            True,
        ),
        (
            "blank reason",
            dataclasses.replace(SUSPENDED, suspend_reason="  "),
            T0 + 8 * DAY,
            True,
            R.SUSPENDED_TOO_LONG,
            True,
        ),
        (
            "start unknown",
            dataclasses.replace(SUSPENDED, suspended_since=None),
            T0 + 30 * DAY,
            False,
            R.SUSPENDED_SINCE_UNKNOWN,
            False,
        ),
    ],
)
def test_suspension_scenarios(
    name: str,
    facts: JobFacts,
    now: datetime,
    status: bool,
    reason: WatchdogReason,
    unowned: bool,
) -> None:
    finding = assess_suspension(facts, now, max_age=WEEK)
    assert (finding.status, finding.reason, finding.unowned) == (status, reason, unowned), name
    assert finding.kind is FindingKind.SUSPENDED_TOO_LONG
    assert finding.applicable


def test_suspension_message_names_owner_reason_and_limit() -> None:
    message = assess_suspension(SUSPENDED, T0 + 11 * DAY, max_age=WEEK).message
    assert message == (
        "suspended 11d ago by alice@example.com: INC-4711: upstream ledger migration; "
        "longer than the 7d limit"
    )


def test_unowned_suspension_message_says_what_to_set() -> None:
    facts = dataclasses.replace(SUSPENDED, suspended_by=None, suspend_reason=None)
    message = assess_suspension(facts, T0 + DAY, max_age=WEEK).message
    assert "set spec.suspendedBy" in message
    assert "set spec.suspendReason" in message


def test_a_running_job_is_not_in_the_suspension_report() -> None:
    finding = assess_suspension(nightly(), T0, max_age=WEEK)
    assert (finding.status, finding.applicable, finding.reason) == (False, False, R.NOT_SUSPENDED)


def test_suspension_max_age_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_age"):
        assess_suspension(SUSPENDED, T0, max_age=timedelta(0))


# --- 5. output freshness ------------------------------------------------------------------------


WATCHED = nightly(output_max_age=26 * HOUR, output_time=T0)


@pytest.mark.parametrize(
    ("name", "facts", "now", "status", "reason"),
    [
        ("fresh", WATCHED, T0 + HOUR, False, R.OUTPUT_FRESH),
        ("exactly maxAge", WATCHED, T0 + 26 * HOUR, False, R.OUTPUT_FRESH),
        ("eleven days old", WATCHED, T0 + 11 * DAY, True, R.OUTPUT_TOO_OLD),
        (
            "unreadable",
            dataclasses.replace(WATCHED, output_time=None, output_error="ConfigMap not found"),
            T0,
            True,
            R.OUTPUT_UNREADABLE,
        ),
        ("from a skewed clock's future", WATCHED, T0 - MINUTE, False, R.OUTPUT_FRESH),
    ],
)
def test_freshness_scenarios(
    name: str, facts: JobFacts, now: datetime, status: bool, reason: WatchdogReason
) -> None:
    finding = assess_freshness(facts, now)
    assert (finding.status, finding.reason, finding.applicable) == (status, reason, True), name
    assert finding.kind is FindingKind.OUTPUT_STALE
    assert finding.age is None or finding.age >= timedelta(0)


def test_freshness_does_not_apply_without_max_age() -> None:
    finding = assess_freshness(nightly(output_time=T0 - 30 * DAY), T0)
    assert (finding.status, finding.applicable, finding.reason) == (
        False,
        False,
        R.NO_FRESHNESS_CHECK,
    )


def test_unreadable_output_message_says_why() -> None:
    with_error = dataclasses.replace(WATCHED, output_time=None, output_error="key lastRun missing")
    assert assess_freshness(with_error, T0).message.endswith("key lastRun missing")
    without = dataclasses.replace(WATCHED, output_time=None)
    assert "no output time was found" in assess_freshness(without, T0).message


def test_stale_output_even_though_the_scheduler_saw_successes() -> None:
    # The job "succeeds" every night but its report stopped being written eleven days ago.
    facts = dataclasses.replace(WATCHED, last_success=T0 + 11 * DAY - HOUR)
    now = T0 + 11 * DAY
    assert not assess_overdue(facts, now).status
    stale = assess_freshness(facts, now)
    assert (stale.status, stale.since, stale.age) == (True, T0, 11 * DAY)


# --- the whole report ---------------------------------------------------------------------------


def test_eleven_days_report_raises_every_alarm_that_applies() -> None:
    facts = dataclasses.replace(
        WATCHED,
        next_occurrence=None,
        dead_letters=((ExecutionId("ex-1"), T0 - DAY),),
    )
    now = T0 + 11 * DAY
    report = assess_job(facts, now, suspended_max_age=WEEK)
    raised = {(f.kind, f.reason) for f in report.findings if f.status}
    assert raised == {
        (FindingKind.OVERDUE, R.NOT_FIRED),
        (FindingKind.SCHEDULE_CHAIN_BROKEN, R.NO_FUTURE_OCCURRENCE),
        (FindingKind.OUTPUT_STALE, R.OUTPUT_TOO_OLD),
    }
    assert report.chain.repair_needed
    assert report.seconds_since_success == 11 * DAY.total_seconds()
    assert report.dead_letters == (DeadLetterAge(ExecutionId("ex-1"), 12 * DAY.total_seconds()),)


def test_healthy_report_raises_nothing() -> None:
    report = assess_job(WATCHED, T0 + HOUR, suspended_max_age=WEEK, chain_grace=MINUTE)
    assert not any(f.status for f in report.findings)
    assert isinstance(report.overdue, Overdue)
    assert isinstance(report.chain, ChainFinding)


# --- names and inputs ---------------------------------------------------------------------------


def test_finding_kinds_are_condition_types() -> None:
    for kind in FindingKind:
        assert kind.condition_type is ConditionType(kind.value)
    assert {kind.value for kind in FindingKind} <= {type_.value for type_ in ConditionType}


def test_reasons_are_unique_camel_case() -> None:
    values = [reason.value for reason in WatchdogReason]
    assert len(values) == len(set(values))
    assert all(re.fullmatch(r"[A-Z][a-z]+(?:[A-Z][a-z]+)*", value) for value in values)
    assert {r.value for r in OVERDUE_REASONS} == {
        "Overran",
        "Failing",
        "NotStarted",
        "StillRunning",
        "NotFired",
    }


@pytest.mark.parametrize("field", ["enabled_since", "last_success", "output_time"])
def test_naive_times_are_refused_with_the_field_named(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        nightly(**{field: datetime(2026, 8, 1, 2, 30)})  # noqa: DTZ001 - a naive time on purpose: the call must refuse it


def test_naive_dead_letter_time_is_refused() -> None:
    with pytest.raises(ValueError, match="dead letter ex-1"):
        nightly(dead_letters=((ExecutionId("ex-1"), datetime(2026, 8, 1)),))  # noqa: DTZ001 - a naive time on purpose: the call must refuse it


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="now"):
        assess_overdue(nightly(), datetime(2026, 8, 1))  # noqa: DTZ001 - a naive time on purpose: the call must refuse it


@pytest.mark.parametrize("field", ["expected_max_interval", "expected_duration", "output_max_age"])
def test_non_positive_spans_are_refused(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        nightly(**{field: timedelta(0)})


def test_times_in_other_offsets_compare_as_instants() -> None:
    plus_two = timezone(timedelta(hours=2))
    facts = nightly(last_success=(T0 + HOUR).astimezone(plus_two))
    assert not assess_overdue(facts, T0 + INTERVAL + 30 * MINUTE).status
    assert assess_overdue(facts, T0 + INTERVAL + 61 * MINUTE).status


@pytest.mark.parametrize(
    ("span", "text"),
    [
        (timedelta(0), "0s"),
        (45 * SECOND, "45s"),
        (90 * SECOND, "1m30s"),
        (90 * MINUTE, "1h30m"),
        (26 * HOUR, "1d2h"),
        (11 * DAY + 2 * HOUR + 3 * MINUTE, "11d2h"),
        (DAY + 5 * MINUTE, "1d"),
        (SECOND / 2, "0s"),
        (-SECOND, "0s"),
    ],
)
def test_format_age(span: timedelta, text: str) -> None:
    assert format_age(span) == text


# --- properties ---------------------------------------------------------------------------------

OFFSETS = st.integers(min_value=-40 * 86_400, max_value=40 * 86_400)
OPTIONAL_OFFSETS = st.none() | OFFSETS
SPANS = st.integers(min_value=1, max_value=10 * 86_400)


def _at(offset: int | None) -> datetime | None:
    return None if offset is None else T0 + offset * SECOND


@st.composite
def job_facts(draw: st.DrawFn) -> JobFacts:
    """A recurring, enabled job with an interval and any history at all."""
    duration = draw(st.none() | SPANS)
    return JobFacts(
        namespace="ns",
        name="job",
        recurring=True,
        enabled_since=T0 + draw(OFFSETS) * SECOND,
        expected_max_interval=draw(SPANS) * SECOND,
        expected_duration=None if duration is None else duration * SECOND,
        last_success=_at(draw(OPTIONAL_OFFSETS)),
        last_fired=_at(draw(OPTIONAL_OFFSETS)),
        last_failure=_at(draw(OPTIONAL_OFFSETS)),
        running_since=_at(draw(OPTIONAL_OFFSETS)),
        ready_since=_at(draw(OPTIONAL_OFFSETS)),
        next_occurrence=_at(draw(OPTIONAL_OFFSETS)),
    )


@settings(max_examples=300, deadline=None)
@given(facts=job_facts(), start=OFFSETS, later=st.integers(min_value=0, max_value=40 * 86_400))
def test_overdue_is_monotone_in_now(facts: JobFacts, start: int, later: int) -> None:
    earlier_now = T0 + start * SECOND
    if assess_overdue(facts, earlier_now).status:
        assert assess_overdue(facts, earlier_now + later * SECOND).status


@settings(max_examples=300, deadline=None)
@given(facts=job_facts(), now=OFFSETS)
def test_overdue_clears_exactly_within_the_interval(facts: JobFacts, now: int) -> None:
    at = T0 + now * SECOND
    finding = assess_overdue(facts, at)
    assert facts.expected_max_interval is not None
    latest = max(t for t in (facts.last_success, facts.enabled_since) if t is not None)
    assert finding.status == (at - latest > facts.expected_max_interval)
    if facts.last_success is not None and facts.last_success >= facts.enabled_since:
        assert (not finding.status) == (at - facts.last_success <= facts.expected_max_interval)


@settings(max_examples=300, deadline=None)
@given(facts=job_facts(), now=OFFSETS)
def test_overdue_reason_matches_its_status(facts: JobFacts, now: int) -> None:
    finding = assess_overdue(facts, T0 + now * SECOND)
    assert finding.applicable
    assert (finding.reason in OVERDUE_REASONS) == finding.status
    assert finding.status or finding.reason is R.ON_SCHEDULE
    assert finding.message


@settings(max_examples=300, deadline=None)
@given(facts=job_facts(), now=OFFSETS, suspended=st.booleans())
def test_chain_verdict(facts: JobFacts, now: int, suspended: bool) -> None:
    facts = dataclasses.replace(facts, suspended=suspended)
    at = T0 + now * SECOND
    finding = assess_chain(facts, at)
    if suspended:
        expected = False
    elif facts.next_occurrence is None:
        expected = at - facts.enabled_since > DEFAULT_CHAIN_GRACE
    else:
        expected = at - facts.next_occurrence > DEFAULT_CHAIN_GRACE
    assert finding.status == expected
    assert finding.repair_needed == expected


@settings(max_examples=300, deadline=None)
@given(
    facts=job_facts(),
    now=OFFSETS,
    output=OPTIONAL_OFFSETS,
    max_age=SPANS,
    suspended=st.booleans(),
)
def test_freshness_ignores_the_schedulers_view(
    facts: JobFacts, now: int, output: int | None, max_age: int, suspended: bool
) -> None:
    watched = dataclasses.replace(
        facts, output_time=_at(output), output_max_age=max_age * SECOND, suspended=suspended
    )
    bare = JobFacts(
        namespace="ns",
        name="job",
        recurring=False,
        enabled_since=T0,
        output_time=watched.output_time,
        output_max_age=watched.output_max_age,
    )
    at = T0 + now * SECOND
    assert assess_freshness(watched, at) == assess_freshness(bare, at)


@settings(max_examples=200, deadline=None)
@given(
    letters=st.lists(st.tuples(st.text(min_size=1, max_size=8), OFFSETS), max_size=20),
    now=OFFSETS,
)
def test_dead_letter_ages_are_sorted_and_complete(letters: list[tuple[str, int]], now: int) -> None:
    facts = nightly(dead_letters=tuple((ExecutionId(i), T0 + s * SECOND) for i, s in letters))
    ages = dead_letter_ages(facts, T0 + now * SECOND)
    assert sorted(a.execution_id for a in ages) == sorted(i for i, _ in letters)
    assert all(a.age_seconds >= 0 for a in ages)
    assert [a.age_seconds for a in ages] == sorted((a.age_seconds for a in ages), reverse=True)
