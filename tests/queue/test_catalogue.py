"""The recurring-job catalogue and its sharded trigger on real PostgreSQL.

Each test drives `Catalogue` and `ShardTrigger` with explicit times: adding jobs,
firing them once (also with two triggers racing on one shard), daylight saving,
catch-up after an outage, deletes, the hourly partitions' upkeep, and a fired
execution leased by the existing worker store.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import alembic.command
import alembic.config
import psycopg
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.waiting import wait_for
from vigil import metrics
from vigil.core.chain import CatchUp, CatchUpPolicy
from vigil.core.ids import execution_id
from vigil.core.jitter import jitter_offset
from vigil.queue import attempt_days, partitions
from vigil.queue import trigger as trigger_module
from vigil.queue.catalogue import Catalogue, RecurringJob
from vigil.queue.migrations import SCRIPT_LOCATION
from vigil.queue.store import QUERIES, QueueStore, WorkerStore
from vigil.queue.trigger import ShardTrigger

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 1, 11, 50, tzinfo=UTC)
QUEUE = "team-a/reports"
LONDON = ZoneInfo("Europe/London")


@pytest.fixture
def catalogue(dsn: str) -> Catalogue:
    return Catalogue(dsn, shards=1)


@pytest.fixture
def trigger(dsn: str) -> Any:
    made = ShardTrigger(dsn, shard=0)
    yield made
    made.close()


def hourly(**fields: Any) -> RecurringJob:
    return RecurringJob(QUEUE, "report", "0 * * * *", **fields)


def rows(dsn: str, query: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as connection:
        return connection.execute(query, params or {}).fetchall()


def executions_of(dsn: str, job_id: str) -> list[tuple[str, datetime]]:
    return [
        (row[0], row[1])
        for row in rows(
            dsn,
            "SELECT execution_id, scheduled_for FROM vigil_queue.executions WHERE job_id = %(j)s "
            "ORDER BY scheduled_for",
            {"j": job_id},
        )
    ]


def pending(dsn: str, job_id: str) -> list[datetime]:
    """The job's unfired bucket rows' nominal times."""
    found = rows(
        dsn,
        "SELECT nominal FROM vigil_queue.schedule_buckets WHERE job_id = %(j)s AND fired_at IS NULL",
        {"j": job_id},
    )
    return [row[0] for row in found]


BAD_FIELDS = [
    pytest.param({"cron": "0 * * * * *"}, "cron", id="a cron of six fields"),
    pytest.param({"cron": "61 * * * *"}, "cron", id="a minute out of range"),
    pytest.param({"timezone": "Mars/Olympus"}, "timezone", id="an unknown time zone"),
    pytest.param({"timezone": "localtime"}, "timezone", id="the host's own zone"),
    pytest.param({"queue": "no-namespace"}, "queue", id="a queue without its namespace"),
    pytest.param({"task": ""}, "task", id="an empty task"),
    pytest.param({"max_attempts": 0}, "max_attempts", id="no attempt at all"),
    pytest.param({"priority": 40000}, "priority", id="a priority past a smallint"),
    pytest.param({"expected_max_interval": timedelta(0)}, "expected_max_interval", id="a zero expected interval"),
    pytest.param({"jitter": timedelta(hours=2)}, "jitter", id="jitter past the cron's interval"),
    pytest.param({"jitter": timedelta(seconds=-1)}, "jitter", id="negative jitter"),
    pytest.param({"catch_up": CatchUp(limit=-1)}, "catch_up.limit", id="a negative catch-up limit"),
    pytest.param({"catch_up": CatchUp(window=timedelta(seconds=-5))}, "catch_up.window", id="a negative window"),
    pytest.param({"idempotency_key": ""}, "idempotency_key", id="an empty idempotency key"),
    pytest.param({"payload_template": {"day": "{{ nope }}"}}, "payload_template.day", id="an undefined name"),
    pytest.param({"payload_template": {"day": "{{ periodStart "}}, "payload_template.day", id="a broken template"),
    pytest.param({"payload_template": ["a"]}, "payload_template", id="a template that is no object"),
]


@pytest.mark.parametrize(("fields", "named"), BAD_FIELDS)
def test_a_recurring_job_with_a_bad_field_is_refused_naming_the_field(fields: dict[str, Any], named: str) -> None:
    good = {"queue": QUEUE, "task": "report", "cron": "0 * * * *"}
    with pytest.raises(ValueError) as refused:
        RecurringJob(**(good | fields))
    assert str(refused.value).startswith(f"{named}: "), str(refused.value)


def test_a_cron_that_never_matches_a_date_is_refused_when_added(catalogue: Catalogue) -> None:
    with pytest.raises(ValueError, match=r"^cron: "):
        catalogue.add(RecurringJob(QUEUE, "report", "0 0 30 2 *"), now=T0)


def test_adding_a_job_catalogues_it_with_its_first_occurrence(dsn: str) -> None:
    catalogue = Catalogue(dsn, shards=8)
    added = catalogue.add(hourly(expected_max_interval=timedelta(hours=2)), now=T0)
    assert added.created and added.next_run == datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    job = catalogue.get(added.job_id)
    assert job is not None
    assert job["enabled"] and job["next_run"] == added.next_run and 0 <= job["shard"] < 8
    assert job["jitter"] == timedelta(seconds=60)  # the core's default for an hourly cron
    assert job["expected_max_interval"] == timedelta(hours=2)
    assert pending(dsn, added.job_id) == [added.next_run]
    assert catalogue.get("no-such-job") is None


def test_a_repeated_idempotency_key_returns_the_first_job(dsn: str, catalogue: Catalogue) -> None:
    first = catalogue.add(hourly(idempotency_key="nightly", payload_template={"n": 1}), now=T0)
    again = catalogue.add(hourly(idempotency_key="nightly", payload_template={"n": 2}), now=T0 + timedelta(hours=1))
    batch = catalogue.add_many(
        [hourly(idempotency_key="twice"), hourly(idempotency_key="twice"), hourly(idempotency_key="nightly")], now=T0
    )
    assert again == type(first)(first.job_id, first.next_run, created=False)
    assert [b.created for b in batch] == [True, False, False]
    assert batch[0].job_id == batch[1].job_id and batch[2].job_id == first.job_id
    kept = catalogue.get(first.job_id)
    assert kept is not None and kept["payload_template"] == {"n": 1}
    assert rows(dsn, "SELECT count(*) FROM vigil_queue.jobs")[0][0] == 2
    assert rows(dsn, "SELECT count(*) FROM vigil_queue.schedule_buckets")[0][0] == 2  # one chain head each


def test_a_pass_fires_due_occurrences_once_and_inserts_the_next(
    dsn: str, catalogue: Catalogue, trigger: ShardTrigger
) -> None:
    added = catalogue.add(hourly(payload_template={"day": "{{ periodStart | date }}", "id": "{{ executionId }}"}), now=T0)
    noon = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    fire_at = noon + jitter_offset(added.job_id, timedelta(seconds=60))

    assert trigger.run_pass(now=fire_at - timedelta(milliseconds=1)).fired == []  # not yet due
    first = trigger.run_pass(now=fire_at)
    again = trigger.run_pass(now=fire_at + timedelta(seconds=30))

    expected = execution_id(added.job_id, noon)
    assert first.fired == [expected] and again.fired == []
    assert executions_of(dsn, added.job_id) == [(expected, noon)]
    assert pending(dsn, added.job_id) == [noon + timedelta(hours=1)]
    job = catalogue.get(added.job_id)
    assert job is not None and job["next_run"] == noon + timedelta(hours=1)
    payload = rows(dsn, "SELECT payload FROM vigil_queue.executions WHERE execution_id = %(e)s", {"e": expected})
    assert payload[0][0] == {"day": "2026-12-01", "id": expected}


def test_two_triggers_on_one_shard_fire_a_thousand_due_jobs_exactly_once(dsn: str, catalogue: Catalogue) -> None:
    added = catalogue.add_many([hourly(tenant=f"t{n % 7}") for n in range(1000)], now=T0)
    now = datetime(2026, 12, 1, 12, 1, 30, tzinfo=UTC)  # every job's fire time has come (jitter < 60 s)
    triggers = [ShardTrigger(dsn, shard=0, batch=40) for _ in range(2)]
    start = threading.Barrier(len(triggers))
    fired: list[list[str]] = [[] for _ in triggers]

    def fire(index: int) -> None:
        start.wait(timeout=30)
        for _ in range(5):  # overlapping passes, as a failover overlap would run them
            fired[index] += triggers[index].run_pass(now=now).fired

    threads = [threading.Thread(target=fire, args=(i,)) for i in range(len(triggers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for made in triggers:
        made.close()

    together = Counter(fired[0] + fired[1])
    assert len(together) == 1000 and set(together.values()) == {1}  # each fired by exactly one trigger
    assert rows(dsn, "SELECT count(*) FROM vigil_queue.executions")[0][0] == 1000
    per_job = rows(dsn, "SELECT job_id, count(*) FROM vigil_queue.schedule_buckets WHERE fired_at IS NULL GROUP BY 1")
    assert len(per_job) == 1000 and {count for _, count in per_job} == {1}  # one next occurrence each
    assert {a.job_id for a in added} == {job_id for job_id, _ in per_job}


def fire_through(dsn: str, trigger: ShardTrigger, job_id: str, *, until: datetime, delay: timedelta) -> None:
    """Run passes at each pending row's fire time plus `delay`, up to `until`."""
    while True:
        found = rows(
            dsn,
            "SELECT fire_at FROM vigil_queue.schedule_buckets WHERE job_id = %(j)s AND fired_at IS NULL",
            {"j": job_id},
        )
        if not found or found[0][0] + delay > until:
            return
        trigger.run_pass(now=found[0][0] + delay)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    start=st.sampled_from([datetime(2026, 3, 26, tzinfo=UTC), datetime(2026, 10, 22, tzinfo=UTC)])
    .flatmap(lambda day: st.integers(min_value=0, max_value=48).map(lambda h: day + timedelta(hours=h))),
    delay=st.integers(min_value=0, max_value=240).map(lambda s: timedelta(seconds=s)),
)
def test_a_london_job_at_half_past_one_fires_once_a_day_across_daylight_saving(
    dsn: str, catalogue: Catalogue, trigger: ShardTrigger, start: datetime, delay: timedelta
) -> None:
    added = catalogue.add(RecurringJob(QUEUE, "report", "30 1 * * *", timezone="Europe/London"), now=start)
    until = start + timedelta(days=6)
    fire_through(dsn, trigger, added.job_id, until=until, delay=delay)

    fired = [nominal.astimezone(LONDON) for _, nominal in executions_of(dsn, added.job_id)]
    days = [local.date() for local in fired]
    assert len(days) == len(set(days)) >= 5  # once a day, no day twice (the fall-back day repeats 01:30)
    assert all((later - earlier).days == 1 for earlier, later in itertools.pairwise(days))
    spring_forward = date(2026, 3, 29)
    for local in fired:  # 01:30, or 02:00 BST on the day the clock jumps over 01:30 (Shift)
        expected = (2, 0) if local.date() == spring_forward else (1, 30)
        assert (local.hour, local.minute) == expected


