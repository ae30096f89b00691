"""A namespace's database role reaches its own namespace's work through the workers' functions and
nothing else (vigil.queue.roles, vigil.queue.functions): with namespace A's worker credentials,
B's rows cannot be read, changed or leased, the history cannot be read, `COPY … TO PROGRAM` is
refused, and an acknowledgement naming a stale lease token changes nothing.

Real PostgreSQL. The session's test server trusts every local login (tests/contract/postgres.py),
so these tests show what each role may do once logged in, not that PostgreSQL checks passwords.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import errors

from tests.contract.postgres import PostgresServer
from tests.queue.conftest import execution_row
from vigil.core.queue import AttemptOutcome, Submission
from vigil.history.store import SqlHistory
from vigil.queue.functions import WORKER_STATEMENTS
from vigil.queue.roles import RoleLimits, TenantRoles, worker_dsn
from vigil.queue.store import Finished, Leased, QueueStore, WorkerStore

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
A, B = "team-a/jobs", "team-b/jobs"


@pytest.fixture
def roles(dsn: str) -> dict[str, str]:
    """Worker DSNs of namespaces team-a and team-b, each with its own role."""
    tenants = TenantRoles(dsn)
    made = {}
    for namespace in ("team-a", "team-b"):
        role = tenants.ensure(namespace, password=f"pw-{namespace}", limits=RoleLimits(connections=5))
        made[namespace] = worker_dsn(dsn, role=role, password=f"pw-{namespace}")
    return made


def lease_as(worker_dsn_: str, queue: str, *, now: datetime = T0, worker: str = "w") -> list[Leased]:
    async def go() -> list[Leased]:
        async with await psycopg.AsyncConnection.connect(worker_dsn_, autocommit=True) as connection:
            return await WorkerStore(connection, queue=queue, worker=worker).lease(
                ["record"], limit=10, lease=LEASE, now=now
            )

    return asyncio.run(go())


def settle_as(worker_dsn_: str, queue: str, leased: Leased, *, worker: str = "w", at: datetime = T0) -> int:
    async def go() -> int:
        async with await psycopg.AsyncConnection.connect(worker_dsn_, autocommit=True) as connection:
            done = Finished(leased, AttemptOutcome.SUCCEEDED, started_at=at, finished_at=at)
            return (await WorkerStore(connection, queue=queue, worker=worker).settle([done], now=at)).settled

    return asyncio.run(go())


def refused(dsn: str, statement: str, params: Any = None) -> bool:
    """True when PostgreSQL refuses `statement` for lack of privilege."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        try:
            connection.execute(statement, params)
        except errors.InsufficientPrivilege:
            return True
    return False


def test_a_namespace_role_leases_and_acknowledges_its_own_work(dsn: str, roles: dict[str, str]) -> None:
    [execution_id] = QueueStore(dsn).submit(A, [Submission("record")], now=T0)
    [leased] = lease_as(roles["team-a"], A)
    assert leased.execution_id == execution_id and leased.lease_token is not None
    assert settle_as(roles["team-a"], A, leased) == 1
    assert execution_row(QueueStore(dsn), execution_id)["state"] == "succeeded"


def test_a_namespace_role_reads_and_changes_no_table(dsn: str, roles: dict[str, str]) -> None:
    QueueStore(dsn).submit(B, [Submission("record")], now=T0)
    a = roles["team-a"]
    assert refused(a, "SELECT * FROM vigil_queue.executions")
    assert refused(a, "UPDATE vigil_queue.executions SET state = 'dead'")
    assert refused(a, "DELETE FROM vigil_queue.attempts")
    assert refused(a, "SELECT * FROM vigil_queue.tenant_roles")
    assert refused(a, "INSERT INTO vigil_queue.tenant_roles VALUES ('x', 'team-b')")
    assert QueueStore(dsn).counts(B)["ready"] == 1


def test_a_namespace_role_cannot_lease_or_acknowledge_another_namespaces_work(
    dsn: str, roles: dict[str, str]
) -> None:
    [b_id] = QueueStore(dsn).submit(B, [Submission("record")], now=T0)
    with pytest.raises(errors.InsufficientPrivilege, match="namespace team-a only"):
        lease_as(roles["team-a"], B)
    [b_leased] = lease_as(roles["team-b"], B)
    # A names B's execution and token under its own queue: the statement is confined to A's queue
    assert settle_as(roles["team-a"], A, b_leased) == 0
    with pytest.raises(errors.InsufficientPrivilege):
        settle_as(roles["team-a"], B, b_leased)
    row = QueueStore(dsn).execution(b_id)
    assert row is not None and row["state"] == "leased"


