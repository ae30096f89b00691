"""Every PostgreSQL connection is bounded in time and never JIT-compiled (vigil/pgconnect.py; issue 36,
item 9, and issue 35), on real PostgreSQL.

* The settings arrive with the connection (its startup packet), for the queue store's connections
  and the history's engine alike; a DSN's own `options` come after them and win.
* A client cut off by a proxy that stops forwarding (tests/integration/tcpproxy.py: it answers
  nothing and closes nothing, as a wedged pooler or a dead NAT entry) while it holds row locks in a
  transaction: the server rolls that transaction back within its idle-in-transaction timeout, so
  another connection can lock the rows. Before, the locks stayed for as long as the kernel's
  keepalive (hours), and a shard's successor skipped the rows.
* A trigger shard's loop whose connection goes silent: its pass is broken off at its deadline
  (`ShardTrigger.abort`) and the loop goes on retrying, instead of its thread hanging for good.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.contract.postgres import PostgresServer
from tests.integration.tcpproxy import TcpProxy
from tests.waiting import wait_for
from vigil import pgconnect
from vigil.core.queue import Submission
from vigil.history.store import SqlHistory
from vigil.queue import trigger as trigger_module
from vigil.queue.store import QueueStore

pytestmark = pytest.mark.postgres

SHORT = dataclasses.replace(pgconnect.DEFAULT_LIMITS, idle_in_transaction_timeout_ms=1_000)
SETTINGS = ("jit", "statement_timeout", "idle_in_transaction_session_timeout", "tcp_keepalives_idle")


def shown(connection: psycopg.Connection[Any]) -> dict[str, str]:
    return {name: str(value) for name in SETTINGS for (value,) in connection.execute(f"SHOW {name}")}


@pytest.fixture
def proxy(dsn: str) -> Iterator[tuple[TcpProxy, str]]:
    """A relay in front of the test's server, and the test database's DSN through it."""
    parts = psycopg.conninfo.conninfo_to_dict(dsn)
    relay = TcpProxy(str(parts["host"]), int(parts["port"]))
    try:
        yield relay, psycopg.conninfo.make_conninfo(dsn, port=str(relay.port))
    finally:
        relay.close()


def test_the_queue_stores_connections_have_jit_off_and_time_bounds(dsn: str) -> None:
    with pgconnect.connect(dsn, autocommit=True) as connection:
        assert shown(connection) == {"jit": "off", "statement_timeout": "1min",
                                     "idle_in_transaction_session_timeout": "30s", "tcp_keepalives_idle": "30"}  # fmt: skip


def test_a_dsn_keeps_its_own_options_after_ours(dsn: str) -> None:
    with pgconnect.connect(f"{dsn} options='-c statement_timeout=5s'", autocommit=True) as connection:
        assert shown(connection)["statement_timeout"] == "5s"
        assert shown(connection)["jit"] == "off"


def test_the_history_engine_connects_with_the_same_bounds_but_no_statement_timeout(
    postgres: PostgresServer, dsn: str
) -> None:
    history = SqlHistory(postgres.database_dsn(str(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])))
    try:
        with history.engine.connect() as connection:
            got = {name: connection.exec_driver_sql(f"SHOW {name}").scalar() for name in SETTINGS}
    finally:
        history.close()
    assert got == {"jit": "off", "statement_timeout": "0", "idle_in_transaction_session_timeout": "30s",
                   "tcp_keepalives_idle": "30"}  # fmt: skip


def test_row_locks_of_a_client_cut_off_mid_transaction_go_within_the_idle_timeout(
    dsn: str, proxy: tuple[TcpProxy, str]
) -> None:
    relay, through = proxy
    ids = QueueStore(dsn).submit("ns/q", [Submission("record") for _ in range(3)], now=datetime.now(UTC))
    held = pgconnect.connect(through, limits=SHORT)
    try:
        held.execute("SELECT 1 FROM vigil_queue.executions WHERE execution_id = ANY(%s) FOR UPDATE", (ids,))
        relay.stop_forwarding()  # the holder is cut off mid-transaction, its socket still open
        cut = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as other:

            def free() -> bool:
                query = "SELECT execution_id FROM vigil_queue.executions WHERE execution_id = ANY(%s) FOR UPDATE SKIP LOCKED"
                return len(other.execute(query, (ids,)).fetchall()) == len(ids)

            wait_for(free, timeout=30, interval=0.1, what="the cut-off holder's row locks to go")
        assert time.monotonic() - cut < SHORT.idle_in_transaction_timeout_ms / 1000 + 5
    finally:
        relay.close()
        held.close()


def test_a_trigger_loop_whose_database_goes_silent_breaks_its_pass_off_and_retries(proxy: tuple[TcpProxy, str]) -> None:
    relay, through = proxy
    trigger = trigger_module.ShardTrigger(through, shard=0)
    now = datetime.now(UTC)
    trigger.run_pass(now=now)  # connected, through the relay
    errors = threading.Semaphore(0)
    stop = threading.Event()
    relay.stop_forwarding()
    loop = threading.Thread(
        target=trigger_module.run,
        kwargs={"trigger": trigger, "clock": lambda: datetime.now(UTC), "stop": stop,
                "on_error": errors.release, "pass_deadline": timedelta(seconds=1)},
    )
    began = time.monotonic()
    loop.start()
    try:
        assert errors.acquire(timeout=30), "the silent pass was never broken off"
        assert time.monotonic() - began < 1 + 5
    finally:
        stop.set()
        relay.close()  # the next connect fails fast: the loop sees `stop` and ends
        loop.join(timeout=60)
    assert not loop.is_alive()
