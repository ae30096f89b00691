"""The upgrade to q0014success on real PostgreSQL: each recurring job's last success on its row.

Covered: a store of the previous revision (q0013output) with succeeded, dead and no executions
is migrated to head, and each recurring job's `last_success_at` is the newest finish of its
succeeded executions (NULL for a job that never succeeded); downgrading drops the column and
upgrading again backfills it the same. A worker of the version before outputs were kept
(q0012keyed), still acknowledging through the older `worker_settle_succeeded` during a rolling
upgrade, puts its job's success on the row too (the migration replaces that function's body).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.queue.previous_version import PREVIOUS_QUEUE as OLD_QUEUE
from tests.queue.previous_version import PreviousWorker
from tests.queue.test_attempt_days import migrate
from vigil.core.queue import AttemptOutcome
from vigil.queue.catalogue import Catalogue, RecurringJob
from vigil.queue.store import Finished, QueueStore
from vigil.queue.trigger import ShardTrigger

pytestmark = pytest.mark.postgres

BEFORE = "q0013output"  # the revision before jobs kept their last success
T0 = datetime(2026, 12, 1, 11, 50, tzinfo=UTC)
QUEUE = "team-a/reports"


def run(dsn: str, query: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        cursor = connection.execute(query, params or {})
        return cursor.fetchall() if cursor.description else []


def columns(dsn: str) -> set[str]:
    return {name for (name,) in run(
        dsn, "SELECT column_name FROM information_schema.columns WHERE table_schema = 'vigil_queue' AND table_name = 'jobs'"
    )}  # fmt: skip


def last_successes(dsn: str) -> dict[str, datetime | None]:
    return {job_id: at for job_id, at in run(dsn, "SELECT job_id, last_success_at FROM vigil_queue.jobs")}


def test_the_upgrade_backfills_each_jobs_newest_success_and_the_downgrade_drops_it(
    postgres: Any,
) -> None:
    from tests.queue.conftest import conninfo

    dsn = conninfo(postgres, postgres.create_database())
    run(dsn, "CREATE SCHEMA vigil_queue")
    migrate(dsn, BEFORE)
    assert "last_success_at" not in columns(dsn)
    hourly = RecurringJob(QUEUE, "report", "0 * * * *", expected_max_interval=timedelta(hours=2))
    twice, failed, never = Catalogue(dsn, shards=1).add_many([hourly, hourly, hourly], now=T0)
    trigger = ShardTrigger(dsn, shard=0)
    try:
        for hour in (12, 13, 14):
            trigger.run_pass(now=datetime(2026, 12, 1, hour, 4, tzinfo=UTC))
    finally:
        trigger.close()
    fired = {job_id: [e for (e,) in run(
        dsn, "SELECT execution_id FROM vigil_queue.executions WHERE job_id = %(j)s ORDER BY scheduled_for", {"j": job_id}
    )] for job_id in (twice.job_id, failed.job_id, never.job_id)}  # fmt: skip
    assert all(len(ids) == 3 for ids in fired.values())

    def finish(execution_id: str, state: str, at: datetime) -> None:
        run(dsn, "UPDATE vigil_queue.executions SET state = %(s)s, finished_at = %(at)s WHERE execution_id = %(e)s",
            {"s": state, "at": at, "e": execution_id})  # fmt: skip

    # the later occurrence's success finished first: the newest finish counts, not the newest occurrence
    newest = datetime(2026, 12, 1, 13, 50, tzinfo=UTC)
    finish(fired[twice.job_id][0], "succeeded", newest)
    finish(fired[twice.job_id][1], "succeeded", datetime(2026, 12, 1, 13, 40, tzinfo=UTC))
    finish(fired[twice.job_id][2], "dead", datetime(2026, 12, 1, 14, 30, tzinfo=UTC))  # newer, not a success
    finish(fired[failed.job_id][0], "dead", datetime(2026, 12, 1, 12, 30, tzinfo=UTC))
    expected = {twice.job_id: newest, failed.job_id: None, never.job_id: None}

    QueueStore(dsn).migrate()
    assert last_successes(dsn) == expected

    migrate(dsn, BEFORE, down=True)
    assert "last_success_at" not in columns(dsn)
    QueueStore(dsn).migrate()
    assert last_successes(dsn) == expected


def test_a_worker_of_the_version_before_outputs_puts_its_jobs_success_on_the_row(
    old_store: tuple[str, str, str],
) -> None:
    dsn, role_dsn, previous_call = old_store
    added = Catalogue(dsn, shards=1).add(
        RecurringJob(OLD_QUEUE, "record", "0 * * * *", expected_max_interval=timedelta(hours=2)), now=T0
    )
    trigger = ShardTrigger(dsn, shard=0)
    try:
        trigger.run_pass(now=datetime(2026, 12, 1, 12, 4, tzinfo=UTC))
    finally:
        trigger.close()
    leased_at, settled_at = datetime(2026, 12, 1, 12, 5, tzinfo=UTC), datetime(2026, 12, 1, 12, 9, tzinfo=UTC)

    async def scenario() -> None:
        async with await psycopg.AsyncConnection.connect(role_dsn, autocommit=True) as connection:
            previous = PreviousWorker(connection, queue=OLD_QUEUE, worker="previous", call=previous_call)
            [held] = await previous.lease(["record"], limit=1, lease=timedelta(minutes=30), now=leased_at)
            QueueStore(dsn).migrate()  # this version's operator migrates to head meanwhile
            # the previous worker, not upgraded yet, acknowledges
            done = Finished(held, AttemptOutcome.SUCCEEDED, started_at=leased_at, finished_at=settled_at)
            assert (await previous.settle([done], now=settled_at)).settled == 1

    asyncio.run(scenario())
    assert last_successes(dsn) == {added.job_id: settled_at}
