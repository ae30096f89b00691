"""A queue's declaration on real PostgreSQL: tenant caps, reserved capacity, status counts, retention.

The declaration is what the operator publishes from a TaskQueue; here it is written with
`QueueStore.declare` directly and leases are taken by `WorkerStore`s with explicit times, so each
rule is checked without an operator or a worker loop.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

import pytest

from tests.queue.conftest import execution_row
from tests.queue.test_store import LEASE, T0, workers
from vigil.core.executions import RetryPolicy
from vigil.core.queue import AttemptOutcome, QueueDeclaration, after_failure, allowance
from vigil.queue.store import Finished, QueueStore, Submission

pytestmark = pytest.mark.postgres

HIGH, LOW = 0, 9


def test_a_declaration_round_trips_and_sets_the_default_max_attempts(store: QueueStore) -> None:
    declared = QueueDeclaration(
        lease=timedelta(seconds=45), heartbeat=timedelta(seconds=15), max_attempts=7,
        dead_retention=timedelta(days=2), tenant_max_concurrent=3, tenant_caps={"big": 10},
        priorities={HIGH: 0.25}, objective=timedelta(minutes=5),
    )  # fmt: skip
    store.declare("ns/q", declared, generation=4, now=T0)
    assert store.declaration("ns/q") == declared
    assert store.declared() == {"ns/q": 4}
    [own, default] = store.submit("ns/q", [Submission("record", max_attempts=2), Submission("record")], now=T0)
    assert execution_row(store, own)["max_attempts"] == 2
    assert execution_row(store, default)["max_attempts"] == 7
    store.undeclare(["ns/q"])
    assert store.declaration("ns/q") is None
    [fallback] = store.submit("ns/q", [Submission("record")], now=T0)
    assert execution_row(store, fallback)["max_attempts"] == 3


def test_a_tenant_at_its_cap_gets_nothing_more_until_one_finishes(store: QueueStore, dsn: str) -> None:
    caps = QueueDeclaration(tenant_max_concurrent=2, tenant_caps={"vip": 5})
    store.submit("q", [Submission("record", tenant="a") for _ in range(10)], now=T0)
    store.submit("q", [Submission("record", tenant="vip") for _ in range(10)], now=T0)

    async def run() -> tuple[Counter[str], Counter[str], Counter[str]]:
        async with workers(dsn, "q", "w1", "w2") as [w1, w2]:
            first = await w1.lease(["record"], limit=20, lease=LEASE, now=T0, declaration=caps)
            second = await w2.lease(["record"], limit=20, lease=LEASE, now=T0, declaration=caps)
            held = [x for x in first if x.tenant == "a"][:1]
            done = Finished(held[0], AttemptOutcome.SUCCEEDED, T0, T0)
            await w1.settle([done], now=T0)
            third = await w2.lease(["record"], limit=20, lease=LEASE, now=T0, declaration=caps)
        return (Counter(x.tenant for x in first), Counter(x.tenant for x in second), Counter(x.tenant for x in third))

    first, second, third = asyncio.run(run())
    assert first == {"a": 2, "vip": 5}  # the cap, and the override's own cap
    assert second == {}  # another worker finds both tenants at their caps
    assert third == {"a": 1}  # one finished: one more


def test_concurrent_leasers_never_take_a_tenant_past_its_cap(store: QueueStore, dsn: str) -> None:
    caps = QueueDeclaration(tenant_max_concurrent=5)
    store.submit("q", [Submission("record", tenant="a") for _ in range(200)], now=T0)

    async def run() -> int:
        async with workers(dsn, "q", *(f"w{i}" for i in range(6))) as leasers:
            batches = await asyncio.gather(
                *(w.lease(["record"], limit=3, lease=LEASE, now=T0, declaration=caps) for w in leasers)
            )
        return sum(len(b) for b in batches)

    assert asyncio.run(run()) == 5
    assert store.counts("q")["leased"] == 5


def test_a_backfill_of_low_priority_cannot_take_the_capacity_reserved_for_high(
    store: QueueStore, dsn: str
) -> None:
    """Concurrency 10 with high's share 0.3: 3 slots only high may take, whatever the backfill."""
    declared = QueueDeclaration(priorities={HIGH: 0.3})
    store.submit("q", [Submission("record", priority=LOW, run_after=T0 - timedelta(hours=1)) for _ in range(500)], now=T0)

    async def run() -> tuple[list[int], list[int], list[int]]:
        async with workers(dsn, "q", "w1") as [w]:
            free = allowance(concurrency=10, priorities=declared.priorities, held={})
            backfill = await w.lease(["record"], limit=10, lease=LEASE, now=T0, declaration=declared, allowance=free)
            held = Counter(x.priority for x in backfill)
            full = allowance(concurrency=10, priorities=declared.priorities, held=held)
            more = await w.lease(["record"], limit=10, lease=LEASE, now=T0, declaration=declared, allowance=full)
            store.submit("q", [Submission("record", priority=HIGH) for _ in range(5)], now=T0)
            urgent = await w.lease(["record"], limit=10, lease=LEASE, now=T0, declaration=declared, allowance=full)
        return [x.priority for x in backfill], [x.priority for x in more], [x.priority for x in urgent]

    backfill, more, urgent = asyncio.run(run())
    assert backfill == [LOW] * 7  # the shared slots only
    assert more == []  # the 3 reserved slots stay free for high
    assert urgent == [HIGH] * 3  # high starts at once, in its reserved slots


