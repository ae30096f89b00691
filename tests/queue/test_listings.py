"""A queue's listings on the HTTP API (vigil.api.queue), on a real PostgreSQL queue store: its jobs,
its dead letters and its per (priority, tenant) stats, what they show, their pages and bounds,
and who may read them.

The store is real (a migrated database per test); the reviews are stood in for
(tests/unit/reviews.py) as in test_api.py. Executions die through a worker's `WorkerStore`
settlements with explicit times, as a worker's last failed attempt makes them dead.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from tests.queue.test_api import ALL_VERBS, LEASE, T0, Clock, api, get, grants, post, submit, worker
from tests.unit.reviews import Reviews
from vigil.api.router import ApiServer
from vigil.core.access import Access
from vigil.core.executions import RetryPolicy
from vigil.core.queue import AttemptOutcome, after_failure
from vigil.queue.store import Finished, QueueStore

pytestmark = pytest.mark.postgres

BASE = "/v1/namespaces/shop/taskqueues/orders"


def kill(dsn: str, count: int, *, error: str = "Traceback ...\nValueError: poison", start: timedelta = timedelta(0)) -> None:
    """Lease `count` ready executions and fail each on its last attempt, one a second apart from
    T0 + `start`: `count` dead letters, the first leased the longest dead."""

    async def run() -> None:
        async with worker(dsn) as w:
            held = await w.lease(["record"], limit=count, lease=LEASE, now=T0)
            assert len(held) == count
            for i, one in enumerate(held):
                at = T0 + start + timedelta(seconds=i)
                dead = after_failure(
                    execution_id=one.execution_id, attempt=one.attempt, max_attempts=one.attempt,
                    backoff=RetryPolicy(), now=at,
                )  # fmt: skip
                await w.settle([Finished(one, AttemptOutcome.FAILED, at, at, error, dead)], now=at)

    asyncio.run(run())


def pages(server: ApiServer, kind: str, key: str, limit: int) -> list[list[Any]]:
    """Every page of a listing, followed by its `continue` tokens."""
    found: list[list[Any]] = []
    token = ""
    while True:
        status, page = get(server, f"{BASE}/{kind}?limit={limit}" + (f"&continue={token}" if token else ""))
        assert status == 200, page
        found.append(page[key])
        token = page.get("continue", "")
        if not token:
            return found


# The queue's jobs --------------------------------------------------------------------------------


def test_jobs_are_listed_newest_first_with_their_last_executions_state(store: QueueStore, dsn: str) -> None:
    clock = Clock()
    server = api(store, clock=clock)
    first = submit(server, maxAttempts=1, priority="high", tenant="acme")[1]
    clock.at = T0 + timedelta(seconds=1)
    second = submit(server)[1]
    kill(dsn, 1)  # both are due: the lease takes the most urgent, the first

    status, page = get(server, f"{BASE}/jobs")

    assert status == 200 and "continue" not in page
    assert [j["jobId"] for j in page["jobs"]] == [second["jobId"], first["jobId"]]
    newest, oldest = page["jobs"]
    assert (newest["task"], newest["enabled"], newest["priority"], newest["tenant"]) == ("record", True, 0, "shop")
    assert (newest["lastExecutionId"], newest["lastState"]) == (second["executionId"], "ready")
    assert (oldest["priority"], oldest["tenant"], oldest["lastState"]) == (-10, "acme", "dead")
    assert oldest["createdAt"] == T0.isoformat()


def test_jobs_of_other_queues_are_not_listed(store: QueueStore) -> None:
    server = api(store, Reviews(grants({"alice": ALL_VERBS}, everywhere=frozenset(ALL_VERBS))))
    submit(server, queue="payments")
    assert get(server, f"{BASE}/jobs")[1]["jobs"] == []


def test_pages_of_jobs_follow_each_other_without_repeats_or_gaps(store: QueueStore) -> None:
    server = api(store)  # every job created at T0: the id breaks the tie
    made = {submit(server, idempotencyKey=f"k{i}")[1]["jobId"] for i in range(7)}

    found = pages(server, "jobs", "jobs", limit=3)

    assert [len(page) for page in found] == [3, 3, 1]
    ids = [job["jobId"] for page in found for job in page]
    assert ids == sorted(made, reverse=True)


def test_a_deleted_job_is_listed_disabled_its_execution_cancelled(store: QueueStore) -> None:
    server = api(store)
    made = submit(server)[1]
    server.answer_delete(f"/v1/jobs/{made['jobId']}", "t-alice")
    [job] = get(server, f"{BASE}/jobs")[1]["jobs"]
    assert (job["enabled"], job["lastState"]) == (False, "cancelled")


# The dead letters --------------------------------------------------------------------------------


def test_dead_letters_are_the_longest_dead_first_with_age_attempt_and_last_error_line(
    store: QueueStore, dsn: str
) -> None:
    clock = Clock()
    server = api(store, clock=clock)
    ids = [submit(server, maxAttempts=1, tenant=f"t{i}", idempotencyKey=f"k{i}")[1]["executionId"] for i in range(3)]
    kill(dsn, 3, error="Traceback (most recent call last):\n  ...\nValueError: " + "x" * 300 + "\n")
    submit(server, idempotencyKey="alive")  # ready: no dead letter
    clock.at = T0 + timedelta(minutes=10)

    status, page = get(server, f"{BASE}/dead-letters")

    assert status == 200
    dead = page["deadLetters"]
    assert sorted(d["executionId"] for d in dead) == sorted(ids)
    assert [d["diedAt"] for d in dead] == [(T0 + timedelta(seconds=i)).isoformat() for i in range(3)]
    assert [d["ageSeconds"] for d in dead] == [600, 599, 598]
    first = dead[0]
    assert (first["task"], first["attempt"], first["maxAttempts"], first["priority"]) == ("record", 1, 1, 0)
    assert first["error"].startswith("ValueError: xxx") and len(first["error"]) == 200


def test_pages_of_dead_letters_follow_each_other(store: QueueStore, dsn: str) -> None:
    server = api(store)
    for i in range(5):
        submit(server, maxAttempts=1, idempotencyKey=f"k{i}")
    kill(dsn, 5)
    found = pages(server, "dead-letters", "deadLetters", limit=2)
    assert [len(page) for page in found] == [2, 2, 1]
    died = [d["diedAt"] for page in found for d in page]
    assert died == sorted(died) and len(set(died)) == 5


def test_a_retried_dead_letter_leaves_the_listing(store: QueueStore, dsn: str) -> None:
    server = api(store)
    eid = submit(server, maxAttempts=1)[1]["executionId"]
    kill(dsn, 1)
    assert post(server, f"/v1/executions/{eid}/retry")[0] == 200
    assert get(server, f"{BASE}/dead-letters")[1]["deadLetters"] == []


# The stats ---------------------------------------------------------------------------------------


def test_stats_count_each_priority_and_tenant_with_its_oldest_due_ready_age(store: QueueStore, dsn: str) -> None:
    clock = Clock()
    server = api(store, clock=clock)
    submit(server, maxAttempts=1, priority="high", tenant="acme", idempotencyKey="dies")
    kill(dsn, 1)  # acme's high one is dead
    submit(server, priority="high", tenant="acme", idempotencyKey="a1")
    clock.at = T0 + timedelta(seconds=30)
    submit(server, priority="high", tenant="acme", idempotencyKey="a2")
    submit(server, tenant="bolt", idempotencyKey="b1")
    submit(server, tenant="bolt", runAt=(T0 + timedelta(hours=1)).isoformat(), idempotencyKey="later")
    clock.at = T0 + timedelta(minutes=2)

    status, stats = get(server, f"{BASE}/stats")

    assert status == 200 and (stats["namespace"], stats["queue"]) == ("shop", "orders")
    assert stats["breakdown"] == [
        {"priority": -10, "tenant": "acme", "ready": 2, "leased": 0, "dead": 1, "oldestReadySeconds": 120},
        {"priority": 0, "tenant": "bolt", "ready": 2, "leased": 0, "dead": 0, "oldestReadySeconds": 90},
    ]


def test_stats_of_a_queue_with_nothing_waiting_are_empty(store: QueueStore) -> None:
    assert get(api(store), f"{BASE}/stats") == (200, {"namespace": "shop", "queue": "orders", "breakdown": []})


# Bounds, validation, access ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=ten", "limit"),
        ("limit=-1", "limit"),
        ("limit=1&limit=2", "limit"),
        ("continue=not-a-token", "continue"),
        ("continue=", None),  # empty: the first page
        ("order=asc", "order"),
        ("limit", "query"),
    ],
)
@pytest.mark.parametrize("kind", ["jobs", "dead-letters"])
def test_a_bad_limit_cursor_or_parameter_is_422_naming_it(store: QueueStore, kind: str, query: str, field: str | None) -> None:
    status, answer = get(api(store), f"{BASE}/{kind}?{query}")
    if field is None:
        assert status == 200
    else:
        assert (status, answer["reason"], answer["errors"][0]["field"]) == (422, "Invalid", field), answer
        assert answer["detail"].startswith(f"{field}: ")


def test_a_token_of_one_listing_is_refused_by_the_other(store: QueueStore, dsn: str) -> None:
    server = api(store)
    for i in range(3):
        submit(server, idempotencyKey=f"k{i}")
    token = get(server, f"{BASE}/jobs?limit=1")[1]["continue"]
    assert get(server, f"{BASE}/jobs?continue={token}")[0] == 200
    status, answer = get(server, f"{BASE}/dead-letters?continue={token}")
    assert (status, answer["errors"][0]["field"]) == (422, "continue")


def test_stats_take_no_parameters(store: QueueStore) -> None:
    status, answer = get(api(store), f"{BASE}/stats?limit=5")
    assert (status, answer["errors"][0]["field"]) == (422, "limit")


def test_a_limit_of_500_is_the_most_one_page_holds(store: QueueStore) -> None:
    assert get(api(store), f"{BASE}/jobs?limit=500")[0] == 200


@pytest.mark.parametrize("kind", ["jobs", "dead-letters", "stats"])
def test_every_listing_needs_get_on_the_taskqueue(store: QueueStore, kind: str) -> None:
    reviews = Reviews(grants({"alice": ALL_VERBS - {"get"}, "bob": {"get"}}))
    server = api(store, reviews)
    status, answer = get(server, f"{BASE}/{kind}?limit=bad")  # 403 before the query is read
    assert (status, answer["reason"]) == (403, "Forbidden")
    assert Access("get", "vigil.dev", "taskqueues", "shop", "orders", "executions") in reviews.asked
    assert get(server, f"{BASE}/{kind}", "t-bob")[0] == 200
    assert get(server, f"{BASE}/{kind}", None)[0] == 401
    assert get(server, "/v1/namespaces/shop/taskqueues/payments/jobs", "t-bob")[0] == 403


def test_listings_with_the_volume_tier_off_are_404_saying_so() -> None:
    status, answer = get(api(None), f"{BASE}/jobs")
    assert (status, answer["reason"]) == (404, "VolumeTierOff")


def test_other_methods_on_a_listing_are_405_and_bad_names_404(store: QueueStore) -> None:
    server = api(store)
    assert post(server, f"{BASE}/dead-letters")[0] == 405
    assert get(server, "/v1/namespaces/Shop/taskqueues/orders/jobs")[0] == 404
    assert get(server, f"{BASE}/attempts")[0] == 404

