"""The volume tier's throughput beside pgqueuer's, on the same PostgreSQL in the same run.

`python -m bench queue` (or `python -m bench.queue [--executions N] [--workers 1,2,4]`).
For each number of worker processes, each system gets a fresh database on one
PostgreSQL server (Debian's, PostgreSQL's default durability: fsync on) and:

1. starts that many worker processes and waits until each says it is ready;
2. starts the clock, submits N no-op executions in batches of SUBMIT_BATCH (one
   transaction each), and stops the clock when all N are done.

Vigil: `vigil worker` processes (`--concurrency/--batch` WORKER_SLOTS) running
the async no-op task of this module, heartbeats on (every HEARTBEAT_SECONDS,
so several happen during a run), every attempt written to `attempts`; done is
`state = 'succeeded'` for all N. pgqueuer: `QueueManager` processes (psycopg
driver, `batch_size` WORKER_SLOTS) running an async no-op entrypoint; done is
N `successful` rows in its log table (aggregation off, so none move away). Each
runs on its own default loop: pgqueuer on uvloop (its dependency, which its command
line `pgq run` uses), `vigil worker` on asyncio's (uvloop measured no faster for it).
Both are asked "how many done?" by the same poller, every POLL_SECONDS.

The **SQL floor** (bench/queuefloor.py: plain processes leasing a batch with `FOR UPDATE SKIP
LOCKED` and acknowledging it) is streamed into the same way, as the reference for what this
server allows. The server keeps `pg_stat_statements`, so each system's PostgreSQL statement time
per execution is printed too: what decides how many executions one PostgreSQL core can serve.

Then, at the largest process count, Vigil twice more on a namespace's queue: its workers logged in
as the owner, then as the namespace's own role (vigil.queue.roles, as the chart's workers are),
whose ratio is what the role's functions and checks cost.

Last, a worker's start on the same server (bench/queuestart.py): from spawning one worker
process to its first task running, one execution ready beforehand, Vigil's median beside
pgqueuer's. The throughput runs above wait for every worker to be ready before their clock
starts, so no start is in those figures.

The rate is executions per second of wall time, submit included; the ratio is
Vigil's over pgqueuer's (above 1: Vigil is faster). A run that reaches its
deadline prints a censored lower bound (bench/reporting.py). The machine is
small and shared: read the ratio, not the absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, LiteralString

import psycopg

from bench import queuefloor, queuestart
from bench.queuefloor import POLL_SECONDS, READY_LINE, WORKER_SLOTS, spawn_process
from bench.reporting import Completion, Row, rate, ratio, table
from tests.contract.postgres import DURABLE_SETTINGS, PostgresServer
from vigil.queue.roles import TenantRoles
from vigil.queue.store import QueueStore, Submission
from vigil.worker import Context, task

QUEUE = "bench"
ROLES_QUEUE = "bench/roles"  # a namespace's queue: its role may use it
DEFAULT_EXECUTIONS = 50_000  # about 15 s per measurement here: 20,000 (5 s) left ratios at 4 processes swinging 0.76x-1.08x
DEFAULT_WORKERS = (1, 2, 4)
SUBMIT_BATCH = 500
HEARTBEAT_SECONDS = 1.0
LEASE_SECONDS = 5.0
READY_TIMEOUT_S = 60.0
DEADLINE_S = 600.0


@task("noop")
async def noop(ctx: Context) -> None:
    """The measured work: nothing, so the figure is the queue's own cost."""


# -- the workers -------------------------------------------------------------------------------


def spawn_vigil(dsn: str, log: Path, *, queue: str = QUEUE) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "vigil", "worker", "--queue", queue, "--tasks", "bench.queue",
               "--dsn", dsn, "--concurrency", str(WORKER_SLOTS), "--batch", str(WORKER_SLOTS),
               "--heartbeat", str(HEARTBEAT_SECONDS), "--lease", str(LEASE_SECONDS)]  # fmt: skip
    return spawn_process(command, log)


