"""`vigil.client` end to end: the operator's HTTP server (ApiServer.serve on a free port) over a
real PostgreSQL queue store, through real sockets.

The reviews are stood in for as in test_api.py (tests/unit/reviews.py); the client sends the
token as a real Authorization header, read from a file when asked to. Covered: submit (and a
repeated idempotency key), the job and the timeline as typed results, cancel, retry and delete,
and errors raised as ApiError with their status, reason and field.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from tests.queue.test_api import QUEUE, T0, Clock, api, everywhere_for_alice, grants
from tests.unit.reviews import Reviews
from vigil.client import ApiError, Client
from vigil.queue.store import QueueStore, WorkerStore

pytestmark = pytest.mark.postgres


@pytest.fixture
def url(store: QueueStore) -> Iterator[str]:
    # alice may act everywhere, so she reads by id alone too; bob may get `orders`' executions
    readers = grants({"bob": {"get"}})
    server = api(store, Reviews(lambda user, access: everywhere_for_alice(user, access) or readers(user, access)),
                 Clock()).serve(0)  # fmt: skip
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_submit_read_cancel_retry_and_delete_through_the_client(url: str, dsn: str) -> None:
    alice = Client(url, token="t-alice", timeout=10)
    made = alice.submit(
        namespace="shop", queue="orders", task="record", payload={"n": 1}, run_at=T0 + timedelta(minutes=1),
        priority="low", max_attempts=2, idempotency_key="k",
    )  # fmt: skip
    assert made.created and made.scheduled_for == T0 + timedelta(minutes=1)
    again = alice.submit(namespace="shop", queue="orders", task="record", idempotency_key="k")
    assert (again.created, again.job_id, again.execution_id) == (False, made.job_id, made.execution_id)

    assert made.job_id is not None
    job = alice.job(made.job_id)
    assert (job.namespace, job.queue, job.priority, job.max_attempts, job.enabled) == ("shop", "orders", 10, 2, True)
    assert [(e.execution_id, e.state) for e in job.executions] == [(made.execution_id, "ready")]

    execution = alice.execution(made.execution_id)
    assert (execution.state, execution.attempt, execution.payload, execution.attempts) == ("ready", 1, {"n": 1}, ())
    assert execution.scheduled_for == T0 + timedelta(minutes=1)

    cancelled = alice.cancel(made.execution_id)
    assert (cancelled.state, cancelled.cancelled_by) == ("cancelled", "alice")
    retried = alice.retry(made.execution_id)
    assert (retried.state, retried.attempt, retried.execution_id) == ("ready", 2, made.execution_id)
    assert leased(dsn) == [made.execution_id]

    deleted = alice.delete_job(made.job_id)
    assert deleted.enabled is False and [e.state for e in deleted.executions] == ["cancelled"]


def leased(dsn: str) -> list[str]:
    async def run() -> list[str]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            w = WorkerStore(connection, queue=QUEUE, worker="w")
            return [h.execution_id for h in await w.lease(["record"], limit=5, lease=timedelta(seconds=30), now=T0 + timedelta(hours=1))]

    return asyncio.run(run())


def test_errors_raise_api_error_with_status_reason_and_field(url: str) -> None:
    alice = Client(url, token="t-alice")
    with pytest.raises(ApiError) as bad:
        alice.submit(namespace="shop", queue="orders", task="record", max_attempts=0)
    assert (bad.value.status, bad.value.reason, bad.value.field) == (422, "Invalid", "maxAttempts")

    bob = Client(url, token="t-bob")
    with pytest.raises(ApiError) as refused:
        bob.submit(namespace="shop", queue="orders", task="record")
    assert (refused.value.status, refused.value.reason) == (403, "Forbidden")

    made = alice.submit(namespace="shop", queue="orders", task="record")
    with pytest.raises(ApiError) as conflict:
        alice.retry(made.execution_id)
    assert (conflict.value.status, conflict.value.reason) == (409, "Conflict")

    with pytest.raises(ApiError) as nobody:
        Client(url, token="t-nobody").execution(made.execution_id)
    assert nobody.value.status == 401


def test_the_token_is_read_from_its_file_at_every_request(url: str, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t-bob\n")
    client = Client(url, token_file=token)
    with pytest.raises(ApiError) as refused:
        client.submit(namespace="shop", queue="orders", task="record")
    assert refused.value.status == 403
    token.write_text("t-alice\n")  # rotated on disk, as a projected token is
    assert client.submit(namespace="shop", queue="orders", task="record").created


def test_no_server_is_an_api_error_with_status_0(tmp_path: Path) -> None:
    with pytest.raises(ApiError) as failed:
        Client("http://127.0.0.1:1", token="t", timeout=2).job("abc")
    assert (failed.value.status, failed.value.reason) == (0, "Unreachable")
    with pytest.raises(ApiError) as unread:
        Client("http://127.0.0.1:1", token_file=tmp_path / "missing").job("abc")
    assert unread.value.reason == "NoToken"


def test_the_client_refuses_what_it_cannot_send() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Client("http://x", token="a", token_file="b")
    with pytest.raises(ValueError, match="timeout"):
        Client("http://x", token="a", timeout=0)
    with pytest.raises(ValueError, match="not a job or execution id"):
        Client("http://x", token="a").job("../leader")
    with pytest.raises(ValueError, match="run_at must be timezone-aware"):
        Client("http://x", token="a").submit(namespace="shop", queue="orders", task="t", run_at=T0.replace(tzinfo=None))


def test_a_job_and_an_execution_are_read_and_changed_within_their_queue(url: str) -> None:
    """Given the queue, the client uses the routes that authorise before reading the store: a
    job named within a queue alice may not read is 403, whatever the id."""
    alice = Client(url, token="t-alice", timeout=10)
    made = alice.submit(namespace="shop", queue="orders", task="record", run_at=T0 + timedelta(minutes=1))
    assert made.job_id is not None
    orders = ("shop", "orders")
    assert alice.job(made.job_id, queue=orders).job_id == made.job_id
    assert alice.execution(made.execution_id, queue=orders).execution_id == made.execution_id
    assert alice.cancel(made.execution_id, queue=orders).state == "cancelled"
    assert alice.retry(made.execution_id, queue=orders).state == "ready"
    with pytest.raises(ApiError) as elsewhere:
        alice.job(made.job_id, queue=("shop", "refunds"))
    assert (elsewhere.value.status, elsewhere.value.reason, elsewhere.value.request_id != "") == (403, "Forbidden", True)
    assert alice.delete_job(made.job_id, queue=orders).enabled is False
