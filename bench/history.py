"""History inserts per second, on SQLite and on PostgreSQL: `python -m bench.history [--records N]`.

`run(dsn, n)` migrates the database at `dsn`, then writes `n` fresh attempt
records through `SqlHistory.write` in batches of 500, one transaction each (the
operator's history flusher writes up to 200 executions' attempts per transaction), spread over a few days so PostgreSQL
creates and fills several daily partitions, and returns records written per
second of wall time. Each record is a new row: the upsert's insert path.

`__main__` measures a SQLite file in a temporary directory and a throwaway
PostgreSQL server started from Debian's packages (tests/contract/postgres.py)
with PostgreSQL's default durability settings (fsync on), not the test
suite's fast ones. Prints figures; never fails for being slow. The machine is
small and shared, so read the numbers as a floor.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.contract.postgres import DURABLE_SETTINGS, PostgresServer
from vigil.core.history import AttemptRecord, AttemptState
from vigil.history.store import SqlHistory

DEFAULT_RECORDS = 20_000
DAYS_SPANNED = 4  # records spread over this many UTC days (PostgreSQL partitions)
FIRST_DAY = datetime(2026, 5, 1, tzinfo=UTC)


def records(n: int) -> list[AttemptRecord]:
    """`n` distinct finished attempts, 3 per execution, over DAYS_SPANNED days."""
    step = timedelta(days=DAYS_SPANNED) / max(1, n)
    made = []
    for i in range(n):
        scheduled = FIRST_DAY + step * (i - i % 3)
        made.append(
            AttemptRecord(
                execution_id=f"bench-{i // 3:08d}",
                attempt=i % 3 + 1,
                namespace=f"team-{i % 10}",
                job=f"job-{i % 1000:04d}",
                job_uid=f"uid-{i % 1000:04d}",
                priority="normal",
                state=AttemptState.SUCCEEDED if i % 3 == 2 else AttemptState.FAILED,
                scheduled_for=scheduled,
                started_at=scheduled + timedelta(seconds=1),
                finished_at=scheduled + timedelta(seconds=5),
                pod=f"bench-{i // 3:08d}-{i % 3 + 1}",
                reason="" if i % 3 == 2 else "PodFailed",
                error="" if i % 3 == 2 else "exit code 1",
            )
        )
    return made


BATCH_SIZE = 500  # records per write: one transaction, a few milliseconds on either database

def run(dsn: str, n: int) -> float:
    """Write `n` new attempt records to the history database at `dsn`; returns inserts per second."""
    history = SqlHistory(dsn, retention_days=3650)
    try:
        history.migrate()
        batch = records(n)
        started = time.perf_counter()
        for start in range(0, n, BATCH_SIZE):
            history.write(batch[start : start + BATCH_SIZE])
        elapsed = time.perf_counter() - started
    finally:
        history.close()
    return n / elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.history")
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS)
    args = parser.parse_args(argv)
    print(
        f"# history inserts/s — {args.records} records, batches of {BATCH_SIZE}, {os.cpu_count()} cores"
    )
    with tempfile.TemporaryDirectory(prefix="vigil-bench-") as workdir:
        sqlite_rate = run(f"sqlite:///{Path(workdir) / 'history.db'}", args.records)
    print(f"  sqlite      {sqlite_rate:10,.0f} inserts/s  (file, WAL)")
    server = PostgresServer.create(settings=DURABLE_SETTINGS)
    try:
        postgres_rate = run(server.create_database("bench"), args.records)
    finally:
        server.drop()
    print(
        f"  postgresql  {postgres_rate:10,.0f} inserts/s  (local server, fsync on, {DAYS_SPANNED} daily partitions)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
