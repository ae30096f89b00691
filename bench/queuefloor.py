"""The SQL floor of a PostgreSQL queue, and what each system's statements cost per execution.

The **floor** is the least a correct at-least-once PostgreSQL queue does: plain psycopg processes
that lease WORKER_SLOTS rows with `FOR UPDATE SKIP LOCKED` (one UPDATE ... RETURNING) and
acknowledge the batch (one UPDATE), on a table of id, state, payload and lease deadline, with
nothing else: no tenants, priorities, attempts, heartbeats or retries. It is the reference for
what the server allows (bench/queue.py streams into it, bench/backlog.py drains it).

**Statement time per execution**: the server runs with `pg_stat_statements` (top-level statements
only, so a function's own statements are counted once, inside its call); after a run, the time
PostgreSQL spent executing the statements of that database, the poller's counts left out,
divided by the executions done.

`python -m bench.queuefloor floor-worker --dsn DSN` is one floor process (spawned by the sections).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

ROOT = Path(__file__).resolve().parents[1]
WORKER_SLOTS = 10  # executions a worker process runs at once, and leases per round trip (every system)
POLL_SECONDS = 0.05
READY_LINE = "bench worker ready"
FILL_BATCH = 5_000  # rows inserted per statement while filling a backlog

#: The servers' settings: PostgreSQL's defaults (durable), and statement statistics kept.
STATEMENT_STATS: Mapping[str, str] = {"shared_preload_libraries": "pg_stat_statements"}

SCHEMA = """
CREATE TABLE floor_jobs (
    id bigserial PRIMARY KEY,
    state text NOT NULL DEFAULT 'ready',
    payload jsonb NOT NULL,
    lease_expires_at timestamptz
);
CREATE INDEX floor_jobs_ready ON floor_jobs (id) WHERE state = 'ready';
"""
LEASE = """
UPDATE floor_jobs SET state = 'leased', lease_expires_at = now() + interval '5 seconds'
WHERE id IN (SELECT id FROM floor_jobs WHERE state = 'ready' ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED)
RETURNING id, payload
"""
ACK = "UPDATE floor_jobs SET state = 'done', lease_expires_at = NULL WHERE id = ANY(%(ids)s) AND state = 'leased'"
INSERT = "INSERT INTO floor_jobs (payload) SELECT %(p)s FROM generate_series(1, %(n)s)"
DONE = "SELECT count(*) FROM floor_jobs WHERE state = 'done'"


def spawn_process(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A worker process of any system, its output in `log`."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'operator'}:{ROOT}"}
    with log.open("ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def install(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(SCHEMA)


def submit(dsn: str, n: int) -> None:
    """`n` ready rows, FILL_BATCH per statement."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        for start in range(0, n, FILL_BATCH):
            connection.execute(INSERT, {"p": Jsonb({}), "n": min(FILL_BATCH, n - start)})


def fill(dsn: str, n: int) -> None:
    install(dsn)
    submit(dsn, n)


def spawn(dsn: str, log: Path) -> subprocess.Popen[bytes]:
    return spawn_process([sys.executable, "-m", "bench.queuefloor", "floor-worker", "--dsn", dsn], log)


def worker(dsn: str) -> None:
    """One floor process: lease WORKER_SLOTS, acknowledge them, until SIGTERM."""
    stop = False

    def halt(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, halt)
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(LEASE, {"limit": 0})  # connected and planned
        print(READY_LINE, flush=True)
        while not stop:
            ids = [row[0] for row in connection.execute(LEASE, {"limit": WORKER_SLOTS}).fetchall()]
            if ids:
                connection.execute(ACK, {"ids": ids})
            else:
                time.sleep(POLL_SECONDS)  # an empty queue: the floor polls like the others


def track_statements(dsn: str) -> None:
    """Statement statistics readable in this database, and the server's WAL counters, counted from now."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        connection.execute("SELECT pg_stat_statements_reset()")
        connection.execute("SELECT pg_stat_reset_shared('wal')")


@dataclass(frozen=True)
class StatementCost:
    """What PostgreSQL spent since `track_statements`: this database's statement time (the
    poller's counts and the statistics' own reads left out), and the server's WAL: bytes
    written and flushes to disk (each a write IOPS at `synchronous_commit = on`; autovacuum's
    share included, as a real server pays it)."""

    ms: float
    wal_bytes: float
    wal_flushes: float

    def per(self, executions: int) -> StatementCost:
        """The same, per one of `executions`."""
        n = max(1, executions)
        return StatementCost(self.ms / n, self.wal_bytes / n, self.wal_flushes / n)


def statement_cost(dsn: str) -> StatementCost:
    """PostgreSQL's cost since `track_statements` (see StatementCost)."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        row = connection.execute(
            "SELECT COALESCE(sum(s.total_exec_time), 0) FROM pg_stat_statements AS s"
            " JOIN pg_database AS d ON d.oid = s.dbid WHERE d.datname = current_database()"
            " AND s.query NOT ILIKE 'SELECT count(*)%' AND s.query NOT ILIKE '%pg_stat_statements%'"
        ).fetchone()
        wal = connection.execute("SELECT wal_bytes, wal_sync FROM pg_stat_wal").fetchone()
    assert row is not None and wal is not None
    return StatementCost(float(row[0]), int(wal[0]), int(wal[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.queuefloor", description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["floor-worker"])
    parser.add_argument("--dsn", required=True)
    args = parser.parse_args(argv)
    worker(args.dsn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