CATCH_UP = [
    pytest.param(CatchUpPolicy.ALL, 6, 0, id="All fires every missed hour"),
    pytest.param(CatchUpPolicy.LATEST, 1, 5, id="Latest fires the newest and records the rest Missed"),
    pytest.param(CatchUpPolicy.NONE, 0, 6, id="None records every late occurrence Missed"),
]


@pytest.mark.parametrize(("policy", "fired", "missed"), CATCH_UP)
def test_catch_up_after_an_outage_follows_the_policy(
    dsn: str, catalogue: Catalogue, trigger: ShardTrigger, policy: CatchUpPolicy, fired: int, missed: int
) -> None:
    added = catalogue.add(hourly(catch_up=CatchUp(policy=policy, window=timedelta(minutes=5))), now=T0)
    after_outage = datetime(2026, 12, 1, 17, 30, tzinfo=UTC)  # 12:00 … 17:00 all late by more than 5 min

    report = trigger.run_pass(now=after_outage)

    nominals = [datetime(2026, 12, 1, hour, 0, tzinfo=UTC) for hour in range(12, 18)]
    assert len(report.fired) == fired and report.missed == missed
    assert [nominal for _, nominal in executions_of(dsn, added.job_id)] == nominals[len(nominals) - fired :]
    outcomes = rows(
        dsn,
        "SELECT nominal, outcome FROM vigil_queue.schedule_buckets WHERE job_id = %(j)s AND fired_at IS NOT NULL "
        "ORDER BY nominal",
        {"j": added.job_id},
    )
    assert [nominal for nominal, _ in outcomes] == nominals  # every occurrence accounted for: none skipped silently
    assert Counter(outcome for _, outcome in outcomes) == Counter({"Fired": fired, "Missed": missed}) - Counter()
    assert pending(dsn, added.job_id) == [datetime(2026, 12, 1, 18, 0, tzinfo=UTC)]


