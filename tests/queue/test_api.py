"""The volume tier's HTTP API (vigil.api.queue) on a real PostgreSQL queue store: routes, who may
call them, field validation, and what cancel, retry and delete do to leasing.

The store is real (a migrated database per test); the API server's TokenReview and
SubjectAccessReview are stood in for (tests/unit/reviews.py: `t-alice` is alice, `t-bob` is
bob), each test granting what it needs; tests/integration/test_queue_access.py asks the real API
server. Leasing and acknowledging are a worker's `WorkerStore` driven with explicit times, so
each rule is seen without a worker loop; one case runs a real in-process worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.queue.conftest import STORES, execution_row, store_as
from tests.queue.tasks import DSN_ENV, create_tables
from tests.queue.workers import in_process, runs
from tests.unit.reviews import Reviews, body
from tests.waiting import wait_for
from vigil.api.queue import JobStore, QueueApi
from vigil.api.router import ApiServer
from vigil.core.access import Access, User
from vigil.core.executions import RetryPolicy
from vigil.core.queue import AttemptOutcome, QueueDeclaration, after_failure
from vigil.queue.store import Finished, QueueStore, WorkerStore
from vigil.queue.trigger import ShardTrigger

pytestmark = pytest.mark.postgres


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, dsn: str) -> QueueStore:
    """Each test twice: on the owner's store, and on the HTTP API's, which acts as the namespace's
    API role (vigil.queue.apistore): the answers must not differ."""
    return store_as(request.param, dsn, namespaces=("shop",))

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
QUEUE = "shop/orders"  # the TaskQueue `orders` in namespace `shop`


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.at = now

    def now(self) -> datetime:
        return self.at


def grants(
    verbs: dict[str, set[str]], *, everywhere: frozenset[str] = frozenset(), editors: frozenset[str] = frozenset()
) -> Callable[[User, Access], bool]:
    """alice may do `verbs[alice]` on the executions (taskqueues/executions) of `orders` in `shop`
    (and `everywhere` in every namespace); `editors` may also update the TaskQueue itself (and so
    submit as any tenant)."""

    def allowed(user: User, access: Access) -> bool:
        if access == Access("update", "vigil.dev", "taskqueues", "shop", "orders"):
            return user.name in editors
        if (access.group, access.resource, access.subresource) != ("vigil.dev", "taskqueues", "executions"):
            return False
        if access.namespace == "" and access.verb in everywhere:
            return True
        return (access.namespace, access.name) == ("shop", "orders") and access.verb in verbs.get(user.name, set())

    return allowed


ALL_VERBS = {"create", "get", "delete", "update"}


def everywhere_for_alice(user: User, access: Access) -> bool:
    """alice may do everything on `orders` and act on every queue's executions by id alone."""
    if user.name == "alice" and access.namespace == "" and access.subresource == "executions":
        return True
    return grants({"alice": ALL_VERBS}, editors=frozenset({"alice"}))(user, access)


def api(store: JobStore | None, reviews: Reviews | None = None, clock: Clock | None = None) -> ApiServer:
    checks = reviews or Reviews(everywhere_for_alice)
    return ApiServer(
        leader=lambda: None,
        find_execution=lambda execution_id: None,
        timeline=lambda execution_id: [],
        queue_api=QueueApi(store, clock=clock or Clock(), authenticator=checks, authorizer=checks),
    )


def submit(server: ApiServer, token: str | None = "t-alice", **fields: Any) -> tuple[int, Any]:
    data = {"namespace": "shop", "queue": "orders", "task": "record", **fields}
    answer = server.answer_post("/v1/jobs", json.dumps(data).encode(), token=token)
    return answer[0], body(answer)


def get(server: ApiServer, path: str, token: str | None = "t-alice") -> tuple[int, Any]:
    answer = server.answer(path, token=token)
    return answer[0], body(answer)


