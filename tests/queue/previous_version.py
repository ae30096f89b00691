"""The previous version of the queue store's worker functions, rebuilt from this one for the
rolling-upgrade tests (`old_store`, a fixture of tests/queue/conftest.py): a store that version
migrated (to q0012keyed) with its functions installed and granted to namespace team-a's role.

Its `settle_succeeded` block is frozen here as it was released (`PREVIOUS_SETTLE_SUCCEEDED`), and
so is how its workers acknowledged successes (`PreviousWorker`); the API's functions are this version's without `execution_output`, installed and granted by this
version's `functions.install_sql` and `TenantRoles.ensure`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
import pytest

from tests.queue.conftest import execution_row
from tests.queue.test_attempt_days import migrate
from vigil.queue import functions
from vigil.queue.queries import QUERIES
from vigil.queue.roles import RoleLimits, TenantRoles, worker_dsn
from vigil.queue.store import QueueStore
from vigil.queue.workerstore import Finished, SettleReport, WorkerStore

PREVIOUS_REVISION = "q0012keyed"  # the revision before outputs were kept
#: The queue the previous version's workers lease from (namespace team-a's).
PREVIOUS_QUEUE = "team-a/outputs"

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


def previous_store(
    dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    *,
    revision: str = PREVIOUS_REVISION,
    settle_succeeded: str = PREVIOUS_SETTLE_SUCCEEDED,
    api_left_out: tuple[str, ...] = ("execution_output",),
) -> tuple[str, str, str]:
    """The empty database `dsn` as an earlier release set it up (by default the previous version:
    migrated to q0012keyed, its functions installed, `settle_succeeded` and the API's functions as
    that release had them) with namespace team-a's role: (owner's DSN, the role's worker DSN, that
    release's call of `settle_succeeded`)."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("CREATE SCHEMA vigil_queue")
    migrate(dsn, revision)
    with monkeypatch.context() as previous:  # vigil.queue.functions as that release had it
        previous.setitem(QUERIES, "settle_succeeded", settle_succeeded)
        api = tuple(spec for spec in functions.API_STATEMENTS if spec.block not in api_left_out)
        previous.setitem(functions.STATEMENTS, functions.API_PREFIX, api)
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(functions.install_sql().encode())  # bytes: no placeholders to read
        role = TenantRoles(dsn).ensure("team-a", password="pw-team-a", limits=RoleLimits(connections=5))
        call = functions.call("settle_succeeded")
    return dsn, worker_dsn(dsn, role=role, password="pw-team-a"), call


class PreviousWorker(WorkerStore):
    """A worker of an earlier version acknowledging successes, as it did: in one transaction, its
    `settle_succeeded` call (`call`: which writes no attempt rows) and then `record_attempts` for each."""

    def __init__(self, connection: psycopg.AsyncConnection[Any], *, queue: str, worker: str, call: str) -> None:
        super().__init__(connection, queue=queue, worker=worker)
        self.call = call

    async def settle(self, finished: Sequence[Finished], *, now: datetime) -> SettleReport:
        held = self._held([f.leased for f in finished])
        async with self._lock, self.connection.pipeline(), self.connection.transaction():
            params = {**held, "outputs": [f.output for f in finished], "worker": self.worker, "now": now}
            cursor = await self.connection.execute(self.call, params)  # a call without outputs ignores them
            won = {row[0] for row in await cursor.fetchall()}
            rows = [(f.leased.execution_id, f.leased.attempt, self.worker, f.outcome.value, f.started_at,
                     f.finished_at, f.error) for f in finished]  # fmt: skip
            await self._record(rows)
        return SettleReport(len(won), [])


def assert_succeeded_once(store: QueueStore, outputs: dict[str, Any]) -> None:
    """Each execution of `outputs` succeeded, its lease released, with its output there, and has
    exactly one attempt row: a success, not a duplicate. Whichever version acknowledged it."""
    for eid, output in outputs.items():
        row = execution_row(store, eid)
        assert (row["state"], row["output"], row["lease_owner"]) == ("succeeded", output, None), eid
        assert [(a["outcome"], a["duplicate"]) for a in store.attempts(eid)] == [("succeeded", False)], eid