def test_a_deleted_job_stops_firing(dsn: str, catalogue: Catalogue, trigger: ShardTrigger) -> None:
    kept = catalogue.add(hourly(), now=T0)
    gone = catalogue.add(hourly(), now=T0)
    noon = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    trigger.run_pass(now=noon + timedelta(minutes=2))

    assert catalogue.delete(gone.job_id, now=noon + timedelta(minutes=5))
    assert not catalogue.delete(gone.job_id, now=noon + timedelta(minutes=6))  # already deleted
    assert not catalogue.delete("no-such-job", now=noon)
    trigger.run_pass(now=noon + timedelta(hours=3, minutes=2))

    assert len(executions_of(dsn, kept.job_id)) == 4
    assert [nominal for _, nominal in executions_of(dsn, gone.job_id)] == [noon]  # only the one before the delete
    assert pending(dsn, gone.job_id) == []
    job = catalogue.get(gone.job_id)
    assert job is not None and not job["enabled"] and job["deleted_at"] == noon + timedelta(minutes=5)


def test_a_job_deleted_while_its_next_occurrence_is_inserted_is_skipped_when_that_comes_due(
    dsn: str, catalogue: Catalogue, trigger: ShardTrigger
) -> None:
    added = catalogue.add(hourly(), now=T0)
    # The delete's view of next_run went stale: a trigger fired and chained meanwhile.
    with psycopg.connect(dsn) as connection:
        connection.execute(
            "UPDATE vigil_queue.jobs SET enabled = false, deleted_at = %(t)s WHERE job_id = %(j)s",
            {"t": T0, "j": added.job_id},
        )
    report = trigger.run_pass(now=datetime(2026, 12, 1, 12, 5, tzinfo=UTC))
    assert report.fired == [] and report.skipped == 1
    assert pending(dsn, added.job_id) == []  # the chain ends
    assert executions_of(dsn, added.job_id) == []