def post(server: ApiServer, path: str, token: str | None = "t-alice") -> tuple[int, Any]:
    answer = server.answer_post(path, b"", token=token)
    return answer[0], body(answer)


def delete(server: ApiServer, path: str, token: str | None = "t-alice") -> tuple[int, Any]:
    answer = server.answer_delete(path, token)
    return answer[0], body(answer)


@contextlib.asynccontextmanager
async def worker(dsn: str, name: str = "w1") -> AsyncIterator[WorkerStore]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        yield WorkerStore(connection, queue=QUEUE, worker=name)


def lease(dsn: str, *, now: datetime = T0) -> list[tuple[str, int]]:
    async def run() -> list[tuple[str, int]]:
        async with worker(dsn) as w:
            return [(held.execution_id, held.attempt) for held in await w.lease(["record"], limit=10, lease=LEASE, now=now)]

    return asyncio.run(run())


# Each route's success ----------------------------------------------------------------------------


def test_a_submitted_job_is_a_job_row_and_its_one_execution_read_back_by_both_routes(store: QueueStore) -> None:
    server = api(store)
    status, made = submit(
        server, payload={"date": "2026-12-01"}, runAt="2026-12-01T13:00:00+01:00", priority="high",
        maxAttempts=5, idempotencyKey="k1",
    )  # fmt: skip
    assert status == 201
    assert datetime.fromisoformat(made["scheduledFor"]) == T0
    status, job = get(server, f"/v1/jobs/{made['jobId']}")
    assert status == 200
    assert (job["namespace"], job["queue"], job["task"], job["payload"]) == ("shop", "orders", "record", {"date": "2026-12-01"})
    assert (job["priority"], job["tenant"], job["maxAttempts"], job["enabled"]) == (-10, "shop", 5, True)
    assert [(e["executionId"], e["state"], e["attempt"]) for e in job["executions"]] == [(made["executionId"], "ready", 1)]
    status, timeline = get(server, f"/v1/executions/{made['executionId']}")
    assert status == 200
    assert (timeline["jobId"], timeline["state"], timeline["attempt"], timeline["maxAttempts"]) == (made["jobId"], "ready", 1, 5)
    assert (timeline["idempotencyKey"], timeline["leaseOwner"], timeline["attempts"]) == ("k1", None, [])
    assert execution_row(store, made["executionId"])["queue"] == QUEUE


def test_defaults_run_now_at_normal_priority_for_the_namespace_as_tenant(store: QueueStore) -> None:
    status, made = submit(api(store))
    assert status == 201 and datetime.fromisoformat(made["scheduledFor"]) == T0
    row = store.execution(made["executionId"])
    assert row is not None
    assert (row["priority"], row["tenant"], row["max_attempts"], row["payload"]) == (0, "shop", 3, {})


def test_a_job_without_max_attempts_takes_its_taskqueues_one_off_or_recurring_and_one_that_says_keeps_its_own(store: QueueStore) -> None:
    store.declare(QUEUE, QueueDeclaration(max_attempts=7), generation=1, now=T0)
    server = api(store)
    _, unsaid = submit(server)
    _, said = submit(server, maxAttempts=2)
    assert get(server, f"/v1/jobs/{unsaid['jobId']}")[1]["maxAttempts"] == 7
    assert get(server, f"/v1/executions/{unsaid['executionId']}")[1]["maxAttempts"] == 7
    assert get(server, f"/v1/executions/{said['executionId']}")[1]["maxAttempts"] == 2
    _, recurring = submit(server, cron="0 2 * * *")
    assert get(server, f"/v1/jobs/{recurring['jobId']}")[1]["maxAttempts"] == 7


def test_a_repeated_idempotency_key_returns_the_first_job_and_adds_nothing(store: QueueStore) -> None:
    server = api(store)
    first = submit(server, idempotencyKey="once", payload={"n": 1})
    again = submit(server, idempotencyKey="once", payload={"n": 2})
    other = submit(server, idempotencyKey="twice")
    assert first[0] == 201 and again == (200, first[1])
    assert other[0] == 201 and other[1]["jobId"] != first[1]["jobId"]
    assert store.counts(QUEUE)["ready"] == 2
    with psycopg.connect(store.dsn) as connection:
        assert connection.execute("SELECT count(*) FROM vigil_queue.jobs").fetchone() == (2,)


