"""Each namespace's own database role: what its workers log in as, never the owner.

A namespace with a TaskQueue gets one login role (`ensure`), made by the operator's leader
(vigil.kube.controllers.queuecredentials), which keeps its DSN in a Secret of that namespace. The role has no
privilege on any table; it is granted USAGE on the `vigil_queue` schema and EXECUTE on the
workers' functions (vigil.queue.functions), which confine every call to the namespace
`tenant_roles` maps the role to. It may open at most `connections` sessions, and each statement and
idle transaction of it is cut off after its timeout. When the namespace's last TaskQueue goes, the
role goes (`remove`): its sessions are ended, its grants revoked, the role dropped.

Beside it, each namespace gets an API role (`<role>_api`, NOLOGIN): the operator's HTTP API acts
for the namespace by `SET ROLE` to it from its own login role (`ensure_api_login`, granted every
namespace's API role and no table), and the API role may only EXECUTE the API's functions, confined
to that namespace (vigil.queue.functions). The workers' role cannot take it, and the API cannot call
the workers' functions: neither holds the other's powers.

Roles belong to the whole PostgreSQL server, not one database; a role's name carries a digest of
the database's name and the namespace's, so two installations on one server (two databases) never
share a role. Making roles needs the owner to have CREATEROLE (a superuser has it).
"""

from __future__ import annotations

import dataclasses
import hashlib
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from vigil import pgconnect
from vigil.queue import functions

ROLE_PREFIX = "vigil_"
API_LOGIN_PREFIX = "vigil_api_"
API_LOGIN_CONNECTIONS = 50  # every replica's API sessions (one per request in flight) together
ROLES_LOCK = "SELECT pg_advisory_xact_lock(hashtext('vigil_queue_roles'))"  # two replicas make one role


@dataclasses.dataclass(frozen=True)
class RoleLimits:
    """What one namespace's role may hold (the chart's `queue.tenantRoles`)."""

    connections: int = 20
    statement_timeout: timedelta = timedelta(seconds=60)
    idle_in_transaction_timeout: timedelta = timedelta(seconds=30)


def role_name(database: str, namespace: str) -> str:
    """The role of `namespace` in `database`: readable, unique per (database, namespace), ≤ 63 bytes."""
    digest = hashlib.sha256(f"{database}/{namespace}".encode()).hexdigest()[:10]
    return f"{ROLE_PREFIX}{namespace[:40]}_{digest}"


def api_role_name(database: str, namespace: str) -> str:
    """The API role of `namespace` in `database` (≤ 61 bytes; it never equals a workers' role, whose
    name ends in hex digits)."""
    return role_name(database, namespace) + functions.API_ROLE_SUFFIX


def api_login_name(database: str) -> str:
    """The HTTP API's login role in `database`: one per database, shared by the operator's replicas."""
    return API_LOGIN_PREFIX + hashlib.sha256(database.encode()).hexdigest()[:10]


