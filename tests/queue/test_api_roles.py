"""The HTTP API reaches the queue store as each namespace's API role, never as the owner
(vigil.queue.apistore, vigil.queue.functions, vigil.queue.roles): acting for namespace A it cannot
read or change B's rows, it reads no table, it cannot take a role it was not granted, and a
namespace without a TaskQueue (no role) gets nothing. The API's answers through it are the owner
store's (the routes' own tests run again on it in test_api_roles_routes.py).

Real PostgreSQL. The session's test server trusts every local login (tests/contract/postgres.py),
so these tests show what each role may do once logged in, not that PostgreSQL checks passwords.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.types.json import Jsonb

from tests.queue.test_api import api as http_api
from tests.queue.test_api import submit
from tests.waiting import wait_for
from vigil.core.queue import OneOffJob, QueueUndeclared, Submission
from vigil.queue import roles as roles_module
from vigil.queue.apistore import ApiQueueStore
from vigil.queue.functions import API_CALLS, API_STATEMENTS, CALLS
from vigil.queue.roles import (
    RoleLimits,
    TenantRoles,
    api_login_name,
    api_role_name,
    role_name,
    worker_dsn,
)
from vigil.queue.store import QueueStore
from vigil.runtime.serving import queue_store
from vigil.settings import Settings

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
A, B, C = "team-a/jobs", "team-b/jobs", "team-c/jobs"  # team-c has no TaskQueue: no role


def one_off(queue: str, **fields: Any) -> OneOffJob:
    job: dict[str, Any] = {
        "task": "record", "payload_text": '{"n":1}', "run_at": T0, "priority": 0, "tenant": "t",
        "max_attempts": None, "idempotency_key": None, **fields,
    }  # fmt: skip
    return OneOffJob(queue=queue, **job)


@pytest.fixture
def api(dsn: str) -> ApiQueueStore:
    """The API's store, with team-a and team-b provisioned as the leader provisions them."""
    tenants = TenantRoles(dsn)
    for namespace in ("team-a", "team-b"):
        tenants.ensure(namespace, password=f"pw-{namespace}", limits=RoleLimits(connections=5))
    return ApiQueueStore(dsn, password="api-pw", migrate_first=False)


def database(dsn: str) -> str:
    with psycopg.connect(dsn) as connection:
        row = connection.execute("SELECT current_database()").fetchone()
    assert row is not None
    return str(row[0])


def login(api: ApiQueueStore) -> psycopg.Connection[Any]:
    """A session as the API's login role, in autocommit: each statement on its own."""
    connection = api.connect()
    connection.autocommit = True
    return connection


def as_api_role(api: ApiQueueStore, namespace: str) -> psycopg.Connection[Any]:
    """A login session that took `namespace`'s API role, as the store does for a request."""
    connection = login(api)
    connection.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(api_role_name(database(api.dsn), namespace))))
    return connection


