"""`vigil worker`: run the tasks of one or more modules from a queue until SIGTERM, then drain.

    vigil worker --queue Q --tasks myapp.tasks [--tasks more.tasks] [--dsn DSN]
                 [--concurrency N] [--batch N] [--lease S] [--heartbeat S]
                 [--poll-interval S] [--drain-timeout S] [--backoff-initial S]
                 [--metrics-port P] [--migrate]

The DSN (a libpq string or postgresql:// URL) comes from --dsn or the
environment's VIGIL_QUEUE_DSN. When the queue has a TaskQueue (its declaration
in the store), its lease, heartbeat and backoff win over --lease, --heartbeat
and --backoff-initial, which apply only to a queue without one. SIGTERM and SIGINT stop leasing and drain: the
in-flight executions finish (up to --drain-timeout), their results are
acknowledged, and the process exits 0. Bad input exits 2 with one line.

The loop, the queue store, the PostgreSQL driver and the metrics are imported
once the arguments are read (`--help` and bad input load none of them).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from vigil.core.backoff import Backoff
from vigil.worker.settings import WorkerSettings

if TYPE_CHECKING:
    from vigil.worker.running import Worker

DSN_ENV = "VIGIL_QUEUE_DSN"
EXIT_BAD_INPUT = 2


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vigil worker", description="Run tasks from a Vigil queue.")
    defaults = WorkerSettings()
    p.add_argument("--queue", required=True, help="the queue to lease from: NS/NAME of its TaskQueue")
    p.add_argument("--tasks", action="append", required=True, metavar="MODULE",
                   help="a module whose @task functions to run (repeatable)")  # fmt: skip
    p.add_argument("--dsn", default=os.environ.get(DSN_ENV), help=f"PostgreSQL (default: ${DSN_ENV})")
    p.add_argument("--concurrency", type=int, default=defaults.concurrency)
    p.add_argument("--batch", type=int, default=defaults.batch, help="leased per round trip (0: concurrency)")
    p.add_argument("--lease", type=float, default=defaults.lease.total_seconds(), help="seconds")
    p.add_argument("--heartbeat", type=float, default=defaults.heartbeat.total_seconds(), help="seconds")
    p.add_argument("--poll-interval", type=float, default=defaults.poll_interval.total_seconds(), help="seconds")
    p.add_argument("--expiry-interval", type=float, default=defaults.expiry_interval.total_seconds(), help="seconds")
    p.add_argument("--drain-timeout", type=float, default=defaults.drain_timeout.total_seconds(), help="seconds")
    p.add_argument("--backoff-initial", type=float, default=defaults.backoff.initial.total_seconds(),
                   help="seconds: the cap of the wait before the second attempt")  # fmt: skip
    p.add_argument("--metrics-port", type=int, default=None, help="serve /metrics on this port")
    p.add_argument("--migrate", action="store_true", help="bring the queue schema up to date first")
    return p


def settings_from(args: argparse.Namespace) -> WorkerSettings:
    def seconds(value: float) -> timedelta:
        return timedelta(seconds=value)

    initial = seconds(args.backoff_initial)
    return WorkerSettings(
        concurrency=args.concurrency,
        batch=args.batch,
        lease=seconds(args.lease),
        heartbeat=seconds(args.heartbeat),
        poll_interval=seconds(args.poll_interval),
        expiry_interval=seconds(args.expiry_interval),
        drain_timeout=seconds(args.drain_timeout),
        backoff=Backoff(initial=initial, max=max(initial, WorkerSettings().backoff.max)),
    )


async def serve(worker: Worker) -> int:
    import asyncio
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    counts = await worker.run(stop)
    logging.getLogger(__name__).info("worker %s stopped: %s", worker.name, counts)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if not args.dsn:
            raise ValueError(f"no database: give --dsn or set {DSN_ENV}")
        settings = settings_from(args)
        for module in args.tasks:
            importlib.import_module(module)
    except (ValueError, ImportError) as error:
        print(f"vigil worker: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return run(args, settings)


def run(args: argparse.Namespace, settings: WorkerSettings) -> int:
    """Run the loop until SIGTERM (the arguments read and the task modules imported)."""
    import asyncio

    from vigil.worker.running import Worker
    from vigil.worker.tasks import REGISTRY

    if args.migrate:
        from vigil.queue.store import QueueStore  # the operator's parts too: only when asked

        QueueStore(args.dsn).migrate()
    if args.metrics_port is not None:
        from prometheus_client import start_http_server

        from vigil import metrics

        start_http_server(args.metrics_port, registry=metrics.REGISTRY)
    import psycopg

    worker = Worker(dsn=args.dsn, queue=args.queue, registry=REGISTRY, settings=settings, clock=SystemClock())
    try:
        return asyncio.run(serve(worker))
    except psycopg.errors.InsufficientPrivilege as error:  # a namespace's role, another namespace's queue
        why = str(error).strip().splitlines()[0]
        print(f"vigil worker: the queue store refuses these credentials for queue {args.queue}: {why}", file=sys.stderr)
        return EXIT_BAD_INPUT