def test_the_timeline_shows_the_lease_and_every_attempt(store: QueueStore, dsn: str) -> None:
    server = api(store)
    _, made = submit(server, maxAttempts=2)
    eid = made["executionId"]

    async def fail_once() -> None:
        async with worker(dsn) as w:
            [held] = await w.lease(["record"], limit=1, lease=LEASE, now=T0)
            status, timeline = get(server, f"/v1/executions/{eid}")
            assert (status, timeline["state"], timeline["leaseOwner"]) == (200, "leased", "w1")
            assert datetime.fromisoformat(timeline["leaseExpiresAt"]) == T0 + LEASE
            retry = after_failure(execution_id=eid, attempt=1, max_attempts=2, backoff=RetryPolicy(), now=T0)
            await w.settle([Finished(held, AttemptOutcome.FAILED, T0, T0 + timedelta(seconds=1), "boom", retry)], now=T0)

    asyncio.run(fail_once())
    status, timeline = get(server, f"/v1/executions/{eid}")
    assert (status, timeline["state"], timeline["attempt"], timeline["lastError"]) == (200, "ready", 2, "boom")
    [attempt] = timeline["attempts"]
    assert (attempt["attempt"], attempt["worker"], attempt["outcome"], attempt["error"], attempt["duplicate"]) == (
        1, "w1", "failed", "boom", False,
    )  # fmt: skip
    assert datetime.fromisoformat(attempt["startedAt"]) == T0


# Cancel, retry, delete ---------------------------------------------------------------------------


def test_a_cancelled_ready_execution_is_never_leased(store: QueueStore, dsn: str) -> None:
    server = api(store)
    _, made = submit(server)
    _, kept = submit(server)
    status, timeline = post(server, f"/v1/executions/{made['executionId']}/cancel")
    assert (status, timeline["state"], timeline["cancelledBy"]) == (200, "cancelled", "alice")
    assert lease(dsn, now=T0 + timedelta(hours=1)) == [(kept["executionId"], 1)]
    status, refused = post(server, f"/v1/executions/{made['executionId']}/cancel")
    assert (status, refused["reason"]) == (409, "Conflict")
    assert "it is cancelled" in refused["detail"]


def test_a_cancelled_leased_execution_is_not_revived_by_its_holders_acknowledgement(store: QueueStore, dsn: str) -> None:
    server = api(store)
    _, made = submit(server)
    eid = made["executionId"]

    async def run() -> None:
        async with worker(dsn) as w:
            [held] = await w.lease(["record"], limit=1, lease=LEASE, now=T0)
            assert post(server, f"/v1/executions/{eid}/cancel")[0] == 200
            assert await w.heartbeat([held], lease=LEASE, now=T0) == {eid}
            assert await w.cancelled([held]) == {eid}  # lost to a cancel, not to another copy
            report = await w.settle([Finished(held, AttemptOutcome.SUCCEEDED, T0, T0)], now=T0)
            assert (report.settled, report.stale) == (0, [])
            assert await w.expire(now=T0 + 2 * LEASE) == []

    asyncio.run(run())
    _, timeline = get(server, f"/v1/executions/{eid}")
    assert (timeline["state"], timeline["leaseOwner"]) == ("cancelled", None)
    assert [(a["outcome"], a["duplicate"]) for a in timeline["attempts"]] == [("succeeded", False)]


