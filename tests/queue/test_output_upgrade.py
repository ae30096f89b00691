"""The rolling upgrade to q0013output on real PostgreSQL: workers of both versions acknowledge.

A store migrated to q0012keyed by the previous version holds that version's functions, among
them `worker_settle_succeeded` without outputs, granted to a namespace's role. Its workers hold
leases when the operator upgrades the store to head (which installs `settle_succeeded` under its
new signature, with `p_outputs`, and leaves the previous one in place). Covered: both signatures
are there and the namespace's role may call both; a success acknowledged by a worker of the
previous version (its whole settle, through the previous signature) still settles, with a null
output, and its attempt row is written; one acknowledged by a worker of this version keeps its
output (null when it returned nothing); the HTTP API's read shows each.

The previous version is rebuilt from this one (tests/queue/previous_version.py, the `old_store`
fixture).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.queue.previous_version import PREVIOUS_QUEUE, PreviousWorker, assert_succeeded_once
from vigil.core.queue import AttemptOutcome, Submission
from vigil.queue import functions
from vigil.queue.store import Finished, Leased, QueueStore, WorkerStore

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)

PREVIOUS_SIGNATURE = "vigil_queue.worker_settle_succeeded(timestamptz,text[],smallint[],uuid[],text,text)"
NEW_SIGNATURE = (  # this version's: outputs, and each attempt's times for its attempt row
    "vigil_queue.worker_settle_succeeded(timestamptz,text[],smallint[],uuid[],text[],timestamptz[],timestamptz[],text,text)"
)


def signatures(dsn: str, role: str) -> dict[str, bool]:
    """Each `worker_settle_succeeded` there is, and whether `role` may execute it."""
    with psycopg.connect(dsn) as connection:
        rows = connection.execute(
            "SELECT p.oid::regprocedure::text, has_function_privilege(%s, p.oid, 'EXECUTE')"
            " FROM pg_proc AS p WHERE p.proname = 'worker_settle_succeeded'",
            (role,),
        ).fetchall()
    return {name.replace("timestamp with time zone", "timestamptz"): allowed for name, allowed in rows}


def success(leased: Leased, output: str | None) -> Finished:
    return Finished(leased, AttemptOutcome.SUCCEEDED, started_at=T0, finished_at=T0, output=output)


def test_workers_of_both_versions_acknowledge_across_the_upgrade(old_store: tuple[str, str, str]) -> None:
    dsn, role_dsn, previous_call = old_store
    assert "p_outputs" not in previous_call and "p_outputs" in functions.CALLS["settle_succeeded"]
    role = str(psycopg.conninfo.conninfo_to_dict(role_dsn)["user"])
    assert signatures(dsn, role) == {PREVIOUS_SIGNATURE: True}
    ids = QueueStore(dsn).submit(PREVIOUS_QUEUE, [Submission("record", {"n": n}, max_attempts=1) for n in range(3)], now=T0)

    async def scenario() -> dict[str, str | None]:
        async with await psycopg.AsyncConnection.connect(role_dsn, autocommit=True) as old, \
                await psycopg.AsyncConnection.connect(role_dsn, autocommit=True) as new:  # fmt: skip
            previous = PreviousWorker(old, queue=PREVIOUS_QUEUE, worker="previous", call=previous_call)
            [held] = await previous.lease(["record"], limit=1, lease=LEASE, now=T0)

            QueueStore(dsn).migrate()  # the operator of this version is rolled out and migrates to head
            assert signatures(dsn, role) == {PREVIOUS_SIGNATURE: True, NEW_SIGNATURE: True}

            # the previous worker, not upgraded yet, acknowledges
            assert (await previous.settle([success(held, '{"never":"sent"}')], now=T0)).settled == 1
            upgraded = WorkerStore(new, queue=PREVIOUS_QUEUE, worker="upgraded")
            returned, nothing = await upgraded.lease(["record"], limit=2, lease=LEASE, now=T0)
            batch = [success(returned, '{"kept":true}'), success(nothing, None)]
            assert (await upgraded.settle(batch, now=T0)).settled == 2
            return {held.execution_id: None, returned.execution_id: {"kept": True}, nothing.execution_id: None}

    expected = asyncio.run(scenario())
    assert sorted(expected) == sorted(ids)
    store = QueueStore(dsn)
    assert_succeeded_once(store, expected)
    for eid, output in expected.items():
        record = store.timeline(eid)
        assert record is not None and record.output == output, eid
