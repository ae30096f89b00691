"""Tasks the queue tests run, in-process or in `vigil worker` subprocesses (`--tasks tests.queue.tasks`).

Each writes what it does to the test database's `runs` table (created by
`create_tables`), so a test sees every copy of every attempt, whichever process
ran it. `hold` waits until the test inserts its execution id into `releases`:
it polls the database, as a real job would wait on the outside world — that is
the workload, not the test's synchronisation (the tests wait with tests/waiting.py).
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading
import time
from typing import Any

import psycopg

from vigil.worker import Context, task

DSN_ENV = "VIGIL_QUEUE_DSN"
HOLD_POLL_SECONDS = 0.05  # how often a held task looks for its release


def create_tables(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            "CREATE TABLE IF NOT EXISTS runs (execution_id text, attempt int, pid int, event text,"
            " at timestamptz DEFAULT clock_timestamp())"
        )
        connection.execute("CREATE TABLE IF NOT EXISTS releases (execution_id text PRIMARY KEY)")


def note(ctx: Context, event: str) -> None:
    with psycopg.connect(os.environ[DSN_ENV], autocommit=True) as connection:
        connection.execute(
            "INSERT INTO runs (execution_id, attempt, pid, event) VALUES (%s, %s, %s, %s)",
            (ctx.execution_id, ctx.attempt, os.getpid(), event),
        )


def released(execution_id: str) -> bool:
    with psycopg.connect(os.environ[DSN_ENV], autocommit=True) as connection:
        row = connection.execute("SELECT 1 FROM releases WHERE execution_id = %s", (execution_id,))
        return row.fetchone() is not None


@task("record")
def record(ctx: Context) -> None:
    note(ctx, "ran")


@task("record_async")
async def record_async(ctx: Context) -> None:
    note(ctx, "ran")
    if await ctx.once_async("act"):
        note(ctx, "acted")


@task("poison")
def poison(ctx: Context) -> None:
    note(ctx, "ran")
    raise RuntimeError(f"poison {ctx.payload.get('n')}")


@task("fail_first")
def fail_first(ctx: Context) -> None:
    """Fails its first attempt and succeeds at the next (a workflow's retried task step)."""
    note(ctx, "ran")
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails")


@task("returns")
def returns(ctx: Context) -> Any:
    """Returns its payload's `value` (its execution's output; None when the payload has none)."""
    note(ctx, "ran")
    return ctx.payload.get("value")


@task("returns_async")
async def returns_async(ctx: Context) -> Any:
    return ctx.payload.get("value")


@task("echo")
def echo(ctx: Context) -> dict[str, Any]:
    """A workflow step's task: returns its block's own payload and the inputs it was given (the
    outputs of the steps it depends on), so the next step's inputs show what this one returned."""
    note(ctx, "ran")
    return {"own": ctx.payload.get("payload"), "inputs": ctx.payload.get("inputs")}


#: Return values the store cannot keep, by the name a payload's `kind` gives.
HOSTILE: dict[str, Any] = {
    "nul": {"note": "a\x00b"},
    "surrogate": ["\ud800"],
    "nan": {"ratio": float("nan")},
    "set": {1, 2},
    "object": threading.Event(),
    "large": "x" * 40_000,
}


@task("returns_hostile")
def returns_hostile(ctx: Context) -> Any:
    """Does its work (notes it), then returns what the store cannot keep: it still succeeds. The
    `kind` is the payload's own, or (a workflow's task step) its block's payload's."""
    note(ctx, "ran")
    return HOSTILE[(ctx.payload.get("payload") or ctx.payload)["kind"]]


@task("hold_async")
async def hold_async(ctx: Context) -> None:
    """Start, then wait for a release that the drain test never gives."""
    note(ctx, "started")
    while not released(ctx.execution_id):
        await asyncio.sleep(HOLD_POLL_SECONDS)
    note(ctx, "finished")


@task("hold")
def hold(ctx: Context) -> None:
    """Start, wait for the test's release, then act once: what two copies of one execution do."""
    note(ctx, "started")
    while not released(ctx.execution_id):
        time.sleep(HOLD_POLL_SECONDS)
    note(ctx, "acted" if ctx.once("act") else "skipped")
    note(ctx, "finished")


@task("until_lease_lost")
def until_lease_lost(ctx: Context) -> None:
    """Start, then work until a heartbeat finds the lease gone (taken, or cancelled through the API)."""
    note(ctx, "started")
    while not ctx.lease_lost:
        time.sleep(HOLD_POLL_SECONDS)
    note(ctx, "lease lost")


@task("nothing")
async def nothing(ctx: Context) -> None:
    """No work at all: what a drain's rate then measures is the queue's own cost."""


#: Releases of `hold_here`, by execution id: for in-process workers only, so that a task can wait
#: through an outage of the database (its `hold` sibling polls the database, and would fail).
HELD_HERE: dict[str, threading.Event] = collections.defaultdict(threading.Event)


@task("hold_here")
def hold_here(ctx: Context) -> None:
    """Wait for the test's release in this process's memory, touching no database."""
    if not HELD_HERE[ctx.execution_id].wait(timeout=120):
        raise TimeoutError("never released")
