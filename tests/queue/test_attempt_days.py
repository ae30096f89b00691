"""Attempts partitioned by day, on real PostgreSQL: the migration, where rows land, and the upkeep.

Covers revision q0007days (upgrading a store that holds attempts, and back), each
attempt filed in its execution's scheduled day's partition (`tableoid`), the
expired-lease duplicate across partitions, and `vigil.queue.attempt_days.maintain`
with an injected `now`: partitions ahead, days past the retention dropped, old
DEFAULT rows purged, younger ones kept, idempotent, one maintainer at a time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import alembic.command
import alembic.config
import psycopg
import pytest
import sqlalchemy as sa

from tests.contract.postgres import PostgresServer
from tests.queue.conftest import conninfo
from tests.queue.test_store import LEASE, expiry_story, workers
from vigil.core.queue import AttemptOutcome, QueueState, Settlement
from vigil.queue import attempt_days
from vigil.queue.migrations import SCRIPT_LOCATION
from vigil.queue.store import Finished, QueueStore, Submission
from vigil.queue.trigger import ShardTrigger

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BEFORE = "q0005watch"  # the revision before attempts were partitioned


def rows(dsn: str, query: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as connection:
        return connection.execute(query, params or {}).fetchall()


def migrate(dsn: str, target: str, *, down: bool = False) -> None:
    """Upgrade (or downgrade) the queue schema to `target`, as QueueStore.migrate() runs alembic."""
    config = alembic.config.Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    engine = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            (alembic.command.downgrade if down else alembic.command.upgrade)(config, target)
    finally:
        engine.dispose()


def partition_of(dsn: str, execution_id: str) -> list[str]:
    found = rows(
        dsn,
        "SELECT tableoid::regclass::text FROM vigil_queue.attempts WHERE execution_id = %(e)s ORDER BY attempt",
        {"e": execution_id},
    )
    return [str(name).removeprefix("vigil_queue.") for name, in found]


def partitions_now(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as connection:
        return attempt_days.partitions(connection)


def run_once(dsn: str, queue: str, *, at: datetime, fail: bool = False) -> None:
    """A worker leases one due execution at `at` and reports it succeeded (or failed for good)."""

    async def run() -> None:
        async with workers(dsn, queue, "w") as [w]:
            [leased] = await w.lease(["record"], limit=1, lease=LEASE, now=at)
            if fail:
                dead = Settlement(QueueState.DEAD, leased.attempt, None)
                finished = Finished(leased, AttemptOutcome.FAILED, at, at, "boom", dead)
            else:
                finished = Finished(leased, AttemptOutcome.SUCCEEDED, at, at)
            assert (await w.settle([finished], now=at)).settled == 1

    asyncio.run(run())


@pytest.fixture
def old_dsn(postgres: PostgresServer) -> Iterator[str]:
    """A database migrated only to the revision before this one: attempts still a plain table."""
    info = conninfo(postgres, postgres.create_database())
    with psycopg.connect(info, autocommit=True) as connection:
        connection.execute("CREATE SCHEMA vigil_queue")
    migrate(info, BEFORE)
    yield info


def test_the_upgrade_keeps_every_existing_attempt_and_files_it_under_its_executions_day(old_dsn: str) -> None:
    dsn = old_dsn
    with psycopg.connect(dsn) as connection:
        for eid, scheduled in (("e-nov", datetime(2026, 11, 29, 23, 30, tzinfo=UTC)), ("e-dec", T0)):
            connection.execute(
                "INSERT INTO vigil_queue.executions (execution_id, queue, task, state, attempt, max_attempts,"
                " run_after, scheduled_for, created_at) VALUES (%(e)s, 'q', 'record', 'dead', 2, 2, %(s)s, %(s)s, %(s)s)",
                {"e": eid, "s": scheduled},
            )
            for attempt, outcome in ((1, "lease_expired"), (2, "failed")):
                connection.execute(
                    "INSERT INTO vigil_queue.attempts (execution_id, attempt, worker, outcome, finished_at, duplicate)"
                    " VALUES (%(e)s, %(a)s, 'w', %(o)s, %(f)s, %(d)s)",
                    {"e": eid, "a": attempt, "o": outcome, "f": T0 + timedelta(days=1), "d": attempt == 1},
                )
        # an attempt whose execution was purged since: filed under its finish day
        connection.execute(
            "INSERT INTO vigil_queue.attempts (execution_id, attempt, worker, outcome, finished_at)"
            " VALUES ('e-gone', 1, 'w', 'failed', %(f)s)",
            {"f": datetime(2026, 11, 20, 8, 0, tzinfo=UTC)},
        )
    QueueStore(dsn).migrate()
    store = QueueStore(dsn)
    for eid in ("e-nov", "e-dec"):
        assert [(a["attempt"], a["outcome"], a["duplicate"]) for a in store.attempts(eid)] == [
            (1, "lease_expired", True),
            (2, "failed", False),
        ]
    assert len(store.attempts("e-gone")) == 1
    days = dict(rows(dsn, "SELECT DISTINCT execution_id, day FROM vigil_queue.attempts"))
    assert {eid: str(day) for eid, day in days.items()} == {
        "e-nov": "2026-11-29", "e-dec": "2026-12-01", "e-gone": "2026-11-20",
    }  # fmt: skip
    assert set(partition_of(dsn, "e-dec")) == {attempt_days.ATTEMPTS.default}
    # the first round moves the days it keeps into their partitions, and purges the older ones
    done = store.maintain_attempts(now=T0, retention_days=7)
    assert done.moved == 4 and done.purged == 1
    assert partition_of(dsn, "e-nov") == ["attempts_p20261129"] * 2
    assert partition_of(dsn, "e-dec") == ["attempts_p20261201"] * 2
    assert store.attempts("e-gone") == []


def test_the_downgrade_copies_every_attempt_back_into_a_plain_table(dsn: str, store: QueueStore) -> None:
    store.maintain_attempts(now=T0)
    [eid] = store.submit("q", [Submission("record")], now=T0)
    run_once(dsn, "q", at=T0, fail=True)
    far = store.submit("q", [Submission("record", run_after=T0 + timedelta(days=30))], now=T0)
    run_once(dsn, "q", at=T0 + timedelta(days=30))  # its day has no partition: DEFAULT
    migrate(dsn, BEFORE, down=True)
    assert rows(dsn, "SELECT relkind::text FROM pg_class WHERE oid = 'vigil_queue.attempts'::regclass") == [("r",)]
    assert rows(dsn, "SELECT to_regclass('vigil_queue.attempts_default')") == [(None,)]
    assert rows(dsn, "SELECT execution_id, attempt, outcome FROM vigil_queue.attempts ORDER BY outcome") == [
        (eid, 1, "failed"),
        (far[0], 1, "succeeded"),
    ]
    QueueStore(dsn).migrate()  # and up again
    assert [a["outcome"] for a in store.attempts(eid)] == ["failed"]


def test_an_attempt_lands_in_its_executions_scheduled_day_and_a_far_day_waits_in_default(
    dsn: str, store: QueueStore
) -> None:
    made = store.maintain_attempts(now=T0, retention_days=3)
    assert made.created == [f"attempts_p202611{d}" for d in (28, 29, 30)] + [f"attempts_p202612{d:02}" for d in (1, 2, 3)]
    # scheduled just before midnight, run after it: filed under the scheduled day, not the finish day
    [late] = store.submit("q", [Submission("record", run_after=datetime(2026, 11, 30, 23, 59, tzinfo=UTC))], now=T0)
    run_once(dsn, "q", at=T0)
    assert partition_of(dsn, late) == ["attempts_p20261130"]
    [far] = store.submit("q", [Submission("record", run_after=T0 + timedelta(days=9))], now=T0)
    run_once(dsn, "q", at=T0 + timedelta(days=9))
    assert partition_of(dsn, far) == [attempt_days.ATTEMPTS.default]  # an insert never fails
    later = store.maintain_attempts(now=T0 + timedelta(days=8), retention_days=3)
    assert "attempts_p20261210" in later.created and later.moved == 1
    assert partition_of(dsn, far) == ["attempts_p20261210"]
    assert [a["outcome"] for a in store.attempts(far)] == ["succeeded"]


def test_an_expired_lease_and_its_late_report_leave_one_row_marked_duplicate_in_its_days_partition(
    dsn: str, store: QueueStore
) -> None:
    store.maintain_attempts(now=T0)
    [eid] = store.submit("q", [Submission("record", max_attempts=2)], now=T0)

    async def run() -> None:
        async with workers(dsn, "q", "a", "b") as [a, b]:
            await expiry_story(a, b, eid)

    asyncio.run(run())
    assert [(h["attempt"], h["outcome"], h["worker"], h["duplicate"]) for h in store.attempts(eid)] == [
        (1, "lease_expired", "a", True),
        (2, "lease_expired", "b", False),
    ]
    assert partition_of(dsn, eid) == ["attempts_p20261201"] * 2


def test_upkeep_drops_days_past_the_retention_purges_old_default_rows_and_keeps_younger_ones(
    dsn: str, store: QueueStore
) -> None:
    first = store.maintain_attempts(now=T0, retention_days=2)
    assert partitions_now(dsn) == [f"attempts_p202611{d}" for d in (29, 30)] + [f"attempts_p202612{d:02}" for d in (1, 2, 3)]
    assert first.created == partitions_now(dsn)
    again = store.maintain_attempts(now=T0, retention_days=2)
    assert (again.created, again.dropped, again.moved, again.purged) == ([], [], 0, 0)  # idempotent
    with psycopg.connect(dsn) as connection:  # DEFAULT rows: an old day finished long ago, one finished lately, a young day
        for eid, day, finished in (
            ("old", "2026-11-20", datetime(2026, 11, 20, 9, 0, tzinfo=UTC)),
            ("old-but-late", "2026-11-20", T0 + timedelta(days=1)),
            ("young", "2026-12-20", T0 + timedelta(days=19)),
        ):
            connection.execute(
                "INSERT INTO vigil_queue.attempts (day, execution_id, attempt, worker, outcome, finished_at)"
                " VALUES (%(d)s, %(e)s, 1, 'w', 'failed', %(f)s)",
                {"d": day, "e": eid, "f": finished},
            )
    now = T0 + timedelta(days=3)  # 2026-12-04: keeps 12-02 onwards
    done = store.maintain_attempts(now=now, retention_days=2)
    assert done.dropped == ["attempts_p20261129", "attempts_p20261130", "attempts_p20261201"]
    assert done.created == ["attempts_p20261204", "attempts_p20261205", "attempts_p20261206"]
    assert partitions_now(dsn)[0] == "attempts_p20261202"
    assert done.purged == 1
    left = {eid for eid, in rows(dsn, "SELECT execution_id FROM vigil_queue.attempts_default")}
    assert left == {"old-but-late", "young"}
    assert store.maintain_attempts(now=now, retention_days=2).purged == 0


def test_a_large_old_default_is_purged_in_bounded_batches(dsn: str, store: QueueStore) -> None:
    total = attempt_days.PURGE_BATCH * 2 + 5
    with psycopg.connect(dsn) as connection:
        connection.execute(
            "INSERT INTO vigil_queue.attempts (day, execution_id, attempt, worker, outcome, finished_at)"
            " SELECT '2026-10-01', 'e' || n, 1, 'w', 'failed', %(f)s FROM generate_series(1, %(n)s) AS n",
            {"f": datetime(2026, 10, 1, tzinfo=UTC), "n": total},
        )
    assert store.maintain_attempts(now=T0).purged == total
    assert rows(dsn, "SELECT count(*) FROM vigil_queue.attempts") == [(0,)]


def test_upkeep_does_nothing_while_another_maintainer_holds_the_lock(dsn: str, store: QueueStore) -> None:
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(hashtext(%(k)s))", {"k": attempt_days.ADVISORY_KEY})
        skipped = store.maintain_attempts(now=T0)
        assert skipped.skipped and skipped.created == []
        assert partitions_now(dsn) == []
        other.execute("SELECT pg_advisory_unlock(hashtext(%(k)s))", {"k": attempt_days.ADVISORY_KEY})
    assert len(store.maintain_attempts(now=T0).created) == attempt_days.DEFAULT_RETENTION_DAYS + 1 + 2


def test_a_partition_made_while_a_transaction_reads_default_and_then_writes_to_it_deadlocks_nobody(
    dsn: str, store: QueueStore
) -> None:
    """The upkeep takes DEFAULT's strongest lock at once: the reader's insert goes ahead of it, never
    waits on a lock the upkeep holds while the upkeep waits on the reader's."""
    store.maintain_attempts(now=T0)
    done: list[Any] = []

    def upkeep() -> None:
        try:
            done.append(store.maintain_attempts(now=T0 + timedelta(days=1)))
        except Exception as err:  # handed to the test's thread
            done.append(err)

    with psycopg.connect(dsn) as reader:
        reader.execute("SELECT count(*) FROM vigil_queue.attempts_default")
        thread = threading.Thread(target=upkeep)
        thread.start()
        deadline = time.monotonic() + 10
        while not waits_on_default(dsn) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert waits_on_default(dsn)
        reader.execute(
            "INSERT INTO vigil_queue.attempts (day, execution_id, attempt, worker, outcome, finished_at)"
            " VALUES ('2026-12-20', 'e', 1, 'w', 'succeeded', %(f)s)",
            {"f": T0},
        )
        reader.commit()
        thread.join(timeout=30)
    [made] = done
    assert not isinstance(made, Exception), made
    assert made.created == ["attempts_p20261204"]
    assert partition_of(dsn, "e") == [attempt_days.ATTEMPTS.default]


def waits_on_default(dsn: str) -> bool:
    query = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted AND relation = 'vigil_queue.attempts_default'::regclass)"
    return bool(rows(dsn, query)[0][0])


def test_a_shard_trigger_keeps_the_attempts_days_of_the_retention_it_was_given(dsn: str) -> None:
    trigger = ShardTrigger(dsn, shard=0, attempts_retention_days=1)
    try:
        assert trigger.maintain_attempts(now=T0).created == [
            "attempts_p20261130", "attempts_p20261201", "attempts_p20261202", "attempts_p20261203",
        ]  # fmt: skip
    finally:
        trigger.close()


def test_a_retention_below_one_day_is_refused(dsn: str, store: QueueStore) -> None:
    with pytest.raises(ValueError, match="retention_days"):
        store.maintain_attempts(now=T0, retention_days=0)
    with pytest.raises(ValueError, match="attempts_retention_days"):
        ShardTrigger(dsn, shard=0, attempts_retention_days=0)
    assert partitions_now(dsn) == []
