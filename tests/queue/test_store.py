"""The queue store on real PostgreSQL: idempotent submits, batch leases, expiry, stale settlements.

Workers here are `WorkerStore`s on connections of their own, driven directly
with explicit times, so each rule is checked without a worker loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import alembic.config
import alembic.script
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.contract.postgres import PostgresServer
from tests.queue.conftest import conninfo
from vigil.core.queue import AttemptOutcome, QueueState
from vigil.history.store import SqlHistory
from vigil.queue.migrations import SCRIPT_LOCATION
from vigil.queue.store import Finished, QueueStore, Submission, WorkerStore

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)


def migrations_head() -> str:
    """The newest revision of the queue's chain (one head: the chain never branches)."""
    config = alembic.config.Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    [head] = alembic.script.ScriptDirectory.from_config(config).get_heads()
    return head


@contextlib.asynccontextmanager
async def workers(dsn: str, queue: str, *names: str) -> AsyncIterator[list[WorkerStore]]:
    """One WorkerStore per name, each on a connection of its own, closed afterwards."""
    async with contextlib.AsyncExitStack() as stack:
        made = []
        for name in names:
            connection: psycopg.AsyncConnection[Any] = await stack.enter_async_context(
                await psycopg.AsyncConnection.connect(dsn, autocommit=True)
            )
            made.append(WorkerStore(connection, queue=queue, worker=name))
        yield made


def test_a_repeated_idempotency_key_returns_the_first_execution(store: QueueStore) -> None:
    first = store.submit(
        "q", [Submission("record", {"n": 1}, idempotency_key="day:2026-12-01")], now=T0
    )
    again = store.submit(
        "q",
        [Submission("record", {"n": 2}, idempotency_key="day:2026-12-01"), Submission("record")],
        now=T0 + timedelta(minutes=1),
    )
    assert again[0] == first[0]
    assert again[1] != first[0]
    assert store.counts("q")["ready"] == 2
    kept = store.execution(first[0])
    assert kept is not None and kept["payload"] == {"n": 1}  # the first one, not overwritten


def test_the_same_key_in_another_queue_is_another_execution(store: QueueStore) -> None:
    one = store.submit("a", [Submission("record", idempotency_key="k")], now=T0)
    other = store.submit("b", [Submission("record", idempotency_key="k")], now=T0)
    assert one != other


def test_an_invalid_submission_is_refused_before_the_database() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        Submission("record", max_attempts=0)
    with pytest.raises(ValueError, match="task"):
        Submission("")
    with pytest.raises(ValueError, match="priority"):
        Submission("record", priority=1 << 20)


def test_lease_order_is_priority_then_due_time_and_future_work_waits(
    store: QueueStore, dsn: str
) -> None:
    ids = store.submit(
        "q",
        [
            Submission("record", {"n": "late"}, run_after=T0 + timedelta(seconds=2), priority=5),
            Submission("record", {"n": "low"}, run_after=T0 - timedelta(seconds=9), priority=5),
            Submission("record", {"n": "high"}, run_after=T0 - timedelta(seconds=1), priority=0),
            Submission("record", {"n": "future"}, run_after=T0 + timedelta(hours=1), priority=0),
        ],
        now=T0,
    )

    async def run() -> list[set[str]]:
        async with workers(dsn, "q", "w1") as [w]:
            batches = []
            for _ in range(3):
                got = await w.lease(["record"], limit=1, lease=LEASE, now=T0 + timedelta(seconds=5))
                batches.append({g.execution_id for g in got})
        return batches

    assert asyncio.run(run()) == [{ids[2]}, {ids[1]}, {ids[0]}]


