"""A task's return value as its execution's output (vigil.worker.outputs), and the worker carrying it.

* `output_of`, one named row per kind of value: None keeps null; a JSON value is kept as its
  compact JSON text; anything the store cannot keep (no JSON value, NUL, a lone surrogate, NaN,
  too deep, over the bound) is null, with a warning naming the task, the execution and why;
* the worker's run of one leased execution (no database: `Worker._run_one`, its result taken
  from the batch that waits to be acknowledged): a sync and an async task's return value is the
  success's output; a return value the store cannot keep still makes a success, with no output;
  a task that raises fails, with no output.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from vigil.core.jsonvalues import MAX_DEPTH
from vigil.core.memory import FakeClock
from vigil.core.queue import AttemptOutcome
from vigil.queue.workerstore import Finished, Leased
from vigil.worker import Context, TaskRegistry, Worker, WorkerSettings
from vigil.worker.outputs import MAX_OUTPUT_BYTES, output_of

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


KEPT = [
    pytest.param({"charged": 12.5, "ids": [1, 2], "ok": True, "note": None}, id="an object"),
    pytest.param([1, "two", 3.0], id="an array"),
    pytest.param("done é ✓ 😀", id="a string, astral text included"),
    pytest.param(0, id="zero"),
    pytest.param(False, id="false"),
    pytest.param({}, id="an empty object"),
    pytest.param("x" * (MAX_OUTPUT_BYTES - 2), id="exactly the bound"),
]


@pytest.mark.parametrize("value", KEPT)
def test_a_json_value_is_kept_as_its_compact_text(value: Any, caplog: pytest.LogCaptureFixture) -> None:
    text = output_of(value, task="charge", execution_id="e-1")
    assert text is not None and json.loads(text) == value
    assert text == json.dumps(value, separators=(",", ":"))
    assert not caplog.records


def test_none_keeps_null() -> None:
    assert output_of(None, task="charge", execution_id="e-1") is None


class Receipt:
    """An object a task might return by habit: no JSON value."""


DROPPED = [
    pytest.param({1, 2}, "not a JSON value", id="a set"),
    pytest.param(Receipt(), "not a JSON value", id="an object"),
    pytest.param({"a": "x\x00y"}, "NUL", id="NUL in a string"),
    pytest.param({"k\x00": 1}, "NUL", id="NUL in a key"),
    pytest.param(["\ud800"], "lone surrogate", id="a lone surrogate"),
    pytest.param({"a": float("nan")}, "NaN", id="NaN"),
    pytest.param(float("inf"), "infinity", id="infinity"),
    pytest.param(nested(MAX_DEPTH + 1), "nested deeper", id="too deep"),
    pytest.param("x" * MAX_OUTPUT_BYTES, "bytes as JSON", id="over the bound"),
    pytest.param(10**5000, "cannot be written as JSON", id="an int too long to print"),
]


@pytest.mark.parametrize(("value", "why"), DROPPED)
def test_what_the_store_cannot_keep_is_null_with_a_warning(
    value: Any, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="vigil.worker.outputs"):
        assert output_of(value, task="charge", execution_id="e-1") is None
    [warning] = caplog.records
    message = warning.getMessage()
    assert "task charge (execution e-1)" in message and "output is null" in message and why in message


# --- the worker carrying it ------------------------------------------------------------------------


def leased(task: str) -> Leased:
    return Leased(
        execution_id=f"e-{task}", task=task, payload={}, attempt=1, max_attempts=1, scheduled_for=T0,
        idempotency_key=None, priority=0, tenant="shop",
    )  # fmt: skip


def registry() -> TaskRegistry:
    tasks = TaskRegistry()
    tasks.register("sync_total", lambda ctx: {"total": 3})
    tasks.register("sync_nothing", lambda ctx: None)
    tasks.register("sync_set", lambda ctx: {1, 2})

    async def async_total(ctx: Context) -> dict[str, Any]:
        return {"total": 4}

    async def async_nul(ctx: Context) -> str:
        return "a\x00b"

    def raises(ctx: Context) -> dict[str, Any]:
        raise RuntimeError("declined")

    tasks.register("async_total", async_total)
    tasks.register("async_nul", async_nul)
    tasks.register("raises", raises)
    return tasks


def run_one(task: str) -> Finished:
    """One leased execution of `task` run by a worker that never connects: its result as queued."""
    worker = Worker(dsn="", queue="shop/work", registry=registry(), settings=WorkerSettings(), clock=FakeClock(T0))

    async def run() -> None:
        held = leased(task)
        ctx = Context(execution_id=held.execution_id, attempt=1, max_attempts=1, scheduled_for=T0, payload={},
                      idempotency_key=None, task=task, queue=worker.queue, worker=worker.name)  # fmt: skip
        await worker._run_one(held, ctx)

    try:
        asyncio.run(run())
    finally:
        worker._threads.shutdown(wait=True)
    [finished] = worker._results
    return finished


@pytest.mark.parametrize(
    ("task", "outcome", "output"),
    [
        pytest.param("sync_total", AttemptOutcome.SUCCEEDED, '{"total":3}', id="sync-returns-an-object"),
        pytest.param("async_total", AttemptOutcome.SUCCEEDED, '{"total":4}', id="async-returns-an-object"),
        pytest.param("sync_nothing", AttemptOutcome.SUCCEEDED, None, id="returns-none"),
        pytest.param("sync_set", AttemptOutcome.SUCCEEDED, None, id="sync-returns-a-set-still-succeeds"),
        pytest.param("async_nul", AttemptOutcome.SUCCEEDED, None, id="async-returns-NUL-still-succeeds"),
        pytest.param("raises", AttemptOutcome.FAILED, None, id="raises-fails-without-output"),
    ],
)
def test_the_worker_acknowledges_a_success_with_its_output(
    task: str, outcome: AttemptOutcome, output: str | None
) -> None:
    finished = run_one(task)
    assert (finished.outcome, finished.output) == (outcome, output)
    assert (finished.error is None) == (outcome is AttemptOutcome.SUCCEEDED)
