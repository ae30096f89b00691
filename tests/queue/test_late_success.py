"""A success is a success (issue 36, item 10): an attempt whose lease expired while its worker was cut
off from the database is still acknowledged when no later attempt has started, so a task that
succeeded is never reported dead; once a later attempt has started, the late report is a duplicate.

Store-level cases run two WorkerStores on an injected clock (T0): the holder leases, the other's
expiry pass runs past the lease, then the holder reports. The restart case runs a real worker
(in process, on a frozen clock so that only the test decides when its lease ends) against a
PostgreSQL server of the test's own, which it stops and starts while the task runs, with
`max_attempts = 1`: before this, the execution ended dead although its task had succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.contract.postgres import PostgresServer
from tests.queue.conftest import conninfo, execution_row
from tests.queue.tasks import HELD_HERE
from tests.queue.workers import FAST
from tests.waiting import wait_for
from vigil.core.memory import FakeClock
from vigil.core.queue import AttemptOutcome, Submission
from vigil.queue.store import Finished, Leased, QueueStore, WorkerStore
from vigil.worker import REGISTRY, Worker

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
QUEUE = "team-a/late"


@contextlib.asynccontextmanager
async def two_workers(dsn: str) -> AsyncIterator[tuple[WorkerStore, WorkerStore]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as a, \
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as b:  # fmt: skip
        yield WorkerStore(a, queue=QUEUE, worker="holder"), WorkerStore(b, queue=QUEUE, worker="other")


def success(leased: Leased, at: datetime) -> Finished:
    return Finished(leased, AttemptOutcome.SUCCEEDED, started_at=T0, finished_at=at)


def attempt_rows(dsn: str, execution_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as connection:
        query = "SELECT attempt, worker, outcome, duplicate FROM vigil_queue.attempts WHERE execution_id = %s ORDER BY attempt"
        return [tuple(row) for row in connection.execute(query, (execution_id,))]


async def expire_then_report(dsn: str, *, max_attempts: int, lease_again: bool) -> tuple[str, int]:
    """The holder leases at T0, the other expires it past the lease (and, with `lease_again`,
    leases the next attempt), then the holder reports a success; returns (id, settled count)."""
    [execution_id] = QueueStore(dsn).submit(QUEUE, [Submission("record", max_attempts=max_attempts)], now=T0)
    async with two_workers(dsn) as (holder, other):
        [leased] = await holder.lease(["record"], limit=1, lease=LEASE, now=T0)
        later = T0 + LEASE + timedelta(seconds=1)
        assert len(await other.expire(now=later)) == 1
        if lease_again:
            assert len(await other.lease(["record"], limit=1, lease=LEASE, now=later)) == 1
        report = await holder.settle([success(leased, later)], now=later + timedelta(seconds=1))
    return execution_id, report.settled


def test_a_late_success_of_the_last_attempt_is_a_success_not_a_dead_letter(dsn: str) -> None:
    execution_id, settled = asyncio.run(expire_then_report(dsn, max_attempts=1, lease_again=False))
    row = execution_row(QueueStore(dsn), execution_id)
    assert (settled, row["state"], row["attempt"], row["last_error"]) == (1, "succeeded", 1, None)
    assert attempt_rows(dsn, execution_id) == [(1, "holder", "succeeded", False)]


def test_a_late_success_is_accepted_while_the_next_attempt_has_not_started(dsn: str) -> None:
    execution_id, settled = asyncio.run(expire_then_report(dsn, max_attempts=3, lease_again=False))
    row = execution_row(QueueStore(dsn), execution_id)
    assert (settled, row["state"], row["attempt"]) == (1, "succeeded", 1)


def test_a_late_success_after_a_later_attempt_started_is_a_duplicate(dsn: str) -> None:
    execution_id, settled = asyncio.run(expire_then_report(dsn, max_attempts=3, lease_again=True))
    row = execution_row(QueueStore(dsn), execution_id)
    assert (settled, row["state"], row["attempt"], row["lease_owner"]) == (0, "leased", 2, "other")
    assert attempt_rows(dsn, execution_id) == [(1, "holder", "lease_expired", True)]


def test_another_worker_cannot_report_the_expired_attempt_as_its_success(dsn: str) -> None:
    async def scenario() -> tuple[str, int]:
        [execution_id] = QueueStore(dsn).submit(QUEUE, [Submission("record", max_attempts=1)], now=T0)
        async with two_workers(dsn) as (holder, other):
            [leased] = await holder.lease(["record"], limit=1, lease=LEASE, now=T0)
            later = T0 + LEASE + timedelta(seconds=1)
            await other.expire(now=later)
            return execution_id, (await other.settle([success(leased, later)], now=later)).settled

    execution_id, settled = asyncio.run(scenario())
    assert (settled, execution_row(QueueStore(dsn), execution_id)["state"]) == (0, "dead")


# -- across a PostgreSQL restart -------------------------------------------------------------


def test_a_task_that_succeeded_across_a_database_restart_is_never_reported_dead(own_postgres: PostgresServer) -> None:
    dsn = conninfo(own_postgres, own_postgres.create_database())
    store = QueueStore(dsn)
    store.migrate()
    clock = FakeClock(datetime.now(UTC))  # frozen: the worker's lease ends only when the test says
    [execution_id] = store.submit(QUEUE, [Submission("hold_here", max_attempts=1)], now=clock.now())
    worker = Worker(dsn=dsn, queue=QUEUE, registry=REGISTRY, settings=FAST, clock=clock)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    thread = threading.Thread(target=lambda: loop.run_until_complete(worker.run(stop)))
    thread.start()
    try:
        wait_for(lambda: execution_row(store, execution_id)["state"] == "leased", timeout=30, what="the lease")
        own_postgres.stop()  # the worker's connections are cut while its task runs
        own_postgres.start()

        async def expire() -> int:  # another worker's expiry pass, once the lease is long over
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
                other = WorkerStore(connection, queue=QUEUE, worker="other")
                return len(await other.expire(now=clock.now() + FAST.lease * 10))

        # the worker's own heartbeat, at once on reconnecting, may hold the row for a moment
        wait_for(lambda: asyncio.run(expire()) == 1, timeout=30, what="the expiry pass to take the lease")
        assert execution_row(store, execution_id)["state"] == "dead"  # what it was left as before
        HELD_HERE[execution_id].set()
        wait_for(lambda: execution_row(store, execution_id)["state"] == "succeeded", timeout=30,
                 what="the late success to be acknowledged")  # fmt: skip
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=60)
        loop.close()
    assert attempt_rows(dsn, execution_id) == [(1, worker.name, "succeeded", False)]
