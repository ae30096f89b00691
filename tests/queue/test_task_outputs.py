"""What a task returns is its execution's output, on real PostgreSQL (migration q0013output).

* the store: a batch of successes acknowledged as a namespace's role (through its
  `worker_settle_succeeded` function and that function's grant) writes each one's output, JSON
  text cast to jsonb, NULL for none; a failure in the same batch keeps NULL; `states` (the
  workflow engine's read) and `execution` return it; a late success (its lease expired, no later
  attempt started) keeps its output too;
* the worker, in process: sync and async tasks' return values become their executions' outputs,
  None stays NULL;
* hostile return values (NUL, a lone surrogate, NaN, a set, an object, 40 KiB) in the same
  queue and batches as good ones: every attempt succeeds, the hostile ones with a NULL output
  and a warning naming the task, the good ones with theirs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.queue.conftest import execution_row
from tests.queue.tasks import DSN_ENV, HOSTILE, create_tables
from tests.queue.workers import in_process, runs
from tests.waiting import wait_for
from vigil.core.executions import RetryPolicy
from vigil.core.queue import AttemptOutcome, QueueState, Submission, after_failure
from vigil.queue.roles import RoleLimits, TenantRoles, worker_dsn
from vigil.queue.store import Finished, Leased, QueueStore, WorkerStore

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
QUEUE = "team-a/outputs"


def now() -> datetime:
    return datetime.now(UTC)


@pytest.fixture
def role_dsn(dsn: str) -> str:
    """The worker DSN of namespace team-a's own role: what a worker in that namespace holds."""
    role = TenantRoles(dsn).ensure("team-a", password="pw-team-a", limits=RoleLimits(connections=5))
    return worker_dsn(dsn, role=role, password="pw-team-a")


@pytest.fixture
def tables(dsn: str, monkeypatch: pytest.MonkeyPatch) -> str:
    create_tables(dsn)
    monkeypatch.setenv(DSN_ENV, dsn)
    return dsn


def success(leased: Leased, output: Any, at: datetime = T0) -> Finished:
    text = None if output is None else json.dumps(output, separators=(",", ":"))
    return Finished(leased, AttemptOutcome.SUCCEEDED, started_at=at, finished_at=at, output=text)


async def lease_all(store: WorkerStore, *, at: datetime = T0) -> dict[str, Leased]:
    return {held.execution_id: held for held in await store.lease(["record"], limit=10, lease=LEASE, now=at)}


# -- the store ----------------------------------------------------------------------------------


def test_a_batch_of_successes_keeps_each_ones_output_as_a_namespace_role(dsn: str, role_dsn: str) -> None:
    store = QueueStore(dsn)
    ids = store.submit(QUEUE, [Submission("record", {"n": n}, max_attempts=1) for n in range(4)], now=T0)
    outputs: list[Any] = [{"receipt": "r-1", "amount": 12.5, "note": "é ✓"}, [1, "two"], None]

    async def scenario() -> int:
        async with await psycopg.AsyncConnection.connect(role_dsn, autocommit=True) as connection:
            worker = WorkerStore(connection, queue=QUEUE, worker="w")
            held = await lease_all(worker)
            batch = [success(held[eid], output) for eid, output in zip(ids, outputs, strict=False)]
            dead = after_failure(execution_id=ids[3], attempt=1, max_attempts=1, backoff=RetryPolicy(), now=T0)
            batch.append(Finished(held[ids[3]], AttemptOutcome.FAILED, T0, T0, "declined", dead))
            return (await worker.settle(batch, now=T0)).settled

    assert asyncio.run(scenario()) == 4
    for eid, output in zip(ids, outputs, strict=False):
        row = execution_row(store, eid)
        assert (row["state"], row["output"]) == ("succeeded", output), eid
    failed = execution_row(store, ids[3])
    assert (failed["state"], failed["output"]) == ("dead", None)
    states = store.states(ids)
    assert [states[eid].output for eid in ids] == [*outputs, None]
    assert [states[eid].state for eid in ids] == [QueueState.SUCCEEDED] * 3 + [QueueState.DEAD]


