"""PostgreSQL restarted under a running trigger and worker: nothing lost, no occurrence marked twice.

The test runs a PostgreSQL server of its own (tests/contract/postgres.py), since it stops
it: the session's server is shared by every test. Jobs due every minute are fired by the
trigger loop (`vigil.queue.trigger.run`, in a thread, as an operator replica runs a shard)
on a clock that runs 30 times fast and stops at END, and run by an in-process worker. A
few occurrences in, the server stops (connections cut) while the clock passes three of the
jobs' minutes, then starts again; the test never touches the trigger or the worker. Then
every occurrence up to END has fired once (catch-up All: the late ones too), each
execution ran and was acknowledged, and the ledger of marks (tests/queue/marks.py) holds
each occurrence once.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.contract.postgres import PostgresServer
from tests.queue.conftest import conninfo
from tests.queue.marks import marks, record_marks
from tests.queue.tasks import DSN_ENV, create_tables
from tests.queue.workers import in_process, runs
from tests.waiting import wait_for
from vigil.core.chain import CatchUp, CatchUpPolicy
from vigil.core.recurring import RecurringJob
from vigil.queue import trigger as trigger_module
from vigil.queue.catalogue import Catalogue
from vigil.queue.store import QueueStore

pytestmark = pytest.mark.postgres

QUEUE = "team-a/q"
JOBS = 40
SPEED = 30  # simulated seconds per real second: a minute every 2 s
MINUTES = 12  # occurrences per job, from BASE + 1 min to END
BASE = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(days=1)  # the clock's start
END = BASE + timedelta(minutes=MINUTES)
DOWN_AT = 4  # the server stops once this many minutes have fired
DOWN_FOR = 3  # and starts again once the clock has passed this many more of them


class FastClock:
    """Simulated time from BASE, SPEED times faster than the real clock, stopping at END."""

    def __init__(self) -> None:
        self.began = time.monotonic()

    def now(self) -> datetime:
        return min(END, BASE + timedelta(seconds=(time.monotonic() - self.began) * SPEED))


@pytest.fixture
def dsn(own_postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> str:
    info = conninfo(own_postgres, own_postgres.create_database())
    QueueStore(info).migrate()
    record_marks(info)
    create_tables(info)
    monkeypatch.setenv(DSN_ENV, info)
    return info


def _rows(dsn: str, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as connection:
        return connection.execute(query).fetchall()


def _answers(dsn: str) -> bool:
    try:
        _rows(dsn, "SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


def test_postgres_restarted_mid_run_loses_nothing_and_marks_nothing_twice(own_postgres: PostgresServer, dsn: str) -> None:
    every_minute = RecurringJob(
        QUEUE, "record", "* * * * *", jitter=timedelta(0), max_attempts=20,
        catch_up=CatchUp(policy=CatchUpPolicy.ALL, window=timedelta(hours=1), limit=100),
    )  # fmt: skip
    added = Catalogue(dsn, shards=1).add_many([every_minute] * JOBS, now=BASE)
    expected = {(a.job_id, BASE + timedelta(minutes=m)) for a in added for m in range(1, MINUTES + 1)}

    clock, stop = FastClock(), threading.Event()
    firing = threading.Thread(
        target=trigger_module.run,
        args=(trigger_module.ShardTrigger(dsn, shard=0),),
        kwargs={"clock": clock.now, "stop": stop},
        name="trigger-shard-0",
    )
    with in_process(dsn, QUEUE):
        firing.start()
        try:
            wait_for(lambda: len(marks(dsn)) >= DOWN_AT * JOBS, timeout=60, interval=0.05,
                     what=f"{DOWN_AT} minutes fired")  # fmt: skip
            own_postgres.stop()
            stopped_at = clock.now()
            wait_for(lambda: clock.now() >= stopped_at + timedelta(minutes=DOWN_FOR), timeout=30,
                     what="the clock past the outage's minutes")  # fmt: skip
            own_postgres.start()
            wait_for(lambda: _answers(dsn), timeout=30, what="the server answering")
            wait_for(lambda: len(marks(dsn)) == len(expected), timeout=120, what="every occurrence up to END marked")
            wait_for(
                lambda: _rows(dsn, "SELECT state, count(*) FROM vigil_queue.executions GROUP BY state")
                == [("succeeded", len(expected))],
                timeout=120,
                what="every execution acknowledged",
            )
            assert firing.is_alive(), "the trigger thread died"
        finally:
            stop.set()
            firing.join(timeout=30)

    ledger = marks(dsn)
    assert {(job_id, nominal) for job_id, nominal, *_ in ledger} == expected
    assert {(outcome, times) for _, _, outcome, _, times in ledger} == {("Fired", 1)}, "missed or marked twice"
    fired = _rows(dsn, "SELECT job_id, scheduled_for, count(*) FROM vigil_queue.executions GROUP BY 1, 2")
    assert {(job_id, at) for job_id, at, _ in fired} == expected
    assert {count for *_, count in fired} == {1}, "an occurrence has two executions"
    execution_ids = {str(row[3]) for row in ledger}
    assert {eid for eid, _, _, event in runs(dsn) if event == "ran"} == execution_ids  # each one ran
    # the outage cut the trigger and the worker: some work was retried or re-leased after it
    print(f"attempts beyond the first: {_rows(dsn, 'SELECT count(*) FROM vigil_queue.executions WHERE attempt > 1')}")
