"""The rolling upgrade that has `settle_succeeded` write its attempt rows, on real PostgreSQL.

The release before it installed `worker_settle_succeeded` with outputs but without each attempt's
start and finish (`SEVEN_ARGUMENT_SETTLE`, frozen here as released), and its workers wrote the
attempt rows with `record_attempts` in the same transaction. A store that release set up, with a
worker of it holding a lease, is migrated by this version's operator (which installs this
version's functions). Covered: both signatures are there and namespace team-a's role may run
both; the older worker acknowledges through its own signature and this version's through the new
one; each execution ends succeeded with its output and exactly one attempt row.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.contract.postgres import PostgresServer
from tests.queue.conftest import conninfo
from tests.queue.previous_version import PreviousWorker, assert_succeeded_once, previous_store
from tests.queue.test_output_upgrade import NEW_SIGNATURE, signatures
from vigil.core.queue import AttemptOutcome, Submission
from vigil.queue.store import Finished, QueueStore, WorkerStore

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
QUEUE = "team-a/settled"
SEVEN_ARGUMENT_SIGNATURE = "vigil_queue.worker_settle_succeeded(timestamptz,text[],smallint[],uuid[],text[],text,text)"

#: `settle_succeeded` as the release before this one ran it: no attempt rows.
SEVEN_ARGUMENT_SETTLE = """
WITH settled AS (
UPDATE vigil_queue.executions AS e
SET state = 'succeeded', attempt = a.attempt, lease_owner = NULL, lease_expires_at = NULL, leased_at = NULL,
    finished_at = %(now)s, last_error = NULL, output = a.output::jsonb
FROM unnest(%(execution_ids)s::text[], %(attempts)s::smallint[], %(tokens)s::uuid[], %(outputs)s::text[])
     AS a(execution_id, attempt, token, output)
WHERE e.execution_id = a.execution_id AND e.queue = %(queue)s AND e.lease_token = a.token
  AND e.execution_id = ANY(%(execution_ids)s::text[])  -- the batch's keys, whatever plan the session keeps
  AND (
    (e.attempt = a.attempt AND e.state = 'leased' AND e.lease_owner = %(worker)s)
    OR (
      ((e.state = 'ready' AND e.attempt = a.attempt + 1) OR (e.state = 'dead' AND e.attempt = a.attempt))
      AND EXISTS (
        SELECT 1 FROM vigil_queue.attempts AS x
        WHERE x.execution_id = a.execution_id AND x.attempt = a.attempt
          AND x.day = (e.scheduled_for AT TIME ZONE 'UTC')::date
          AND x.outcome = 'lease_expired' AND x.worker = %(worker)s
      )
    )
  )
RETURNING e.execution_id, e.job_id, e.finished_at
),
recorded AS (
    UPDATE vigil_queue.jobs AS j SET last_success_at = GREATEST(j.last_success_at, s.finished_at)
    FROM (SELECT job_id, max(finished_at) AS finished_at FROM settled WHERE job_id IS NOT NULL GROUP BY job_id) AS s
    WHERE j.job_id = s.job_id AND j.cron IS NOT NULL
      AND (j.last_success_at IS NULL OR j.last_success_at < s.finished_at)
)
SELECT s.execution_id FROM settled AS s;
"""


def test_workers_of_the_release_before_and_this_one_acknowledge_across_the_upgrade(
    postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = conninfo(postgres, postgres.create_database())
    _, role_dsn, before_call = previous_store(
        dsn, monkeypatch, revision="head", settle_succeeded=SEVEN_ARGUMENT_SETTLE, api_left_out=()
    )
    assert "p_outputs" in before_call and "p_started" not in before_call
    role = str(psycopg.conninfo.conninfo_to_dict(role_dsn)["user"])
    assert signatures(dsn, role) == {SEVEN_ARGUMENT_SIGNATURE: True}
    ids = QueueStore(dsn).submit(QUEUE, [Submission("record", {"n": n}) for n in range(2)], now=T0)
    finished = T0 + timedelta(seconds=3)

    async def scenario() -> dict[str, dict[str, int]]:
        async with await psycopg.AsyncConnection.connect(role_dsn, autocommit=True) as old, \
                await psycopg.AsyncConnection.connect(role_dsn, autocommit=True) as new:  # fmt: skip
            older = PreviousWorker(old, queue=QUEUE, worker="older", call=before_call)
            [held] = await older.lease(["record"], limit=1, lease=LEASE, now=T0)

            QueueStore(dsn).migrate()  # this version's operator is rolled out
            assert signatures(dsn, role) == {SEVEN_ARGUMENT_SIGNATURE: True, NEW_SIGNATURE: True}

            done = Finished(held, AttemptOutcome.SUCCEEDED, T0, finished, output='{"by": 1}')
            assert (await older.settle([done], now=finished)).settled == 1
            upgraded = WorkerStore(new, queue=QUEUE, worker="upgraded")
            [taken] = await upgraded.lease(["record"], limit=1, lease=LEASE, now=T0)
            done = Finished(taken, AttemptOutcome.SUCCEEDED, T0, finished, output='{"by": 2}')
            assert (await upgraded.settle([done], now=finished)).settled == 1
            return {held.execution_id: {"by": 1}, taken.execution_id: {"by": 2}}

    expected = asyncio.run(scenario())
    assert sorted(expected) == sorted(ids)
    store = QueueStore(dsn)
    assert_succeeded_once(store, expected)
    for eid in expected:  # each attempt row has its attempt's own finish, whichever version wrote it
        assert [a["finished_at"] for a in store.attempts(eid)] == [finished], eid
