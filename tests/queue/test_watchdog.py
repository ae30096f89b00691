"""The volume tier's watchdog on real PostgreSQL: overdue jobs with their reasons, broken chains,
dead letters and oldest ready ages, a bounded number of statements a pass, and the metrics.

Jobs are catalogued and fired by the real catalogue and trigger; what workers would do to the
fired executions (succeed, die, stay waiting) is written straight into `executions`, at
explicit times. The watchdog's clock is a plain object the test moves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from vigil import metrics
from vigil.core.chain import CatchUp, CatchUpPolicy
from vigil.core.queue import AttemptOutcome, QueueDeclaration, QueueWatchSummary
from vigil.core.watchdog import WatchdogReason
from vigil.queue.catalogue import Catalogue, RecurringJob
from vigil.queue.repair import repair_chains
from vigil.queue.store import Finished, QueueStore, Submission, WorkerStore
from vigil.queue.trigger import ShardTrigger
from vigil.queue.watchdog import QueueWatchdog

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 1, 11, 50, tzinfo=UTC)
T1 = datetime(2026, 12, 1, 13, 5, tzinfo=UTC)  # when a worker leases what fired by then
LEASE = timedelta(hours=6)
QUEUE = "team-a/reports"


@dataclasses.dataclass
class Clock:
    at: datetime

    def now(self) -> datetime:
        return self.at


class CountingConnection(psycopg.Connection[Any]):
    """A connection that counts the statements it runs (every one goes through `execute`)."""

    statements = 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]  # counts every statement; psycopg overloads execute per query type
        CountingConnection.statements += 1
        return super().execute(*args, **kwargs)


def run(dsn: str, query: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        cursor = connection.execute(query, params or {})
        return cursor.fetchall() if cursor.description else []


def fired_execution(dsn: str, job_id: str) -> str:
    [(execution_id,)] = run(dsn, "SELECT execution_id FROM vigil_queue.executions WHERE job_id = %(j)s", {"j": job_id})
    return str(execution_id)


def finish(dsn: str, execution_id: str, state: str, at: datetime) -> None:
    """The execution ends in `state` at `at`; a success goes on its job's row as a worker's
    acknowledgement puts it there (settle_succeeded: only forward)."""
    run(
        dsn,
        "WITH e AS (UPDATE vigil_queue.executions SET state = %(s)s, finished_at = %(at)s"
        " WHERE execution_id = %(e)s RETURNING job_id, state, finished_at)"
        " UPDATE vigil_queue.jobs AS j SET last_success_at = GREATEST(j.last_success_at, e.finished_at)"
        " FROM e WHERE j.job_id = e.job_id AND e.state = 'succeeded'",
        {"s": state, "at": at, "e": execution_id},
    )


def job(cron: str = "0 * * * *", interval: timedelta | None = timedelta(hours=2), **fields: Any) -> RecurringJob:
    return RecurringJob(QUEUE, "report", cron, expected_max_interval=interval, **fields)


@pytest.fixture
def catalogue(dsn: str) -> Catalogue:
    return Catalogue(dsn, shards=1)


@pytest.fixture
def trigger(dsn: str) -> Any:
    made = ShardTrigger(dsn, shard=0)
    yield made
    made.close()


def test_overdue_jobs_are_reported_with_their_reason_and_healthy_or_disabled_ones_are_not(
    dsn: str, catalogue: Catalogue, trigger: ShardTrigger, caplog: pytest.LogCaptureFixture
) -> None:
    healthy, failing, waiting = catalogue.add_many([job(), job(), job()], now=T0)
    not_fired = catalogue.add(job("0 3 * * *", timedelta(hours=1)), now=T0)  # daily at 03:00
    no_interval = catalogue.add(job("0 3 * * *", None), now=T0)
    disabled = catalogue.add(job("0 3 * * *", timedelta(hours=1)), now=T0)
    catalogue.delete(disabled.job_id, now=T0)
    trigger.run_pass(now=datetime(2026, 12, 1, 12, 2, tzinfo=UTC))
    finish(dsn, fired_execution(dsn, healthy.job_id), "succeeded", datetime(2026, 12, 1, 12, 5, tzinfo=UTC))
    finish(dsn, fired_execution(dsn, failing.job_id), "dead", datetime(2026, 12, 1, 12, 10, tzinfo=UTC))
    clock = Clock(datetime(2026, 12, 1, 14, 0, tzinfo=UTC))  # 2h10m after the adds; 1h55m after the success
    watchdog = QueueWatchdog(dsn, clock=clock)

    with caplog.at_level(logging.INFO, logger="vigil.queue.watchdog"):
        report = watchdog.check()
        again = watchdog.check()

    reasons = {v.job_id: v.finding.reason for v in report.overdue}
    assert reasons == {
        failing.job_id: WatchdogReason.FAILING,
        waiting.job_id: WatchdogReason.NOT_STARTED,
        not_fired.job_id: WatchdogReason.NOT_FIRED,
    }
    assert healthy.job_id not in reasons and no_interval.job_id not in reasons and disabled.job_id not in reasons
    assert report.overdue_counts == {QUEUE: 3}
    assert report.broken == [] and report.broken_counts == {}
    # one WARNING per episode, not one per pass
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 3 and {v.job_id for v in again.overdue} == set(reasons)

    # a success ends the episode: logged once, and the job is no longer reported
    finish(dsn, fired_execution(dsn, waiting.job_id), "succeeded", clock.at)
    with caplog.at_level(logging.INFO, logger="vigil.queue.watchdog"):
        caplog.clear()
        after = watchdog.check()
    assert waiting.job_id not in {v.job_id for v in after.overdue}
    assert [r.getMessage() for r in caplog.records] == [f"Overdue cleared: job {waiting.job_id}"]


def lease_now(dsn: str, at: datetime) -> list[str]:
    """A worker leases every due execution of QUEUE at `at` (the real lease statement)."""

    async def take() -> list[str]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            worker = WorkerStore(connection, queue=QUEUE, worker="w1")
            leased = await worker.lease(["report"], limit=100, lease=timedelta(hours=6), now=at)
        return [item.execution_id for item in leased]

    return asyncio.run(take())


@pytest.mark.parametrize(
    ("leased_at", "now", "reason"),
    [
        # fired at 12:00, waited for a worker until 14:00: running 1 minute, not 2 hours
        pytest.param(datetime(2026, 12, 1, 14, 0, tzinfo=UTC), datetime(2026, 12, 1, 14, 1, tzinfo=UTC),
                     WatchdogReason.STILL_RUNNING, id="long-wait-short-run"),
        # leased at 12:05 and still held at 14:10: 2h05m, past the 2h interval
        pytest.param(datetime(2026, 12, 1, 12, 5, tzinfo=UTC), datetime(2026, 12, 1, 14, 10, tzinfo=UTC),
                     WatchdogReason.OVERRAN, id="long-held-lease"),
    ],
)  # fmt: skip
def test_a_leased_execution_runs_since_its_lease_began_not_since_it_was_due(
    dsn: str, catalogue: Catalogue, trigger: ShardTrigger, leased_at: datetime, now: datetime, reason: WatchdogReason
) -> None:
    added = catalogue.add(job(), now=T0)  # hourly, expected within 2h: due by 13:50
    trigger.run_pass(now=datetime(2026, 12, 1, 12, 4, tzinfo=UTC))  # past the default jitter
    fired = fired_execution(dsn, added.job_id)
    waiting = QueueWatchdog(dsn, clock=Clock(datetime(2026, 12, 1, 13, 55, tzinfo=UTC))).check(audit=False)
    assert [(v.job_id, v.finding.reason) for v in waiting.overdue] == [(added.job_id, WatchdogReason.NOT_STARTED)]

    assert lease_now(dsn, leased_at) == [fired]
    report = QueueWatchdog(dsn, clock=Clock(now)).check(audit=False)

    assert [(v.job_id, v.finding.reason) for v in report.overdue] == [(added.job_id, reason)]
    assert run(dsn, "SELECT leased_at FROM vigil_queue.executions WHERE execution_id = %(e)s", {"e": fired}) == [
        (leased_at,)
    ]


def last_success(dsn: str, job_id: str) -> datetime | None:
    [(at,)] = run(dsn, "SELECT last_success_at FROM vigil_queue.jobs WHERE job_id = %(j)s", {"j": job_id})
    assert at is None or isinstance(at, datetime), at
    return at


def test_a_workers_acknowledgement_puts_the_success_on_its_jobs_row_and_never_moves_it_back(
    dsn: str, store: QueueStore, catalogue: Catalogue, trigger: ShardTrigger
) -> None:
    hourly, other = catalogue.add_many([job(), job()], now=T0)  # hourly, expected within 2h
    one_off = store.submit(QUEUE, [Submission("report", {})], now=T0)[0]
    trigger.run_pass(now=datetime(2026, 12, 1, 12, 4, tzinfo=UTC))
    trigger.run_pass(now=datetime(2026, 12, 1, 13, 4, tzinfo=UTC))
    first, second = (e for (e,) in run(
        dsn, "SELECT execution_id FROM vigil_queue.executions WHERE job_id = %(j)s ORDER BY scheduled_for",
        {"j": hourly.job_id},
    ))  # fmt: skip
    newer, older = datetime(2026, 12, 1, 13, 30, tzinfo=UTC), datetime(2026, 12, 1, 13, 20, tzinfo=UTC)

    async def acknowledge() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            worker = WorkerStore(connection, queue=QUEUE, worker="w1")
            held = {h.execution_id: h for h in await worker.lease(["report"], limit=100, lease=LEASE, now=T1)}

            def done(execution_id: str) -> Finished:
                return Finished(held[execution_id], AttemptOutcome.SUCCEEDED, started_at=T1, finished_at=T1)

            # the newer occurrence's success first, with the one-off's; the older one's later, at an earlier time
            assert (await worker.settle([done(second), done(one_off)], now=newer)).settled == 2
            assert (await worker.settle([done(first)], now=older)).settled == 1

    asyncio.run(acknowledge())

    assert last_success(dsn, hourly.job_id) == newer
    assert last_success(dsn, other.job_id) is None  # fired, never succeeded
    # a submission has no job: its success, in the same batch, settles and writes no job's row
    assert run(dsn, "SELECT job_id, state FROM vigil_queue.executions WHERE execution_id = %(e)s", {"e": one_off}) == [
        (None, "succeeded")
    ]
    # the watchdog reads the row: within 2h of the success the job is fine, past it overdue
    fine = QueueWatchdog(dsn, clock=Clock(newer + timedelta(hours=1, minutes=59))).check(audit=False)
    late = QueueWatchdog(dsn, clock=Clock(newer + timedelta(hours=2, minutes=1))).check(audit=False)
    assert hourly.job_id not in {v.job_id for v in fine.overdue} and other.job_id in {v.job_id for v in fine.overdue}
    assert hourly.job_id in {v.job_id for v in late.overdue}


def test_whatever_ends_a_lease_clears_its_start_and_a_heartbeat_keeps_it(dsn: str, store: QueueStore) -> None:
    at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    first, second = store.submit(QUEUE, [Submission("report"), Submission("report")], now=at)

    async def work() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            worker = WorkerStore(connection, queue=QUEUE, worker="w1")
            held = await worker.lease(["report"], limit=2, lease=timedelta(seconds=30), now=at)
            await worker.heartbeat(held, lease=timedelta(seconds=30), now=at + timedelta(seconds=20))
            assert {row[0] for row in run(dsn, "SELECT leased_at FROM vigil_queue.executions")} == {at}
            await worker.expire(now=at + timedelta(minutes=5))  # both expire: back to ready

    asyncio.run(work())
    assert run(dsn, "SELECT state, leased_at FROM vigil_queue.executions ORDER BY 1") == [
        ("ready", None), ("ready", None)
    ]
    assert {first, second} == {row[0] for row in run(dsn, "SELECT execution_id FROM vigil_queue.executions")}


def test_a_job_whose_pending_occurrence_vanished_is_a_broken_chain_and_a_disabled_one_is_not(
    dsn: str, catalogue: Catalogue
) -> None:
    kept, lost, disabled = catalogue.add_many([job(), job(), job()], now=T0)
    catalogue.delete(disabled.job_id, now=T0)
    run(dsn, "DELETE FROM vigil_queue.schedule_buckets WHERE job_id = ANY(%(j)s)", {"j": [lost.job_id, disabled.job_id]})
    watchdog = QueueWatchdog(dsn, clock=Clock(T0 + timedelta(minutes=10)))

    report = watchdog.check()

    assert report.broken is not None
    assert [(v.job_id, v.finding.reason) for v in report.broken] == [(lost.job_id, WatchdogReason.NO_FUTURE_OCCURRENCE)]
    assert report.broken_counts == {QUEUE: 1}
    assert kept.job_id not in {v.job_id for v in report.overdue}
    # a pass without the audit does not judge chains
    assert watchdog.check(audit=False).broken is None


def test_dead_letter_and_oldest_ready_ages_per_queue_priority_and_tenant(dsn: str, store: QueueStore) -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    store.submit(QUEUE, [
        Submission("t", priority=0, tenant="a", run_after=now - timedelta(seconds=30)),
        Submission("t", priority=0, tenant="a", run_after=now - timedelta(seconds=90)),
        Submission("t", priority=5, tenant="a", run_after=now - timedelta(seconds=10)),
        Submission("t", priority=0, tenant="b", run_after=now + timedelta(minutes=5)),  # backoff: not due
    ], now=now - timedelta(minutes=2))  # fmt: skip
    dead = store.submit("team-b/mail", [Submission("t"), Submission("t"), Submission("t")], now=now)
    for execution_id, died in zip(dead, (now - timedelta(hours=3), now - timedelta(hours=1)), strict=False):
        finish(dsn, execution_id, "dead", died)

    report = QueueWatchdog(dsn, clock=Clock(now)).check(audit=False)

    assert report.oldest_ready == {
        (QUEUE, 0, "a"): 90.0, (QUEUE, 5, "a"): 10.0, (QUEUE, 0, "b"): 0.0, ("team-b/mail", 0, ""): 0.0,
    }  # fmt: skip
    assert {q: (d.count, d.oldest_age_seconds) for q, d in report.dead_letters.items()} == {"team-b/mail": (2, 10800.0)}


@pytest.mark.parametrize("jobs", [10, 2000])
def test_a_pass_runs_five_statements_whatever_the_catalogue_size(dsn: str, catalogue: Catalogue, jobs: int) -> None:
    catalogue.add_many([job("0 3 * * *", timedelta(hours=1)) for _ in range(jobs)], now=T0)
    CountingConnection.statements = 0
    watchdog = QueueWatchdog(
        dsn, clock=Clock(T0 + timedelta(hours=2)), cap=50,
        connect=lambda: CountingConnection.connect(dsn, autocommit=True),
    )  # fmt: skip

    report = watchdog.check()

    assert CountingConnection.statements == 5  # four reads, and the queues' summaries
    assert len(report.overdue) == min(jobs, 50)  # the cap: series for at most 50 jobs
    assert report.overdue_counts == {QUEUE: jobs}  # the count covers them all


def test_each_pass_leaves_each_declared_queues_share_where_its_task_queue_reads_it(
    dsn: str, store: QueueStore, catalogue: Catalogue
) -> None:
    for key in (QUEUE, "team-b/mail"):
        store.declare(key, QueueDeclaration(), generation=1, now=T0)
    late = catalogue.add_many([job("0 3 * * *", timedelta(hours=1)) for _ in range(2)], now=T0)
    lost = catalogue.add(job("0 3 * * *", None), now=T0)  # no interval: never overdue
    lose_head(dsn, lost.job_id)
    clock = Clock(T0 + timedelta(hours=2))
    watchdog = QueueWatchdog(dsn, clock=clock)
    queues = [QUEUE, "team-b/mail", "team-c/undeclared"]

    watchdog.check()
    watch = {key: found.watch for key, found in store.stats(queues, now=clock.at).items()}

    first = sorted(added.job_id for added in late)
    assert watch[QUEUE] == QueueWatchSummary(
        overdue=2, overdue_jobs=tuple((job_id, "NotFired") for job_id in first),
        broken=1, broken_jobs=((lost.job_id, "NoFutureOccurrence"),),
    )  # fmt: skip
    assert watch["team-b/mail"] == QueueWatchSummary(overdue=0, broken=0)  # declared and healthy
    assert watch["team-c/undeclared"] is None  # no TaskQueue: nothing kept for it

    # a pass without the audit renews the overdue jobs and keeps the last audit's chains
    for added in late:
        catalogue.delete(added.job_id, now=clock.at)
    watchdog.check(audit=False)
    assert store.stats([QUEUE], now=clock.at)[QUEUE].watch == QueueWatchSummary(
        overdue=0, broken=1, broken_jobs=((lost.job_id, "NoFutureOccurrence"),)
    )
    # a TaskQueue deleted: its share goes with the next pass
    store.undeclare([QUEUE])
    watchdog.check(audit=False)
    assert store.stats([QUEUE], now=clock.at)[QUEUE].watch is None


def test_the_pass_publishes_its_metrics_and_a_deleted_job_loses_its_series(dsn: str, catalogue: Catalogue) -> None:
    overdue = catalogue.add(job("0 3 * * *", timedelta(hours=1)), now=T0)
    clock = Clock(T0 + timedelta(hours=2))
    watchdog = QueueWatchdog(dsn, clock=clock, publish=metrics.record_queue_watchdog)

    def sample(name: str, **labels: str) -> float | None:
        return metrics.REGISTRY.get_sample_value(name, labels)

    watchdog.check()
    series = {"namespace": "team-a", "queue": "reports", "job": overdue.job_id, "reason": "NotFired"}
    assert sample("vigil_queue_job_overdue", **series) == 1.0
    assert sample("vigil_queue_jobs_overdue", namespace="team-a", queue="reports") == 1.0

    catalogue.delete(overdue.job_id, now=clock.at)
    watchdog.check()
    assert sample("vigil_queue_job_overdue", **series) is None
    assert sample("vigil_queue_jobs_overdue", namespace="team-a", queue="reports") is None


def pending(dsn: str, job_id: str) -> list[tuple[Any, ...]]:
    """The job's unfired bucket rows: (nominal, fire_at)."""
    query = "SELECT nominal, fire_at FROM vigil_queue.schedule_buckets WHERE job_id = %(j)s AND fired_at IS NULL"
    return run(dsn, query, {"j": job_id})


