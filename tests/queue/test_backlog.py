"""A backlog on real PostgreSQL: the lease's plan and a worker's drain rate do not grow with the
queue's depth (issue 35).

With 50,000 ready executions analysed, the planner once estimated the lease near 500,000 (a
LIMIT taken from a column, guessed at a tenth of the table, times a hundred guessed tenants):
above `jit_above_cost`, so every lease was JIT-compiled (about 700 ms for 10 rows) and a
worker drained 15 executions a second. Here, on a connection with the server's own settings
(JIT on, as a DBA may leave it), the lease over 100,000 analysed rows is estimated below the
JIT threshold and is not compiled (every connection the queue package opens has JIT off
regardless: tests/queue/test_connections.py); and a worker drains a 100,000-deep queue at
about the rate it drains a 10,000-deep one. The comparison of rates is deliberately loose (half): it separates the two behaviours
(0.006x before) without timing the machine; `make bench backlog` measures the figures.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.queue.workers import FAST, in_process
from tests.waiting import wait_for
from vigil.core.queue import Submission
from vigil.queue.functions import (
    BY_KEY,
    BY_KEY_SETTINGS,
    PARAMETER_TYPES,
    PLACEHOLDER,
    PLANNED_ONCE_SETTINGS,
    parameters,
)
from vigil.queue.queries import QUERIES
from vigil.queue.store import QueueStore

pytestmark = pytest.mark.postgres

QUEUE = "ns/backlog"
DEEP, SHALLOW = 100_000, 10_000
DRAINED = 2_000  # executions timed at each depth
FILL_BATCH = 5_000
JIT_ABOVE_COST = 100_000.0  # PostgreSQL's default
LEASE_MS_BOUND = 50.0  # a lease of 10 from 100,000 rows: about 0.5 ms here; a JIT compile took 700


def fill(store: QueueStore, count: int, *, analyse: bool = True) -> None:
    now = datetime.now(UTC) - timedelta(seconds=1)
    for start in range(0, count, FILL_BATCH):
        store.submit(QUEUE, [Submission("nothing") for _ in range(min(FILL_BATCH, count - start))], now=now)
    if analyse:
        with psycopg.connect(store.dsn, autocommit=True) as connection:
            connection.execute("ANALYZE vigil_queue.executions")


def lease_params(limit: int = 10) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {"queue": QUEUE, "tasks": ["nothing"], "limit": limit, "now": now, "worker": "explain",
            "expires": now + timedelta(seconds=5), "tenant_cap": None, "tenant_caps": Jsonb({}),
            "reserved_priorities": [], "reserved_free": [], "shared_free": limit}  # fmt: skip


def explain(dsn: str, query: str, params: dict[str, Any]) -> dict[str, Any]:
    """EXPLAIN (ANALYZE) on a plain connection, the server's defaults (JIT on); rolled back."""
    with psycopg.connect(dsn) as connection:
        row = connection.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}", params).fetchone()
        connection.rollback()
    assert row is not None
    document = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return dict(document[0])


def drain_rate(dsn: str) -> float:
    """Executions per second one in-process worker finishes, over DRAINED of them."""

    def succeeded() -> int:
        with psycopg.connect(dsn, autocommit=True) as connection:
            row = connection.execute("SELECT count(*) FROM vigil_queue.executions WHERE state = 'succeeded'").fetchone()
            return int(row[0]) if row else 0

    with in_process(dsn, QUEUE, FAST):
        wait_for(lambda: succeeded() > 0, timeout=60, interval=0.05, what="the worker's first execution")
        began, first = time.monotonic(), succeeded()
        wait_for(lambda: succeeded() >= first + DRAINED, timeout=120, interval=0.05, what=f"{DRAINED} more")
        done = succeeded() - first
        return done / (time.monotonic() - began)


@pytest.fixture
def deep(store: QueueStore) -> QueueStore:
    fill(store, DEEP)
    return store


