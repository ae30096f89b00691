"""A backlog drained: the volume tier at queue depths of 10,000 to 1,000,000, beside pgqueuer and the floor.

`python -m bench backlog` (or `python -m bench.backlog [--sizes 10000,100000,1000000]
[--workers 1,4] [--window 50000]`).

The `queue` section submits while its workers run, so its ready set stays small. A queue's
hardest ordinary day is the opposite: a deploy, an outage or a backfill leaves N executions
ready at once. For each N and each number of worker processes, each of three systems gets a
fresh database on one PostgreSQL server (Debian's, default durability), and:

1. N no-op executions are submitted through the system's own client, then the table is
   analysed (`ANALYZE`: what autovacuum does within a minute of any real backlog, and what
   turned Vigil's lease into a 700 ms JIT compile before);
2. that many worker processes start; the clock starts when all say they are ready, and
   stops when `min(N, window)` executions are done. The rate is what was done in between,
   per second. The window (50,000) keeps the 1,000,000 case to a minute: it measures
   leasing at that depth, with 950,000 still queued behind it, which is the case in question;
3. the figure is the median of three such windows (`--repeats`), each with fresh processes after
   a fresh ANALYZE: one window of 10,000 is timed in one or two seconds, and the peer's own rate
   moved by up to 1.4x between single windows, more than the margins in question. At 1,000,000
   the three windows drain from one fill (1,000,000, then 950,000, then 900,000 ready); at
   10,000 and 100,000 each window has a fresh database, filled anew.

The systems: Vigil's `vigil worker` (bench/queue.py's no-op task, `--concurrency/--batch` 10);
pgqueuer's `QueueManager` (psycopg driver, batch 10, on uvloop as `pgq run` runs it); and the
**floor** (bench/queuefloor.py), the least a correct at-least-once PostgreSQL queue does: plain
psycopg processes that lease 10 rows with `FOR UPDATE SKIP LOCKED` and acknowledge the batch.
The floor is the reference for what this server allows; pgqueuer is the peer. Before the workers start, Vigil's lease statement is
explained on a connection with the server's default settings (JIT on, as a DBA may leave it):
its estimated cost beside `jit_above_cost`, whether JIT compiled it, and its time per leased
execution, so a plan whose cost grows with N shows here.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, LiteralString

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from bench import queuefloor
from bench.queue import QUEUE, count, spawn_peer, spawn_vigil, stop_all, wait_ready
from bench.queuefloor import FILL_BATCH, POLL_SECONDS, READY_LINE, WORKER_SLOTS
from bench.reporting import Completion, Row, rate, ratio
from tests.contract.postgres import DURABLE_SETTINGS, PostgresServer
from vigil.queue.queries import QUERIES
from vigil.queue.store import QueueStore, Submission

DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
DEFAULT_WORKERS = (1, 4)
DEFAULT_WINDOW = 50_000  # executions timed at each depth: about 15 s at one process here
DEADLINE_S = 300.0
JIT_ABOVE_COST = 100_000.0  # PostgreSQL's default; a plan estimated above it is JIT-compiled
LEASE_EXPLAINS = 5  # the lease explained this many times; the median is printed
DEFAULT_CATALOGUE = 1_000_000  # daily jobs catalogued for the trigger's and watchdog's plans
DEFAULT_REPEATS = 3  # windows timed per (system, N, processes); the median is the figure
REUSED_DEPTH = 0.85  # a window drains what the last one left while at least this share of N is ready


@dataclass(frozen=True)
class System:
    """How one system is filled, started and counted."""

    name: str
    fill: Callable[[str, int], None]
    spawn: Callable[[str, Path], subprocess.Popen[bytes]]
    marker: str
    done: LiteralString  # SELECT count(*) of executions done
    table: tuple[str, ...]  # what ANALYZE reads: (schema, table) or (table,)


@dataclass(frozen=True)
class Plan:
    """A statement explained: its estimated cost, whether JIT compiled it, and its time (for the
    lease: per leased execution)."""

    cost: float
    jit: bool
    ms: float


# -- filling -----------------------------------------------------------------------------------


def fill_vigil(dsn: str, n: int) -> None:
    store = QueueStore(dsn)
    store.migrate()
    now = datetime.now(UTC) - timedelta(seconds=1)  # all due at once: a backlog
    for start in range(0, n, FILL_BATCH):
        store.submit(QUEUE, [Submission("noop") for _ in range(min(FILL_BATCH, n - start))], now=now)


def fill_peer(dsn: str, n: int) -> None:
    from pgqueuer import PsycopgDriver, Queries

    async def fill() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            queries = Queries(PsycopgDriver(connection))
            await queries.install()
            for start in range(0, n, FILL_BATCH):
                size = min(FILL_BATCH, n - start)
                await queries.enqueue(["noop"] * size, [None] * size, [0] * size)

    asyncio.run(fill())


SYSTEMS = (
    System("vigil", fill_vigil, spawn_vigil, "tasks noop",
           "SELECT count(*) FROM vigil_queue.executions WHERE state = 'succeeded'", ("vigil_queue", "executions")),
    System("pgqueuer", fill_peer, spawn_peer, READY_LINE,
           "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'", ("pgqueuer",)),
    System("floor", queuefloor.fill, queuefloor.spawn, READY_LINE, queuefloor.DONE, ("floor_jobs",)),
)  # fmt: skip


# -- measuring ---------------------------------------------------------------------------------


def explain_lease(dsn: str) -> Plan:
    """Vigil's lease of WORKER_SLOTS, explained (and rolled back) on a default-settings connection."""
    now = datetime.now(UTC)
    params = {"queue": QUEUE, "tasks": ["noop"], "limit": WORKER_SLOTS, "now": now, "worker": "explain",
              "expires": now + timedelta(seconds=5), "tenant_cap": None, "tenant_caps": Jsonb({}),
              "reserved_priorities": [], "reserved_free": [], "shared_free": WORKER_SLOTS}  # fmt: skip
    plans: list[Plan] = []
    with psycopg.connect(dsn) as connection:
        for _ in range(LEASE_EXPLAINS):
            row = connection.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + QUERIES["lease"], params).fetchone()
            connection.rollback()
            assert row is not None
            top = (row[0] if isinstance(row[0], list) else json.loads(row[0]))[0]
            leased = max(1, int(top["Plan"].get("Actual Rows", 0)))
            ms = float(top["Planning Time"]) + float(top["Execution Time"])
            plans.append(Plan(float(top["Plan"]["Total Cost"]), "JIT" in top, ms / leased))
    plans.sort(key=lambda p: p.ms)
    return plans[len(plans) // 2]


def drain(
    server: PostgresServer, system: System, n: int, workers: int, window: int, logs: Path, repeats: int = 1
) -> tuple[list[Completion], float, Plan | None]:
    """`repeats` times: analyse, then time `workers` processes draining min(n, window); returns each
    window's completion, the first fill's seconds and (Vigil) the lease's plan. A window drains from
    what the one before left when that is still REUSED_DEPTH of n (1,000,000: three windows of 50,000
    from one fill), else from a fresh database filled anew (10,000 and 100,000)."""
    done: list[Completion] = []
    first_fill: float | None = None
    plan: Plan | None = None
    dsn, ready = "", 0
    try:
        for repeat in range(repeats):
            if ready < REUSED_DEPTH * n:
                if dsn:
                    _drop(server, dsn)
                dsn = server.conninfo(server.create_database().rsplit("/", 1)[1])
                began = time.monotonic()
                system.fill(dsn, n)
                first_fill = time.monotonic() - began if first_fill is None else first_fill
                ready = n
            window_done = _window(dsn, system, min(n, window), workers, logs / f"{n}-{repeat}",
                                  explain=plan is None and system.name == "vigil")
            plan = plan or window_done[1]
            done.append(window_done[0])
            ready -= window_done[0].finished
    finally:
        if dsn:
            _drop(server, dsn)
    return done, first_fill or 0.0, plan


def _window(
    dsn: str, system: System, target: int, workers: int, logs: Path, *, explain: bool
) -> tuple[Completion, Plan | None]:
    """ANALYZE, (`explain`) explain Vigil's lease, then time `workers` fresh processes until `target`
    more executions are done."""
    logs.mkdir(parents=True, exist_ok=True)
    with psycopg.connect(dsn, autocommit=True) as poller:
        poller.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(*system.table)))
        plan = explain_lease(dsn) if explain else None
        goal = count(poller, system.done) + target  # done when the window ends, counted before the workers start
        paths = [logs / f"{system.name}-{workers}-{i}.log" for i in range(workers)]
        processes = [system.spawn(dsn, path) for path in paths]
        try:
            wait_ready(processes, paths, system.marker)
            start, at_start = time.monotonic(), count(poller, system.done)
            finished = at_start
            while finished < goal and time.monotonic() - start < DEADLINE_S:
                if any(p.poll() is not None for p in processes):
                    print(f"  a {system.name} worker exited early: see {logs}")
                    break
                time.sleep(POLL_SECONDS)
                finished = count(poller, system.done)
            elapsed = time.monotonic() - start
        finally:
            stop_all(processes)
    return Completion(min(finished, goal) - at_start, goal - at_start, elapsed), plan