def partition_of(dsn: str, job_id: str) -> str:
    found = rows(
        dsn,
        "SELECT tableoid::regclass::text FROM vigil_queue.schedule_buckets WHERE job_id = %(j)s AND fired_at IS NULL",
        {"j": job_id},
    )
    return str(found[0][0]).removeprefix("vigil_queue.")


def test_partitions_are_made_ahead_and_a_far_occurrence_waits_in_default_until_its_hour_is_made(
    dsn: str, store: QueueStore, catalogue: Catalogue
) -> None:
    made = store.maintain_partitions(now=T0, ahead=timedelta(hours=48))
    weekly = catalogue.add(RecurringJob(QUEUE, "report", "0 9 * * 1"), now=T0)  # Monday 7 December, 09:00
    hourly_job = catalogue.add(hourly(), now=T0)

    hours = [T0.replace(minute=0) + timedelta(hours=h) for h in range(49)]
    assert made.created == [partitions.partition_name(hour) for hour in hours]
    assert store.maintain_partitions(now=T0, ahead=timedelta(hours=48)).created == []  # idempotent
    assert partition_of(dsn, hourly_job.job_id) == "schedule_buckets_p2026120112"
    assert partition_of(dsn, weekly.job_id) == partitions.DEFAULT_PARTITION  # an insert past the horizon works

    later = store.maintain_partitions(now=datetime(2026, 12, 5, 10, 0, tzinfo=UTC), ahead=timedelta(hours=48))
    assert "schedule_buckets_p2026120709" in later.created and later.moved == 1
    assert partition_of(dsn, weekly.job_id) == "schedule_buckets_p2026120709"