def lose_head(dsn: str, job_id: str) -> tuple[datetime, datetime]:
    """Delete the job's pending bucket row (what a restore or a hand might do); its (nominal, fire_at)."""
    [head] = pending(dsn, job_id)
    run(dsn, "DELETE FROM vigil_queue.schedule_buckets WHERE job_id = %(j)s AND fired_at IS NULL", {"j": job_id})
    return head[0], head[1]


def test_with_repair_a_lost_head_comes_back_at_its_own_time_and_the_job_fires_from_it(
    dsn: str, catalogue: Catalogue, trigger: ShardTrigger, caplog: pytest.LogCaptureFixture
) -> None:
    lost, kept = catalogue.add_many([job(), job()], now=T0)  # hourly: the first at 12:00 (jittered)
    nominal, fire_at = lose_head(dsn, lost.job_id)
    kept_head = pending(dsn, kept.job_id)
    watchdog = QueueWatchdog(dsn, clock=Clock(T0 + timedelta(minutes=5)), repair=True)

    with caplog.at_level(logging.WARNING, logger="vigil.queue.repair"):
        report = watchdog.check()

    assert [v.job_id for v in report.broken or []] == [lost.job_id]  # reported as found
    assert [(r.job_id, r.nominal, r.fire_at) for r in report.repaired] == [(lost.job_id, nominal, fire_at)]
    assert pending(dsn, lost.job_id) == [(nominal, fire_at)]
    assert pending(dsn, kept.job_id) == kept_head
    assert f"repaired the schedule chain of {QUEUE} job {lost.job_id}" in caplog.text
    assert watchdog.check().broken == []  # the next audit finds it whole

    trigger.run_pass(now=fire_at - timedelta(seconds=1))
    assert outcomes(dsn, lost.job_id) == {}  # not before its time
    trigger.run_pass(now=fire_at)
    assert outcomes(dsn, lost.job_id) == {nominal: "Fired"}
    assert run(dsn, "SELECT scheduled_for FROM vigil_queue.executions WHERE job_id = %(j)s", {"j": lost.job_id}) == [
        (nominal,)
    ]
    [(next_nominal, _)] = pending(dsn, lost.job_id)
    assert next_nominal == nominal + timedelta(hours=1)


