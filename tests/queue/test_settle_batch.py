"""How a worker's batch of successes is acknowledged, on real PostgreSQL.

A batch whose attempts all succeeded is one statement (`settle_succeeded`), which writes each
settled attempt's row with it: one round trip, no transaction around it. What that statement
could not settle (a lease taken by an expiry and a later attempt) goes on to the transaction
that writes the remaining rows and marks duplicates, as a batch with failures always does.

The connection is counted (`Counted`): what `execute`, `transaction` and `pipeline` were asked.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.queue.conftest import execution_row
from vigil.core.queue import AttemptOutcome
from vigil.queue.store import Finished, Leased, QueueStore, Submission, WorkerStore

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
QUEUE = "team-a/batch"


class Counted:
    """A real async connection whose `execute`, `transaction` and `pipeline` calls are counted."""

    def __init__(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self.connection = connection
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        if name in ("execute", "transaction", "pipeline"):
            self.calls[name] += 1
        return getattr(self.connection, name)


def success(leased: Leased, started: datetime, finished: datetime) -> Finished:
    return Finished(leased, AttemptOutcome.SUCCEEDED, started, finished)


def attempt_rows(store: QueueStore, eid: str) -> list[tuple[Any, ...]]:
    return [(a["attempt"], a["outcome"], a["worker"], a["started_at"], a["finished_at"], a["duplicate"])
            for a in store.attempts(eid)]  # fmt: skip


def test_a_batch_of_successes_is_one_statement_and_writes_each_attempts_row(store: QueueStore) -> None:
    ids = store.submit(QUEUE, [Submission("record", {"n": n}) for n in range(3)], now=T0)
    started, finished = T0 + timedelta(seconds=1), T0 + timedelta(seconds=2)

    async def scenario() -> tuple[int, Counter[str]]:
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as connection:
            worker = WorkerStore(connection, queue=QUEUE, worker="w")
            held = await worker.lease(["record"], limit=3, lease=LEASE, now=T0)
            counted = Counted(connection)
            worker.connection = counted
            report = await worker.settle([success(h, started, finished) for h in held], now=finished)
            return report.settled, counted.calls

    settled, calls = asyncio.run(scenario())
    assert settled == 3
    assert calls == Counter(execute=1), calls  # no BEGIN, no COMMIT, no second statement
    for eid in ids:
        assert execution_row(store, eid)["state"] == "succeeded"
        assert attempt_rows(store, eid) == [(1, "succeeded", "w", started, finished, False)], eid


def test_what_the_one_statement_cannot_settle_goes_on_to_the_transaction(store: QueueStore) -> None:
    """Of two successes, one lost its lease to an expiry and a later attempt: the other is settled by
    the statement, the late one is a duplicate, and each attempt has one row."""
    kept, lost = store.submit(QUEUE, [Submission("record", {"n": n}, max_attempts=3) for n in range(2)], now=T0)

    async def scenario() -> tuple[int, list[str], Counter[str], str]:
        async with await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as a_connection, \
                await psycopg.AsyncConnection.connect(store.dsn, autocommit=True) as b_connection:  # fmt: skip
            a = WorkerStore(a_connection, queue=QUEUE, worker="a")
            b = WorkerStore(b_connection, queue=QUEUE, worker="b")
            held = {h.execution_id: h for h in await a.lease(["record"], limit=2, lease=LEASE, now=T0)}
            await b.expire(now=T0 + LEASE)  # both leases expire; b takes the lost one's next attempt
            [again] = await b.lease(["record"], limit=1, lease=LEASE, now=T0 + LEASE)
            assert again.execution_id in held
            counted = Counted(a_connection)
            a.connection = counted
            batch = [success(h, T0, T0 + LEASE) for h in held.values()]
            report = await a.settle(batch, now=T0 + LEASE)
            return report.settled, [f.leased.execution_id for f in report.stale], counted.calls, again.execution_id

    settled, stale, calls, taken = asyncio.run(scenario())
    other = kept if taken == lost else lost
    assert (settled, stale) == (1, [taken])
    assert calls["transaction"] == 1 and calls["execute"] > 1, calls
    assert execution_row(store, other)["state"] == "succeeded"
    # the settled late success: the expiry's row became the success it was
    assert [(r[1], r[2], r[5]) for r in attempt_rows(store, other)] == [("succeeded", "a", False)]
    # the one another attempt took: its expiry's row is a duplicate, and attempt 2 is b's
    assert [(r[0], r[1], r[2], r[5]) for r in attempt_rows(store, taken)] == [(1, "lease_expired", "a", True)]
    assert execution_row(store, taken)["state"] == "leased"