def test_a_past_partition_is_dropped_only_once_every_row_in_it_has_fired(
    dsn: str, store: QueueStore, catalogue: Catalogue, trigger: ShardTrigger
) -> None:
    store.maintain_partitions(now=T0, ahead=timedelta(hours=3))
    catalogue.add(hourly(), now=T0)
    noon_partition = "schedule_buckets_p2026120112"
    outage_over = datetime(2026, 12, 1, 13, 30, tzinfo=UTC)

    kept = store.maintain_partitions(now=outage_over, ahead=timedelta(hours=3))
    assert kept.dropped == ["schedule_buckets_p2026120111"]  # empty and past
    assert noon_partition in partitions_now(dsn)  # noon's occurrence has not fired yet

    trigger.run_pass(now=outage_over)
    dropped = store.maintain_partitions(now=outage_over, ahead=timedelta(hours=3))
    assert dropped.dropped == [noon_partition]
    assert partitions_now(dsn)[0] == "schedule_buckets_p2026120113"  # the current hour stays


def partitions_now(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as connection:
        return partitions.partitions(connection)


def test_partition_upkeep_from_several_replicas_at_once_makes_each_partition_once(dsn: str, store: QueueStore) -> None:
    start = threading.Barrier(4)
    results: list[partitions.Maintenance] = []

    def upkeep() -> None:
        start.wait(timeout=30)
        results.append(store.maintain_partitions(now=T0, ahead=timedelta(hours=24)))

    threads = [threading.Thread(target=upkeep) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    made = [name for result in results for name in result.created]
    assert len(results) == 4 and len(made) == len(set(made))
    assert len(partitions_now(dsn)) == 25


def test_making_a_partition_never_deadlocks_with_a_pass_that_read_default_and_then_inserts_into_it(
    dsn: str, store: QueueStore
) -> None:
    """A firing transaction reads the due rows (DEFAULT included) and then inserts a far next occurrence.

    Upkeep waiting for DEFAULT meanwhile must let that insert through: holding a weaker lock on
    DEFAULT and upgrading it at ATTACH made the two wait on each other until PostgreSQL killed one.
    """
    store.maintain_partitions(now=T0, ahead=timedelta(hours=1))
    far = T0 + timedelta(days=30)
    with psycopg.connect(dsn) as firing:
        firing.execute("SELECT count(*) FROM vigil_queue.schedule_buckets WHERE minute <= %(now)s", {"now": T0})
        backend = firing.info.backend_pid
        made: list[partitions.Maintenance] = []
        failed: list[BaseException] = []

        def upkeep() -> None:
            try:
                made.append(store.maintain_partitions(now=T0, ahead=timedelta(hours=2)))
            except BaseException as error:  # the test reports whatever upkeep raised
                failed.append(error)

        maintainer = threading.Thread(target=upkeep)
        maintainer.start()
        wait_for(
            lambda: waiting_on(dsn, besides=backend),
            timeout=10,
            interval=0.02,
            what="upkeep to wait for the firing transaction's lock",
        )
        firing.execute(
            "INSERT INTO vigil_queue.schedule_buckets (minute, shard, job_id, nominal, fire_at)"
            " VALUES (%(at)s, 0, 'far', %(at)s, %(at)s)",
            {"at": far},
        )
        firing.commit()
    maintainer.join(timeout=30)
    assert failed == []
    assert [result.created for result in made] == [["schedule_buckets_p2026120113"]]
    assert rows(dsn, "SELECT job_id FROM vigil_queue.schedule_buckets_default") == [("far",)]


def waiting_on(dsn: str, *, besides: int) -> bool:
    """Whether a backend other than `besides` waits for a lock."""
    found = rows(dsn, "SELECT count(*) FROM pg_locks WHERE NOT granted AND pid <> %(pid)s", {"pid": besides})
    return bool(found[0][0])


def test_a_fired_execution_is_leasable_by_a_worker(dsn: str, catalogue: Catalogue, trigger: ShardTrigger) -> None:
    added = catalogue.add(hourly(payload_template={"at": "{{ scheduledFor | isoformat }}"}, priority=2), now=T0)
    noon = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    [fired] = trigger.run_pass(now=noon + timedelta(minutes=1)).fired

    async def lease() -> list[Any]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            worker = WorkerStore(connection, queue=QUEUE, worker="w1")
            return await worker.lease(["report"], limit=10, lease=timedelta(seconds=30), now=noon + timedelta(minutes=1))

    [leased] = asyncio.run(lease())
    assert leased.execution_id == fired == execution_id(added.job_id, noon)
    assert leased.scheduled_for == noon and leased.attempt == 1 and leased.priority == 2
    assert leased.payload == {"at": "2026-12-01T12:00:00+00:00"}


def test_every_enabled_job_keeps_a_pending_occurrence(dsn: str, catalogue: Catalogue, trigger: ShardTrigger) -> None:
    added = catalogue.add_many([hourly() for _ in range(20)], now=T0)
    catalogue.delete(added[0].job_id, now=T0)
    for hour in range(4):
        trigger.run_pass(now=datetime(2026, 12, 1, 12 + hour, 2, tzinfo=UTC))
    broken = rows(dsn, QUERIES["integrity_broken_chains"], {"limit": 10})
    assert broken == []
    assert rows(dsn, "SELECT count(*) FROM vigil_queue.executions")[0][0] == 19 * 4



def test_the_catalogue_migration_downgrades_to_the_first_revision_and_back(dsn: str, catalogue: Catalogue) -> None:
    catalogue.add(hourly(), now=T0)
    config = alembic.config.Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    engine = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))
    try:
        for target, expected in (("q0001", False), ("head", True)):
            with engine.begin() as connection:
                config.attributes["connection"] = connection
                (alembic.command.downgrade if target == "q0001" else alembic.command.upgrade)(config, target)
            found = rows(dsn, "SELECT to_regclass('vigil_queue.schedule_buckets') IS NOT NULL")[0][0]
            assert found is expected
    finally:
        engine.dispose()
    assert catalogue.add(hourly(), now=T0).created  # the upgraded schema takes jobs again