def test_a_namespace_role_reads_no_history_and_runs_no_program(
    dsn: str, roles: dict[str, str], postgres: PostgresServer
) -> None:
    database = dsn.rsplit("dbname=", 1)[1]
    history = SqlHistory(postgres.database_dsn(database))
    history.migrate()
    history.close()
    with psycopg.connect(dsn) as owner:
        tables = [row[0] for row in owner.execute(
            "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables WHERE schemaname NOT IN "
            "('pg_catalog', 'information_schema', 'vigil_queue')"
        ).fetchall()]  # fmt: skip
    assert tables, "the history made no tables"
    for table in tables:
        assert refused(roles["team-a"], f"SELECT * FROM {table}"), table
    with psycopg.connect(roles["team-a"], autocommit=True) as connection, pytest.raises(errors.InsufficientPrivilege):
        connection.execute("COPY (SELECT 1) TO PROGRAM 'id'")


def test_an_acknowledgement_with_a_stale_lease_token_changes_nothing(dsn: str, roles: dict[str, str]) -> None:
    [execution_id] = QueueStore(dsn).submit(A, [Submission("record", max_attempts=3)], now=T0)
    a = roles["team-a"]
    [first] = lease_as(a, A, worker="w")
    later = T0 + LEASE + timedelta(seconds=1)

    async def expire() -> None:
        async with await psycopg.AsyncConnection.connect(a, autocommit=True) as connection:
            await WorkerStore(connection, queue=A, worker="other").expire(now=later)

    asyncio.run(expire())
    [second] = lease_as(a, A, now=later, worker="w")  # the same worker name: only the token differs
    assert second.lease_token != first.lease_token
    stale = Leased(**{**first.__dict__, "attempt": second.attempt})  # the right attempt, the old token
    assert settle_as(a, A, stale, at=later) == 0
    row = QueueStore(dsn).execution(execution_id)
    assert row is not None and (row["state"], row["attempt"]) == ("leased", 2)
    assert settle_as(a, A, second, at=later) == 1


def test_a_role_no_namespace_owns_calls_nothing(dsn: str, roles: dict[str, str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as owner:
        owner.execute("DROP ROLE IF EXISTS stranger")
        owner.execute("CREATE ROLE stranger LOGIN")
    stranger = worker_dsn(dsn, role="stranger", password="-")
    with pytest.raises(errors.InsufficientPrivilege):
        lease_as(stranger, A)


def test_removing_a_namespace_role_ends_its_sessions_and_drops_it(dsn: str, roles: dict[str, str]) -> None:
    session = psycopg.connect(roles["team-a"], autocommit=True)
    TenantRoles(dsn).remove("team-a")
    with pytest.raises(psycopg.OperationalError):
        session.execute("SELECT 1")
    session.close()
    with pytest.raises(psycopg.OperationalError, match="does not exist"):
        psycopg.connect(roles["team-a"]).close()
    assert set(TenantRoles(dsn).provisioned()) == {"team-b"}
    lease_as(roles["team-b"], B)  # the other namespace's role is untouched


def test_a_worker_given_another_namespaces_queue_says_so_and_exits(dsn: str, roles: dict[str, str]) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "vigil", "worker", "--queue", B, "--tasks", "tests.queue.tasks", "--dsn", roles["team-a"]],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    assert f"refuses these credentials for queue {B}" in ran.stderr and "namespace team-a only" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_every_worker_function_runs_with_its_own_settings(store: QueueStore) -> None:
    """Whatever the caller's session sets, each worker function resolves names in pg_catalog only
    (a caller's objects never stand in for the owner's) and never JIT-compiles; the lease plans once
    per session (a generic plan: planned anew at each call, it took twice its execution), without
    sequential scans, and the reads by key for a batch plan without them or bitmap scans (test_backlog.py)."""
    expected = {"search_path=pg_catalog, pg_temp", "jit=off"}
    by_key = {f"worker_{block}" for block in ("settle", "settle_succeeded", "heartbeat", "record_attempts")}
    with psycopg.connect(store.dsn, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT p.proname, p.proconfig, p.prosecdef FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'vigil_queue' AND p.proname LIKE 'worker\\_%'"
        ).fetchall()
    assert {name for name, _, _ in rows} == {f"worker_{s.block}" for s in WORKER_STATEMENTS}
    for name, config, definer in rows:
        assert definer, name
        planning = (
            {"plan_cache_mode=force_generic_plan", "enable_seqscan=off"} if name == "worker_lease"
            else {"enable_seqscan=off", "enable_bitmapscan=off"} if name in by_key else set()
        )  # fmt: skip
        assert set(config or []) == expected | planning, (name, config)
