"""The rolling upgrade to q0013output on real PostgreSQL: workers of both versions acknowledge.

A store migrated to q0012keyed by the previous version holds that version's functions, among
them `worker_settle_succeeded` without outputs, granted to a namespace's role. Its workers hold
leases when the operator upgrades the store to head (which installs `settle_succeeded` under its
new signature, with `p_outputs`, and leaves the previous one in place). Covered: both signatures
are there and the namespace's role may call both; a success acknowledged by a worker of the
previous version (its whole settle, through the previous signature) still settles, with a null
output, and its attempt row is written; one acknowledged by a worker of this version keeps its
output (null when it returned nothing); the HTTP API's read shows each.

The previous version is rebuilt from this one: its `settle_succeeded` block as it was released
(`PREVIOUS_SETTLE_SUCCEEDED`, frozen here), and the API's functions without `execution_output`,
installed and granted by this version's `functions.install_sql` and `TenantRoles.ensure`.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.contract.postgres import PostgresServer
from tests.queue.conftest import conninfo, execution_row
from tests.queue.test_attempt_days import migrate
from vigil.core.queue import AttemptOutcome, Submission
from vigil.queue import functions
from vigil.queue.queries import QUERIES
from vigil.queue.roles import RoleLimits, TenantRoles, worker_dsn
from vigil.queue.store import Finished, Leased, QueueStore, WorkerStore

pytestmark = pytest.mark.postgres

BEFORE = "q0012keyed"  # the revision before outputs were kept
T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
QUEUE = "team-a/outputs"

#: `settle_succeeded` as the previous version released it (no outputs): what its function runs.
PREVIOUS_SETTLE_SUCCEEDED = """
UPDATE vigil_queue.executions AS e
SET state = 'succeeded', attempt = a.attempt, lease_owner = NULL, lease_expires_at = NULL, leased_at = NULL,
    finished_at = %(now)s, last_error = NULL
FROM unnest(%(execution_ids)s::text[], %(attempts)s::smallint[], %(tokens)s::uuid[]) AS a(execution_id, attempt, token)
WHERE e.execution_id = a.execution_id AND e.queue = %(queue)s AND e.lease_token = a.token
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
RETURNING e.execution_id;
"""

PREVIOUS_SIGNATURE = "vigil_queue.worker_settle_succeeded(timestamptz,text[],smallint[],uuid[],text,text)"
NEW_SIGNATURE = "vigil_queue.worker_settle_succeeded(timestamptz,text[],smallint[],uuid[],text[],text,text)"


@pytest.fixture
def old_store(postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, str]:
    """A store the previous version migrated (to q0012keyed, its functions installed) with
    namespace team-a's role: (owner's DSN, the role's worker DSN, the previous version's call of
    `settle_succeeded`)."""
    dsn = conninfo(postgres, postgres.create_database())
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("CREATE SCHEMA vigil_queue")
    migrate(dsn, BEFORE)
    with monkeypatch.context() as previous:  # vigil.queue.functions as the previous version had it
        previous.setitem(QUERIES, "settle_succeeded", PREVIOUS_SETTLE_SUCCEEDED)
        api = tuple(spec for spec in functions.API_STATEMENTS if spec.block != "execution_output")
        previous.setitem(functions.STATEMENTS, functions.API_PREFIX, api)
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(functions.install_sql().encode())  # bytes: no placeholders to read
        role = TenantRoles(dsn).ensure("team-a", password="pw-team-a", limits=RoleLimits(connections=5))
        call = functions.call("settle_succeeded")
    return dsn, worker_dsn(dsn, role=role, password="pw-team-a"), call


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


def test_workers_of_both_versions_acknowledge_across_the_upgrade(
    old_store: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn, role_dsn, previous_call = old_store
    assert "p_outputs" not in previous_call and "p_outputs" in functions.CALLS["settle_succeeded"]
    role = str(psycopg.conninfo.conninfo_to_dict(role_dsn)["user"])
    assert signatures(dsn, role) == {PREVIOUS_SIGNATURE: True}
    ids = QueueStore(dsn).submit(QUEUE, [Submission("record", {"n": n}, max_attempts=1) for n in range(3)], now=T0)

    async def scenario() -> dict[str, str | None]:
        async with await psycopg.AsyncConnection.connect(role_dsn, autocommit=True) as old, \
                await psycopg.AsyncConnection.connect(role_dsn, autocommit=True) as new:  # fmt: skip
            previous = WorkerStore(old, queue=QUEUE, worker="previous")
            [held] = await previous.lease(["record"], limit=1, lease=LEASE, now=T0)

            QueueStore(dsn).migrate()  # the operator of this version is rolled out and migrates to head
            assert signatures(dsn, role) == {PREVIOUS_SIGNATURE: True, NEW_SIGNATURE: True}

            with monkeypatch.context() as patched:  # the previous worker, not upgraded yet, acknowledges
                patched.setitem(functions.CALLS, "settle_succeeded", previous_call)
                assert (await previous.settle([success(held, '{"never":"sent"}')], now=T0)).settled == 1
            upgraded = WorkerStore(new, queue=QUEUE, worker="upgraded")
            returned, nothing = await upgraded.lease(["record"], limit=2, lease=LEASE, now=T0)
            batch = [success(returned, '{"kept":true}'), success(nothing, None)]
            assert (await upgraded.settle(batch, now=T0)).settled == 2
            return {held.execution_id: None, returned.execution_id: {"kept": True}, nothing.execution_id: None}

    expected = asyncio.run(scenario())
    assert sorted(expected) == sorted(ids)
    store = QueueStore(dsn)
    for eid, output in expected.items():
        row = execution_row(store, eid)
        assert (row["state"], row["output"], row["lease_owner"]) == ("succeeded", output, None), eid
        assert [(a["outcome"], a["duplicate"]) for a in store.attempts(eid)] == [("succeeded", False)], eid
        record = store.timeline(eid)
        assert record is not None and record.output == output, eid
