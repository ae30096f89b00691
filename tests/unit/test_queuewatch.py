"""The volume tier's pure watchdog part: the declarative rules fed from catalogue facts, episodes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from vigil.core.chain import CatchUp, JobView
from vigil.core.queuewatch import (
    ChainRestart,
    Episodes,
    QueueJobFacts,
    broken_chain_verdicts,
    chain_restart,
    oldest_ready_ages,
    overdue_verdicts,
)
from vigil.core.recurring import cron_schedule
from vigil.core.schedule import GapPolicy, OverlapPolicy
from vigil.core.watchdog import WatchdogReason, age_seconds

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def facts(**fields: object) -> QueueJobFacts:
    given: dict[str, object] = {"expected_max_interval": timedelta(hours=1), **fields}
    return QueueJobFacts(job_id="j", queue="shop/orders", created_at=T0, **given)  # type: ignore[arg-type]  # tests pass partial facts as keyword values


def test_the_declarative_rules_judge_catalogue_jobs() -> None:
    later = T0 + timedelta(hours=2)
    [never] = overdue_verdicts([facts()], later)
    assert never.finding.reason is WatchdogReason.NOT_FIRED
    assert overdue_verdicts([facts(last_success=T0 + timedelta(minutes=90))], later) == []
    [failing] = overdue_verdicts([facts(last_fired=T0 + timedelta(minutes=5), last_failure=T0 + timedelta(minutes=9))], later)
    assert failing.finding.reason is WatchdogReason.FAILING
    assert overdue_verdicts([facts(expected_max_interval=None)], later) == []  # nothing to keep


def test_a_chain_is_broken_only_past_the_grace_of_a_new_job() -> None:
    assert broken_chain_verdicts([facts()], T0 + timedelta(minutes=1)) == []
    [broken] = broken_chain_verdicts([facts()], T0 + timedelta(minutes=5))
    assert broken.finding.reason is WatchdogReason.NO_FUTURE_OCCURRENCE


def test_ages_are_never_negative() -> None:
    assert age_seconds(T0 + timedelta(seconds=5), T0) == 0.0
    assert oldest_ready_ages([("shop/orders", "", 0, T0 - timedelta(seconds=3))], T0) == {("shop/orders", 0, ""): 3.0}


def test_episodes_start_and_end_once_and_an_unjudged_kind_stays_open() -> None:
    episodes = Episodes()
    assert episodes.advance({("Overdue", "a"): "NotFired", ("Broken", "b"): "x"}, judged=["Overdue", "Broken"]) == (
        [("Overdue", "a"), ("Broken", "b")], [],
    )  # fmt: skip
    assert episodes.advance({("Overdue", "a"): "NotFired"}, judged=["Overdue"]) == ([], [])  # no audit: b stays
    started, ended = episodes.advance({}, judged=["Overdue", "Broken"])
    assert started == [] and sorted(ended) == [("Broken", "b"), ("Overdue", "a")]


def hourly(jitter: timedelta = timedelta(0)) -> JobView:
    schedule = cron_schedule("0 * * * *", "Europe/London", GapPolicy.SHIFT, OverlapPolicy.ONCE)
    return JobView(
        namespace="shop", name="j", uid="j", generation=1, schedule=schedule, schedule_hash="", jitter=jitter,
        catch_up=CatchUp(),
    )


@pytest.mark.parametrize(
    ("next_run", "last_handled", "nominal"),
    [
        pytest.param(T0 + timedelta(hours=3), T0 + timedelta(hours=2), T0 + timedelta(hours=3), id="the-named-head"),
        pytest.param(T0 + timedelta(hours=3), None, T0 + timedelta(hours=3), id="named-nothing-handled-seen"),
        pytest.param(T0 + timedelta(hours=2), T0 + timedelta(hours=2), T0 + timedelta(hours=3), id="named-but-handled"),
        pytest.param(None, T0 + timedelta(hours=5), T0 + timedelta(hours=6), id="after-the-newest-handled"),
        pytest.param(None, None, T0 + timedelta(hours=1), id="after-the-creation"),
    ],
)
def test_a_broken_chain_restarts_at_the_first_occurrence_it_has_not_handled(
    next_run: datetime | None, last_handled: datetime | None, nominal: datetime
) -> None:
    job = hourly(jitter=timedelta(minutes=10))

    restart = chain_restart(job, next_run=next_run, last_handled=last_handled, enabled_since=T0)

    assert restart == ChainRestart("j", nominal, nominal + job.offset)
    assert timedelta(0) <= job.offset < timedelta(minutes=10)  # the job's own jitter, as the trigger fires it
