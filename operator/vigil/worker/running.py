"""The worker loop: lease a batch, run each execution, heartbeat, acknowledge in batches, drain.

One asyncio loop per process and three PostgreSQL connections: one that leases
(so a lease never waits behind an acknowledgement's commit), one for the rest
of the queue's statements (`vigil.queue.store.WorkerStore`), and one that only
LISTENs:

- **lease**: while slots are free, lease up to min(free slots, batch) due
  executions; when fewer come back than asked, wait for a NOTIFY of the queue
  (a submit commits) or `poll_interval`, whichever is first — polling is the
  fallback when notifications are lost (the LISTEN connection dropped).
- **run**: async tasks run on the loop; sync tasks in a thread pool of
  `concurrency` threads. An exception fails the attempt: the core decides retry
  (backoff) or dead letter (`vigil.core.queue.after_failure`). What a task returns
  is its execution's output, checked where it ran (`vigil.worker.outputs`: a value
  the store cannot keep becomes null, with a warning; the attempt still succeeds).
- **acknowledge**: results gather for `ack_interval` or `ack_batch` results and
  settle in one transaction with their attempt rows.
- **heartbeat**: every `heartbeat`, all held leases are extended in one
  statement. A lease that does not come back was taken (it expired; another
  worker may be running the same execution): the context's `lease_lost` turns
  true, the attempt is marked duplicate and counted.
- **expire**: every `expiry_interval`, leases past their deadline — any
  worker's — go back to the queue with attempt + 1, or to the dead letters.
- **declaration**: at start and every `declaration_refresh`, the queue's row in
  the store (its TaskQueue) is read: its lease, heartbeat and backoff replace the
  worker's flags, its tenant caps and reserved shares bound what a lease takes
  (`vigil.core.queue.allowance`). Without a row the flags apply and nothing is capped.
- **drain**: `stop` (SIGTERM) ends leasing; in-flight executions may finish for
  up to `drain_timeout`, heartbeats continue meanwhile, results are acknowledged,
  then the worker returns.

`now` comes from the injected clock, read once per pass.

A worker's start is paid before its first lease, so this module imports only what the loop
uses: the worker's part of the store (`vigil.queue.workerstore`, not `vigil.queue.store`,
which composes the operator's submit and upkeep parts too), and the clock's port for typing
only (`vigil.core.ports` loads the trigger's core: chains, schedules, buckets).
tests/unit/test_worker_imports.py keeps it so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import traceback
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg

from vigil import metrics, pgconnect
from vigil.core.backoff import RetryPolicy
from vigil.core.queue import (
    Allowance,
    AttemptOutcome,
    QueueDeclaration,
    after_failure,
    allowance,
    bounded_error,
)
from vigil.queue.workerstore import NOTIFY_CHANNEL, Finished, Leased, WorkerStore
from vigil.worker.outputs import output_of
from vigil.worker.settings import WorkerSettings
from vigil.worker.tasks import Context, TaskFunction, TaskRegistry

if TYPE_CHECKING:
    from vigil.core.ports import Clock

log = logging.getLogger(__name__)

LISTEN_CHECK_SECONDS = 1.0  # how often the listener looks whether the worker is stopping


def worker_name() -> str:
    """host-pid-random: unique per process, readable in `lease_owner` and the attempt rows."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclasses.dataclass
class WorkerCounts:
    """What this worker did, for tests and logs (the metrics carry the same)."""

    succeeded: int = 0
    failed: int = 0
    expired: int = 0  # leases (anyone's) this worker returned to the queue
    duplicates: int = 0  # own attempts whose lease was taken while they ran