def test_the_lease_over_a_deep_analysed_queue_is_planned_cheap_and_never_jit_compiled(deep: QueueStore) -> None:
    plan = explain(deep.dsn, QUERIES["lease"], lease_params())
    assert plan["Plan"]["Total Cost"] < JIT_ABOVE_COST, plan["Plan"]["Total Cost"]
    assert "JIT" not in plan, plan.get("JIT")
    assert plan["Plan"]["Actual Rows"] == 10
    assert plan["Planning Time"] + plan["Execution Time"] < LEASE_MS_BOUND


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """A plan node and every node under it."""
    return [plan, *(node for child in plan.get("Plans", []) for node in nodes(child))]


def prepare(connection: psycopg.Connection[Any], block: str) -> str:
    """PREPARE `block` as its function runs it, named after it; the EXECUTE arguments (bound by a
    ClientCursor: a utility statement takes no server-side parameters)."""
    names = parameters(QUERIES[block])
    prepared = PLACEHOLDER.sub(lambda m: f"${names.index(m.group(1)) + 1}", QUERIES[block])
    connection.execute(f"PREPARE {block} ({', '.join(PARAMETER_TYPES[n] for n in names)}) AS {prepared}")
    return ", ".join(f"%({n})s::{PARAMETER_TYPES[n]}" for n in names)


def explained(row: tuple[Any, ...] | None) -> dict[str, Any]:
    """An `EXPLAIN (FORMAT JSON)` row's plan, and the scans of the executions in it (`scans`)."""
    assert row is not None
    plan = dict((row[0] if isinstance(row[0], list) else json.loads(row[0]))[0])
    scans = [n for n in nodes(plan["Plan"]) if n.get("Relation Name") == "executions" and n["Node Type"] != "ModifyTable"]
    plan["scans"] = [n["Node Type"] for n in scans]
    plan["read"] = sum(int(n.get("Actual Rows", 0)) * int(n.get("Actual Loops", 1)) for n in scans)  # executions read
    return plan


YOUNG = 200  # rows a stream has submitted, unanalysed, when a worker's first lease plans