class TenantRoles:
    """Make, list and drop the namespaces' roles, on the owner's connection (`dsn`)."""

    def __init__(self, dsn: str, *, limits: RoleLimits | None = None, host: str | None = None) -> None:
        """`limits`: each new role's (`provision`); `host`: what the workers' DSNs name, when not the
        owner DSN's host."""
        self.dsn = dsn
        self.limits = limits or RoleLimits()
        self.host = host

    def provision(self, namespace: str, *, password: str) -> str:
        """`ensure` with this store's limits; returns the DSN the namespace's workers use."""
        role = self.ensure(namespace, password=password, limits=self.limits)
        return worker_dsn(self.dsn, role=role, password=password, host=self.host)

    def provisioned(self) -> dict[str, str]:
        """Each namespace that has a role, and the role's name."""
        with pgconnect.connect(self.dsn) as connection:
            rows = connection.execute("SELECT namespace, role FROM vigil_queue.tenant_roles").fetchall()
        return {str(namespace): str(role) for namespace, role in rows}

    def ensure(self, namespace: str, *, password: str, limits: RoleLimits) -> str:
        """Make `namespace`'s role, or set its password and limits anew; returns its name."""
        if not namespace or namespace == "*":
            raise ValueError(f"no role for namespace {namespace!r}")
        with pgconnect.connect(self.dsn) as connection, connection.transaction():
            connection.execute(ROLES_LOCK)
            database = str(_one(connection, "SELECT current_database()"))
            role = role_name(database, namespace)
            exists = _one(connection, "SELECT count(*) FROM pg_roles WHERE rolname = %s", role)
            verb = "ALTER" if exists else "CREATE"
            connection.execute(
                sql.SQL(
                    "{} ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS "
                    "NOINHERIT CONNECTION LIMIT {} PASSWORD {}"
                ).format(sql.SQL(verb), sql.Identifier(role), sql.Literal(limits.connections), sql.Literal(password))
            )
            for setting, value in (
                ("statement_timeout", limits.statement_timeout),
                ("idle_in_transaction_session_timeout", limits.idle_in_transaction_timeout),
            ):
                milliseconds = int(value.total_seconds() * 1000)
                connection.execute(
                    sql.SQL("ALTER ROLE {} SET {} = {}").format(
                        sql.Identifier(role), sql.Identifier(setting), sql.Literal(str(milliseconds))
                    )
                )
            connection.execute(functions.grant_sql(role))
            _ensure_api_role(connection, database, namespace)
            connection.execute(
                "INSERT INTO vigil_queue.tenant_roles (role, namespace) VALUES (%s, %s) "
                "ON CONFLICT (namespace) DO UPDATE SET role = excluded.role",
                (role, namespace),
            )
        return role

    def remove(self, namespace: str) -> None:
        """End the sessions of `namespace`'s role, revoke its grants and drop it."""
        with pgconnect.connect(self.dsn) as connection, connection.transaction():
            row = connection.execute(
                "DELETE FROM vigil_queue.tenant_roles WHERE namespace = %s RETURNING role", (namespace,)
            ).fetchone()
            if row is None:
                return
            role = str(row[0])
            connection.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
            )
            for each in (role, role + functions.API_ROLE_SUFFIX):
                if _one(connection, "SELECT count(*) FROM pg_roles WHERE rolname = %s", each):
                    connection.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(each)))
                    connection.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(each)))

    def ensure_api_login(self, *, password: str, connections: int = API_LOGIN_CONNECTIONS) -> str:
        """Make the HTTP API's login role (or set its password anew), grant it every namespace's API
        role (made here if a namespace's role predates them), and return the DSN the API uses.

        The login role holds no table and no function but the locating ones: all it may do for a
        namespace it does as that namespace's API role. Run by every replica when its API first
        needs the store; the replicas share the chart's password (a Secret), so they agree."""
        if not password:
            raise ValueError("the queue API's database role needs a password (queue.apiPassword)")
        with pgconnect.connect(self.dsn) as connection, connection.transaction():
            connection.execute(ROLES_LOCK)
            database = str(_one(connection, "SELECT current_database()"))
            login = api_login_name(database)
            exists = _one(connection, "SELECT count(*) FROM pg_roles WHERE rolname = %s", login)
            connection.execute(
                sql.SQL(
                    "{} ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS "
                    "NOINHERIT CONNECTION LIMIT {} PASSWORD {}"
                ).format(
                    sql.SQL("ALTER" if exists else "CREATE"), sql.Identifier(login),
                    sql.Literal(connections), sql.Literal(password),
                )
            )
            connection.execute(functions.login_grant_sql(login))
            for (namespace,) in connection.execute("SELECT namespace FROM vigil_queue.tenant_roles").fetchall():
                _ensure_api_role(connection, database, str(namespace))
        return worker_dsn(self.dsn, role=login, password=password)


def _ensure_api_role(connection: psycopg.Connection[Any], database: str, namespace: str) -> str:
    """Make `namespace`'s API role if missing, grant it the API's functions, and grant it to the
    API's login role when that exists (else `ensure_api_login` grants it when it makes the login)."""
    role = api_role_name(database, namespace)
    if not _one(connection, "SELECT count(*) FROM pg_roles WHERE rolname = %s", role):
        connection.execute(
            sql.SQL(
                "CREATE ROLE {} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS NOINHERIT"
            ).format(sql.Identifier(role))
        )
    connection.execute(functions.api_grant_sql(role))
    login = api_login_name(database)
    if _one(connection, "SELECT count(*) FROM pg_roles WHERE rolname = %s", login):
        connection.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(role), sql.Identifier(login)))
    return role


def worker_dsn(owner_dsn: str, *, role: str, password: str, host: str | None = None) -> str:
    """The DSN a namespace's workers use: the owner's server and database, the namespace's role."""
    params: dict[str, Any] = dict(psycopg.conninfo.conninfo_to_dict(owner_dsn))
    for owner_only in ("user", "password", "passfile", "options", "service"):
        params.pop(owner_only, None)
    if host:
        params["host"] = host
    return psycopg.conninfo.make_conninfo(**params, user=role, password=password)


def _one(connection: psycopg.Connection[Any], query: str, *args: Any) -> Any:
    row = connection.execute(query, args or None).fetchone()
    return None if row is None else row[0]
