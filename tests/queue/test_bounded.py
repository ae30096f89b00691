"""The bounded store on real PostgreSQL: per-namespace quotas, and the retention of finished work.

Quotas: a namespace at its quota of unfinished executions (count) or of their payloads' bytes
gets the named error `QuotaExceeded` from `QueueStore.submit`, `submit_job` and `retry`, the HTTP
API's 429 with Retry-After, and its recurring occurrences settle `Failed` with reason
QuotaExceeded (once, never retried); a canary namespace beside it submits and fires as before.
The check is one probe of a counter row (its EXPLAIN at 100,000 ready rows below), recounted by
the upkeep so room comes back as executions finish.

Retention: succeeded and cancelled executions past their queue's retention leave with their
once_marks, never a ready or leased one, never a recurring job's newest success; deleted jobs
leave after the retention. A short soak at a steady rate over several (injected-clock)
retention periods keeps row counts and table sizes flat. Times are injected throughout: the
upkeep is `QueueStore.keep_bounded(now=...)`, as the leader's TaskQueue pass calls it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.queue.test_api import Clock, api, submit
from tests.unit.reviews import body
from tests.unit.test_api_one_off_payload import job_of, payload_of_size
from vigil.api.queuebase import MAX_PAYLOAD_BYTES
from vigil.core.queue import (
    QUOTA_PAYLOAD_BYTES,
    QUOTA_READY_EXECUTIONS,
    OneOffJob,
    QuotaExceeded,
    QuotaLimits,
    Submission,
)
from vigil.queue.catalogue import Catalogue, RecurringJob
from vigil.queue.queries import QUERIES
from vigil.queue.store import QueueStore
from vigil.queue.trigger import ShardTrigger

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
UNLIMITED = QuotaLimits()


def bound(
    store: QueueStore,
    *,
    now: datetime = T0,
    limits: dict[str, QuotaLimits] | None = None,
    default: QuotaLimits = UNLIMITED,
    retention: dict[str, timedelta] | None = None,
    keep: timedelta = 7 * DAY,
) -> Any:
    """One upkeep pass, as the leader's TaskQueue pass runs it."""
    return store.keep_bounded(
        limits=limits or {}, default_limits=default, retention=retention or {}, default_retention=keep, now=now
    )