@pytest.mark.parametrize("planned", ["over the backlog", "on the empty queue before it", "on a young queue before it"])
def test_the_lease_functions_generic_plan_reads_a_deep_queue_by_index(store: QueueStore, planned: str) -> None:
    """The lease's function plans it once per session (a generic plan, made without the
    parameters' values): planned anew at each call, it took twice its execution. Such a plan
    guesses every LIMIT at a tenth of the table, so its estimated cost grows with the backlog; what
    must not grow is its work: every read of the executions by an index, 10 rows leased, within
    the same bound as the plan made with the values; and so when the session made it on an empty
    queue and the backlog came after (a new queue's first burst), since the plan is kept until an
    ANALYZE; and when it was made on a young queue, a few hundred rows a stream had submitted and
    no statistics. Made on an empty or young queue with sequential scans allowed, the plan joined
    the chosen rows to the executions by reading the whole table, for every lease until the next
    ANALYZE: the lease function turns them off. (The function runs with JIT off, so the estimate
    compiles nothing: test_roles.py)"""
    if planned == "over the backlog":
        fill(store, DEEP)
    with psycopg.connect(store.dsn, autocommit=True) as connection:
        for name, value in (*PLANNED_ONCE_SETTINGS, ("jit", "off")):  # the lease function's own
            connection.execute(f"SET {name} = {value}")
        arguments = prepare(connection, "lease")
        cursor = psycopg.ClientCursor(connection)
        if planned == "on a young queue before it":
            fill(store, YOUNG, analyse=False)  # a worker started into a stream: a few pages, no statistics
        cursor.execute(f"EXECUTE lease ({arguments})", lease_params())  # the session's plan made
        if planned != "over the backlog":
            fill(store, DEEP, analyse=False)  # an ANALYZE would have the plan made again
        plan = explained(cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE lease ({arguments})", lease_params()).fetchone())
    assert plan["scans"] and "Seq Scan" not in plan["scans"], plan["scans"]
    assert plan["Plan"]["Actual Rows"] == 10
    assert plan["Planning Time"] + plan["Execution Time"] < LEASE_MS_BOUND


def test_a_worker_drains_a_deep_queue_about_as_fast_as_a_shallow_one(postgres: Any, deep: QueueStore) -> None:
    from tests.queue.conftest import conninfo

    shallow = QueueStore(conninfo(postgres, postgres.create_database()))
    shallow.migrate()
    fill(shallow, SHALLOW)
    at_shallow = drain_rate(shallow.dsn)
    at_deep = drain_rate(deep.dsn)
    assert at_deep >= 0.5 * at_shallow, f"{at_deep:.0f}/s at {DEEP:,} vs {at_shallow:.0f}/s at {SHALLOW:,}"


def by_key(block: str, ids: list[str]) -> dict[str, Any]:
    """The parameters of a by-key statement (`BY_KEY`) naming the executions `ids`: a batch's
    acknowledgement, heartbeat or attempt rows, or (settle) the first of them."""
    now, n = datetime.now(UTC), len(ids)
    held = {"queue": QUEUE, "execution_ids": ids, "attempts": [1] * n, "tokens": [uuid.uuid4() for _ in ids], "worker": "w"}
    return {
        "record_attempts": {"queue": QUEUE, "execution_ids": ids, "attempts": [1] * n, "workers": ["w"] * n,
                            "outcomes": ["succeeded"] * n, "started": [now] * n, "finished": [now] * n, "errors": [None] * n},
        "settle_succeeded": {**held, "outputs": [None] * n, "started": [now] * n, "finished": [now] * n, "now": now},
        "heartbeat": {**held, "expires": now},
        "settle": {"queue": QUEUE, "execution_id": ids[0], "attempt": 1, "token": uuid.uuid4(), "worker": "w",
                   "state": "succeeded", "next_attempt": 1, "run_after": None, "error": None, "now": now},
    }[block]  # fmt: skip


@pytest.mark.parametrize("block", sorted(BY_KEY))
def test_a_by_key_statement_planned_on_a_young_queue_reads_only_its_batch(store: QueueStore, block: str) -> None:
    """The statements of an acknowledgement, a heartbeat and the attempts' rows read each execution
    by key. A session keeps a plan once PostgreSQL settles on one, and a worker started into a stream
    makes it on a young, unanalysed queue, whose statistics say almost nothing is ready: such a plan
    read the whole table for each batch (`record_attempts`: 3.5 s a batch of 2,400 at 50,000 rows;
    the streaming worker ran 630 executions/s, not 6,000), or (`settle_succeeded`, whose states are
    each a partial index) every ready execution of the queue through a bitmap of those indexes, for
    each acknowledgement (9,190 rows read to settle 90, 7 ms a call, in a stream of 4 workers),
    until the next ANALYZE. Their functions turn sequential and bitmap scans off (`BY_KEY_SETTINGS`).
    The plan made on the young queue is forced here, as the session's plan cache would keep it."""
    fill(store, YOUNG, analyse=False)
    with psycopg.connect(store.dsn, autocommit=True) as connection:
        for name, value in (*BY_KEY_SETTINGS, ("jit", "off"), ("plan_cache_mode", "force_generic_plan")):
            connection.execute(f"SET {name} = {value}")
        arguments = prepare(connection, block)
        cursor = psycopg.ClientCursor(connection)
        young = [r[0] for r in connection.execute("SELECT execution_id FROM vigil_queue.executions LIMIT 10")]
        cursor.execute(f"EXECUTE {block} ({arguments})", by_key(block, young))  # the session's plan made
        fill(store, DEEP, analyse=False)  # an ANALYZE would have the plan made again
        ids = [r[0] for r in connection.execute("SELECT execution_id FROM vigil_queue.executions ORDER BY execution_id DESC LIMIT 500")]
        plan = explained(cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {block} ({arguments})", by_key(block, ids)).fetchone())
    assert plan["scans"] and set(plan["scans"]) <= {"Index Scan", "Index Only Scan"}, plan["scans"]
    assert plan["read"] <= len(ids), f"{plan['read']} executions read for a batch of {len(ids)}"