class Worker:
    """Runs the tasks of `registry` from `queue` until `stop` is set (see the module docstring)."""

    def __init__(
        self,
        *,
        dsn: str,
        queue: str,
        registry: TaskRegistry,
        settings: WorkerSettings,
        clock: Clock,
        name: str | None = None,
    ) -> None:
        self.dsn = dsn
        self.queue = queue
        self.registry = registry
        self.settings = settings
        self.clock = clock
        self.name = name or worker_name()
        self.counts = WorkerCounts()
        self._held: dict[tuple[str, int], tuple[Leased, Context]] = {}
        self._results: list[Finished] = []
        self._results_ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._slot_free = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()
        self._duplicates: set[tuple[str, int]] = set()
        self.declared: QueueDeclaration | None = None  # the queue's TaskQueue, from the store
        self._threads = ThreadPoolExecutor(settings.concurrency, thread_name_prefix="vigil-task")
        self._store: WorkerStore | None = None  # leasing: its own connection, never behind an ack
        self._books: WorkerStore | None = None  # acknowledgements, heartbeats, expiries, once
        self._reconnecting = asyncio.Lock()
        self._beat_now = asyncio.Event()  # set on a reconnect: heartbeat at once, not at the next tick

    async def run(self, stop: asyncio.Event) -> WorkerCounts:
        """Work until `stop`, then drain; returns what was done."""
        tasks = self.registry.names()
        if not tasks:
            raise ValueError("no tasks registered: import the module that defines them (--tasks)")
        connection, books = await _connect_together(self.dsn, 2)
        self._store = WorkerStore(connection, queue=self.queue, worker=self.name)
        self._books = WorkerStore(books, queue=self.queue, worker=self.name)
        await self._read_declaration()
        halt = asyncio.Event()  # ends the helpers once the drain is over
        helpers = [
            asyncio.create_task(self._declarations(halt)),
            asyncio.create_task(self._listen(halt)),
            asyncio.create_task(self._heartbeats(halt)),
            asyncio.create_task(self._expiries(halt)),
            asyncio.create_task(self._acknowledge(halt)),
        ]
        log.info("worker %s: queue %s, tasks %s", self.name, self.queue, ", ".join(tasks))
        try:
            await self._lease_loop(tasks, stop)
            await self._drain()
        finally:
            halt.set()
            self._results_ready.set()
            await asyncio.gather(*helpers, return_exceptions=True)
            await self._flush()
            await self._require_store().connection.close()
            await self._require_books().connection.close()
            self._threads.shutdown(wait=False, cancel_futures=True)
        return self.counts

    # -- leasing and running ---------------------------------------------------------------------

    async def _lease_loop(self, tasks: list[str], stop: asyncio.Event) -> None:
        store = self._require_store()
        while not stop.is_set():
            free = self.settings.concurrency - len(self._held)
            if free <= 0:
                self._slot_free.clear()
                await _first(stop.wait(), self._slot_free.wait())
                continue
            asked = min(free, self.settings.lease_batch)
            self._wake.clear()
            try:
                leased = await store.lease(
                    tasks, limit=asked, lease=self.lease, now=self.clock.now(),
                    declaration=self.declared, allowance=self._allowance(),
                )  # fmt: skip
            except psycopg.OperationalError as error:
                log.warning("worker %s: leasing failed (%s); retrying after the poll interval", self.name, error)
                await self._reconnect(store)
                leased = []
            for item in leased:
                self._start(item)
            if len(leased) < asked:
                # Fewer than asked: nothing more is due. A submit's NOTIFY, a returned lease or
                # the poll interval (retries coming due; lost notifications) ends the wait.
                await _first(
                    stop.wait(), self._wake.wait(), timeout=self.settings.poll_interval.total_seconds()
                )

    def _start(self, leased: Leased) -> None:
        store = self._require_books()
        ctx = Context(
            execution_id=leased.execution_id,
            attempt=leased.attempt,
            max_attempts=leased.max_attempts,
            scheduled_for=leased.scheduled_for,
            payload=leased.payload,
            idempotency_key=leased.idempotency_key,
            task=leased.task,
            queue=self.queue,
            worker=self.name,
            loop=asyncio.get_running_loop(),
        )
        ctx.claim = lambda key: store.once(leased, key, now=self.clock.now())
        self._held[(leased.execution_id, leased.attempt)] = (leased, ctx)
        running = asyncio.create_task(self._run_one(leased, ctx))
        self._running.add(running)
        running.add_done_callback(self._running.discard)

    async def _run_one(self, leased: Leased, ctx: Context) -> None:
        started = self.clock.now()
        function = self.registry.get(leased.task)
        error: str | None = None
        output: str | None = None
        try:
            if function is None:
                raise LookupError(f"task {leased.task!r} is not registered in this worker")
            if self.registry.is_async(function):
                output = output_of(await function(ctx), task=leased.task, execution_id=leased.execution_id)
            else:
                output = await asyncio.get_running_loop().run_in_executor(self._threads, _run_sync, function, ctx)
        except asyncio.CancelledError:
            # Cut short by the drain timeout: neither success nor failure. The lease is simply
            # no longer extended, so the execution runs again elsewhere once it expires.
            self._held.pop((leased.execution_id, leased.attempt), None)
            raise
        except Exception:
            error = bounded_error(traceback.format_exc())
        self._finish(leased, started, error, output)

    def _finish(self, leased: Leased, started: Any, error: str | None, output: str | None = None) -> None:
        now = self.clock.now()
        if error is None:
            finished = Finished(leased, AttemptOutcome.SUCCEEDED, started, now, output=output)
            self.counts.succeeded += 1
        else:
            settlement = after_failure(
                execution_id=leased.execution_id,
                attempt=leased.attempt,
                max_attempts=leased.max_attempts,
                backoff=RetryPolicy(backoff=self.declared.backoff if self.declared else self.settings.backoff),
                now=now,
            )
            finished = Finished(leased, AttemptOutcome.FAILED, started, now, error, settlement)
            self.counts.failed += 1
        metrics.record_queue_attempt(self.queue, finished.outcome.value)
        self._results.append(finished)
        if len(self._results) >= self.settings.ack_batch:
            self._results_ready.set()
        self._held.pop((leased.execution_id, leased.attempt), None)
        self._slot_free.set()

    async def _drain(self) -> None:
        if not self._running:
            return
        log.info("worker %s: draining %d in-flight executions", self.name, len(self._running))
        _, late = await asyncio.wait(
            set(self._running), timeout=self.settings.drain_timeout.total_seconds()
        )
        for task in late:
            task.cancel()  # an async task stops here; a sync one's thread is left to the exit
        if late:
            log.warning("worker %s: %d executions did not finish within the drain timeout", self.name, len(late))

    # -- the queue's declaration ------------------------------------------------------------------

    @property
    def lease(self) -> timedelta:
        """The TaskQueue's leaseDuration when declared, else the worker's --lease."""
        return self.declared.lease if self.declared else self.settings.lease

    @property
    def heartbeat(self) -> timedelta:
        return self.declared.heartbeat if self.declared else self.settings.heartbeat

    def _allowance(self) -> Allowance | None:
        """This worker's free slots per reserved priority and shared (None: nothing reserved)."""
        if self.declared is None or not self.declared.priorities:
            return None
        held = Counter(leased.priority for leased, _ in self._held.values())
        return allowance(concurrency=self.settings.concurrency, priorities=self.declared.priorities, held=held)

    async def _read_declaration(self) -> None:
        try:
            declared = await self._require_books().declaration()
        except psycopg.OperationalError as error:
            log.warning("worker %s: reading the queue's declaration failed (%s)", self.name, error)
            await self._reconnect(self._require_books())
            return
        if declared != self.declared:
            log.info("worker %s: queue %s declared as %s", self.name, self.queue, declared or "nothing (flags apply)")
            self.declared = declared

    async def _declarations(self, halt: asyncio.Event) -> None:
        while not await _stopped(halt, self.settings.declaration_refresh.total_seconds()):
            await self._read_declaration()

    # -- helpers: acknowledgements, heartbeats, expiries, notifications -----------------------

    async def _acknowledge(self, halt: asyncio.Event) -> None:
        while not halt.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._results_ready.wait(), timeout=self.settings.ack_interval.total_seconds() or None)
            self._results_ready.clear()
            await self._flush()

    async def _flush(self) -> None:
        if not self._results:
            return
        batch, self._results = self._results, []
        try:
            report = await self._require_books().settle(batch, now=self.clock.now())
        except psycopg.OperationalError as error:
            log.warning("worker %s: acknowledging failed (%s); will retry", self.name, error)
            self._results = batch + self._results
            await self._reconnect(self._require_books())
            return
        self._count_duplicates([f.leased for f in report.stale])

    async def _heartbeats(self, halt: asyncio.Event) -> None:
        """Extend the held leases every heartbeat, and at once after a reconnect: after an outage
        of the database a lease may be close to its end, and another worker's expiry pass near."""
        while not await _stopped(halt, self.heartbeat.total_seconds(), early=self._beat_now):
            self._beat_now.clear()
            held = [leased for leased, _ in self._held.values()]
            try:
                lost = await self._require_books().heartbeat(held, lease=self.lease, now=self.clock.now())
            except psycopg.OperationalError as error:
                log.warning("worker %s: heartbeat failed (%s)", self.name, error)
                await self._reconnect(self._require_books())
                continue
            if lost:
                gone = [leased for leased in held if leased.execution_id in lost]
                for leased in gone:
                    entry = self._held.get((leased.execution_id, leased.attempt))
                    if entry is not None:
                        entry[1].lease_lost = True
                try:
                    cancelled = await self._require_books().cancelled(gone)  # through the API: no copy runs
                    copies = [leased for leased in gone if leased.execution_id not in cancelled]
                    await self._require_books().mark_duplicates(copies)
                except psycopg.OperationalError as error:  # the acknowledgement marks them later
                    log.warning("worker %s: recording lost leases failed (%s)", self.name, error)
                    await self._reconnect(self._require_books())
                    continue
                self._count_duplicates(copies)

    async def _expiries(self, halt: asyncio.Event) -> None:
        while not await _stopped(halt, self.settings.expiry_interval.total_seconds()):
            try:
                expired = await self._require_books().expire(now=self.clock.now())
            except psycopg.OperationalError as error:
                log.warning("worker %s: returning expired leases failed (%s)", self.name, error)
                await self._reconnect(self._require_books())
                continue
            if expired:
                self.counts.expired += len(expired)
                metrics.record_queue_lease_expiries(self.queue, len(expired))
                self._wake.set()

    async def _listen(self, halt: asyncio.Event) -> None:
        """Wake the lease loop on NOTIFY; on any failure, leave it to polling and try again later."""
        while not halt.is_set():
            try:
                async with await pgconnect.connect_async(self.dsn) as listener:
                    await listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    while not halt.is_set():
                        # Returns after a second without notifications, to look at `halt` again.
                        async for note in listener.notifies(timeout=LISTEN_CHECK_SECONDS):
                            if note.payload == self.queue:
                                self._wake.set()
            except psycopg.OperationalError as error:
                log.warning("worker %s: LISTEN failed (%s); polling meanwhile", self.name, error)
                await _stopped(halt, self.settings.poll_interval.total_seconds())

    async def _reconnect(self, store: WorkerStore) -> None:
        """Replace `store`'s connection if the server cut it (a restart, a network break).

        A connection that is only slow stays. A failed connect leaves the closed one in place,
        so the next failing statement tries again: the worker never has to be restarted.
        """
        async with self._reconnecting:
            if not store.connection.closed:
                return  # still open, or another coroutine replaced it meanwhile
            try:
                store.connection = await pgconnect.connect_async(self.dsn)
            except psycopg.OperationalError as error:
                log.warning("worker %s: reconnecting failed (%s); trying again on the next failure", self.name, error)
                return
            log.info("worker %s: reconnected to the queue store", self.name)
            self._beat_now.set()

    def _count_duplicates(self, attempts: list[Leased]) -> None:
        for leased in attempts:
            key = (leased.execution_id, leased.attempt)
            if key not in self._duplicates:
                self._duplicates.add(key)
                self.counts.duplicates += 1
                metrics.record_queue_duplicate(self.queue)
                log.warning("worker %s: %s attempt %d ran after its lease was taken (a duplicate)",
                            self.name, leased.execution_id, leased.attempt)  # fmt: skip

    def _require_store(self) -> WorkerStore:
        if self._store is None:
            raise RuntimeError("the worker is not running")
        return self._store

    def _require_books(self) -> WorkerStore:
        if self._books is None:
            raise RuntimeError("the worker is not running")
        return self._books


