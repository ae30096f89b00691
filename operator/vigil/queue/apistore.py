"""The HTTP API's queue store: every operation as the namespace's own API role, never the owner.

The operator's HTTP API (vigil.api.queue, served by every replica) authorises each caller with
Kubernetes, then reads and writes the store. `ApiQueueStore` does that writing with the least the
database will grant it:

* It logs in as the API's login role (`vigil.queue.roles.TenantRoles.ensure_api_login`: made by
  the owner when the store is first used, its password the chart's Secret), which holds no table
  and may call only the two locating functions (which queue holds an execution or job id).
* For each operation it opens a transaction, learns the namespace (the queue the request names, or
  the one that holds the id), and `SET LOCAL ROLE` to that namespace's API role: the only roles it
  may take are those the owner granted it, one per namespace with a TaskQueue. As that role it may
  only EXECUTE the API's functions (`vigil_queue.api_<block>`, the same blocks of sql/*.sql the
  owner's QueueStore sends), and each function confines itself to the namespace of the role the
  session took (vigil.queue.functions: the namespace comes from the grant, never an argument).
  The role ends with the transaction.
* A namespace with no TaskQueue has no role: its reads answer as for an unknown id or an empty
  queue, its submissions raise QueueUndeclared (the API's 404).

So a fault in the API's routes can reach at most the namespace the request names (or the id's),
never another one's rows, the tables themselves, the history, or the owner's powers.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql

from vigil import pgconnect
from vigil.queue import bounds, roles
from vigil.queue.functions import API_CALLS, LOCATE_CALLS
from vigil.queue.store import QueueStore


class ApiQueueStore(QueueStore):
    """QueueStore's HTTP API operations (vigil.api.queuebase.JobStore) as the namespaces' API roles.

    `dsn` is the owner's: used only to migrate and to make the API's login role (`password`);
    every operation connects as that login role. Only the JobStore operations are for use: the
    owner's own (submit, declare, purge, ...) are refused by the database under this login.
    """

    statements = API_CALLS

    def __init__(self, dsn: str, *, password: str, migrate_first: bool = True, shards: int = 1) -> None:
        super().__init__(dsn, migrate_first=migrate_first, shards=shards)
        self._password = password
        self._login: str | None = None  # the API login role's DSN, once made
        self._making_login = threading.Lock()

    def connect(self) -> psycopg.Connection[Any]:
        """A connection as the API's login role (made by the owner the first time it is needed)."""
        if self._login is None:
            with self._making_login:
                if self._login is None:
                    self._login = roles.TenantRoles(self.dsn).ensure_api_login(password=self._password)
        return pgconnect.connect(self._login)

    @contextlib.contextmanager
    def _acting(
        self, *, queue: str | None = None, execution_id: str | None = None, job_id: str | None = None
    ) -> Iterator[psycopg.Connection[Any] | None]:
        with self.connect() as connection, connection.transaction():
            if queue is None:
                queue = _locate(connection, execution_id=execution_id, job_id=job_id)
            role = None if queue is None else _api_role(connection, bounds.namespace_of(queue))
            if role is None:
                yield None
                return
            connection.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
            yield connection


def _locate(connection: psycopg.Connection[Any], *, execution_id: str | None, job_id: str | None) -> str | None:
    """The queue that holds the execution (or job) of that id, asked as the login role; None: none."""
    if execution_id is not None:
        row = connection.execute(LOCATE_CALLS["locate_execution"], {"execution_id": execution_id}).fetchone()
    elif job_id is not None:
        row = connection.execute(LOCATE_CALLS["locate_job"], {"job_id": job_id}).fetchone()
    else:
        raise ValueError("an operation of the queue API names a queue, an execution id or a job id")
    return None if row is None else str(row[0])


def _api_role(connection: psycopg.Connection[Any], namespace: str) -> str | None:
    """`namespace`'s API role if this login may take it (the namespace has a TaskQueue), else None.

    Asked first, because a refused SET ROLE would end the transaction with an error."""
    if not namespace:
        return None
    database = connection.execute("SELECT current_database()").fetchone()
    assert database is not None
    role = roles.api_role_name(str(database[0]), namespace)
    row = connection.execute(
        "SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = %s AND pg_catalog.pg_has_role(rolname, 'MEMBER')",
        (role,),
    ).fetchone()
    return None if row is None else role
