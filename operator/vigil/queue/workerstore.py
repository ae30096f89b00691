"""The queue store as a worker uses it: lease, heartbeat, settle, expire, once.

`WorkerStore` (asynchronous, on one autocommit connection the worker owns: a single statement
needs no BEGIN/COMMIT round trips, and a settlement's statements go in one pipelined transaction)
leases a batch with FOR UPDATE SKIP LOCKED, extends leases by heartbeat, settles attempts in
batches, returns expired leases to the queue and takes `once` marks, each through its
`vigil_queue.worker_<block>` function (vigil.queue.functions). What an attempt's end decides
(retry with backoff, dead letter, an expired lease's next attempt) is `vigil.core.queue`'s; this
module only writes it, each write conditional on the lease still being the writer's (execution
id, attempt and owner), so a worker whose lease was taken can never overwrite the new holder's
state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from vigil.core.queue import (
    Allowance,
    AttemptOutcome,
    QueueDeclaration,
    Settlement,
    after_expiry,
    lease_deadline,
)
from vigil.queue.declarestore import declaration_from_row
from vigil.queue.functions import CALLS as WORKER

NOTIFY_CHANNEL = "vigil_queue"  # submit notifies it with the queue's name; workers LISTEN
EXPIRY_BATCH = 500  # expired leases returned to the queue per statement


@dataclasses.dataclass(frozen=True)
class Leased:
    """An execution a worker holds: what the task's context is made of."""

    execution_id: str
    task: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    scheduled_for: datetime
    idempotency_key: str | None
    priority: int
    tenant: str
    lease_token: uuid.UUID | None = None  # drawn for this lease; what acknowledges it names it


@dataclasses.dataclass(frozen=True)
class Finished:
    """How a worker's attempt ended, to be settled (in a batch) with the store."""

    leased: Leased
    outcome: AttemptOutcome
    started_at: datetime
    finished_at: datetime
    error: str | None = None
    settlement: Settlement | None = None  # for failures: the next state (vigil.core.queue)
    output: str | None = None  # for successes: what the task returned, as checked JSON text (vigil.worker.outputs)


@dataclasses.dataclass(frozen=True)
class SettleReport:
    """What a batch of settlements found: the attempts whose lease had been taken meanwhile.

    An attempt whose execution was cancelled under it is neither settled nor stale: its
    row is recorded and nothing else changes.
    """

    settled: int
    stale: list[Finished]  # ran to the end after their lease expired: duplicates