def _run_sync(function: TaskFunction, ctx: Context) -> str | None:
    """A sync task and the check of what it returned, both in its worker thread."""
    return output_of(function(ctx), task=ctx.task, execution_id=ctx.execution_id)


async def _first(*waits: Any, timeout: float | None = None) -> None:
    """Wait until the first of `waits` (coroutines) finishes, or `timeout` seconds; cancel the rest."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


async def _stopped(halt: asyncio.Event, seconds: float, *, early: asyncio.Event | None = None) -> bool:
    """Wait `seconds`, or until `halt` (or `early`, when given) is set; True when halted."""
    waits = [asyncio.ensure_future(halt.wait())]
    if early is not None:
        waits.append(asyncio.ensure_future(early.wait()))
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
    return halt.is_set()


async def _connect_together(dsn: str, count: int) -> list[psycopg.AsyncConnection[Any]]:
    """`count` connections opened at once, so a start waits for one connect and not each in turn.

    When one fails, those that opened are closed and the first failure is raised.
    """
    opened = await asyncio.gather(*(pgconnect.connect_async(dsn) for _ in range(count)), return_exceptions=True)
    failures = [result for result in opened if isinstance(result, BaseException)]
    connections = [result for result in opened if not isinstance(result, BaseException)]
    if failures:
        for connection in connections:
            await connection.close()
        raise failures[0]
    return connections