def spawn_peer(dsn: str, log: Path) -> subprocess.Popen[bytes]:
    return spawn_process([sys.executable, "-m", "bench.queue", "peer-worker", "--dsn", dsn], log)


async def peer_worker(dsn: str) -> None:
    """One pgqueuer worker process: an async no-op entrypoint until SIGTERM."""
    from pgqueuer import PsycopgDriver, Queries, QueueManager
    from pgqueuer.models import Job

    connection = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    qm = QueueManager(Queries(PsycopgDriver(connection)))

    @qm.entrypoint("noop")
    async def peer_noop(job: Job) -> None:
        """The same nothing."""

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, qm.shutdown.set)
    print(READY_LINE, flush=True)
    await qm.run(batch_size=WORKER_SLOTS, log_aggregation_interval=timedelta(0))
    await connection.close()


# -- one measurement ---------------------------------------------------------------------------


def wait_ready(processes: list[subprocess.Popen[bytes]], logs: list[Path], marker: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not all(marker in log.read_text() for log in logs):
        if any(p.poll() is not None for p in processes) or time.monotonic() > deadline:
            raise RuntimeError(f"a worker did not start: see {', '.join(map(str, logs))}")
        time.sleep(POLL_SECONDS)


def measure(
    dsn: str,
    workers: int,
    executions: int,
    *,
    spawn: Callable[[str, Path], subprocess.Popen[bytes]],
    marker: str,
    submit: Callable[[int], None],
    done: Callable[[], int],
    logs: Path,
) -> Completion:
    """Start `workers` processes, submit `executions` in batches, time until `done()` counts them all."""
    paths = [logs / f"worker-{i}.log" for i in range(workers)]
    processes = [spawn(dsn, path) for path in paths]
    try:
        wait_ready(processes, paths, marker)
        began = time.monotonic()
        for start in range(0, executions, SUBMIT_BATCH):
            submit(min(SUBMIT_BATCH, executions - start))
        finished = done()
        while finished < executions and time.monotonic() - began < DEADLINE_S:
            if any(p.poll() is not None for p in processes):
                print(f"  a worker exited early: see {logs}")
                break
            time.sleep(POLL_SECONDS)
            finished = done()
        return Completion(finished, executions, time.monotonic() - began)
    finally:
        stop_all(processes)


def stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every worker, then wait for each (killed after a minute)."""
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def count(connection: psycopg.Connection[Any], query: LiteralString) -> int:
    """The number a `SELECT count(*)` answers (always one row)."""
    row = connection.execute(query).fetchone()
    assert row is not None, query
    return int(row[0])


@dataclass(frozen=True)
class Run:
    """One system's run: its completion, and PostgreSQL's cost per execution done."""

    done: Completion
    cost: queuefloor.StatementCost

    @property
    def statement_ms(self) -> float:
        return self.cost.ms


def timed(dsn: str, run: Callable[[], Completion]) -> Run:
    queuefloor.track_statements(dsn)
    done = run()
    return Run(done, queuefloor.statement_cost(dsn).per(done.finished))


def vigil_run(
    server: PostgresServer, workers: int, executions: int, logs: Path, *, queue: str = QUEUE, own_role: bool = False
) -> Run:
    """`own_role`: the workers log in as the queue's namespace's role (vigil.queue.roles), as the
    chart's workers do, instead of the owner."""
    dsn = server.conninfo(server.create_database().rsplit("/", 1)[1])
    store = QueueStore(dsn)
    store.migrate()
    workers_dsn = TenantRoles(dsn).provision(queue.split("/")[0], password="bench") if own_role else dsn

    def submit(count: int) -> None:
        store.submit(queue, [Submission("noop") for _ in range(count)], now=datetime.now(UTC))

    with psycopg.connect(dsn, autocommit=True) as poller:

        def done() -> int:
            return count(poller, "SELECT count(*) FROM vigil_queue.executions WHERE state = 'succeeded'")

        def spawn(_: str, log: Path) -> subprocess.Popen[bytes]:
            return spawn_vigil(workers_dsn, log, queue=queue)

        return timed(dsn, lambda: measure(dsn, workers, executions, spawn=spawn, marker="tasks noop",
                                          submit=submit, done=done, logs=logs))  # fmt: skip


def peer_run(server: PostgresServer, workers: int, executions: int, logs: Path) -> Run:
    from pgqueuer import PsycopgDriver, Queries

    dsn = server.conninfo(server.create_database().rsplit("/", 1)[1])

    async def install() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            await Queries(PsycopgDriver(connection)).install()

    asyncio.run(install())

    def submit(count: int) -> None:
        async def enqueue() -> None:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
                await Queries(PsycopgDriver(connection)).enqueue(["noop"] * count, [None] * count, [0] * count)

        asyncio.run(enqueue())

    with psycopg.connect(dsn, autocommit=True) as poller:

        def done() -> int:
            return count(poller, "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")

        return timed(dsn, lambda: measure(dsn, workers, executions, spawn=spawn_peer, marker=READY_LINE,
                                          submit=submit, done=done, logs=logs))  # fmt: skip


def floor_run(server: PostgresServer, workers: int, executions: int, logs: Path) -> Run:
    """The SQL floor (bench.queuefloor) streamed into the same way: its processes started, then the
    rows submitted in batches of SUBMIT_BATCH."""
    dsn = server.conninfo(server.create_database().rsplit("/", 1)[1])
    queuefloor.install(dsn)
    with psycopg.connect(dsn, autocommit=True) as poller:

        def done() -> int:
            return count(poller, queuefloor.DONE)

        return timed(dsn, lambda: measure(dsn, workers, executions, spawn=queuefloor.spawn, marker=READY_LINE,
                                          submit=lambda n: queuefloor.submit(dsn, n), done=done, logs=logs))  # fmt: skip


# -- the section -------------------------------------------------------------------------------


def roles_row(server: PostgresServer, workers: int, executions: int, logs: Path) -> Row:
    """The same workers as the namespace's own role beside the owner: what the functions cost."""
    (logs / "owner").mkdir(parents=True)
    (logs / "role").mkdir()
    owner = vigil_run(server, workers, executions, logs / "owner", queue=ROLES_QUEUE).done
    role = vigil_run(server, workers, executions, logs / "role", queue=ROLES_QUEUE, own_role=True).done
    r = ratio(role.rate, owner.rate) if role.complete and owner.complete else "n/a (censored)"
    print(f"  {workers} worker(s) as the namespace's role: {rate(role, 'executions')}; "
          f"as the owner {rate(owner, 'executions')}; ratio {r}")  # fmt: skip
    return Row(f"queue: executions/s as the namespace's own role, {workers} worker process(es)",
               rate(role, "executions"), reference=f"owner's credentials {rate(owner, 'executions')}",
               ratio=r, target=">= 0.9x")  # fmt: skip



def queue_rows(workers: int, ours: Run, theirs: Run, floor: Run) -> list[Row]:
    """Vigil beside pgqueuer and beside the SQL floor, and its statement time beside theirs."""
    return [
        Row(f"queue: executions/s end to end, {workers} worker process(es)", rate(ours.done, "executions"),
            reference=f"pgqueuer {rate(theirs.done, 'executions')}", ratio=_ratio(ours.done, theirs.done),
            target=">= 1.5x"),
        Row("  same, beside the SQL floor", "", reference=f"floor {rate(floor.done, 'executions')}",
            ratio=_ratio(ours.done, floor.done), target=">= 0.5x"),
        Row("  PostgreSQL statement time per execution", f"{ours.statement_ms:.3f} ms",
            reference=f"floor {floor.statement_ms:.3f} ms; pgqueuer {theirs.statement_ms:.3f} ms",
            ratio=ratio(ours.statement_ms, floor.statement_ms) if floor.statement_ms else "n/a", target="<= 0.1 ms"),
        Row("  PostgreSQL WAL per execution", f"{ours.cost.wal_bytes:,.0f} B",
            reference=f"floor {floor.cost.wal_bytes:,.0f} B; pgqueuer {theirs.cost.wal_bytes:,.0f} B",
            ratio=ratio(ours.cost.wal_bytes, floor.cost.wal_bytes) if floor.cost.wal_bytes else "n/a", target="-"),
        Row("  WAL flushes per 1,000 executions", f"{ours.cost.wal_flushes * 1000:,.0f}",
            reference=f"floor {floor.cost.wal_flushes * 1000:,.0f}; pgqueuer {theirs.cost.wal_flushes * 1000:,.0f}",
            ratio=ratio(ours.cost.wal_flushes, floor.cost.wal_flushes) if floor.cost.wal_flushes else "n/a",
            target="-"),
    ]  # fmt: skip


def _ratio(ours: Completion, theirs: Completion) -> str:
    return ratio(ours.rate, theirs.rate) if ours.complete and theirs.complete else "n/a (censored)"


def run(executions: int, worker_counts: tuple[int, ...]) -> list[Row]:
    """Measure both systems at each worker count; print as it goes; return the summary rows."""
    import pgqueuer

    print(f"## queue: {executions} no-op executions end to end, Vigil vs pgqueuer {pgqueuer.__version__}, "
          f"same PostgreSQL (durable), worker processes {', '.join(map(str, worker_counts))}")  # fmt: skip
    rows: list[Row] = []
    server = PostgresServer.create(settings={**DURABLE_SETTINGS, **queuefloor.STATEMENT_STATS})
    try:
        with tempfile.TemporaryDirectory(prefix="vigil-bench-queue-") as tmp:
            for index, workers in enumerate(worker_counts):
                logs = Path(tmp) / f"{index}-{workers}"
                for system in ("vigil", "peer", "floor"):
                    (logs / system).mkdir(parents=True)
                ours = vigil_run(server, workers, executions, logs / "vigil")
                theirs = peer_run(server, workers, executions, logs / "peer")
                floor = floor_run(server, workers, executions, logs / "floor")
                print(f"  {workers} worker(s): vigil {rate(ours.done, 'executions')}, "
                      f"{ours.statement_ms:.3f} ms of statements each; "
                      f"pgqueuer {rate(theirs.done, 'executions')}, {theirs.statement_ms:.3f} ms; "
                      f"floor {rate(floor.done, 'executions')}, {floor.statement_ms:.3f} ms")  # fmt: skip
                rows.extend(queue_rows(workers, ours, theirs, floor))
            rows.append(roles_row(server, max(worker_counts), executions, Path(tmp) / "roles"))
        rows.append(queuestart.row(server))
    finally:
        server.drop()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.queue", description=__doc__.split("\n")[0])
    parser.add_argument("mode", nargs="?", default="measure", choices=["measure", "peer-worker"])
    parser.add_argument("--executions", type=int, default=DEFAULT_EXECUTIONS)
    parser.add_argument("--workers", default=",".join(map(str, DEFAULT_WORKERS)),
                        help="worker process counts, comma-separated (default 1,2,4)")  # fmt: skip
    parser.add_argument("--dsn", help="peer-worker mode: the database")
    args = parser.parse_args(argv)
    if args.mode == "peer-worker":
        # on uvloop, as pgqueuer's own command line (`pgq run`) runs it: uvloop is its dependency
        import uvloop

        uvloop.run(peer_worker(args.dsn))
        return 0
    rows = run(args.executions, tuple(int(n) for n in args.workers.split(",")))
    print()
    for line in table(rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