def test_a_late_success_keeps_its_output(dsn: str) -> None:
    [execution_id] = QueueStore(dsn).submit(QUEUE, [Submission("record", max_attempts=1)], now=T0)

    async def scenario() -> int:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as a, \
                await psycopg.AsyncConnection.connect(dsn, autocommit=True) as b:  # fmt: skip
            holder, other = WorkerStore(a, queue=QUEUE, worker="holder"), WorkerStore(b, queue=QUEUE, worker="other")
            leased = (await lease_all(holder))[execution_id]
            later = T0 + LEASE + timedelta(seconds=1)
            assert len(await other.expire(now=later)) == 1  # dead: it was the last attempt
            return (await holder.settle([success(leased, {"late": True}, later)], now=later)).settled

    assert asyncio.run(scenario()) == 1
    row = execution_row(QueueStore(dsn), execution_id)
    assert (row["state"], row["output"]) == ("succeeded", {"late": True})


# -- the worker ---------------------------------------------------------------------------------

VALUES: list[Any] = [{"receipt": "r-1", "lines": [1, 2, 3]}, ["a", None, 2.5], "done", 0, False, None]


def test_what_a_task_returns_is_its_executions_output(store: QueueStore, tables: str) -> None:
    submissions = [Submission("returns", {} if value is None else {"value": value}) for value in VALUES]
    submissions += [Submission("returns_async", {"value": {"async": True}})]
    with in_process(tables, QUEUE) as counts:
        ids = store.submit(QUEUE, submissions, now=now())
        wait_for(lambda: store.counts(QUEUE)["succeeded"] == len(ids), timeout=30, what="every one succeeded")
    assert counts.succeeded == len(ids) and counts.failed == 0
    outputs = [execution_row(store, eid)["output"] for eid in ids]
    assert outputs == [*VALUES, {"async": True}]
    # the workflow engine's read (states_of) gives the same
    assert {eid: state.output for eid, state in store.states(ids).items()} == dict(zip(ids, outputs, strict=True))


def test_a_return_value_the_store_cannot_keep_still_succeeds_with_a_null_output(
    store: QueueStore, tables: str, caplog: pytest.LogCaptureFixture
) -> None:
    kinds = sorted(HOSTILE)
    submissions: list[Submission] = []
    for n, kind in enumerate(kinds):  # each beside a good one: they share acknowledgement batches
        submissions += [Submission("returns_hostile", {"kind": kind}), Submission("returns", {"value": {"n": n}})]
    with caplog.at_level(logging.WARNING, logger="vigil.worker.outputs"), in_process(tables, QUEUE) as counts:
        ids = store.submit(QUEUE, submissions, now=now())
        wait_for(lambda: store.counts(QUEUE)["succeeded"] == len(ids), timeout=30, what="every one succeeded")
    assert counts.succeeded == len(ids) and counts.failed == 0
    hostile, good = ids[0::2], ids[1::2]
    for eid, kind in zip(hostile, kinds, strict=True):
        row = execution_row(store, eid)
        assert (row["state"], row["output"], row["last_error"]) == ("succeeded", None, None), kind
        assert [h["outcome"] for h in store.attempts(eid)] == ["succeeded"], kind
    assert [execution_row(store, eid)["output"] for eid in good] == [{"n": n} for n in range(len(kinds))]
    ran = {eid for eid, _, _, event in runs(tables) if event == "ran"}
    assert set(hostile) <= ran  # the work was done once each, not retried
    warned = [r.getMessage() for r in caplog.records if r.name == "vigil.worker.outputs"]
    assert len(warned) == len(kinds)
    assert all("task returns_hostile (execution " in message and "output is null" in message for message in warned)