def outcomes(dsn: str, job_id: str) -> dict[datetime, str]:
    """nominal -> outcome of each occurrence the job's buckets record as handled."""
    query = "SELECT nominal, outcome FROM vigil_queue.schedule_buckets WHERE job_id = %(j)s AND fired_at IS NOT NULL"
    return dict(run(dsn, query, {"j": job_id}))


def test_a_head_lost_long_ago_comes_back_due_and_the_catch_up_policy_fires_or_records_the_gap(
    dsn: str, catalogue: Catalogue, trigger: ShardTrigger
) -> None:
    none = CatchUp(policy=CatchUpPolicy.NONE)  # what is more than 5 minutes late is Missed
    added = catalogue.add(job("*/10 * * * *", timedelta(hours=2), jitter=timedelta(0), catch_up=none), now=T0)
    trigger.run_pass(now=datetime(2026, 12, 1, 12, 0, tzinfo=UTC))  # fires 12:00, chains 12:10
    nominal, _ = lose_head(dsn, added.job_id)
    assert nominal == datetime(2026, 12, 1, 12, 10, tzinfo=UTC)
    now = datetime(2026, 12, 1, 12, 45, tzinfo=UTC)

    report = QueueWatchdog(dsn, clock=Clock(now), repair=True).check()
    trigger.run_pass(now=now)

    assert [r.nominal for r in report.repaired] == [nominal]  # from the lost one, not from now

    def at(minute: int) -> datetime:
        return datetime(2026, 12, 1, 12, minute, tzinfo=UTC)

    # the gap goes through the job's catch-up policy: recorded Missed, or fired, never skipped
    assert outcomes(dsn, added.job_id) == {
        at(0): "Fired", at(10): "Missed", at(20): "Missed", at(30): "Missed", at(40): "Fired",
    }  # fmt: skip
    assert pending(dsn, added.job_id) == [(at(50), at(50))]


