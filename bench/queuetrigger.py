"""The volume tier's trigger and recovery figures (issue 13), each beside its reference from the same run.

`python -m bench queuetrigger`, or `python -m bench.queuetrigger [--small N] [--large N] [--due N]
[--hour N] [--rss-small N] [--rss-large N] [--kills N]`. Every figure runs on one PostgreSQL
server of its own (Debian's, PostgreSQL's default durability), a fresh database each, the jobs
catalogued through `Catalogue.add_many` as the HTTP API catalogues them:

1. **cost per due job** — `--small` (10,000) and then `--large` (1,000,000) jobs catalogued, of
   which ROUNDS rounds of `--due` (1,000) come due in successive minutes (jitter off) and the
   rest are daily jobs spread over the other minutes of the day (default jitter). Partitions are
   made ahead as the trigger loop makes them, and the tables analysed (as autovacuum would).
   Each round is the passes of every shard (`ShardTrigger.run_pass`, the operator's shard count)
   at that minute, timed; the figure is the median round's time per fired job, large beside
   small (target: at most 1.5x). The catalogue must not show in a pass's cost.
2. **fire lag** — `--hour` (100,000) jobs due in the same hour (`0 H * * *`) with the default
   jitter (60 s for a daily cron), fired by `vigil.queue.trigger.run` in one thread per shard,
   as an operator replica runs its shards, on a clock that reads the system clock plus a fixed
   offset, so the hour begins a few seconds after the loops start and the lag is real time.
   A fired job's lag is from its own (jittered) fire time until the pass that fired it
   returned (its transaction committed): p50/p99 (target: p99 at most 1 s).
3. **RSS** — a process running every shard's trigger loop (as the operator's replicas do,
   without the Kubernetes Leases) over a catalogue of `--rss-large` (1,000,000) daily jobs
   spread over the day, so some come due all along: its VmRSS from /proc every 2 s for
   `--rss-settle` seconds, the steady figure the median of the last third; beside the same
   process over `--rss-small` (10,000) jobs (target: at most 200 MiB).
4. **re-run after SIGKILL** — a `vigil worker` process runs a task that holds, a second one
   waits idle; the first is killed with SIGKILL, and the time from the kill until the second
   starts the same execution id (attempt 2) is measured, `--kills` (5) times, beside the lease
   (KILL_LEASE_S; target: within the lease + 1 s).

The machine is small and shared: read ratios and targets, not absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.reporting import Row, percentile
from bench.rss import rss_mib
from tests.contract.postgres import DURABLE_SETTINGS, PostgresServer
from vigil.core.jitter import MAX_DEFAULT_JITTER
from vigil.core.recurring import RecurringJob
from vigil.queue import partitions
from vigil.queue import trigger as trigger_module
from vigil.queue.catalogue import Catalogue
from vigil.queue.store import QueueStore, Submission
from vigil.settings import Queue as QueueSettings
from vigil.worker import Context, task

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "bench/trigger"
SHARDS = QueueSettings().shards  # the operator's default
DEFAULT_SMALL, DEFAULT_LARGE, DEFAULT_DUE = 10_000, 1_000_000, 1_000
DEFAULT_HOUR = 100_000
DEFAULT_RSS_SMALL, DEFAULT_RSS_LARGE = 10_000, 1_000_000
DEFAULT_KILLS = 5
ROUNDS = 5  # measured minutes per catalogue size: the median round is the figure
CHUNK = 50_000  # jobs built and catalogued at a time, so the bench's own memory stays flat
LAG_LEAD_S = 10.0  # the hour begins this long after the trigger loops start
LAG_DEADLINE_S = 600.0
RSS_SAMPLE_S = 2.0
DEFAULT_RSS_SETTLE = 60.0
KILL_LEASE_S, KILL_HEARTBEAT_S = 5.0, 1.0
KILL_DEADLINE_S = 60.0
DSN_ENV = "VIGIL_BENCH_DSN"


@task("bench_hold")
async def bench_hold(ctx: Context) -> None:
    """Note the start of this attempt, then hold until the process dies."""
    async with await psycopg.AsyncConnection.connect(os.environ[DSN_ENV], autocommit=True) as connection:
        await connection.execute(
            "INSERT INTO bench_starts (execution_id, attempt) VALUES (%s, %s)", (ctx.execution_id, ctx.attempt)
        )
    await asyncio.Event().wait()


# -- shared ------------------------------------------------------------------------------------


def fresh_database(server: PostgresServer) -> str:
    dsn = server.conninfo(server.create_database().rsplit("/", 1)[1])
    QueueStore(dsn).migrate()
    return dsn


def daily_jobs(count: int, *, skip: set[int] | None = None) -> Iterator[RecurringJob]:
    """`count` daily jobs spread evenly over the minutes of the day (UTC), none in `skip`."""
    minutes = [m for m in range(1440) if m not in (skip or set())]
    for i in range(count):
        minute = minutes[i % len(minutes)]
        yield RecurringJob(QUEUE, "noop", f"{minute % 60} {minute // 60} * * *")


def catalogue(dsn: str, jobs: Iterator[RecurringJob], *, now: datetime) -> int:
    """Add the jobs CHUNK at a time; how many."""
    added, chunk = 0, []
    store = Catalogue(dsn, shards=SHARDS)
    for job in jobs:
        chunk.append(job)
        if len(chunk) == CHUNK:
            added += len(store.add_many(chunk, now=now))
            chunk = []
    if chunk:
        added += len(store.add_many(chunk, now=now))
    return added


def prepare(dsn: str, *, now: datetime) -> None:
    """Partitions ahead, as the trigger loop keeps them."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        partitions.maintain(connection, now=now)