def test_a_retried_dead_execution_is_leased_again_with_the_same_id(store: QueueStore, dsn: str) -> None:
    server = api(store)
    _, made = submit(server, maxAttempts=1)
    eid = made["executionId"]

    async def die() -> None:
        async with worker(dsn) as w:
            [held] = await w.lease(["record"], limit=1, lease=LEASE, now=T0)
            dead = after_failure(execution_id=eid, attempt=1, max_attempts=1, backoff=RetryPolicy(), now=T0)
            await w.settle([Finished(held, AttemptOutcome.FAILED, T0, T0, "poison", dead)], now=T0)

    asyncio.run(die())
    assert get(server, f"/v1/executions/{eid}")[1]["state"] == "dead"
    assert lease(dsn) == []
    status, timeline = post(server, f"/v1/executions/{eid}/retry")
    assert (status, timeline["state"], timeline["attempt"], timeline["maxAttempts"]) == (200, "ready", 2, 2)
    assert lease(dsn) == [(eid, 2)]
    status, refused = post(server, f"/v1/executions/{eid}/retry")
    assert status == 409 and "it is leased" in refused["detail"]


def test_a_cancelled_execution_can_be_retried_too(store: QueueStore, dsn: str) -> None:
    server = api(store)
    _, made = submit(server)
    eid = made["executionId"]
    post(server, f"/v1/executions/{eid}/cancel")
    assert post(server, f"/v1/executions/{eid}/retry")[0] == 200
    assert lease(dsn) == [(eid, 2)]


def test_a_deleted_job_is_disabled_its_unfinished_executions_cancelled_and_not_retried(
    store: QueueStore, dsn: str
) -> None:
    server = api(store)
    _, made = submit(server)
    status, job = delete(server, f"/v1/jobs/{made['jobId']}")
    assert (status, job["enabled"]) == (200, False)
    assert [e["state"] for e in job["executions"]] == ["cancelled"]
    assert lease(dsn) == []
    status, refused = post(server, f"/v1/executions/{made['executionId']}/retry")
    assert status == 409 and "job was deleted" in refused["detail"]
    assert delete(server, f"/v1/jobs/{made['jobId']}")[0] == 200  # again: nothing changes
    assert get(server, f"/v1/jobs/{made['jobId']}")[1]["enabled"] is False