def _drop(server: PostgresServer, dsn: str) -> None:
    with psycopg.connect(server.conninfo(), autocommit=True) as admin:  # its gigabyte goes at once
        admin.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(dsn.rsplit("=", 1)[1])))


def median(done: list[Completion]) -> Completion:
    """The window of median rate (the lower of the middle two for an even count); a censored
    window counts as slower than any complete one."""
    ranked = sorted(done, key=lambda c: (c.complete, c.rate))
    return ranked[(len(ranked) - 1) // 2]


def explain(dsn: str, query: str, params: dict[str, Any]) -> Plan:
    """One named statement explained (and rolled back) on a default-settings connection."""
    with psycopg.connect(dsn) as connection:
        row = connection.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query, params).fetchone()
        connection.rollback()
    assert row is not None
    top = (row[0] if isinstance(row[0], list) else json.loads(row[0]))[0]
    ms = float(top["Planning Time"]) + float(top["Execution Time"])
    return Plan(float(top["Plan"]["Total Cost"]), "JIT" in top, ms)


def catalogue_plans(server: PostgresServer, jobs: int) -> list[Row]:
    """The trigger's and the watchdog's statements over `jobs` catalogued daily jobs, analysed,
    explained on a default (JIT on) connection: cost beside jit_above_cost, JIT, time; the
    watchdog's overdue statement both with every job overdue (none has fired) and with none."""
    from bench.queuetrigger import catalogue, daily_jobs, prepare
    from vigil.core.buckets import MINUTE, minute_of
    from vigil.core.queuewatch import DEFAULT_SERIES_CAP, RECENT_EXECUTIONS

    dsn = server.conninfo(server.create_database().rsplit("/", 1)[1])
    QueueStore(dsn).migrate()
    now = datetime.now(UTC)
    prepare(dsn, now=now)
    began = time.monotonic()
    # every job watched (expectedMaxInterval 26h): the watchdog's overdue scan reads them all
    watched = (dataclasses.replace(job, expected_max_interval=timedelta(hours=26)) for job in daily_jobs(jobs))
    catalogue(dsn, watched, now=now - timedelta(days=2))
    print(f"  catalogued {jobs:,} watched daily jobs in {time.monotonic() - began:.0f}s; explaining on a default connection")
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("ANALYZE")
    minute = minute_of(now)
    statements = {
        "trigger_due": {"shard": 0, "now": now, "minute": minute, "limit": 2000},
        "trigger_next": {"shard": 0, "now": now, "minute": minute, "horizon": minute + MINUTE},
        "watchdog_overdue": {"now": now, "limit": DEFAULT_SERIES_CAP, "recent": RECENT_EXECUTIONS},
        "watchdog_oldest_ready": {"limit": DEFAULT_SERIES_CAP},
        "watchdog_dead_letters": {},
    }
    rows = []
    for name, params in statements.items():
        plan = explain(dsn, QUERIES[name], params)
        jit = "JIT ON" if plan.jit else "no JIT"
        print(f"  {name}: cost {plan.cost:,.0f} vs jit_above_cost {JIT_ABOVE_COST:,.0f}, {jit}, {plan.ms:.2f} ms")
        rows.append(Row(f"backlog: {name} at {jobs:,} jobs catalogued", f"{plan.ms:.2f} ms, cost {plan.cost:,.0f}",
                        reference=f"jit_above_cost {JIT_ABOVE_COST:,.0f}", ratio=jit, target="no JIT"))  # fmt: skip
    # the catalogued jobs never fired, so every one is overdue above; a healthy catalogue: each
    # job's last success an hour ago, on its row as a worker's acknowledgement puts it there
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("UPDATE vigil_queue.jobs SET last_success_at = %(at)s", {"at": now - timedelta(hours=1)})
        connection.execute("VACUUM ANALYZE vigil_queue.jobs")
    plan = explain(dsn, QUERIES["watchdog_overdue"], statements["watchdog_overdue"])
    jit = "JIT ON" if plan.jit else "no JIT"
    print(f"  watchdog_overdue, none overdue: cost {plan.cost:,.0f}, {jit}, {plan.ms:.2f} ms")
    rows.append(Row(f"backlog: watchdog_overdue at {jobs:,} jobs, none overdue", f"{plan.ms:.2f} ms, cost {plan.cost:,.0f}",
                    reference=f"jit_above_cost {JIT_ABOVE_COST:,.0f}", ratio=jit, target="no JIT"))  # fmt: skip
    return rows


