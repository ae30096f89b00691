"""A worker's start: from its process being spawned to its first task running, Vigil beside pgqueuer.

`python -m bench.queuestart [--runs N]`; also a row of `python -m bench queue` (bench/queue.py).

Each system gets a fresh database on the same PostgreSQL. One sample: one execution is made
ready, the bench reads the wall clock and spawns one worker process — `python -m vigil worker`
with the task module bench/firsttask.py, or a pgqueuer `QueueManager` process (this module's
`peer` mode) — and the task prints the wall clock when it runs. The difference is everything a
worker does before its first lease comes back: the interpreter's start, the imports, argument
parsing, the connections, the queue's declaration (Vigil), the lease itself and the task's
dispatch. The worker is then stopped (SIGTERM) and the next sample submits a new execution.

The systems alternate; the first sample of each is a warm-up (bytecode written, files in the
page cache) and is not counted; the figure is the median of the rest and the ratio Vigil's over
pgqueuer's (below 1: Vigil starts sooner). Both task modules import nothing but their worker's
SDK (and this module's constants, standard library only), and both workers use the throughput
section's slots, so the bench's own imports are no part of either figure.

The machine is small and shared: read the ratio, not the absolute figures.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

# Both workers import this module (bench/firsttask.py for its line's prefix, pgqueuer's as its
# `peer` mode): at its top only what they load anyway, the measuring side's imports in its functions.
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from bench.reporting import Row
    from tests.contract.postgres import PostgresServer

RAN = "first task ran at"  # the task's line: this and the wall clock (bench/firsttask.py)
QUEUE = "start"
DEFAULT_RUNS = 7  # counted samples per system, after one warm-up each
START_TIMEOUT_S = 60.0
POLL_S = 0.005  # how often the bench reads the worker's output while it waits


# -- the workers -------------------------------------------------------------------------------


def vigil_command(dsn: str) -> list[str]:
    from bench.queuefloor import WORKER_SLOTS

    return [sys.executable, "-m", "vigil", "worker", "--queue", QUEUE, "--tasks", "bench.firsttask",
            "--dsn", dsn, "--concurrency", str(WORKER_SLOTS), "--batch", str(WORKER_SLOTS)]  # fmt: skip


def peer_command(dsn: str) -> list[str]:
    from bench.queuefloor import WORKER_SLOTS

    return [sys.executable, "-m", "bench.queuestart", "peer", "--dsn", dsn, "--batch", str(WORKER_SLOTS)]


async def peer_worker(dsn: str, batch: int) -> None:
    """One pgqueuer worker process with the same task, until SIGTERM: it imports pgqueuer and the
    driver, nothing of the bench's measuring side."""
    from datetime import timedelta

    import psycopg
    from pgqueuer import PsycopgDriver, Queries, QueueManager
    from pgqueuer.models import Job

    connection = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    qm = QueueManager(Queries(PsycopgDriver(connection)))

    @qm.entrypoint("first")
    async def first(job: Job) -> None:
        print(f"{RAN} {time.time():.6f}", flush=True)

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, qm.shutdown.set)
    await qm.run(batch_size=batch, log_aggregation_interval=timedelta(0))
    await connection.close()


# -- one sample ---------------------------------------------------------------------------------


def ran_at(log: Path) -> float | None:
    """The wall clock the task printed, once it has."""
    for line in log.read_text().splitlines():
        if line.startswith(RAN):
            return float(line.removeprefix(RAN))
    return None


def sample(command: list[str], submit: Callable[[], None], log: Path) -> float:
    """Seconds from spawning `command` to its first task running (one execution ready before)."""
    from bench.queuefloor import spawn_process

    submit()
    began = time.time()
    process = spawn_process(command, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while (ran := ran_at(log)) is None:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"a worker did not run its first task: see {log}")
            time.sleep(POLL_S)
        return ran - began
    finally:
        process.send_signal(signal.SIGTERM)  # as bench.queue.stop_all (not imported: a task module)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- the two systems ----------------------------------------------------------------------------


def vigil_submitter(dsn: str) -> Callable[[], None]:
    from datetime import UTC, datetime

    from vigil.queue.store import QueueStore, Submission

    store = QueueStore(dsn)
    store.migrate()

    def submit() -> None:
        store.submit(QUEUE, [Submission("first")], now=datetime.now(UTC))

    return submit


def peer_submitter(dsn: str) -> Callable[[], None]:
    import psycopg
    from pgqueuer import PsycopgDriver, Queries

    async def install() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            await Queries(PsycopgDriver(connection)).install()

    async def enqueue() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            await Queries(PsycopgDriver(connection)).enqueue(["first"], [None], [0])

    asyncio.run(install())
    return lambda: asyncio.run(enqueue())


def measure(server: PostgresServer, runs: int, logs: Path) -> tuple[list[float], list[float]]:
    """`runs` counted samples of each system, alternating, after one warm-up each."""
    ours_dsn = server.conninfo(server.create_database().rsplit("/", 1)[1])
    theirs_dsn = server.conninfo(server.create_database().rsplit("/", 1)[1])
    systems = {
        "vigil": (vigil_command(ours_dsn), vigil_submitter(ours_dsn)),
        "pgqueuer": (peer_command(theirs_dsn), peer_submitter(theirs_dsn)),
    }
    seconds: dict[str, list[float]] = {name: [] for name in systems}
    for index in range(runs + 1):
        for name, (command, submit) in systems.items():
            taken = sample(command, submit, logs / f"{name}-{index}.log")
            if index:  # the first is the warm-up
                seconds[name].append(taken)
    return seconds["vigil"], seconds["pgqueuer"]


def row(server: PostgresServer, runs: int = DEFAULT_RUNS) -> Row:
    """The start figure beside pgqueuer's, printed as it is measured."""
    import statistics
    import tempfile
    from pathlib import Path

    from bench.reporting import Row, ratio

    with tempfile.TemporaryDirectory(prefix="vigil-bench-queuestart-") as tmp:
        ours, theirs = measure(server, runs, Path(tmp))
    mine, peer = statistics.median(ours), statistics.median(theirs)
    print(f"  worker start to its first task, {runs} runs each: vigil median {mine:.3f}s "
          f"({', '.join(f'{s:.3f}' for s in ours)}); pgqueuer median {peer:.3f}s "
          f"({', '.join(f'{s:.3f}' for s in theirs)})")  # fmt: skip
    return Row(f"queue: `vigil worker` start to its first task, median of {runs}", f"{mine:.3f} s",
               reference=f"pgqueuer {peer:.3f} s", ratio=ratio(mine, peer), target="<= 0.3 s")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.queuestart", description=__doc__.split("\n")[0])
    parser.add_argument("mode", nargs="?", default="measure", choices=["measure", "peer"])
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="counted samples per system")
    parser.add_argument("--dsn", help="peer mode: the database")
    parser.add_argument("--batch", type=int, default=1, help="peer mode: pgqueuer's batch size")
    args = parser.parse_args(argv)
    if args.mode == "peer":
        asyncio.run(peer_worker(args.dsn, args.batch))
        return 0
    from bench.queuefloor import STATEMENT_STATS
    from bench.reporting import table
    from tests.contract.postgres import DURABLE_SETTINGS, PostgresServer

    print("## queuestart: a worker process from its spawn to its first task, Vigil vs pgqueuer, same PostgreSQL")
    server = PostgresServer.create(settings={**DURABLE_SETTINGS, **STATEMENT_STATS})
    try:
        found = row(server, args.runs)
    finally:
        server.drop()
    print()
    for line in table([found]):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