def test_a_running_task_cancelled_learns_it_at_its_heartbeat_and_is_no_duplicate(
    store: QueueStore, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real in-process worker: its heartbeat finds the lease gone to a cancel (the task sees
    `lease_lost`), its late acknowledgement changes nothing, and no duplicate is counted."""
    create_tables(dsn)
    monkeypatch.setenv(DSN_ENV, dsn)
    clock = Clock(datetime.now(UTC))
    server = api(store, clock=clock)
    _, made = submit(server, task="until_lease_lost")
    eid = made["executionId"]
    with in_process(dsn, QUEUE) as counts:
        wait_for(lambda: [e for *_, e in runs(dsn, eid) if e == "started"], timeout=30, what="the task started")
        clock.at = datetime.now(UTC)
        assert post(server, f"/v1/executions/{eid}/cancel")[0] == 200
        wait_for(lambda: [e for *_, e in runs(dsn, eid) if e == "lease lost"], timeout=30, what="the task told")
        wait_for(lambda: store.attempts(eid), timeout=30, what="the attempt's row")
    assert execution_row(store, eid)["state"] == "cancelled"
    assert [(a["outcome"], a["duplicate"]) for a in store.attempts(eid)] == [("succeeded", False)]
    assert counts.duplicates == 0 and counts.succeeded == 1


# Who may call ------------------------------------------------------------------------------------


def routes(made: dict[str, str]) -> list[tuple[str, str]]:
    return [
        ("POST", "/v1/jobs"),
        ("GET", f"/v1/jobs/{made['jobId']}"),
        ("DELETE", f"/v1/jobs/{made['jobId']}"),
        ("GET", f"/v1/executions/{made['executionId']}"),
        ("POST", f"/v1/executions/{made['executionId']}/cancel"),
        ("POST", f"/v1/executions/{made['executionId']}/retry"),
    ]


def call(server: ApiServer, method: str, path: str, token: str | None) -> tuple[int, Any]:
    if method == "POST" and path == "/v1/jobs":
        return submit(server, token=token)
    return {"GET": get, "POST": post, "DELETE": delete}[method](server, path, token)


@pytest.mark.parametrize("token", [None, "t-nobody"], ids=["no token", "a token the API server refuses"])
def test_every_route_needs_a_token_the_api_server_accepts(store: QueueStore, token: str | None) -> None:
    server = api(store)
    _, made = submit(server)
    for method, path in routes(made):
        status, answer = call(server, method, path, token)
        assert (status, answer["reason"]) == (401, "Unauthorized"), (method, path)
    assert store.counts(QUEUE)["ready"] == 1


def test_every_route_asks_for_its_verb_on_the_taskqueues_executions_and_refuses_without_it(store: QueueStore) -> None:
    reviews = Reviews(grants({"alice": ALL_VERBS}))
    server = api(store, reviews)
    _, made = submit(server)
    verbs = ["create", "get", "delete", "get", "update", "update"]
    for (method, path), verb in zip(routes(made), verbs, strict=True):
        for where in (path, path.replace("/v1/", "/v1/namespaces/shop/taskqueues/orders/", 1)):
            if where.startswith("/v1/namespaces/shop/taskqueues/orders/jobs") and method == "POST":
                continue  # a submission names its queue in its body
            reviews.asked.clear()
            status, answer = call(server, method, where, "t-bob")
            assert (status, answer["reason"]) == (403, "Forbidden"), (method, where)
            # by id alone the queue is not known before the store is read: the verb is asked everywhere
            named = ("shop", "orders") if where == "/v1/jobs" or "/taskqueues/" in where else ("", "")
            assert Access(verb, "vigil.dev", "taskqueues", *named, "executions") in reviews.asked, (method, where)
    assert store.counts(QUEUE) == {"ready": 1, "leased": 0, "succeeded": 0, "dead": 0, "cancelled": 0}


def test_a_reader_may_read_but_not_cancel_or_submit(store: QueueStore) -> None:
    server = api(store, Reviews(grants({"alice": ALL_VERBS, "bob": {"get"}})))
    _, made = submit(server)
    in_queue = f"/v1/namespaces/shop/taskqueues/orders/executions/{made['executionId']}"
    assert get(server, in_queue, "t-bob")[0] == 200
    assert post(server, f"{in_queue}/cancel", "t-bob")[0] == 403
    assert submit(server, token="t-bob")[0] == 403
    # by id alone a grant on one TaskQueue is not enough: the store would be read before the
    # queue is known (vigil.api.queuebase.QueueContext.by_id)
    refused = get(server, f"/v1/executions/{made['executionId']}", "t-bob")
    assert refused[0] == 403 and "/v1/namespaces/NAMESPACE/taskqueues/QUEUE/" in refused[1]["detail"]


def test_an_unknown_id_is_403_like_one_elsewhere_unless_the_caller_may_act_everywhere(store: QueueStore) -> None:
    mine = api(store, Reviews(grants({"alice": ALL_VERBS})))
    assert get(mine, "/v1/jobs/no-such-job")[0] == 403
    assert get(mine, "/v1/executions/ex-nothing")[0] == 403
    everywhere = api(store, Reviews(grants({}, everywhere=frozenset({"get", "update"}))))
    assert get(everywhere, "/v1/jobs/no-such-job")[1]["reason"] == "NotFound"
    assert post(everywhere, "/v1/executions/ex-nothing/retry")[0] == 404


def test_reviews_that_cannot_be_made_are_503_never_access(store: QueueStore) -> None:
    reviews = Reviews(grants({"alice": ALL_VERBS}))
    reviews.down = True
    status, answer = submit(api(store, reviews))
    assert (status, answer["reason"]) == (503, "ReviewUnavailable")


def test_a_queue_store_that_cannot_be_reached_is_503() -> None:
    unreachable = QueueStore("host=127.0.0.1 port=1 dbname=nothing connect_timeout=2", migrate_first=True)
    status, answer = submit(api(unreachable))
    assert (status, answer["reason"]) == (503, "QueueUnavailable")


def test_with_the_volume_tier_off_every_route_is_404_saying_so() -> None:
    server = api(None)
    for method, path in routes({"jobId": "j1", "executionId": "ex-1"}):
        status, answer = call(server, method, path, "t-alice")
        assert (status, answer["reason"]) == (404, "VolumeTierOff"), (method, path)


def test_other_methods_are_405_and_other_paths_404(store: QueueStore) -> None:
    server = api(store)
    assert get(server, "/v1/jobs")[0] == 405
    assert post(server, "/v1/jobs/abc")[0] == 405
    assert delete(server, "/v1/executions/ex-1")[0] == 405
    assert get(server, "/v1/queues")[0] == 404


# Bad fields: 422 naming the field ----------------------------------------------------------------

BAD_FIELDS = [
    pytest.param({"namespace": "Shop"}, "namespace", id="namespace not a DNS label"),
    pytest.param({"namespace": None}, "namespace", id="namespace not a string"),
    pytest.param({"queue": "orders/x"}, "queue", id="queue not an object name"),
    pytest.param({"task": ""}, "task", id="empty task"),
    pytest.param({"task": 7}, "task", id="task not a string"),
    pytest.param({"payload": [1, 2]}, "payload", id="payload not an object"),
    pytest.param({"payload": {"blob": "x" * 40_000}}, "payload", id="payload over the size cap"),
    pytest.param({"runAt": "tomorrow"}, "runAt", id="runAt not RFC 3339"),
    pytest.param({"runAt": "2026-12-01T12:00:00"}, "runAt", id="runAt without an offset"),
    pytest.param({"runAt": "2026-12-01T11:54:59Z"}, "runAt", id="runAt past the catch-up window"),
    pytest.param({"priority": "urgent"}, "priority", id="priority an unknown name"),
    pytest.param({"priority": 1.5}, "priority", id="priority not whole"),
    pytest.param({"priority": 40_000}, "priority", id="priority out of range"),
    pytest.param({"maxAttempts": 0}, "maxAttempts", id="maxAttempts zero"),
    pytest.param({"maxAttempts": True}, "maxAttempts", id="maxAttempts a boolean"),
    pytest.param({"idempotencyKey": ""}, "idempotencyKey", id="empty idempotency key"),
    pytest.param({"tenant": " a"}, "tenant", id="tenant with a leading space"),
    pytest.param({"timezone": "Europe/Paris"}, "timezone", id="a one-off job's timezone"),
    pytest.param({"colour": "blue"}, "colour", id="an unknown field"),
    # A recurring job (cron): the issue's own examples first.
    pytest.param({"cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "timezone", id="unknown timezone"),
    pytest.param({"cron": "0 0 3 * * *"}, "cron", id="cron of 6 fields"),
    pytest.param({"cron": "0 3 * * *", "payloadTemplate": {"x": "y" * 40_000}}, "payloadTemplate", id="template too big"),
    pytest.param({"cron": "0 3 * * *", "payloadTemplate": {"d": "{{ nope("}}, "payloadTemplate.d", id="broken template"),
    pytest.param({"cron": "0 3 * * *", "payloadTemplate": {"t": "{% set a = 'a' * 30000 %}" + "{% set a = a ~ a %}" * 15}},
                 "payloadTemplate.t", id="hostile template"),  # issue 36: refused by what it builds
    pytest.param({"cron": "0 3 * * *", "runAt": "2026-12-01T13:00:00Z"}, "runAt", id="recurring with a runAt"),
    pytest.param({"cron": "0 3 * * *", "payload": {}}, "payload", id="recurring with a payload"),
    pytest.param({"cron": "0 3 * * *", "expectedMaxInterval": "a day"}, "expectedMaxInterval", id="bad interval"),
    pytest.param({"cron": "0 3 * * *", "maxAttempts": 0}, "maxAttempts", id="recurring no attempts"),
    pytest.param({"cron": "0 0 30 2 *"}, "cron", id="a cron that never comes"),
]


@pytest.mark.parametrize(("fields", "field"), BAD_FIELDS)
def test_a_bad_field_is_422_naming_it_and_adds_nothing(store: QueueStore, fields: dict[str, Any], field: str) -> None:
    status, answer = submit(api(store), **fields)
    assert (status, answer["reason"], answer["errors"][0]["field"]) == (422, "Invalid", field)
    assert answer["detail"].startswith(f"{field}: ")
    assert store.counts(QUEUE)["ready"] == 0


def test_a_recurring_job_is_catalogued_with_its_next_run_and_fired_by_the_trigger(store: QueueStore, dsn: str) -> None:
    server = api(store)
    status, made = submit(
        server, cron="0 2 * * *", timezone="Europe/London", expectedMaxInterval="26h",
        payloadTemplate={"date": "{{ periodStart | date }}"}, idempotencyKey="nightly",
    )  # fmt: skip
    assert status == 201 and set(made) == {"jobId", "nextRun"}
    assert datetime.fromisoformat(made["nextRun"]) == datetime(2026, 12, 2, 2, 0, tzinfo=UTC)  # GMT in December
    assert submit(server, cron="0 2 * * *", idempotencyKey="nightly") == (200, made)
    status, job = get(server, f"/v1/jobs/{made['jobId']}")
    assert status == 200
    assert (job["cron"], job["timezone"], job["expectedMaxInterval"]) == ("0 2 * * *", "Europe/London", "1d2h")
    assert (job["nextRun"], job["tenant"], job["executions"]) == (made["nextRun"], "shop", [])

    trigger = ShardTrigger(dsn, shard=0)  # the store spreads over one shard: the default
    try:
        fired = trigger.run_pass(now=datetime(2026, 12, 2, 2, 1, tzinfo=UTC)).fired
    finally:
        trigger.close()
    assert len(fired) == 1
    [execution] = get(server, f"/v1/jobs/{made['jobId']}")[1]["executions"]
    timeline = get(server, f"/v1/executions/{execution['executionId']}")[1]
    assert (timeline["state"], timeline["payload"]) == ("ready", {"date": "2026-12-01"})


def test_a_deleted_recurring_job_fires_no_more(store: QueueStore, dsn: str) -> None:
    server = api(store)
    _, made = submit(server, cron="0 2 * * *")
    assert delete(server, f"/v1/jobs/{made['jobId']}")[0] == 200
    job = get(server, f"/v1/jobs/{made['jobId']}")[1]
    assert (job["enabled"], job["nextRun"]) == (False, None)
    trigger = ShardTrigger(dsn, shard=0)
    try:
        assert trigger.run_pass(now=datetime(2026, 12, 2, 2, 1, tzinfo=UTC)).fired == []
    finally:
        trigger.close()
    assert store.counts(QUEUE)["ready"] == 0


def test_a_body_that_is_not_a_json_object_is_422(store: QueueStore) -> None:
    server = api(store)
    for raw in (b"", b"[]", b"{"):
        answer = server.answer_post("/v1/jobs", raw, token="t-alice")
        assert (answer[0], body(answer)["errors"][0]["field"]) == (422, "body")
    answer = server.answer_post("/v1/executions/ex-1/cancel", b'{"why": 1}', token="t-alice")
    assert (answer[0], body(answer)["errors"][0]["field"]) == (422, "body")


def test_a_runat_within_the_catch_up_window_runs_at_once_with_its_own_scheduled_time(store: QueueStore) -> None:
    status, made = submit(api(store), runAt="2026-12-01T11:56:00Z")
    assert status == 201 and made["scheduledFor"].startswith("2026-12-01T11:56:00")