def test_a_tenants_backlog_does_not_hold_back_another_tenants_work(
    store: QueueStore, dsn: str
) -> None:
    """Tenant A's backfill is older and larger; tenant B's work still gets every other turn."""
    backfill = [
        Submission("record", {"n": i}, tenant="a", run_after=T0 - timedelta(hours=1))
        for i in range(2000)
    ]
    store.submit("q", backfill, now=T0)
    mine = set(store.submit("q", [Submission("record", tenant="b") for _ in range(3)], now=T0))
    urgent = store.submit("q", [Submission("record", tenant="a", priority=-1)], now=T0)

    async def run() -> list[list[str]]:
        async with workers(dsn, "q", "w1") as [w]:
            first = await w.lease(["record"], limit=4, lease=LEASE, now=T0)
            second = await w.lease(["record"], limit=4, lease=LEASE, now=T0)
        return [[g.tenant for g in first], [g.execution_id for g in first + second]]

    tenants, leased = asyncio.run(run())
    assert urgent[0] in leased[:4]  # a higher priority goes first, whoever's it is
    assert (
        sorted(tenants).count("b") >= 1
    )  # B's turn comes in the first batch, not after 2000 of A's
    assert mine <= set(leased)  # and all of B's within two batches


BACKFILL = 100_000  # the size: tenant A's whole backfill is ready at once
BATCH = 10  # one lease round trip of a worker with concurrency 10


def test_a_100000_job_backfill_delays_another_tenant_and_a_higher_priority_by_one_batch_at_most(
    store: QueueStore, dsn: str
) -> None:
    """While workers chew through A's backfill, B's work and A's own urgent job each wait one batch at most."""
    for start in range(0, BACKFILL, 20_000):
        chunk = [Submission("record", {"n": i}, tenant="a") for i in range(start, start + 20_000)]
        store.submit("q", chunk, now=T0 - timedelta(hours=1))

    async def run() -> tuple[list[str], list[str], list[tuple[str, int]]]:
        async with workers(dsn, "q", "w1", "w2") as [w1, w2]:
            at = T0
            for _ in range(5):  # the backfill is running: both workers take and finish A's batches
                for w in (w1, w2):
                    got = await w.lease(["record"], limit=BATCH, lease=LEASE, now=at)
                    assert {g.tenant for g in got} == {"a"} and len(got) == BATCH
                    await w.settle([Finished(g, AttemptOutcome.SUCCEEDED, at, at) for g in got], now=at)
                at += timedelta(seconds=1)
            mine = store.submit("q", [Submission("record", tenant="b") for _ in range(3)], now=at)
            [urgent] = store.submit("q", [Submission("record", tenant="a", priority=-1)], now=at)
            next_batch = await w1.lease(["record"], limit=BATCH, lease=LEASE, now=at)
        return mine, [urgent], [(g.execution_id, g.priority) for g in next_batch]

    mine, urgent, next_batch = asyncio.run(run())
    leased = {execution_id for execution_id, _ in next_batch}
    assert set(mine) <= leased  # every one of B's executions in the very next batch
    assert set(urgent) <= leased and next_batch[0] == (urgent[0], -1)  # the higher priority first
    assert len(next_batch) == BATCH  # and the rest of the batch keeps the backfill going
    ready = BACKFILL + 4 - 100 - BATCH
    assert store.counts("q") == {"succeeded": 100, "leased": BATCH, "ready": ready, "dead": 0, "cancelled": 0}


def test_an_expired_lease_is_leased_again_with_the_same_id_and_the_next_attempt(
    store: QueueStore, dsn: str
) -> None:
    [eid] = store.submit("q", [Submission("record", max_attempts=2)], now=T0)

    async def run() -> None:
        async with workers(dsn, "q", "a", "b") as [a, b]:
            await expiry_story(a, b, eid)

    asyncio.run(run())
    row = store.execution(eid)
    assert row is not None and row["state"] == "dead" and row["attempt"] == 2
    history = store.attempts(eid)
    assert [(h["attempt"], h["outcome"], h["worker"], h["duplicate"]) for h in history] == [
        (1, "lease_expired", "a", True),
        (2, "lease_expired", "b", False),
    ]