def sql(dsn: str, statement: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        cursor = connection.execute(statement, params or {})
        return cursor.fetchall() if cursor.description else []


def finish(dsn: str, ids: list[str], *, state: str, at: datetime) -> None:
    """Settle executions as a worker (succeeded) or the API (cancelled) would, at `at`."""
    sql(
        dsn,
        "UPDATE vigil_queue.executions SET state = %(state)s, finished_at = %(at)s WHERE execution_id = ANY(%(ids)s)",
        {"state": state, "at": at, "ids": ids},
    )


def one_off(queue: str, payload_text: str = "{}") -> OneOffJob:
    return OneOffJob(queue, "record", payload_text, T0, 0, queue.split("/")[0], None, None)


# Quotas ------------------------------------------------------------------------------------------


def test_a_namespace_at_its_count_quota_gets_the_named_error_and_a_canary_namespace_does_not(
    store: QueueStore,
) -> None:
    bound(store, limits={"full": QuotaLimits(max_ready_executions=3)})
    store.submit("full/q", [Submission("t"), Submission("t")], now=T0)
    store.submit_job(one_off("full/other"), now=T0)  # another queue of the namespace counts too
    with pytest.raises(QuotaExceeded) as refused:
        store.submit("full/q", [Submission("t")], now=T0)
    error = refused.value
    assert (error.namespace, error.quota, error.limit, error.used, error.wanted) == (
        "full", QUOTA_READY_EXECUTIONS, 3, 3, 1
    )
    assert "maxReadyExecutions" in str(error) and "'full'" in str(error)
    with pytest.raises(QuotaExceeded):
        store.submit_job(one_off("full/q"), now=T0)
    assert store.counts("full/q")["ready"] == 2 and store.counts("full/other")["ready"] == 1  # nothing stayed
    store.submit("canary/q", [Submission("t") for _ in range(10)], now=T0)  # no limit of its own
    assert store.counts("canary/q")["ready"] == 10


def test_a_one_off_payload_at_the_apis_bound_is_stored_whole_once_measured(store: QueueStore, dsn: str) -> None:
    """The API measures the payload's text and the store writes that text (no second dump)."""
    payload = payload_of_size(MAX_PAYLOAD_BYTES)
    job = job_of(payload)
    assert store.submit_job(job, now=T0).created
    stored = sql(dsn, "SELECT j.payload, e.payload FROM vigil_queue.jobs AS j "
                      "JOIN vigil_queue.executions AS e USING (job_id) WHERE j.queue = %(q)s", {"q": job.queue})  # fmt: skip
    assert stored == [(payload, payload)]


def test_a_batch_past_the_quota_adds_nothing_and_a_known_key_counts_nothing(store: QueueStore) -> None:
    bound(store, limits={"ns": QuotaLimits(max_ready_executions=3)})
    store.submit("ns/q", [Submission("t", idempotency_key="a")], now=T0)
    with pytest.raises(QuotaExceeded) as refused:
        store.submit("ns/q", [Submission("t") for _ in range(3)], now=T0)
    assert (refused.value.used, refused.value.wanted) == (1, 3)
    assert store.counts("ns/q")["ready"] == 1
    for _ in range(5):  # the same key again and again adds nothing, so it is never refused
        store.submit("ns/q", [Submission("t", idempotency_key="a")], now=T0)
    store.submit("ns/q", [Submission("t"), Submission("t")], now=T0)
    assert store.quota_use("ns") == (3, 6, 3, None)  # three executions of '{}' (2 bytes each)


def test_a_namespace_at_its_payload_bytes_quota_gets_the_named_error(store: QueueStore) -> None:
    big = {"blob": "x" * 80}  # 92 bytes of JSON text ({"blob": "xx…"})
    bound(store, limits={"ns": QuotaLimits(max_payload_bytes=200)})
    store.submit("ns/q", [Submission("t", payload=big), Submission("t", payload=big)], now=T0)
    with pytest.raises(QuotaExceeded) as refused:
        store.submit("ns/q", [Submission("t", payload=big)], now=T0)
    error = refused.value
    assert (error.quota, error.limit, error.used, error.wanted) == (QUOTA_PAYLOAD_BYTES, 200, 184, 92)
    store.submit("ns/q", [Submission("t", payload={"n": 1})], now=T0)  # a small one still fits
    store.submit("other/q", [Submission("t", payload=big) for _ in range(5)], now=T0)


def test_room_comes_back_when_executions_finish_and_the_upkeep_recounts(store: QueueStore, dsn: str) -> None:
    bound(store, limits={"ns": QuotaLimits(max_ready_executions=2)})
    ids = store.submit("ns/q", [Submission("t"), Submission("t")], now=T0)
    finish(dsn, ids[:1], state="succeeded", at=T0)
    with pytest.raises(QuotaExceeded):  # the counter runs ahead of the truth until a recount
        store.submit("ns/q", [Submission("t")], now=T0)
    bound(store, limits={"ns": QuotaLimits(max_ready_executions=2)}, now=T0 + timedelta(seconds=5))
    assert store.quota_use("ns") == (1, 2, 2, None)
    store.submit("ns/q", [Submission("t")], now=T0)
    sql(dsn, "UPDATE vigil_queue.executions SET state = 'leased', lease_owner = 'w' WHERE execution_id = %(id)s",
        {"id": ids[1]})  # leased still counts: it is not finished
    bound(store, limits={"ns": QuotaLimits(max_ready_executions=2)}, now=T0 + timedelta(seconds=10))
    assert store.quota_use("ns") == (2, 4, 2, None)


class AdmitsDuringTheRecount:
    """A connection that lets another one submit right after the recount's counting statement:
    an admission that commits while the recount runs must not be lost to it."""

    def __init__(self, connection: psycopg.Connection[Any], admit: Any) -> None:
        self.connection = connection
        self.admit = admit

    def execute(self, query: Any, params: Any = None) -> Any:
        cursor = self.connection.execute(query, params)
        if query == QUERIES["quota_counts"]:
            self.admit()
        return cursor


def test_an_admission_during_the_recount_is_not_lost(store: QueueStore, dsn: str) -> None:
    from vigil.queue import bounds

    bound(store, limits={"ns": QuotaLimits(max_ready_executions=3)})
    store.submit("ns/q", [Submission("t")], now=T0)
    with psycopg.connect(dsn, autocommit=True) as connection:
        racing = AdmitsDuringTheRecount(connection, lambda: store.submit("ns/q", [Submission("t", payload={"a": 1})], now=T0))
        bounds.recount(racing, now=T0)  # type: ignore[arg-type]  # a connection wrapper that admits mid-recount, not a psycopg Connection
    assert store.quota_use("ns") == (2, 10, 3, None)  # '{}' and '{"a": 1}': both counted
    store.submit("ns/q", [Submission("t")], now=T0)
    with pytest.raises(QuotaExceeded):
        store.submit("ns/q", [Submission("t")], now=T0)


def test_a_retry_is_within_the_quota_too(store: QueueStore, dsn: str) -> None:
    bound(store, limits={"ns": QuotaLimits(max_ready_executions=1)})
    [first] = store.submit("ns/q", [Submission("t")], now=T0)
    finish(dsn, [first], state="dead", at=T0)
    bound(store, limits={"ns": QuotaLimits(max_ready_executions=1)})
    store.submit("ns/q", [Submission("t")], now=T0)
    with pytest.raises(QuotaExceeded):
        store.retry(first, now=T0)
    assert store.counts("ns/q")["dead"] == 1


def test_the_chart_default_applies_to_a_new_namespace_and_a_taskqueue_only_lowers_it(store: QueueStore) -> None:
    from vigil.core.queue import QueueDeclaration, namespace_quotas

    declarations = {
        "low/a": QueueDeclaration(quota=QuotaLimits(max_ready_executions=1)),
        "low/b": QueueDeclaration(quota=QuotaLimits(max_ready_executions=5)),
        "high/a": QueueDeclaration(quota=QuotaLimits(max_ready_executions=50)),
    }
    limits = namespace_quotas(declarations, default=QuotaLimits(2, 1000), granted={})
    assert limits == {"low": QuotaLimits(1, 1000), "high": QuotaLimits(2, 1000)}
    bound(store, limits=limits, default=QuotaLimits(2, 1000))
    store.submit("newcomer/q", [Submission("t"), Submission("t")], now=T0)
    with pytest.raises(QuotaExceeded):
        store.submit("newcomer/q", [Submission("t")], now=T0)
    store.submit("low/b", [Submission("t")], now=T0)
    with pytest.raises(QuotaExceeded):
        store.submit("low/a", [Submission("t")], now=T0)


def test_the_api_answers_429_with_retry_after_naming_the_quota(store: QueueStore) -> None:
    bound(store, limits={"shop": QuotaLimits(max_ready_executions=1)})
    server = api(store, clock=Clock(T0))
    assert submit(server)[0] == 201
    status, answer = submit(server)
    assert status == 429
    assert answer["reason"] == "QuotaExceeded" and answer["quota"] == QUOTA_READY_EXECUTIONS
    assert (answer["namespace"], answer["limit"], answer["used"]) == ("shop", 1, 1)
    served = server.serve(0)
    try:
        request = urllib.request.Request(
            f"http://127.0.0.1:{served.server_address[1]}/v1/jobs",
            data=json.dumps({"namespace": "shop", "queue": "orders", "task": "record"}).encode(),
            headers={"Authorization": "Bearer t-alice", "Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 429
        assert int(refused.value.headers["Retry-After"]) > 0
        assert body((429, "", refused.value.read()))["reason"] == "QuotaExceeded"
    finally:
        served.shutdown()
        served.server_close()


def test_a_recurring_occurrence_past_the_quota_fails_once_with_its_reason_and_a_canary_fires(
    store: QueueStore, dsn: str
) -> None:
    bound(store, limits={"full": QuotaLimits(max_ready_executions=1)})
    store.submit("full/q", [Submission("t")], now=T0)  # the namespace is at its quota
    catalogue = Catalogue(dsn, shards=1)
    refused = catalogue.add(RecurringJob("full/q", "report", "0 * * * *"), now=T0 - timedelta(minutes=5))
    canary = catalogue.add(RecurringJob("canary/q", "report", "0 * * * *"), now=T0 - timedelta(minutes=5))
    trigger = ShardTrigger(dsn, shard=0)
    try:
        report = trigger.run_pass(now=T0 + timedelta(seconds=90))
        assert report.failed == 1 and len(report.fired) == 1
        assert store.counts("canary/q")["ready"] == 1
        rows = sql(
            dsn,
            "SELECT outcome, reason FROM vigil_queue.schedule_buckets WHERE job_id = %(j)s AND fired_at IS NOT NULL",
            {"j": refused.job_id},
        )
        [(outcome, reason)] = rows
        assert outcome == "Failed" and reason.startswith("QuotaExceeded: namespace 'full'"), reason
        later = trigger.run_pass(now=T0 + timedelta(minutes=5))
        assert later.failed == 0 and later.fired == []  # settled once, never retried
        assert store.counts("full/q")["ready"] == 1
    finally:
        trigger.close()
    assert canary.job_id


def test_the_quota_check_is_one_probe_at_100000_ready_rows(store: QueueStore, dsn: str) -> None:
    """EXPLAIN of the admission with a namespace holding 100,000 ready executions: its cost and
    plan do not read `executions` (docs/queue.md quotes the figure)."""
    sql(
        dsn,
        "INSERT INTO vigil_queue.executions (execution_id, queue, task, state, max_attempts, run_after, "
        "scheduled_for, created_at, tenant) SELECT 'e' || n, 'deep/q', 't', 'ready', 3, %(t)s, %(t)s, %(t)s, 'deep' "
        "FROM generate_series(1, 100000) AS n",
        {"t": T0},
    )
    sql(dsn, "ANALYZE vigil_queue.executions")
    bound(store)  # the recount
    deep = store.quota_use("deep")
    assert deep is not None and deep[:2] == (100_000, 200_000)
    with psycopg.connect(dsn) as connection:
        [(plans,)] = connection.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + QUERIES["quota_admit"],
            {"namespace": "deep", "payloads": [Jsonb({"n": 1})]},
        ).fetchall()
        connection.rollback()
    plan = plans[0]
    text = json.dumps(plan)
    assert '"Relation Name": "executions"' not in text
    cost, took = plan["Plan"]["Total Cost"], plan["Execution Time"]
    with psycopg.connect(dsn) as connection:  # what the admission spares: the recount, once a pass
        [(plans,)] = connection.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + QUERIES["quota_counts"]).fetchall()
        connection.rollback()
    print(f"quota_admit at 100,000 ready rows: cost {cost}, {took:.3f} ms; the recount: cost "
          f"{plans[0]['Plan']['Total Cost']}, {plans[0]['Execution Time']:.1f} ms")
    assert cost < 100 and took < 50


# Retention ---------------------------------------------------------------------------------------


def test_finished_executions_leave_after_the_retention_with_their_once_marks_never_an_unfinished_one(
    store: QueueStore, dsn: str
) -> None:
    ids = store.submit("ns/q", [Submission("t") for _ in range(6)], now=T0 - 30 * DAY)
    old_done, old_cancelled, recent_done, ready, leased, dead = ids
    finish(dsn, [old_done], state="succeeded", at=T0 - 8 * DAY)
    finish(dsn, [old_cancelled], state="cancelled", at=T0 - 8 * DAY)
    finish(dsn, [recent_done], state="succeeded", at=T0 - 6 * DAY)
    finish(dsn, [dead], state="dead", at=T0 - 8 * DAY)  # dead letters keep their own retention
    sql(dsn, "UPDATE vigil_queue.executions SET state = 'leased', lease_owner = 'w', lease_expires_at = %(t)s "
        "WHERE execution_id = %(id)s", {"t": T0 - 20 * DAY, "id": leased})  # fmt: skip
    for execution in ids:
        sql(dsn, "INSERT INTO vigil_queue.once_marks VALUES (%(e)s, 'k', 1, 'w', %(t)s)", {"e": execution, "t": T0 - 9 * DAY})

    done = bound(store, now=T0)

    assert done.purged_finished == 2
    left = {row[0] for row in sql(dsn, "SELECT execution_id FROM vigil_queue.executions")}
    assert left == {recent_done, ready, leased, dead}
    marked = {row[0] for row in sql(dsn, "SELECT execution_id FROM vigil_queue.once_marks")}
    assert marked == left
    assert bound(store, now=T0 + 2 * DAY).purged_finished == 1  # recent_done's turn: 7 days after it finished
    assert bound(store, now=T0 + 60 * DAY).purged_finished == 0  # ready, leased and dead stay


def test_a_queue_keeps_its_own_retention_and_dead_letters_their_marks_go_with_them(
    store: QueueStore, dsn: str
) -> None:
    [short, default] = [store.submit(q, [Submission("t")], now=T0)[0] for q in ("ns/short", "ns/long")]
    finish(dsn, [short, default], state="succeeded", at=T0)
    bound(store, now=T0 + 2 * DAY, retention={"ns/short": DAY})
    assert {row[0] for row in sql(dsn, "SELECT execution_id FROM vigil_queue.executions")} == {default}
    [dead] = store.submit("ns/q", [Submission("t")], now=T0)
    finish(dsn, [dead], state="dead", at=T0)
    sql(dsn, "INSERT INTO vigil_queue.once_marks VALUES (%(e)s, 'k', 1, 'w', %(t)s)", {"e": dead, "t": T0})
    assert store.purge_dead({"ns/q": DAY}, now=T0 + 2 * DAY) == 1
    assert sql(dsn, "SELECT count(*) FROM vigil_queue.once_marks") == [(0,)]


def test_a_recurring_jobs_newest_success_stays_and_a_one_off_job_leaves_with_its_execution(
    store: QueueStore, dsn: str
) -> None:
    job = Catalogue(dsn, shards=1).add(RecurringJob("ns/q", "report", "0 0 1 * *"), now=T0 - 120 * DAY)
    runs = []
    for month in range(3):
        at = T0 - (90 - 30 * month) * DAY  # the newest 30 days ago: past the retention too
        execution = f"run-{month}"
        sql(dsn, "INSERT INTO vigil_queue.executions (execution_id, job_id, queue, task, state, max_attempts, "
            "run_after, scheduled_for, created_at, finished_at) VALUES (%(e)s, %(j)s, 'ns/q', 'report', "
            "'succeeded', 3, %(t)s, %(t)s, %(t)s, %(t)s)", {"e": execution, "j": job.job_id, "t": at})  # fmt: skip
        runs.append(execution)
    made = store.submit_job(one_off("ns/q"), now=T0 - 10 * DAY)
    finish(dsn, [made.execution_id], state="succeeded", at=T0 - 10 * DAY)

    bound(store, now=T0)

    left = {row[0] for row in sql(dsn, "SELECT execution_id FROM vigil_queue.executions")}
    assert left == {runs[-1]}  # its last success, 30 days ago: the watchdog's last success still reads it
    assert store.job(made.job_id or "") is None and store.job(job.job_id) is not None


def test_deleted_jobs_leave_after_the_retention(store: QueueStore, dsn: str) -> None:
    catalogue = Catalogue(dsn, shards=1)
    gone, kept, live = (catalogue.add(RecurringJob("ns/q", "report", "0 * * * *"), now=T0) for _ in range(3))
    store.delete_job(gone.job_id, now=T0, by="alice")
    store.delete_job(kept.job_id, now=T0 + 5 * DAY, by="alice")
    done = bound(store, now=T0 + 8 * DAY)
    assert done.purged_jobs == 1
    assert store.job(gone.job_id) is None
    assert store.job(kept.job_id) is not None and store.job(live.job_id) is not None


# The soak ----------------------------------------------------------------------------------------

PERIOD = timedelta(hours=1)  # the soak's retention: short, the clock injected


def table_bytes(dsn: str) -> int:
    [(size,)] = sql(
        dsn,
        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'vigil_queue' AND c.relname IN ('executions', 'once_marks', 'jobs')",
    )
    return int(size)


def soak(store: QueueStore, dsn: str, *, periods: int, steps_per_period: int, per_step: int) -> tuple[list[int], list[int]]:
    """A steady rate of executions (a few as one-off jobs, each with a once mark), settled or
    cancelled a step later, over `periods` retention periods, the upkeep run each step; the rows
    (executions, once_marks, jobs) and the tables' bytes at the end of each period.

    VACUUM stands in for autovacuum (its naptime is a minute; the soak's hour is seconds), which
    the store leaves the space to. tests/stress/test_queue_soak.py runs the long variant."""
    limits = {"soak": QuotaLimits(max_ready_executions=3 * per_step)}
    bound(store, limits=limits, keep=PERIOD)
    now, pending, counts, sizes = T0, [], [], []
    for n in range(periods * steps_per_period):
        now += PERIOD / steps_per_period
        ids = store.submit("soak/q", [Submission("t", payload={"n": n, "pad": "x" * 100}) for _ in range(per_step - 2)], now=now)
        ids += [store.submit_job(one_off("soak/q"), now=now).execution_id for _ in range(2)]  # with job rows
        sql(dsn, "INSERT INTO vigil_queue.once_marks SELECT unnest(%(ids)s::text[]), 'k', 1, 'w', %(t)s", {"ids": ids, "t": now})
        finish(dsn, pending[: per_step // 2], state="succeeded", at=now)
        finish(dsn, pending[per_step // 2 :], state="cancelled", at=now)
        pending = ids
        bound(store, now=now, limits=limits, keep=PERIOD)
        sql(dsn, "VACUUM vigil_queue.executions, vigil_queue.once_marks, vigil_queue.jobs")
        if n % steps_per_period == steps_per_period - 1:
            [(rows,)] = sql(dsn, "SELECT (SELECT count(*) FROM vigil_queue.executions) + "
                            "(SELECT count(*) FROM vigil_queue.once_marks) + (SELECT count(*) FROM vigil_queue.jobs)")
            counts.append(int(rows))
            sizes.append(table_bytes(dsn))
    soak = store.quota_use("soak")
    assert soak is not None and soak[0] == per_step  # only the last step's are unfinished
    return counts, sizes


def test_soak_row_counts_and_table_sizes_stay_flat_over_several_retention_periods(
    store: QueueStore, dsn: str
) -> None:
    counts, sizes = soak(store, dsn, periods=8, steps_per_period=6, per_step=200)
    # after the first period the store holds one retention's worth, whatever has passed through it
    steady = counts[1:]
    assert max(steady) <= min(steady) * 1.1, counts
    assert max(sizes[2:]) <= sizes[1] * 1.15, sizes


def test_a_task_scheduledjobs_occurrence_past_the_quota_is_refused_with_its_reason_not_raised(
    store: QueueStore,
) -> None:
    """The declarative tier's `task:` jobs submit through `QueueStore.submit`: a refusal by quota is
    a Launch refused for good (never retried), its reason QuotaExceeded (tests/unit/test_quota_refusals.py
    shows the trigger settling it Failed with that reason)."""
    from tests.queue.test_scheduled_tasks import fire_of, job
    from tests.queue.test_scheduled_tasks import submit as launch

    bound(store, limits={"billing": QuotaLimits(max_ready_executions=0)})
    obj = job()
    refused = launch(store, obj, fire_of(obj))
    assert not refused.created and refused.refused_reason == "QuotaExceeded"
    assert "billing" in refused.refused and "maxReadyExecutions" in refused.refused
    bound(store, limits={"billing": QuotaLimits(max_ready_executions=1)})
    assert launch(store, obj, fire_of(obj)).created