def analyse(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("ANALYZE")


# -- 1. cost per due job -----------------------------------------------------------------------


def cost_per_due_job(server: PostgresServer, *, catalogued: int, due: int) -> float:
    """Seconds of trigger passes per fired job, the median of ROUNDS rounds (see the module docstring)."""
    dsn = fresh_database(server)
    start = (datetime.now(UTC) + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    now = start - timedelta(minutes=5)
    prepare(dsn, now=now)
    rounds = [start + timedelta(minutes=k) for k in range(ROUNDS)]
    # no other job's occurrence between `now` and the last round (jitter only delays a fire)
    busy = {(start.hour * 60 + start.minute + k) % 1440 for k in range(-6, ROUNDS + 2)}
    measured = (
        RecurringJob(QUEUE, "noop", f"{at.minute} {at.hour} * * *", jitter=timedelta(0))
        for at in rounds for _ in range(due)
    )  # fmt: skip
    catalogue(dsn, measured, now=now)
    catalogue(dsn, daily_jobs(max(0, catalogued - due * ROUNDS), skip=busy), now=now)
    analyse(dsn)
    triggers = [trigger_module.ShardTrigger(dsn, shard=k) for k in range(SHARDS)]
    per_job: list[float] = []
    try:
        for trigger in triggers:  # connect first: a pass's cost, not a connection's
            trigger.run_pass(now=now)
        for at in rounds:
            began, fired = time.perf_counter(), 0
            for trigger in triggers:
                fired += len(trigger.run_pass(now=at + timedelta(seconds=1)).fired)
            per_job.append((time.perf_counter() - began) / max(1, fired))
            if fired != due:
                print(f"  note: the round at {at:%H:%M} fired {fired}, not {due}")
    finally:
        for trigger in triggers:
            trigger.close()
    return statistics.median(per_job)


# -- 2. fire lag -------------------------------------------------------------------------------


class OffsetClock:
    """The system clock plus a fixed offset: real seconds, at a chosen instant."""

    def __init__(self, offset: timedelta) -> None:
        self.offset = offset
        self.local = threading.local()

    def now(self) -> datetime:
        self.local.now = datetime.now(UTC) + self.offset
        return self.local.now  # type: ignore[no-any-return]  # the thread-local is untyped; it holds a datetime


def fire_lag(server: PostgresServer, *, jobs: int) -> list[float]:
    """Lags (s) of `jobs` fires due in one hour, default jitter (see the module docstring)."""
    dsn = fresh_database(server)
    hour = (datetime.now(UTC) + timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    catalogue(dsn, (RecurringJob(QUEUE, "noop", f"0 {hour.hour} * * *") for _ in range(jobs)), now=hour - timedelta(hours=1))
    prepare(dsn, now=hour - timedelta(minutes=5))
    analyse(dsn)
    clock = OffsetClock(hour - timedelta(seconds=LAG_LEAD_S) - datetime.now(UTC))
    lags: list[float] = []
    lock = threading.Lock()

    def on_pass(report: trigger_module.PassReport) -> None:
        done = datetime.now(UTC) + clock.offset
        extra = (done - clock.local.now).total_seconds()  # from the pass's `now` to its return
        with lock:
            lags.extend(lag + extra for lag in report.lags)

    stop = threading.Event()
    threads = [
        threading.Thread(target=trigger_module.run, args=(trigger_module.ShardTrigger(dsn, shard=k),),
                         kwargs={"clock": clock.now, "stop": stop, "on_pass": on_pass}, daemon=True)
        for k in range(SHARDS)
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + LAG_LEAD_S + MAX_DEFAULT_JITTER.total_seconds() + LAG_DEADLINE_S
    while len(lags) < jobs and time.monotonic() < deadline:
        time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    return lags


# -- 3. RSS ------------------------------------------------------------------------------------


def run_shards(dsn: str) -> None:
    """The child process of the RSS figure: every shard's trigger loop on the system clock, until SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads = [
        threading.Thread(target=trigger_module.run, args=(trigger_module.ShardTrigger(dsn, shard=k),),
                         kwargs={"clock": lambda: datetime.now(UTC), "stop": stop})
        for k in range(SHARDS)
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    print("bench shards running", flush=True)
    for thread in threads:
        thread.join()


def operator_rss(server: PostgresServer, *, jobs: int, settle: float, logs: Path) -> list[float]:
    """VmRSS samples (MiB) of a process running every shard over `jobs` catalogued daily jobs."""
    dsn = fresh_database(server)
    now = datetime.now(UTC)
    prepare(dsn, now=now)
    catalogue(dsn, daily_jobs(jobs), now=now)
    analyse(dsn)
    log = logs / f"shards-{jobs}.log"
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'operator'}:{ROOT}"}
    with log.open("ab") as out:
        child = subprocess.Popen([sys.executable, "-m", "bench.queuetrigger", "run-shards", "--dsn", dsn],
                                 env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)  # fmt: skip
    samples: list[float] = []
    try:
        deadline = time.monotonic() + 60
        while "bench shards running" not in log.read_text() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        end = time.monotonic() + settle
        while time.monotonic() < end and child.poll() is None:
            samples.append(rss_mib(child.pid))
            time.sleep(RSS_SAMPLE_S)
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    if not samples:
        print(f"  note: the shard process gave no samples: see {log}")
    return samples


def steady(samples: list[float]) -> float:
    return statistics.median(samples[-max(1, len(samples) // 3) :]) if samples else float("nan")


# -- 4. re-run after SIGKILL -------------------------------------------------------------------


def spawn_worker(dsn: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, DSN_ENV: dsn, "PYTHONPATH": f"{ROOT / 'operator'}:{ROOT}"}
    command = [sys.executable, "-m", "vigil", "worker", "--queue", QUEUE, "--tasks", "bench.queuetrigger",
               "--dsn", dsn, "--lease", str(KILL_LEASE_S), "--heartbeat", str(KILL_HEARTBEAT_S),
               "--concurrency", "1"]  # fmt: skip
    with log.open("ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)


def _started(connection: psycopg.Connection[Any], execution: str, attempt: int) -> float | None:
    row = connection.execute(
        "SELECT extract(epoch FROM at) FROM bench_starts WHERE execution_id = %s AND attempt = %s",
        (execution, attempt),
    ).fetchone()
    return float(row[0]) if row else None


def _wait(what: str, probe: Any, deadline: float = KILL_DEADLINE_S) -> Any:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        got = probe()
        if got:
            return got
        time.sleep(0.02)
    raise RuntimeError(f"timed out waiting for {what}")


def rerun_after_kill(server: PostgresServer, *, logs: Path) -> float:
    """Seconds from a SIGKILL of the worker running an execution until the other starts it again."""
    dsn = fresh_database(server)
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("CREATE TABLE bench_starts (execution_id text, attempt int, at timestamptz DEFAULT clock_timestamp())")
        first = spawn_worker(dsn, logs / "first.log")
        second: subprocess.Popen[bytes] | None = None
        try:
            _wait("the first worker", lambda: "tasks bench_hold" in (logs / "first.log").read_text())
            [execution] = QueueStore(dsn).submit(QUEUE, [Submission("bench_hold")], now=datetime.now(UTC))
            _wait("attempt 1", lambda: _started(connection, execution, 1))
            second = spawn_worker(dsn, logs / "second.log")
            _wait("the second worker", lambda: "tasks bench_hold" in (logs / "second.log").read_text())
            first.kill()
            killed = time.time()
            again = _wait("attempt 2", lambda: _started(connection, execution, 2), KILL_LEASE_S + KILL_DEADLINE_S)
            return float(again) - killed
        finally:
            for process in (first, second):
                if process is not None and process.poll() is None:
                    process.kill()
                if process is not None:
                    process.wait()


# -- the section -------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> list[Row]:
    """Every figure, printed as it goes; the summary rows."""
    print(f"## queue trigger: {SHARDS} shards; catalogue {args.small} vs {args.large} ({args.due} due per round), "
          f"{args.hour} due in one hour, RSS at {args.rss_small} vs {args.rss_large}, {args.kills} SIGKILLs")  # fmt: skip
    rows: list[Row] = []
    server = PostgresServer.create(settings=DURABLE_SETTINGS)
    try:
        with tempfile.TemporaryDirectory(prefix="vigil-bench-trigger-") as tmp:
            rows.append(_cost_row(server, args))
            rows.append(_lag_row(server, args))
            rows.append(_rss_row(server, args, Path(tmp)))
            rows.append(_kill_row(server, args, Path(tmp)))
    finally:
        server.drop()
    return rows


def _cost_row(server: PostgresServer, args: argparse.Namespace) -> Row:
    small = cost_per_due_job(server, catalogued=args.small, due=args.due)
    large = cost_per_due_job(server, catalogued=args.large, due=args.due)
    print(f"  cost per due job: {large * 1e3:.3f} ms with {args.large} catalogued, {small * 1e3:.3f} ms with "
          f"{args.small}; ratio {large / small:.2f}x")  # fmt: skip
    return Row(f"queue trigger: cost per due job, {args.large} catalogued", f"{large * 1e3:.3f} ms",
               reference=f"{small * 1e3:.3f} ms at {args.small}", ratio=f"{large / small:.2f}x", target="<= 1.5x")  # fmt: skip


def _lag_row(server: PostgresServer, args: argparse.Namespace) -> Row:
    lags = fire_lag(server, jobs=args.hour)
    if len(lags) < args.hour:
        print(f"  note: only {len(lags)}/{args.hour} fired before the deadline: the p99 counts the rest as late")
    padded = lags + [float("inf")] * max(0, args.hour - len(lags))
    p50, p99 = percentile(padded, 0.5), percentile(padded, 0.99)
    print(f"  fire lag, {args.hour} due in one hour, default jitter: p50 {p50:.3f}s p99 {p99:.3f}s max {max(padded):.3f}s")
    return Row(f"queue trigger: lag from fire time, {args.hour} due in one hour", f"p99 {p99:.3f}s",
               reference=f"p50 {p50:.3f}s", target="p99 <= 1 s")  # fmt: skip


def _rss_row(server: PostgresServer, args: argparse.Namespace, logs: Path) -> Row:
    small = operator_rss(server, jobs=args.rss_small, settle=args.rss_settle, logs=logs)
    large = operator_rss(server, jobs=args.rss_large, settle=args.rss_settle, logs=logs)
    s, big = steady(small), steady(large)
    print(f"  RSS of the shard process: steady {big:.0f} MiB (peak {max(large, default=float('nan')):.0f}) with "
          f"{args.rss_large} catalogued, {s:.0f} MiB (peak {max(small, default=float('nan')):.0f}) with {args.rss_small}")  # fmt: skip
    return Row(f"queue trigger: shard process RSS, {args.rss_large} catalogued", f"{big:.0f} MiB",
               reference=f"{s:.0f} MiB at {args.rss_small}", ratio=f"{big / s:.2f}x", target="<= 200 MiB")  # fmt: skip


def _kill_row(server: PostgresServer, args: argparse.Namespace, logs: Path) -> Row:
    times = []
    for k in range(args.kills):
        (logs / f"kill-{k}").mkdir()
        times.append(rerun_after_kill(server, logs=logs / f"kill-{k}"))
    print(f"  re-run after SIGKILL ({args.kills}x, lease {KILL_LEASE_S:.0f}s, heartbeat {KILL_HEARTBEAT_S:.0f}s): "
          f"median {statistics.median(times):.2f}s, max {max(times):.2f}s")  # fmt: skip
    return Row("queue worker: SIGKILL to the same execution id running again", f"max {max(times):.2f}s",
               reference=f"lease {KILL_LEASE_S:.0f}s", ratio=f"{max(times) / KILL_LEASE_S:.2f}x",
               target=f"<= {KILL_LEASE_S + 1:.0f}s (lease + 1 s)")  # fmt: skip


def parser() -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(prog="python -m bench.queuetrigger", description=__doc__.split("\n")[0])
    made.add_argument("mode", nargs="?", default="measure", choices=["measure", "run-shards"])
    made.add_argument("--small", type=int, default=DEFAULT_SMALL, help="the small catalogue of the cost figure")
    made.add_argument("--large", type=int, default=DEFAULT_LARGE, help="the large catalogue of the cost figure")
    made.add_argument("--due", type=int, default=DEFAULT_DUE, help="jobs due per measured round")
    made.add_argument("--hour", type=int, default=DEFAULT_HOUR, help="jobs due in one hour, for the lag")
    made.add_argument("--rss-small", type=int, default=DEFAULT_RSS_SMALL, help="catalogue of the RSS reference")
    made.add_argument("--rss-large", type=int, default=DEFAULT_RSS_LARGE, help="catalogue of the RSS figure")
    made.add_argument("--rss-settle", type=float, default=DEFAULT_RSS_SETTLE, help="seconds of RSS samples")
    made.add_argument("--kills", type=int, default=DEFAULT_KILLS, help="SIGKILLs of the re-run figure")
    made.add_argument("--dsn", help="run-shards mode: the database")
    return made


def section(argv: list[str]) -> list[Row]:
    """For `python -m bench queuetrigger`: the figures with these arguments (the defaults: issue 13's sizes)."""
    return run(parser().parse_args(argv))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.mode == "run-shards":
        run_shards(args.dsn)
        return 0
    from bench.reporting import table

    rows = run(args)
    print()
    for line in table(rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