class WorkerStore:
    """A worker's operations on its own async connection (autocommit; each call one transaction)."""

    def __init__(self, connection: psycopg.AsyncConnection[Any], *, queue: str, worker: str) -> None:
        self.connection = connection
        self.queue = queue
        self.worker = worker
        # One connection, many coroutines: a transaction must not take in another's statements.
        self._lock = asyncio.Lock()

    async def lease(
        self,
        tasks: Sequence[str],
        *,
        limit: int,
        lease: timedelta,
        now: datetime,
        declaration: QueueDeclaration | None = None,
        allowance: Allowance | None = None,
    ) -> list[Leased]:
        """Up to `limit` due executions of `tasks`, leased to this worker until now + lease.

        Within the tenants' caps of `declaration` and, when given, the `allowance` of this
        worker's slots (vigil.core.queue.allowance): reserved slots go only to their priority.
        One statement, or, when tenants are capped, the queue's tenant lock and the statement in
        one pipelined transaction (one round trip), so leasers count each other's leases.
        """
        caps = declaration or QueueDeclaration()
        reserved = dict(allowance.reserved_free) if allowance is not None else {}
        params = {
            "queue": self.queue,
            "tasks": list(tasks),
            "limit": limit,
            "now": now,
            "worker": self.worker,
            "expires": lease_deadline(now, lease),
            "tenant_cap": caps.tenant_max_concurrent,
            "tenant_caps": Jsonb(dict(caps.tenant_caps)),
            "reserved_priorities": list(reserved),
            "reserved_free": list(reserved.values()),
            "shared_free": allowance.shared_free if allowance is not None else limit,
        }
        if caps.capped:
            async with self._lock, self.connection.pipeline(), self.connection.transaction():
                await self.connection.execute(WORKER["lock_tenants"], {"queue": self.queue})
                cursor = await self.connection.execute(WORKER["lease"], params)
                rows = await cursor.fetchall()
            return [_leased(row) for row in rows]
        async with self._lock:  # one statement: atomic in autocommit, no BEGIN/COMMIT round trips
            cursor = await self.connection.execute(WORKER["lease"], params)
            rows = await cursor.fetchall()
        return [_leased(row) for row in rows]

    async def declaration(self) -> QueueDeclaration | None:
        """This queue's published declaration (its TaskQueue), or None when there is none."""
        async with self._lock:
            cursor = await self.connection.execute(WORKER["declared_queue"], {"queue": self.queue})
            row = await cursor.fetchone()
        return None if row is None else declaration_from_row(row)

    async def heartbeat(
        self, held: Sequence[Leased], *, lease: timedelta, now: datetime
    ) -> set[str]:
        """Extend the leases of `held`; returns the ids whose lease this worker no longer has."""
        if not held:
            return set()
        params = {
            **self._held(held),
            "worker": self.worker,
            "expires": lease_deadline(now, lease),
        }
        async with self._lock:  # one statement: atomic in autocommit, no BEGIN/COMMIT round trips
            cursor = await self.connection.execute(WORKER["heartbeat"], params)
            kept = {row[0] for row in await cursor.fetchall()}
        return {h.execution_id for h in held} - kept

    async def expire(self, *, now: datetime) -> list[tuple[str, int, Settlement]]:
        """Return leases past their deadline to the queue (attempt + 1) or the dead letters.

        Each gets an attempt row `lease_expired`, naming the holder that lost it.
        """
        async with self._lock, self.connection.transaction():
            cursor = await self.connection.execute(
                WORKER["expired"], {"queue": self.queue, "now": now, "limit": EXPIRY_BATCH}
            )
            rows = await cursor.fetchall()
            done: list[tuple[str, int, Settlement]] = []
            history: list[tuple[str, int, str, str, datetime | None, datetime, str | None]] = []
            for execution_id, attempt, max_attempts, owner, expired_at, token in rows:
                settlement = after_expiry(attempt=attempt, max_attempts=max_attempts, now=now)
                await self.connection.execute(
                    WORKER["settle"],
                    self._settle_params(execution_id, attempt, token, owner, settlement, now, "lease expired"),
                )
                done.append((execution_id, attempt, settlement))
                why = f"lease held by {owner} expired"
                outcome = AttemptOutcome.LEASE_EXPIRED.value
                history.append((execution_id, attempt, owner, outcome, None, expired_at, why))
            await self._record(history)
        return done

    async def settle(self, finished: Sequence[Finished], *, now: datetime) -> SettleReport:
        """Acknowledge a batch of attempts and write their attempt rows, atomically.

        A batch of successes is one statement (`settle_succeeded`, which writes the attempt rows of
        those it settles); only what it could not settle goes on to the transaction below. Any other
        batch is that one transaction: the successes in one statement, each with its output, the
        failures one statement each (their next run_after differs), then the attempt rows. An
        attempt whose lease was taken meanwhile changes nothing but its attempt row, marked
        duplicate: it ran while another copy could. An attempt this worker had acknowledged already
        (the reply to that commit was lost, and the acknowledgement is sent again) counts as
        settled, and is no duplicate.
        """
        if not finished:
            return SettleReport(0, [])
        if all(f.outcome is AttemptOutcome.SUCCEEDED for f in finished):
            async with self._lock:  # one statement: atomic in autocommit, no BEGIN/COMMIT round trips
                won = await self._settle_succeeded(finished, now=now)
            rest = [f for f in finished if f.leased.execution_id not in won]
            if not rest:
                return SettleReport(len(finished), [])
            report = await self._settle_together(rest, now=now)
            return SettleReport(len(finished) - len(rest) + report.settled, report.stale)
        return await self._settle_together(finished, now=now)

    async def _settle_together(self, finished: Sequence[Finished], *, now: datetime) -> SettleReport:
        """`settle` in one pipelined transaction: successes, failures, then every attempt row."""
        wins = [f for f in finished if f.outcome is AttemptOutcome.SUCCEEDED]
        async with self._lock, self.connection.pipeline(), self.connection.transaction():
            won = await self._settle_succeeded(wins, now=now) if wins else set()
            recorded = {(f.leased.execution_id, f.leased.attempt) for f in wins if f.leased.execution_id in won}
            settled = set(recorded)  # the successes settled, their attempt rows written with them
            for f in finished:
                if f.outcome is AttemptOutcome.SUCCEEDED or f.settlement is None:
                    continue
                params = self._settle_params(
                    f.leased.execution_id, f.leased.attempt, f.leased.lease_token,
                    self.worker, f.settlement, now, f.error,
                )
                cursor = await self.connection.execute(WORKER["settle"], params)
                if await cursor.fetchone() is not None:
                    settled.add((f.leased.execution_id, f.leased.attempt))
            # before this batch's own attempt rows are written: a row already there is an earlier commit's
            pending = [f for f in finished if (f.leased.execution_id, f.leased.attempt) not in settled]
            settled |= await self._acknowledged_among(pending)
            await self._record(
                [
                    (
                        f.leased.execution_id, f.leased.attempt, self.worker,
                        f.outcome.value, f.started_at, f.finished_at, f.error,
                    )
                    for f in finished
                    if (f.leased.execution_id, f.leased.attempt) not in recorded
                ]
            )
            unsettled = [f for f in finished if (f.leased.execution_id, f.leased.attempt) not in settled]
            cancelled = await self._cancelled_among([f.leased for f in unsettled]) if unsettled else set()
            stale = [f for f in unsettled if f.leased.execution_id not in cancelled]
            if stale:
                await self.connection.execute(WORKER["mark_duplicates"], self._held([f.leased for f in stale]))
        return SettleReport(len(settled), stale)

    async def _settle_succeeded(self, wins: Sequence[Finished], *, now: datetime) -> set[str]:
        """Settle `wins` and write the attempt rows of those settled; returns their execution ids."""
        cursor = await self.connection.execute(
            WORKER["settle_succeeded"],
            {
                **self._held([f.leased for f in wins]),
                "outputs": [f.output for f in wins],
                "started": [f.started_at for f in wins],
                "finished": [f.finished_at for f in wins],
                "worker": self.worker,
                "now": now,
            },
        )
        return {row[0] for row in await cursor.fetchall()}

    async def cancelled(self, held: Sequence[Leased]) -> set[str]:
        """The ids among `held` whose lease was taken by a cancel (the API's), not by another copy."""
        if not held:
            return set()
        async with self._lock:
            return await self._cancelled_among(held)

    async def _acknowledged_among(self, finished: Sequence[Finished]) -> set[tuple[str, int]]:
        if not finished:
            return set()
        params = {
            **self._held([f.leased for f in finished]),
            "outcomes": [f.outcome.value for f in finished],
            "worker": self.worker,
        }
        cursor = await self.connection.execute(WORKER["acknowledged_among"], params)
        return {(str(row[0]), int(row[1])) for row in await cursor.fetchall()}

    async def _cancelled_among(self, held: Sequence[Leased]) -> set[str]:
        cursor = await self.connection.execute(WORKER["cancelled_among"], self._held(held))
        return {row[0] for row in await cursor.fetchall()}

    async def mark_duplicates(self, held: Sequence[Leased]) -> None:
        """Mark attempts whose lease was taken while their holder still ran them."""
        if not held:
            return
        async with self._lock:  # one statement: atomic in autocommit, no BEGIN/COMMIT round trips
            await self.connection.execute(WORKER["mark_duplicates"], self._held(held))

    async def once(self, leased: Leased, key: str, *, now: datetime) -> bool:
        """Claim `key` for this execution: True for the first copy to ask, False for any other."""
        params = {
            "queue": self.queue,
            "execution_id": leased.execution_id,
            "token": leased.lease_token,
            "key": key,
            "attempt": leased.attempt,
            "worker": self.worker,
            "now": now,
        }
        async with self._lock:  # one statement: atomic in autocommit, no BEGIN/COMMIT round trips
            cursor = await self.connection.execute(WORKER["once"], params)
            return await cursor.fetchone() is not None

    async def _record(
        self, rows: Sequence[tuple[str, int, str, str, datetime | None, datetime, str | None]]
    ) -> None:
        if not rows:
            return
        columns = list(zip(*rows, strict=True))
        names = ("execution_ids", "attempts", "workers", "outcomes", "started", "finished", "errors")
        params: dict[str, Any] = {"queue": self.queue, **dict(zip(names, map(list, columns), strict=True))}
        await self.connection.execute(WORKER["record_attempts"], params)

    def _held(self, held: Sequence[Leased]) -> dict[str, Any]:
        """The parameters naming leases: this queue, and each one's execution, attempt and token."""
        return {
            "queue": self.queue,
            "execution_ids": [h.execution_id for h in held],
            "attempts": [h.attempt for h in held],
            "tokens": [h.lease_token for h in held],
        }

    def _settle_params(
        self, execution_id: str, attempt: int, token: uuid.UUID | None, owner: str,
        settlement: Settlement, now: datetime, error: str | None,
    ) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "execution_id": execution_id,
            "attempt": attempt,
            "token": token,
            "worker": owner,
            "state": settlement.state.value,
            "next_attempt": settlement.attempt,
            "run_after": settlement.run_after,
            "error": error,
            "now": now,
        }


def _leased(row: Sequence[Any]) -> Leased:
    return Leased(
        execution_id=row[0],
        task=row[1],
        payload=row[2],
        attempt=row[3],
        max_attempts=row[4],
        scheduled_for=row[5],
        idempotency_key=row[6],
        priority=row[7],
        tenant=row[8],
        lease_token=row[9],
    )