def run(
    sizes: tuple[int, ...], worker_counts: tuple[int, ...], window: int, catalogued: int = 0, repeats: int = DEFAULT_REPEATS
) -> list[Row]:
    """Every (N, processes) for the three systems; prints as it goes; returns the summary rows."""
    import pgqueuer

    print(f"## backlog: N no-op executions submitted and analysed, then drained; N = "
          f"{', '.join(f'{n:,}' for n in sizes)}; {', '.join(map(str, worker_counts))} worker process(es); "
          f"timed over min(N, {window:,}), the median of {repeats} windows; Vigil, pgqueuer {pgqueuer.__version__}, "
          "the SQL floor; same PostgreSQL (durable)")  # fmt: skip
    rows: list[Row] = []
    rates: dict[tuple[str, int, int], Completion] = {}
    server = PostgresServer.create(settings=DURABLE_SETTINGS)
    try:
        with tempfile.TemporaryDirectory(prefix="vigil-bench-backlog-") as tmp:
            for n in sizes:
                for workers in worker_counts:
                    line = [f"  N={n:>9,} {workers} process(es):"]
                    for system in SYSTEMS:
                        windows, filled, plan = drain(server, system, n, workers, window, Path(tmp), repeats)
                        done = rates[(system.name, n, workers)] = median(windows)
                        each = f" (median of {', '.join(f'{w.rate:.0f}' for w in windows)})" if repeats > 1 else ""
                        line.append(f"{system.name} {rate(done, 'executions')}{each} [fill {filled:.0f}s]")
                        if plan is not None:
                            line.append(f"(lease: cost {plan.cost:,.0f} vs jit_above_cost {JIT_ABOVE_COST:,.0f}, "
                                        f"JIT {'ON' if plan.jit else 'off'}, {plan.ms:.3f} ms/execution)")  # fmt: skip
                    print("; ".join(line))
        if catalogued:
            rows.extend(catalogue_plans(server, catalogued))
    finally:
        server.drop()
    smallest = sizes[0]
    for n in sizes:
        for workers in worker_counts:
            ours, peer, floor = (rates[(s.name, n, workers)] for s in SYSTEMS)
            rows.append(Row(f"backlog: N={n:,}, {workers} process(es), executions/s", rate(ours, "executions"),
                            reference=f"pgqueuer {rate(peer, 'executions')}", ratio=_ratio(ours, peer),
                            target=">= 1.5x"))  # fmt: skip
            rows.append(Row("  same, beside the SQL floor", "", reference=f"floor {rate(floor, 'executions')}",
                            ratio=_ratio(ours, floor), target="-"))  # fmt: skip
            if n != smallest:
                rows.extend(depth_rows(rates, n, smallest, workers))
    return rows