async def expiry_story(a: WorkerStore, b: WorkerStore, eid: str) -> None:
    [first] = await a.lease(["record"], limit=1, lease=LEASE, now=T0)
    assert await b.expire(now=T0 + LEASE - timedelta(milliseconds=1)) == []
    [(expired_id, attempt, settlement)] = await b.expire(now=T0 + LEASE)
    assert (expired_id, attempt, settlement.state, settlement.attempt) == (
        eid,
        1,
        QueueState.READY,
        2,
    )
    [second] = await b.lease(["record"], limit=1, lease=LEASE, now=T0 + LEASE)
    assert (second.execution_id, second.attempt) == (eid, 2)
    # the first holder finds out at its next heartbeat, and its late ack changes nothing
    assert await a.heartbeat([first], lease=LEASE, now=T0 + LEASE) == {eid}
    stale = Finished(first, AttemptOutcome.SUCCEEDED, T0, T0 + LEASE)
    report = await a.settle([stale], now=T0 + LEASE)
    assert report.settled == 0 and report.stale == [stale]
    # the last attempt's lease expiring makes a dead letter
    [(_, _, last)] = await b.expire(now=T0 + 3 * LEASE)
    assert last.state is QueueState.DEAD


def test_once_lets_one_copy_act_whatever_the_attempt(store: QueueStore, dsn: str) -> None:
    [eid] = store.submit("q", [Submission("record")], now=T0)

    async def run() -> list[bool]:
        async with workers(dsn, "q", "a", "b") as [a, b]:
            [first] = await a.lease(["record"], limit=1, lease=LEASE, now=T0)
            await b.expire(now=T0 + LEASE)
            [second] = await b.lease(["record"], limit=1, lease=LEASE, now=T0 + LEASE)
            claims = await asyncio.gather(
                a.once(first, "charge", now=T0 + LEASE), b.once(second, "charge", now=T0 + LEASE)
            )
            return [*claims, await b.once(second, "other-key", now=T0 + LEASE)]

    first_claim, second_claim, other = asyncio.run(run())
    assert sorted([first_claim, second_claim]) == [False, True]
    assert other is True
    assert eid


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    executions=st.integers(min_value=1, max_value=60),
    batches=st.lists(st.integers(min_value=1, max_value=16), min_size=2, max_size=6),
)
def test_concurrent_batches_never_hand_one_execution_to_two_workers(
    dsn: str, executions: int, batches: list[int]
) -> None:
    """Workers (one per batch size) lease at the same time until nothing is left: each execution once."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    QueueStore(dsn).submit(queue, [Submission("record") for _ in range(executions)], now=T0)

    async def drain(limit: int, index: int) -> list[str]:
        mine: list[str] = []
        async with workers(dsn, queue, f"w{index}") as [w]:
            while got := await w.lease(["record"], limit=limit, lease=LEASE, now=T0):
                mine += [g.execution_id for g in got]
        return mine

    async def run() -> list[list[str]]:
        return await asyncio.gather(*(drain(limit, i) for i, limit in enumerate(batches)))

    leased = [eid for mine in asyncio.run(run()) for eid in mine]
    assert len(leased) == len(set(leased)) == executions


def test_the_queue_shares_a_database_with_the_history_and_migrates_idempotently(
    postgres: PostgresServer,
) -> None:
    """Its own schema and version table: both chains run on one database, each twice, side by side."""
    url = postgres.create_database()
    info = conninfo(postgres, url)
    history = SqlHistory(url)
    for _ in range(2):
        history.migrate()
        QueueStore(info).migrate()
    history.close()
    with psycopg.connect(info) as connection:
        tables = {
            (schema, name)
            for schema, name in connection.execute(
                "SELECT table_schema, table_name FROM information_schema.tables"
                " WHERE table_schema IN ('public', 'vigil_queue')"
            )
        }
        [version] = connection.execute(
            "SELECT version_num FROM vigil_queue.vigil_queue_version"
        ).fetchall()
    assert {
        ("public", "attempts"),
        ("vigil_queue", "attempts"),
        ("vigil_queue", "executions"),
        ("vigil_queue", "schedule_buckets"),
    } <= tables
    assert version == (migrations_head(),)
