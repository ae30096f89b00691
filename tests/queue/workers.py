"""Running workers for the queue tests: in this process (a thread with its own loop) or as `vigil worker`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from tests.queue.tasks import DSN_ENV
from vigil.core.executions import Backoff
from vigil.worker import REGISTRY, Worker, WorkerCounts, WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
#: Short enough that an expired lease is seen within a test's patience; heartbeats 4 per lease.
FAST = WorkerSettings(
    concurrency=4,
    lease=timedelta(seconds=2),
    heartbeat=timedelta(milliseconds=500),
    poll_interval=timedelta(milliseconds=200),
    expiry_interval=timedelta(milliseconds=200),
    drain_timeout=timedelta(seconds=20),
    backoff=Backoff(initial=timedelta(milliseconds=50), max=timedelta(milliseconds=200)),
)
FAST_ARGS = ["--concurrency", "4", "--lease", "2", "--heartbeat", "0.5", "--poll-interval", "0.2",
             "--expiry-interval", "0.2", "--drain-timeout", "20", "--backoff-initial", "0.05"]  # fmt: skip


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


@contextlib.contextmanager
def in_process(dsn: str, queue: str, settings: WorkerSettings = FAST) -> Iterator[WorkerCounts]:
    """A Worker on a thread of its own until the block ends; then stopped and drained."""
    worker = Worker(dsn=dsn, queue=queue, registry=REGISTRY, settings=settings, clock=SystemClock())
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    failure: list[BaseException] = []

    def main() -> None:
        try:
            loop.run_until_complete(worker.run(stop))
        except BaseException as error:
            failure.append(error)
        finally:
            loop.close()

    thread = threading.Thread(target=main, name=f"worker-{queue}")
    thread.start()
    try:
        yield worker.counts
    finally:
        with contextlib.suppress(RuntimeError):  # the loop ended already (a failure, raised below)
            loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=60)
        assert not thread.is_alive(), "the worker did not stop"
        if failure:
            raise failure[0]


def spawn(dsn: str, queue: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    """`vigil worker` in a subprocess running tests/queue/tasks.py, its output in `log`."""
    env = {**os.environ, DSN_ENV: dsn, "PYTHONPATH": f"{ROOT / 'operator'}:{ROOT}"}
    command = [sys.executable, "-m", "vigil", "worker", "--queue", queue, "--tasks", "tests.queue.tasks",
               *FAST_ARGS, *extra]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def runs(dsn: str, execution_id: str | None = None) -> list[tuple[str, int, int, str]]:
    """(execution id, attempt, pid, event) rows the tasks wrote, in order."""
    query = "SELECT execution_id, attempt, pid, event FROM runs"
    params: tuple[str, ...] = ()
    if execution_id is not None:
        query += " WHERE execution_id = %s"
        params = (execution_id,)
    with psycopg.connect(dsn) as connection:
        return [tuple(row) for row in connection.execute(query + " ORDER BY at", params)]


def release(dsn: str, execution_id: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("INSERT INTO releases VALUES (%s) ON CONFLICT DO NOTHING", (execution_id,))