def depth_rows(rates: Mapping[tuple[str, int, int], Completion], n: int, smallest: int, workers: int) -> list[Row]:
    """What depth costs: Vigil's rate at `n` beside its own at `smallest`, and that share beside the
    SQL floor's same share. The floor leases and acknowledges nothing else, so its share is what the
    server itself loses to a deeper table (more primary-key pages written whole after each
    checkpoint); Vigil losing no more than that is the lease's cost staying flat in N."""
    ours, base = rates[("vigil", n, workers)], rates[("vigil", smallest, workers)]
    floor, floor_base = rates[("floor", n, workers)], rates[("floor", smallest, workers)]
    share = _ratio(ours, base)
    floor_share = _ratio(floor, floor_base)
    both = all(c.complete for c in (ours, base, floor, floor_base))
    kept = ratio((ours.rate / base.rate) / (floor.rate / floor_base.rate), 1.0) if both else "n/a (censored)"
    return [
        Row(f"  same, beside Vigil at N={smallest:,}", "", reference=rate(base, "executions"), ratio=share,
            target=">= 0.9x"),
        Row(f"  that share, beside the floor's ({floor.rate:,.0f}/s vs {floor_base.rate:,.0f}/s)",
            share, reference=f"floor {floor_share}", ratio=kept, target=">= 0.9x"),
    ]  # fmt: skip


def catalogue_only(catalogued: int) -> list[Row]:
    """The catalogue's statement plans alone (`--catalogue-only`), on a server of their own."""
    server = PostgresServer.create(settings=DURABLE_SETTINGS)
    try:
        return catalogue_plans(server, catalogued)
    finally:
        server.drop()


def _ratio(ours: Completion, theirs: Completion) -> str:
    return ratio(ours.rate, theirs.rate) if ours.complete and theirs.complete else "n/a (censored)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.backlog", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="queue depths, comma-separated")
    parser.add_argument("--workers", default=",".join(map(str, DEFAULT_WORKERS)), help="process counts, comma-separated")
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="executions timed at each depth")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="windows timed per cell; the median is the figure")
    parser.add_argument("--catalogue", type=int, default=DEFAULT_CATALOGUE,
                        help="daily jobs catalogued to explain the trigger's and watchdog's statements (0: none)")  # fmt: skip
    parser.add_argument("--catalogue-only", action="store_true",
                        help="only the catalogue's statement plans: no backlog drained")  # fmt: skip
    args = parser.parse_args(argv)
    from bench.reporting import table

    rows = catalogue_only(args.catalogue) if args.catalogue_only else run(tuple(int(n) for n in args.sizes.split(",")), tuple(int(n) for n in args.workers.split(",")),
               args.window, args.catalogue, args.repeats)  # fmt: skip
    print()
    for line in table(rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