def test_high_priority_uses_the_shared_slots_too_most_urgent_first(store: QueueStore, dsn: str) -> None:
    declared = QueueDeclaration(priorities={HIGH: 0.2, LOW: 0.2})
    store.submit("q", [Submission("record", priority=LOW) for _ in range(20)], now=T0)
    store.submit("q", [Submission("record", priority=HIGH) for _ in range(20)], now=T0)

    async def run() -> Counter[int]:
        async with workers(dsn, "q", "w1") as [w]:
            free = allowance(concurrency=10, priorities=declared.priorities, held={})
            got = await w.lease(["record"], limit=10, lease=LEASE, now=T0, declaration=declared, allowance=free)
        return Counter(x.priority for x in got)

    # high: its 2 reserved and all 6 shared (it goes first); low: only its own 2 reserved.
    assert asyncio.run(run()) == {HIGH: 8, LOW: 2}


def test_the_status_query_counts_and_finds_the_oldest_due_ready_execution(
    store: QueueStore, dsn: str
) -> None:
    store.submit("ns/q", [Submission("record", tenant="a", run_after=T0 - timedelta(seconds=90))], now=T0)
    store.submit("ns/q", [Submission("record", tenant="b", priority=3, run_after=T0 - timedelta(seconds=40)) for _ in range(4)], now=T0)
    store.submit("ns/q", [Submission("record", tenant="a", run_after=T0 + timedelta(hours=1))], now=T0)  # not due
    store.submit("ns/q", [Submission("poison", tenant="c", max_attempts=1) for _ in range(2)], now=T0)
    store.submit("other", [Submission("record", run_after=T0 - timedelta(days=1))], now=T0)
    later = T0 + timedelta(seconds=10)

    async def run() -> None:
        async with workers(dsn, "ns/q", "w1") as [w]:
            poison = await w.lease(["poison"], limit=5, lease=LEASE, now=T0)
            await w.settle(
                [Finished(x, AttemptOutcome.FAILED, T0, later, "boom", after_failure(
                    execution_id=x.execution_id, attempt=1, max_attempts=1, backoff=RetryPolicy(), now=later))
                 for x in poison[:1]],
                now=later,
            )
            await w.lease(["record"], limit=2, lease=LEASE, now=later)

    asyncio.run(run())
    stats = store.stats(["ns/q", "empty/q"], now=later)
    q = stats["ns/q"]
    # ready: 6 records, 2 of them leased (a's oldest, one of b's); leased: those and a poison
    assert (q.ready, q.leased, q.dead, q.dead_last_minute) == (4, 3, 1, 1)
    # the oldest due ready: b's at T0-40s (a's T0-90s is leased, a's future one is not due)
    assert q.oldest_ready_age == timedelta(seconds=50)
    assert stats["empty/q"].ready == 0 and stats["empty/q"].oldest_ready_age is None


def test_dead_executions_past_their_retention_are_purged(store: QueueStore, dsn: str) -> None:
    [dead] = store.submit("q", [Submission("poison", max_attempts=1)], now=T0)

    async def run() -> None:
        async with workers(dsn, "q", "w1") as [w]:
            assert len(await w.lease(["poison"], limit=1, lease=LEASE, now=T0)) == 1
            await w.expire(now=T0 + LEASE)  # the lease ran out on its only attempt: dead

    asyncio.run(run())
    assert store.counts("q")["dead"] == 1
    assert store.purge_dead({"q": timedelta(hours=1)}, now=T0 + timedelta(minutes=30)) == 0
    assert store.purge_dead({"q": timedelta(hours=1)}, now=T0 + timedelta(hours=2)) == 1
    assert store.execution(dead) is None
