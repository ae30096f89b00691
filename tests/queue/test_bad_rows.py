"""A bad row fails alone: the volume tier's trigger on a real PostgreSQL, with one poisoned job.

A recurring job whose template renders NUL for its real occurrences (but not for the
sample period it was validated with) once stopped its whole shard: PostgreSQL's jsonb
refused the row, the trigger's one statement for up to 2,000 due rows failed, and the
same batch was retried forever. Now the rendered payload is checked before the write
(vigil.core.jsonvalues), and should PostgreSQL still refuse a value (the check stood
aside here to show it), the batch is applied in halves down to that row. Either way
the poisoned occurrence settles Failed with its reason on its bucket row, its chain
goes on, every other row of the batch fires, and a canary job of another namespace
on the same shard fires at its own fire time.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from vigil import metrics
from vigil.core import jsonvalues
from vigil.core.ids import execution_id
from vigil.queue.catalogue import Catalogue, RecurringJob
from vigil.queue.trigger import PassReport, ShardTrigger

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 1, 11, 50, tzinfo=UTC)
NOON = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
#: Renders "ok" for the catalogue's sample period (midnight) and NUL for an occurrence at noon.
POISON = {"v": '{{ "\\x00" if scheduledFor.hour == 12 else "ok" }}'}


@pytest.fixture
def catalogue(dsn: str) -> Catalogue:
    return Catalogue(dsn, shards=1)  # one shard: every job below shares it


@pytest.fixture
def trigger(dsn: str) -> Iterator[ShardTrigger]:
    made = ShardTrigger(dsn, shard=0)
    yield made
    made.close()


def hourly(queue: str, **fields: Any) -> RecurringJob:
    return RecurringJob(queue, "report", "0 * * * *", **fields)


def bucket_rows(dsn: str, job_id: str) -> list[tuple[Any, ...]]:
    """(nominal, outcome, reason, execution id) of the job's bucket rows, oldest first."""
    with psycopg.connect(dsn) as connection:
        return connection.execute(
            "SELECT nominal, outcome, reason, execution_id FROM vigil_queue.schedule_buckets "
            "WHERE job_id = %(j)s ORDER BY nominal",
            {"j": job_id},
        ).fetchall()


def executions(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as connection:
        return {row[0] for row in connection.execute("SELECT job_id FROM vigil_queue.executions").fetchall()}


def passes_at_each_fire_time(trigger: ShardTrigger, *, start: datetime, until: datetime) -> list[PassReport]:
    """Passes as the loop makes them with its clock injected: each at the next fire time a pass names."""
    reports: list[PassReport] = []
    now: datetime | None = start
    while now is not None and now <= until:
        reports.append(trigger.run_pass(now=now))
        now = reports[-1].next_fire
    return reports


def test_a_rendered_payload_the_store_would_refuse_fails_alone_and_the_shard_fires_on_time(
    dsn: str, catalogue: Catalogue, trigger: ShardTrigger
) -> None:
    good = catalogue.add_many([hourly("team-a/reports", payload_template={"n": n}) for n in range(5)], now=T0)
    bad = catalogue.add(hourly("team-a/reports", payload_template=POISON), now=T0)
    canary = catalogue.add(hourly("team-b/canary"), now=T0)  # another namespace, the same shard
    failed_before = metrics.REGISTRY.get_sample_value("vigil_queue_trigger_occurrences_total", {"outcome": "Failed"})

    reports = passes_at_each_fire_time(trigger, start=NOON, until=NOON + timedelta(minutes=2))
    for report in reports:
        metrics.record_queue_trigger_pass(report)

    assert executions(dsn) == {a.job_id for a in good} | {canary.job_id}
    assert all(lag == 0 for report in reports for lag in report.lags)  # each fired in the pass at its fire time
    assert sum(r.failed for r in reports) == 1 and sum(r.refused for r in reports) == 0
    [(nominal, outcome, reason, execution), (after, pending, _, _)] = bucket_rows(dsn, bad.job_id)
    assert (nominal, outcome, execution, pending) == (NOON, "Failed", None, None)
    assert reason.startswith("LaunchRefused: payload.v: holds NUL"), reason
    assert after == NOON + timedelta(hours=1)  # its chain goes on: the next occurrence waits
    assert trigger.run_pass(now=NOON + timedelta(minutes=5)).failed == 0  # settled once, never retried
    failed_after = metrics.REGISTRY.get_sample_value("vigil_queue_trigger_occurrences_total", {"outcome": "Failed"})
    assert failed_after == (failed_before or 0) + 1


def test_a_row_postgresql_refuses_fails_alone_and_the_rest_of_its_batch_commits(
    dsn: str, catalogue: Catalogue, trigger: ShardTrigger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before the write stood aside: PostgreSQL's own refusal is the last line."""
    monkeypatch.setattr(jsonvalues, "check_text", lambda text, **_: None)
    jobs = [hourly("team-a/reports", payload_template=POISON if n in (3, 11) else {"n": n}) for n in range(16)]
    added = catalogue.add_many(jobs, now=T0)
    canary = catalogue.add(hourly("team-b/canary"), now=T0)
    poisoned = {added[3].job_id, added[11].job_id}
    refused_before = metrics.REGISTRY.get_sample_value("vigil_queue_trigger_refused_total") or 0

    report = trigger.run_pass(now=NOON + timedelta(minutes=1, seconds=30))  # all 17 due: one batch
    metrics.record_queue_trigger_pass(report)

    fired_jobs = {a.job_id for a in added} - poisoned | {canary.job_id}
    assert executions(dsn) == fired_jobs
    assert sorted(report.fired) == sorted(execution_id(job_id, NOON) for job_id in fired_jobs)
    assert (report.failed, report.refused, report.lost_races) == (2, 2, 0)
    for job_id in poisoned:
        [(_, outcome, reason, _), (_, pending, _, _)] = bucket_rows(dsn, job_id)
        assert (outcome, pending) == ("Failed", None)
        assert reason.startswith("LaunchRefused: the queue store refused the execution: unsupported Unicode"), reason
    assert metrics.REGISTRY.get_sample_value("vigil_queue_trigger_refused_total") == refused_before + 2
    again = trigger.run_pass(now=NOON + timedelta(minutes=2))  # no retry loop: nothing left due
    assert (again.fired, again.failed, again.refused) == ([], 0, 0)


def test_a_batch_without_a_bad_row_is_one_statement(
    dsn: str, catalogue: Catalogue, trigger: ShardTrigger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bisecting costs only when a row is refused: the common case applies the batch at once."""
    catalogue.add_many([hourly("team-a/reports", payload_template={"n": n}) for n in range(40)], now=T0)
    statements: list[str] = []
    real_execute = psycopg.Connection.execute

    def counted(self: psycopg.Connection[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(str(query)[:40])
        return real_execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counted)
    report = trigger.run_pass(now=NOON + timedelta(minutes=1, seconds=30))
    assert len(report.fired) == 40
    assert sum("trigger_apply" in s or "WITH head AS" in s for s in statements) == 1, statements