def test_the_api_acts_for_a_namespace_as_its_role_and_never_logs_in_as_the_owner(api: ApiQueueStore) -> None:
    made = api.submit_job(one_off(A), now=T0)
    assert api.timeline(made.execution_id) is not None
    with api._acting(queue=A) as connection:  # what every operation runs in
        assert connection is not None
        session, current, acting = connection.execute(
            "SELECT session_user, current_user, current_setting('role')"
        ).fetchone() or ("", "", "")
        seen = connection.execute(
            "SELECT usename FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        ).fetchone()
    db = database(api.dsn)
    assert session == api_login_name(db) and seen == (api_login_name(db),)
    assert current == acting == api_role_name(db, "team-a")
    with psycopg.connect(api.dsn) as owner:
        owner_name = owner.execute("SELECT current_user").fetchone()
        assert owner_name is not None and session != owner_name[0]
        # neither the login nor any namespace's API role holds a privilege on any of the store's tables
        held = owner.execute(
            "SELECT r.rolname, c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " CROSS JOIN pg_roles AS r WHERE n.nspname = 'vigil_queue' AND c.relkind IN ('r', 'p', 'v')"
            " AND r.rolname LIKE 'vigil\\_%%' AND has_table_privilege(r.oid, c.oid, 'SELECT,INSERT,UPDATE,DELETE')"
        ).fetchall()
        assert held == []
        # the login is no superuser and inherits nothing: the roles it holds act only when SET
        assert owner.execute(
            "SELECT rolsuper, rolinherit, rolcreaterole FROM pg_roles WHERE rolname = %s", (session,)
        ).fetchone() == (False, False, False)


def test_a_submission_through_the_http_api_waits_in_the_database_as_the_api_role(dsn: str) -> None:
    """Seen from the server while the request is in flight: the session that serves it logged in
    as the API's login role and acts as the namespace's API role, not as the owner. (The owner
    holds the jobs table locked, so the request waits inside its function for as long as the test
    looks; then the lock goes and the request answers as it always did.)"""
    TenantRoles(dsn).ensure("shop", password="pw-shop", limits=RoleLimits())
    server = http_api(ApiQueueStore(dsn, password="api-pw", migrate_first=False))
    db = database(dsn)
    answers: list[tuple[int, Any]] = []
    # the activity is read on a session of its own: a transaction sees one snapshot of it
    with psycopg.connect(dsn) as owner, psycopg.connect(dsn, autocommit=True) as watcher:
        owner.execute("LOCK TABLE vigil_queue.jobs IN ACCESS EXCLUSIVE MODE")
        request = threading.Thread(target=lambda: answers.append(submit(server)))
        request.start()
        waiting = wait_for(
            lambda: watcher.execute(
                "SELECT usename, query FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            ).fetchall(),
            timeout=30, what="the API's request waiting on the lock",
        )  # fmt: skip
        assert [(user, "api_insert_job" in query) for user, query in waiting] == [(api_login_name(db), True)]
        owner.rollback()
    request.join(timeout=30)
    assert answers and answers[0][0] == 201


def test_acting_for_a_it_reads_and_changes_none_of_bs_rows(dsn: str, api: ApiQueueStore) -> None:
    owner = QueueStore(dsn)
    theirs = owner.submit_job(one_off(B), now=T0)
    with as_api_role(api, "team-a") as connection:
        for block, params in (
            ("timeline", {"execution_id": theirs.execution_id}),
            ("attempts_of", {"execution_id": theirs.execution_id}),
            ("job", {"job_id": theirs.job_id}),
            ("job_executions", {"job_id": theirs.job_id, "limit": 10}),
            ("cancel", {"execution_id": theirs.execution_id, "job_id": None, "now": T0, "by": "mallory"}),
            ("retry", {"execution_id": theirs.execution_id, "now": T0}),
            ("disable_job", {"job_id": theirs.job_id, "now": T0}),
            ("drop_job", {"job_id": theirs.job_id}),
            ("queue_jobs", {"queue": B, "limit": 10, "after_at": None, "after_id": None}),
            ("dead_letters", {"queue": B, "limit": 10, "after_at": None, "after_id": None}),
            ("queue_breakdown", {"queue": B, "now": T0, "limit": 10}),
            ("job_of_key", {"queue": B, "idempotency_key": "k"}),
            ("quota_admit", {"namespace": "team-b", "payloads": [Jsonb({})]}),
            ("notify", {"queue": B}),
        ):
            with pytest.raises(errors.InsufficientPrivilege):
                connection.execute(API_CALLS[block], params)
    untouched = owner.timeline(theirs.execution_id)
    assert untouched is not None and untouched.state.value == "ready" and untouched.cancelled_by is None
    job = owner.job(theirs.job_id)
    assert job is not None and job.enabled
    # through the store: an id of B's is B's role's business, so A's request cannot reach it by path
    assert api.timeline(theirs.execution_id) is not None  # the store acts as B for B's id, after the route authorised


def test_a_submission_naming_another_namespace_is_refused_inside_the_function(api: ApiQueueStore) -> None:
    with as_api_role(api, "team-a") as connection:
        params = {
            "job_id": "j-1", "queue": B, "task": "record", "payload": Jsonb({}), "priority": 0, "tenant": "t",
            "max_attempts": None, "default_max_attempts": 3, "now": T0,
        }  # fmt: skip
        with pytest.raises(errors.InsufficientPrivilege):
            connection.execute(API_CALLS["insert_job"], params)
    with as_api_role(api, "team-a") as connection, pytest.raises(errors.InsufficientPrivilege):
        connection.execute(API_CALLS["catalogue_by_key"], {"queue": B, "idempotency_keys": ["k"]})


def test_the_api_reads_no_table_as_its_login_or_as_a_namespace(api: ApiQueueStore) -> None:
    for connect in (lambda: login(api), lambda: as_api_role(api, "team-a")):
        for table in ("executions", "jobs", "attempts", "tenant_roles", "namespace_quotas"):
            with connect() as connection, pytest.raises(errors.InsufficientPrivilege):
                connection.execute(sql.SQL("SELECT * FROM vigil_queue.{}").format(sql.Identifier(table)))
        with connect() as connection, pytest.raises(errors.InsufficientPrivilege):
            connection.execute("COPY (SELECT 1) TO PROGRAM 'true'")


def test_the_api_takes_no_role_it_was_not_granted(dsn: str, api: ApiQueueStore) -> None:
    db = database(dsn)
    with psycopg.connect(dsn) as owner:
        owner_row = owner.execute("SELECT current_user").fetchone()
    assert owner_row is not None
    for role in (owner_row[0], role_name(db, "team-a"), api_role_name(db, "team-c")):
        for attempt in (
            sql.SQL("SET ROLE {}").format(sql.Identifier(role)),
            sql.SQL("SELECT set_config('role', {}, false)").format(sql.Literal(role)),
            sql.SQL("SET SESSION AUTHORIZATION {}").format(sql.Identifier(role)),
        ):
            with login(api) as connection, pytest.raises((errors.InsufficientPrivilege, errors.UndefinedObject, errors.InvalidParameterValue)):
                connection.execute(attempt)
    with pytest.raises(psycopg.OperationalError, match="permission denied to set role"):
        login_dsn = TenantRoles(dsn).ensure_api_login(password="api-pw")
        psycopg.connect(login_dsn + f" options='-c role={role_name(db, 'team-a')}'").close()


def test_without_a_namespace_role_the_api_functions_refuse_whoever_calls(dsn: str, api: ApiQueueStore) -> None:
    """The login itself may not call the API's functions (nor the workers'); a namespace's workers'
    role may call neither the API's functions nor take its namespace's API role."""
    params = {"execution_id": "ex-1"}
    with login(api) as connection, pytest.raises(errors.InsufficientPrivilege):
        connection.execute(API_CALLS["timeline"], params)
    with login(api) as connection, pytest.raises(errors.InsufficientPrivilege):
        connection.execute(CALLS["declared_queue"], {"queue": A})
    worker = worker_dsn(dsn, role=role_name(database(dsn), "team-a"), password="pw-team-a")
    with psycopg.connect(worker, autocommit=True) as connection, pytest.raises(errors.InsufficientPrivilege):
        connection.execute(API_CALLS["timeline"], params)
    with psycopg.connect(worker, autocommit=True) as connection, pytest.raises(errors.InsufficientPrivilege):
        connection.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(api_role_name(database(dsn), "team-a"))))


