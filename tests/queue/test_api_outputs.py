"""The HTTP API's execution shows what its task returned (`output`), on a real PostgreSQL queue store.

Covered, on the owner's store and on the API's (a namespace's API role, `api_execution_output`):
a succeeded execution's output in `GET /v1/executions/{id}` and within its queue, null for one
that succeeded returning nothing, for one not run yet and for a dead one, and in the answers of
cancel and retry (null: neither is of a succeeded execution); the largest output the store keeps
(32 KiB as compact JSON) comes back whole in an answer that stays near that size. Then through
the real server (ApiServer.serve: uvicorn and the ASGI application) on a free port: the raw
answer carries `"output"` (null included) and `vigil.client` gives it as `Execution.output`.
Every answer is also held to the OpenAPI document (tests/queue/conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.queue.conftest import STORES, store_as
from tests.queue.test_api import LEASE, T0, api, everywhere_for_alice, get, post, submit, worker
from tests.unit.reviews import Reviews
from vigil.api.router import ApiServer
from vigil.client import Client
from vigil.core import jsonvalues
from vigil.core.executions import RetryPolicy
from vigil.core.queue import AttemptOutcome, after_failure
from vigil.queue.store import Finished, QueueStore
from vigil.worker.outputs import MAX_OUTPUT_BYTES

pytestmark = pytest.mark.postgres

RECEIPT = {"receipt": "r-1", "amount": 12.5, "lines": [1, 2, 3], "note": "é ✓"}


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, dsn: str) -> QueueStore:
    """Each test on the owner's store and on the HTTP API's (as the namespace's API role)."""
    return store_as(request.param, dsn, namespaces=("shop",))


def run(dsn: str, outputs: dict[str, Any], *, fail: frozenset[str] = frozenset()) -> None:
    """A worker leases what is due and acknowledges each execution of `outputs` a success returning
    its value (JSON text as the worker sends it; None: nothing), each of `fail` a last failure."""

    async def scenario() -> None:
        async with worker(dsn) as w:
            held = {h.execution_id: h for h in await w.lease(["record"], limit=10, lease=LEASE, now=T0)}
            done = [
                Finished(held[eid], AttemptOutcome.SUCCEEDED, T0, T0,
                         output=None if value is None else jsonvalues.checked_text(value, path="output"))
                for eid, value in outputs.items()
            ]  # fmt: skip
            for eid in fail:
                dead = after_failure(execution_id=eid, attempt=1, max_attempts=1, backoff=RetryPolicy(), now=T0)
                done.append(Finished(held[eid], AttemptOutcome.FAILED, T0, T0, "declined", dead))
            assert (await w.settle(done, now=T0)).settled == len(done)

    asyncio.run(scenario())


def made(server: ApiServer, n: int) -> list[str]:
    ids = []
    for _ in range(n):
        status, answer = submit(server, maxAttempts=1)
        assert status == 201
        ids.append(answer["executionId"])
    return ids


def test_a_succeeded_execution_shows_its_output_by_id_and_within_its_queue(store: QueueStore, dsn: str) -> None:
    server = api(store)
    returned, nothing, dead = made(server, 3)
    run(dsn, {returned: RECEIPT, nothing: None}, fail=frozenset({dead}))
    [unrun] = made(server, 1)

    for path in (f"/v1/executions/{returned}", f"/v1/namespaces/shop/taskqueues/orders/executions/{returned}"):
        status, answer = get(server, path)
        assert (status, answer["state"], answer["output"]) == (200, "succeeded", RECEIPT), path
        assert [a["outcome"] for a in answer["attempts"]] == ["succeeded"]
        assert "output" not in answer["attempts"][0]  # the execution keeps one output: its success's
    for eid, state in ((nothing, "succeeded"), (unrun, "ready"), (dead, "dead")):
        status, answer = get(server, f"/v1/executions/{eid}")
        assert (status, answer["state"]) == (200, state)
        assert "output" in answer and answer["output"] is None, state


def test_cancel_and_retry_answer_the_execution_with_a_null_output(store: QueueStore, dsn: str) -> None:
    server = api(store)
    [eid] = made(server, 1)
    status, cancelled = post(server, f"/v1/executions/{eid}/cancel")
    assert (status, cancelled["state"], cancelled["output"]) == (200, "cancelled", None)
    status, retried = post(server, f"/v1/executions/{eid}/retry")
    assert (status, retried["state"], retried["output"]) == (200, "ready", None)
    run(dsn, {eid: ["after", "a", "retry"]})
    assert get(server, f"/v1/executions/{eid}")[1]["output"] == ["after", "a", "retry"]


def test_the_largest_output_kept_comes_back_whole_in_an_answer_near_its_size(store: QueueStore, dsn: str) -> None:
    server = api(store)
    [eid] = made(server, 1)
    largest = {"text": "x" * (MAX_OUTPUT_BYTES - len('{"text":""}'))}
    assert len(jsonvalues.checked_text(largest, path="output")) == MAX_OUTPUT_BYTES
    run(dsn, {eid: largest})
    status, _, raw = server.answer(f"/v1/executions/{eid}", token="t-alice")
    assert (status, json.loads(raw)["output"]) == (200, largest)
    # the output is the answer's bulk; the rest (an empty payload, one attempt) is under 2 KiB
    assert MAX_OUTPUT_BYTES < len(raw) < MAX_OUTPUT_BYTES + 2048


@pytest.fixture
def url(store: QueueStore) -> Iterator[str]:
    served = api(store, Reviews(everywhere_for_alice)).serve(0)
    try:
        yield f"http://127.0.0.1:{served.server_address[1]}"
    finally:
        served.shutdown()
        served.server_close()


def test_the_real_server_and_the_client_give_the_output(url: str, store: QueueStore, dsn: str) -> None:
    alice = Client(url, token="t-alice", timeout=10)
    returned = alice.submit(namespace="shop", queue="orders", task="record", max_attempts=1).execution_id
    run(dsn, {returned: RECEIPT})
    unrun = alice.submit(namespace="shop", queue="orders", task="record", max_attempts=1).execution_id

    request = urllib.request.Request(f"{url}/v1/executions/{unrun}", headers={"Authorization": "Bearer t-alice"})
    with urllib.request.urlopen(request, timeout=10) as response:
        raw = json.loads(response.read())
    assert "output" in raw and raw["output"] is None

    got = alice.execution(returned)
    assert (got.state, got.output) == ("succeeded", RECEIPT)
    in_queue = alice.execution(returned, queue=("shop", "orders"))
    assert in_queue.output == RECEIPT
    assert alice.execution(unrun).output is None