def test_a_trigger_that_dies_between_reading_and_writing_loses_nothing(
    dsn: str, catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch
) -> None:
    added = catalogue.add_many([hourly() for _ in range(30)], now=T0)
    now = datetime(2026, 12, 1, 12, 2, tzinfo=UTC)
    doomed = ShardTrigger(dsn, shard=0)
    planned = trigger_module._plan

    def plan_then_die(due: Any, at: datetime) -> Any:
        with psycopg.connect(dsn, autocommit=True) as other:  # the process dies mid-transaction
            other.execute("SELECT pg_terminate_backend(%(pid)s)", {"pid": doomed.connection().info.backend_pid})
        return planned(due, at)

    monkeypatch.setattr(trigger_module, "_plan", plan_then_die)
    with pytest.raises(psycopg.OperationalError):
        doomed.run_pass(now=now)
    monkeypatch.setattr(trigger_module, "_plan", planned)
    assert rows(dsn, "SELECT count(*) FROM vigil_queue.executions")[0][0] == 0
    assert rows(dsn, "SELECT count(*) FROM vigil_queue.schedule_buckets WHERE fired_at IS NOT NULL")[0][0] == 0

    survivor = ShardTrigger(dsn, shard=0)
    try:
        assert len(survivor.run_pass(now=now).fired) == 30
    finally:
        survivor.close()
        doomed.close()
    assert {job_id for job_id, in rows(dsn, "SELECT job_id FROM vigil_queue.executions")} == {a.job_id for a in added}