def test_without_repair_a_broken_chain_is_reported_and_left_as_it_is(dsn: str, catalogue: Catalogue) -> None:
    added = catalogue.add(job(), now=T0)
    lose_head(dsn, added.job_id)
    watchdog = QueueWatchdog(dsn, clock=Clock(T0 + timedelta(minutes=5)))

    first, second = watchdog.check(), watchdog.check()

    assert [v.job_id for v in first.broken or []] == [v.job_id for v in second.broken or []] == [added.job_id]
    assert first.repaired == second.repaired == []
    assert pending(dsn, added.job_id) == [] and outcomes(dsn, added.job_id) == {}


def test_a_repair_racing_another_repair_or_the_trigger_never_doubles_the_chain(
    dsn: str, catalogue: Catalogue, trigger: ShardTrigger
) -> None:
    added = catalogue.add(job(), now=T0)
    nominal, fire_at = lose_head(dsn, added.job_id)
    now = T0 + timedelta(minutes=5)
    # two replicas' repairs at once: the second waits on the first's uncommitted row, then adds nothing
    with psycopg.connect(dsn) as first:
        assert [r.nominal for r in repair_chains(first, [added.job_id], now=now)] == [nominal]
        with ThreadPoolExecutor(1) as pool:
            second = pool.submit(lambda: repair_in_own_session(dsn, added.job_id, now))
            wait_for_lock_wait(dsn)
            first.commit()
            assert second.result(timeout=30) == []
    assert pending(dsn, added.job_id) == [(nominal, fire_at)]

    # a repair planned before the trigger fired the head, applied after: the chain moved on
    trigger.run_pass(now=fire_at)
    assert repair_in_own_session(dsn, added.job_id, now) == []
    assert outcomes(dsn, added.job_id) == {nominal: "Fired"}
    assert len(pending(dsn, added.job_id)) == 1
    assert len(run(dsn, "SELECT 1 FROM vigil_queue.executions WHERE job_id = %(j)s", {"j": added.job_id})) == 1


def repair_in_own_session(dsn: str, job_id: str, now: datetime) -> list[datetime]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        return [r.nominal for r in repair_chains(connection, [job_id], now=now)]


def wait_for_lock_wait(dsn: str, timeout: float = 30.0) -> None:
    """Until a session of the test database waits on a lock (the racing repair's insert)."""
    deadline = time.monotonic() + timeout
    query = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
    while run(dsn, query)[0][0] == 0:
        assert time.monotonic() < deadline, "the racing repair never waited on the first one's row"
        time.sleep(0.01)  # polling a condition, not a synchronising sleep
