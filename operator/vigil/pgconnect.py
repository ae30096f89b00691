"""How every PostgreSQL connection is opened: bounded in time, and never JIT-compiled.

The queue store (vigil.queue: the trigger shards, the watchdog, the HTTP API's store, every
worker's connections) opens its connections here; the history database (vigil.history) takes
the same settings as its engine's connect arguments, without the statement timeout (its
migrations and retention run on the same engine).

Every statement of the volume tier touches a few rows through an index (a lease of a
batch, a heartbeat, an acknowledgement, a trigger batch, the watchdog's capped reads).
PostgreSQL's JIT compiles a statement whose *estimated* cost passes `jit_above_cost`
(100,000 by default), and an estimate can grow with the backlog even when the work does
not: with 50,000 ready executions analysed, the lease was estimated near 500,000 and
spent 680 ms compiling to lease 10 rows (0.3 ms without). So JIT is off on every
connection opened here, whatever the server's setting; the statements are also
shaped so that their estimates stay small (vigil/queue/sql/).

A connection is also bounded in time, so that no failure holds rows or a worker forever:

* `connect_timeout`: a server that does not answer is given up on (libpq's own timeout).
* `statement_timeout`: a statement that runs away (a plan gone wrong, a lock queue) ends.
* `idle_in_transaction_session_timeout`: a client that stalls inside a transaction (frozen,
  cut off) has its transaction rolled back by the server, so its row locks go.
* TCP keepalives and `tcp_user_timeout`: a peer that vanished without a clean close (a
  proxy that stops forwarding, a node that lost power) is noticed by the kernel in a
  bounded time, on both ends: the client's next statement fails, and the server ends the
  backend, rolling back what it held.

The settings travel in the connection's startup packet (libpq's `options`), so they hold
from the first statement and need no extra round trip. A pooler in transaction mode that
drops startup options (PgBouncer without `ignore_startup_parameters`) refuses the
connection instead: point workers at the server, or at a session-mode pool.

Migrations get no statement timeout (an index build on a large table may take minutes),
only the rest.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo


@dataclasses.dataclass(frozen=True)
class ConnectionLimits:
    """Time bounds on one queue-store connection; each field's unit is in its name."""

    #: Give up on a server that does not accept the connection: a restarting database is back
    #: within seconds, and a caller that waits longer holds its own callers.
    connect_timeout_seconds: int = 10
    #: End a statement that runs longer: every statement here takes milliseconds, so a minute
    #: only ever ends one that went wrong (0: no limit, for migrations).
    statement_timeout_ms: int = 60_000
    #: Roll back a transaction whose client stopped talking mid-way, releasing its row locks:
    #: no transaction here waits on its client for more than a pipelined round trip.
    idle_in_transaction_timeout_ms: int = 30_000
    #: First TCP keepalive probe after this much silence, then one every interval, and the
    #: connection is dead after `keepalives_count` unanswered: about 30 + 3 x 5 = 45 s.
    keepalives_idle_seconds: int = 30
    keepalives_interval_seconds: int = 5
    keepalives_count: int = 3
    #: Data sent and not acknowledged for this long means the peer is gone (a proxy that
    #: stopped forwarding answers no keepalive either, but this catches it mid-statement).
    tcp_user_timeout_ms: int = 30_000

    def server_options(self) -> str:
        """The `options` string of the startup packet: the server-side settings."""
        settings = {
            "jit": "off",
            "statement_timeout": str(self.statement_timeout_ms),
            "idle_in_transaction_session_timeout": str(self.idle_in_transaction_timeout_ms),
            "tcp_keepalives_idle": str(self.keepalives_idle_seconds),
            "tcp_keepalives_interval": str(self.keepalives_interval_seconds),
            "tcp_keepalives_count": str(self.keepalives_count),
            "tcp_user_timeout": str(self.tcp_user_timeout_ms),
        }
        return " ".join(f"-c {name}={value}" for name, value in settings.items())

    def client_parameters(self) -> dict[str, Any]:
        """libpq's own (client-side) parameters."""
        return {
            "connect_timeout": self.connect_timeout_seconds,
            "keepalives": 1,
            "keepalives_idle": self.keepalives_idle_seconds,
            "keepalives_interval": self.keepalives_interval_seconds,
            "keepalives_count": self.keepalives_count,
            "tcp_user_timeout": self.tcp_user_timeout_ms,
        }


DEFAULT_LIMITS = ConnectionLimits()
#: Migrations may build an index on a large table, and the history's retention delete a day of rows:
#: no statement timeout for them.
MIGRATION_LIMITS = dataclasses.replace(DEFAULT_LIMITS, statement_timeout_ms=0)


def connect_arguments(limits: ConnectionLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The limits as psycopg's connect keyword arguments (SQLAlchemy's `connect_args`)."""
    return {**limits.client_parameters(), "options": limits.server_options()}


def bounded(dsn: str, limits: ConnectionLimits = DEFAULT_LIMITS) -> str:
    """`dsn` (a libpq key/value string or a postgresql:// URI) with the limits added.

    What the DSN sets itself wins for the client parameters; its own `options` are kept,
    after ours, so a `-c` it sets overrides ours.
    """
    given = conninfo_to_dict(dsn)
    parameters: dict[str, Any] = {**limits.client_parameters(), **given}
    own = str(given.get("options") or "")
    parameters["options"] = f"{limits.server_options()} {own}".strip()
    return make_conninfo("", **parameters)


def answers(dsn: str, *, timeout_seconds: int = 5) -> bool:
    """Whether the server behind `dsn` accepts a connection and a statement within the timeout."""
    limits = dataclasses.replace(DEFAULT_LIMITS, connect_timeout_seconds=timeout_seconds,
                                 statement_timeout_ms=timeout_seconds * 1000)  # fmt: skip
    try:
        with connect(dsn, autocommit=True, limits=limits) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def connect(
    dsn: str, *, autocommit: bool = False, limits: ConnectionLimits = DEFAULT_LIMITS
) -> psycopg.Connection[Any]:
    """A synchronous connection with the limits."""
    return psycopg.connect(bounded(dsn, limits), autocommit=autocommit)


async def connect_async(
    dsn: str, *, limits: ConnectionLimits = DEFAULT_LIMITS
) -> psycopg.AsyncConnection[Any]:
    """An asynchronous autocommit connection with the limits (a worker's)."""
    return await psycopg.AsyncConnection.connect(bounded(dsn, limits), autocommit=True)