def test_the_trigger_loop_keeps_partitions_and_fires_until_stopped(dsn: str, catalogue: Catalogue) -> None:
    added = catalogue.add(hourly(), now=T0)
    clock_at = [datetime(2026, 12, 1, 12, 2, tzinfo=UTC)]
    stop = threading.Event()
    passes: list[trigger_module.PassReport] = []
    fired_before, lags_before = trigger_metric("occurrences_total", outcome="Fired"), trigger_metric("lag_seconds_count")

    def on_pass(report: trigger_module.PassReport) -> None:
        passes.append(report)
        metrics.record_queue_trigger_pass(report)  # as the operator's shard threads do

    loop = threading.Thread(
        target=trigger_module.run,
        args=(ShardTrigger(dsn, shard=0),),
        kwargs={"clock": lambda: clock_at[0], "stop": stop, "interval": timedelta(milliseconds=20), "on_pass": on_pass},
    )
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while not executions_of(dsn, added.job_id) and time.monotonic() < deadline:
            stop.wait(0.02)
    finally:
        stop.set()
        loop.join(timeout=30)
    assert not loop.is_alive()
    assert [nominal for _, nominal in executions_of(dsn, added.job_id)] == [datetime(2026, 12, 1, 12, 0, tzinfo=UTC)]
    assert "schedule_buckets_p2026120312" in partitions_now(dsn)  # 48 hours ahead of the clock
    with psycopg.connect(dsn) as connection:  # and the attempts' days, from 14 behind to 2 ahead
        assert attempt_days.partitions(connection)[-1] == "attempts_p20261203"
        assert attempt_days.partitions(connection)[0] == "attempts_p20261117"
    assert sum(len(p.fired) for p in passes) == 1
    assert trigger_metric("occurrences_total", outcome="Fired") == fired_before + 1
    assert trigger_metric("lag_seconds_count") == lags_before + 1  # 2 minutes late: the clock says 12:02


def fire_time(dsn: str, job_id: str) -> datetime:
    [[fire_at]] = rows(
        dsn, "SELECT fire_at FROM vigil_queue.schedule_buckets WHERE job_id = %(j)s AND fired_at IS NULL", {"j": job_id}
    )
    assert isinstance(fire_at, datetime) and fire_at.tzinfo is not None  # timestamptz: aware
    return fire_at


def test_a_pass_says_when_the_shards_next_occurrence_comes_due(dsn: str, catalogue: Catalogue, trigger: Any) -> None:
    """Of the unfired rows in the pass's minute and the next: further ahead, the interval decides."""
    added = catalogue.add(hourly(), now=T0)
    fire_at = fire_time(dsn, added.job_id)
    report = trigger.run_pass(now=fire_at - timedelta(seconds=1))
    assert (report.fired, report.next_fire) == ([], fire_at)
    assert trigger.run_pass(now=fire_at - timedelta(minutes=2)).next_fire is None
    report = trigger.run_pass(now=fire_at)
    assert len(report.fired) == 1 and report.next_fire is None  # the next one is an hour away


def test_the_loop_starts_the_next_pass_when_an_occurrence_comes_due_not_a_whole_interval_later(
    dsn: str, catalogue: Catalogue
) -> None:
    """The clock stands still 50 ms before the fire time, so each pass says "in 50 ms"; with a
    one-minute interval, a loop that waited for it would not reach a second pass in time."""
    added = catalogue.add(hourly(), now=T0)
    before = fire_time(dsn, added.job_id) - timedelta(milliseconds=50)
    stop = threading.Event()
    passes: list[trigger_module.PassReport] = []

    def on_pass(report: trigger_module.PassReport) -> None:
        passes.append(report)
        if len(passes) == 3:
            stop.set()

    loop = threading.Thread(
        target=trigger_module.run,
        args=(ShardTrigger(dsn, shard=0),),
        kwargs={"clock": lambda: before, "stop": stop, "interval": timedelta(minutes=1), "on_pass": on_pass},
    )
    loop.start()
    stop.wait(30)
    stop.set()
    loop.join(timeout=30)
    assert not loop.is_alive()
    assert len(passes) == 3, f"{len(passes)} passes: the loop waited for its interval"
    assert all(p.fired == [] and p.next_fire == before + timedelta(milliseconds=50) for p in passes)