def test_a_namespace_without_a_taskqueue_gets_nothing_and_never_the_owner(dsn: str, api: ApiQueueStore) -> None:
    owner = QueueStore(dsn)
    [stranded] = owner.submit(C, [Submission("record")], now=T0)
    with pytest.raises(QueueUndeclared):
        api.submit_job(one_off(C), now=T0)
    assert api.timeline(stranded) is None
    assert api.cancel(stranded, now=T0, by="alice") is None
    assert api.queue_jobs(C, limit=10).jobs == () and api.queue_breakdown(C, now=T0) == []
    left = owner.timeline(stranded)
    assert left is not None and left.state.value == "ready"
    # when a namespace's last TaskQueue goes, so does its API role, and the API's reach into it
    ours = api.submit_job(one_off(B), now=T0)
    TenantRoles(dsn).remove("team-b")
    assert api.timeline(ours.execution_id) is None and api.job(ours.job_id) is None
    with pytest.raises(QueueUndeclared):
        api.submit_job(one_off(B), now=T0)


def test_a_submission_to_a_namespace_without_a_taskqueue_is_404_through_the_http_api(dsn: str) -> None:
    server = http_api(ApiQueueStore(dsn, password="api-pw", migrate_first=False))
    status, answer = submit(server)  # namespace shop: no TaskQueue, so no role
    assert status == 404 and answer["reason"] == "NotFound" and "has no TaskQueue" in answer["detail"]


def test_a_namespace_provisioned_after_the_api_started_is_granted_to_it(dsn: str, api: ApiQueueStore) -> None:
    api.submit_job(one_off(A), now=T0)  # the login is made now
    TenantRoles(dsn).ensure("team-c", password="pw-c", limits=RoleLimits())
    assert api.submit_job(one_off(C), now=T0).created


def test_every_api_function_is_a_definer_with_pinned_settings_and_no_public_execute(store: QueueStore) -> None:
    expected = {"search_path=pg_catalog, pg_temp", "jit=off"}  # plans: PostgreSQL's choice (vigil.queue.functions)
    with psycopg.connect(store.dsn, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT p.proname, p.proconfig, p.prosecdef, has_function_privilege('public', p.oid, 'EXECUTE')"
            " FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'vigil_queue' AND p.proname LIKE 'api\\_%' AND p.proname NOT LIKE 'api\\_login\\_%'"
            " AND p.proname <> 'api_namespace'"
        ).fetchall()
    assert {name for name, *_ in rows} == {f"api_{s.block}" for s in API_STATEMENTS}
    for name, config, definer, public in rows:
        assert definer and not public, name
        assert set(config or []) == expected, (name, config)


def test_the_login_password_is_the_charts_and_a_second_replica_agrees(dsn: str, api: ApiQueueStore) -> None:
    first = TenantRoles(dsn).ensure_api_login(password="api-pw")
    again = TenantRoles(dsn).ensure_api_login(password="api-pw")
    assert first == again and "password=api-pw" in first and f"user={api_login_name(database(dsn))}" in first
    with pytest.raises(ValueError, match="needs a password"):
        TenantRoles(dsn).ensure_api_login(password="")
    assert roles_module.API_LOGIN_PREFIX in first


def test_the_operator_hands_its_api_the_role_store_whenever_it_has_the_password() -> None:
    dsn = "host=db dbname=vigil"
    with_password = Settings.model_validate({"queue": {"dsn": dsn, "apiPassword": "api-pw"}})
    assert type(queue_store(with_password)) is ApiQueueStore
    without = Settings.model_validate({"queue": {"dsn": dsn}})
    roles_off = Settings.model_validate({"queue": {"dsn": dsn, "apiPassword": "pw", "tenantRoles": {"enabled": False}}})
    assert type(queue_store(without)) is QueueStore and type(queue_store(roles_off)) is QueueStore