def test_the_loop_logs_and_counts_occurrences_an_outage_recorded_missed(
    dsn: str, catalogue: Catalogue, caplog: pytest.LogCaptureFixture
) -> None:
    """Volume-tier jobs are rows (no Events): the log and the metric are what tell of Missed ones."""
    catalogue.add(hourly(catch_up=CatchUp(policy=CatchUpPolicy.NONE, window=timedelta(minutes=5))), now=T0)
    missed_before = trigger_metric("occurrences_total", outcome="Missed")
    stop = threading.Event()

    def on_pass(report: trigger_module.PassReport) -> None:
        metrics.record_queue_trigger_pass(report)
        if report.missed:
            stop.set()

    caplog.set_level("WARNING", logger=trigger_module.__name__)
    loop = threading.Thread(
        target=trigger_module.run,
        args=(ShardTrigger(dsn, shard=0),),
        kwargs={"clock": lambda: datetime(2026, 12, 1, 17, 30, tzinfo=UTC), "stop": stop,
                "interval": timedelta(milliseconds=20), "on_pass": on_pass},
    )  # fmt: skip
    loop.start()
    loop.join(timeout=30)
    assert not loop.is_alive()
    assert trigger_metric("occurrences_total", outcome="Missed") == missed_before + 6  # 12:00 … 17:00
    assert "6 occurrence(s) recorded Missed by their catch-up policy, 0 Failed" in caplog.text


def trigger_metric(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(f"vigil_queue_trigger_{name}", labels) or 0.0


def test_a_trigger_loop_whose_store_is_unreachable_counts_each_failed_pass_and_keeps_trying() -> None:
    gone = "host=127.0.0.1 port=1 dbname=vigil user=vigil connect_timeout=1"  # nothing listens on port 1
    stop = threading.Event()
    errors: list[int] = []

    def on_error() -> None:
        errors.append(1)
        metrics.record_queue_trigger_error()
        if len(errors) == 3:
            stop.set()

    before = trigger_metric("pass_errors_total")
    loop = threading.Thread(
        target=trigger_module.run,
        args=(ShardTrigger(gone, shard=0),),
        kwargs={"clock": lambda: T0, "stop": stop, "interval": timedelta(milliseconds=20), "on_error": on_error},
    )
    loop.start()
    loop.join(timeout=30)
    assert not loop.is_alive() and len(errors) == 3  # the thread outlived every failure, stopped on request
    assert trigger_metric("pass_errors_total") == before + 3


def plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", []) for node in plan_nodes(child))]


def test_a_pass_reads_only_the_partitions_whose_minutes_have_come_never_the_catalogue(
    dsn: str, store: QueueStore, catalogue: Catalogue
) -> None:
    store.maintain_partitions(now=T0, ahead=timedelta(hours=6))
    catalogue.add_many([RecurringJob(QUEUE, "report", "0 15 * * *") for _ in range(3000)], now=T0)  # not due
    catalogue.add_many([hourly() for _ in range(10)], now=T0)
    now = datetime(2026, 12, 1, 12, 2, tzinfo=UTC)
    with psycopg.connect(dsn) as connection:
        connection.execute("ANALYZE vigil_queue.jobs, vigil_queue.schedule_buckets")
        cursor = psycopg.ClientCursor(connection)
        params = {"shard": 0, "now": now, "minute": now, "limit": 2000}
        [[explained]] = cursor.execute("EXPLAIN (FORMAT JSON) " + QUERIES["trigger_due"], params).fetchall()
    nodes = plan_nodes(explained[0]["Plan"])
    scanned = {node["Relation Name"] for node in nodes if "Relation Name" in node}
    assert scanned == {"schedule_buckets_p2026120111", "schedule_buckets_p2026120112", "schedule_buckets_default", "jobs"}
    jobs = [node for node in nodes if node.get("Relation Name") == "jobs"]
    assert [(node["Node Type"], node["Index Name"]) for node in jobs] == [("Index Scan", "jobs_pkey")]  # per due row
