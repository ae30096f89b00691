"""Values refused at the door, at each door of the volume tier, on a real PostgreSQL queue store.

Each hostile kind — NUL and lone surrogates (in values and keys), NaN and infinities,
nesting deeper than 64, a payload over the size limit — is refused where it enters:
`POST /v1/jobs` answers 422 naming the field (`payload.a[1].b`), `QueueStore.submit`
raises SubmissionRefused naming the submission's field and adds nothing, and a
ScheduledJob's `task:` occurrence whose rendered payload holds one is refused for
that occurrence (Failed, never a launch the trigger retries forever). The store
also refuses what the API refuses of its other fields, and an execution id that is
another occurrence's, while a relaunch of the same occurrence after the job's
`task.queue` changed still adds nothing and succeeds.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.unit.reviews import Reviews, body
from vigil.api.queue import QueueApi
from vigil.api.router import ApiServer
from vigil.core.chain import Fire
from vigil.core.ids import ExecutionId, execution_id
from vigil.core.jsonvalues import MAX_DEPTH
from vigil.core.memory import FakeClock
from vigil.core.queue import Submission
from vigil.core.schedule import occurrence_at
from vigil.core.submissions import ExecutionIdTaken, SubmissionRefused
from vigil.kube.controllers.launcher import TaskSubmitter
from vigil.model.jobspec import job_view
from vigil.queue.store import QueueStore

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
QUEUE = "shop/orders"


class Clock:
    def now(self) -> datetime:
        return T0


def server(store: QueueStore) -> ApiServer:
    anyone = Reviews(lambda user, access: user.name == "alice")  # alice may do anything: only values matter here
    return ApiServer(
        leader=lambda: None,
        find_execution=lambda execution_id: None,
        timeline=lambda execution_id: [],
        queue_api=QueueApi(store, clock=Clock(), authenticator=anyone, authorizer=anyone),
    )


def post(store: QueueStore, raw: str) -> tuple[int, Any]:
    answer = server(store).answer_post("/v1/jobs", raw.encode(), token="t-alice")
    return answer[0], body(answer)


def deep(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


HEAD = '{"namespace": "shop", "queue": "orders", "task": "record", '
HOSTILE_BODIES = [
    pytest.param(HEAD + '"payload": {"a": [0, {"b": "x\\u0000"}]}}', "payload.a[1].b", id="NUL in a value"),
    pytest.param(HEAD + '"payload": {"k\\u0000": 1}}', 'payload["k\\u0000"]', id="NUL in a key"),
    pytest.param(HEAD + '"payload": {"a": "\\ud800"}}', "payload.a", id="a lone surrogate"),
    pytest.param(HEAD + '"payload": {"a": NaN}}', "payload.a", id="NaN"),
    pytest.param(HEAD + '"payload": {"a": [Infinity]}}', "payload.a[0]", id="Infinity"),
    pytest.param(HEAD + '"payload": {"a": -Infinity}}', "payload.a", id="-Infinity"),
    pytest.param(HEAD + '"payload": {"a": 1e400}}', "payload.a", id="a number past a double"),
    pytest.param(HEAD + f'"payload": {deep(MAX_DEPTH + 1)}}}', "payload" + ".a" * MAX_DEPTH, id="65 deep"),
    pytest.param(HEAD + f'"payload": {deep(20_000)}}}', "body", id="too deep to read"),
    pytest.param(HEAD + '"payload": {"a": "' + "x" * 40_000 + '"}}', "payload", id="over the size limit"),
    pytest.param(HEAD + '"payload": {}, "tenant": "t\\u0000"}', "tenant", id="NUL in the tenant"),
    pytest.param(
        HEAD + '"cron": "0 3 * * *", "payloadTemplate": {"d": "\\u0000"}}', "payloadTemplate.d", id="NUL in a template"
    ),
    pytest.param(
        HEAD + '"cron": "0 3 * * *", "payloadTemplate": {"d": "{{ \\"\\\\x00\\" }}"}}',
        "payloadTemplate.d",
        id="a template that renders NUL",
    ),
]


@pytest.mark.parametrize(("raw", "field"), HOSTILE_BODIES)
def test_the_http_api_answers_422_naming_the_field(store: QueueStore, raw: str, field: str) -> None:
    status, answer = post(store, raw)
    assert (status, answer["reason"], answer["errors"][0]["field"]) == (422, "Invalid", field), answer
    assert store.counts(QUEUE)["ready"] == 0


def test_the_http_api_still_takes_an_ordinary_payload(store: QueueStore) -> None:
    status, _ = post(store, HEAD + '"payload": {"a": [1, 2.5, "é 😀", null, {"b": true}]}}')
    assert status == 201 and store.counts(QUEUE)["ready"] == 1


HOSTILE_SUBMISSIONS = [
    pytest.param(QUEUE, {"payload": {"a": ["x\x00"]}}, r"submissions\[1\]\.payload\.a\[0\]: holds NUL", id="NUL"),
    pytest.param(QUEUE, {"payload": {"a": "\udc00"}}, r"submissions\[1\]\.payload\.a: holds a lone", id="surrogate"),
    pytest.param(QUEUE, {"payload": {"a": float("nan")}}, r"submissions\[1\]\.payload\.a: is nan", id="NaN"),
    pytest.param(QUEUE, {"payload": {"a": "x" * 40_000}}, r"submissions\[1\]\.payload: is \d+ bytes", id="too big"),
    pytest.param(QUEUE, {"payload": [1]}, r"submissions\[1\]\.payload: must be a JSON object", id="not an object"),
    pytest.param(QUEUE, {"payload": {"a": 10**5000}}, r"submissions\[1\]\.payload: cannot be written as JSON",
                 id="an int too long to write"),
    pytest.param(QUEUE, {"task": "a\x00"}, r"submissions\[1\]\.task: must be printable", id="NUL in the task"),
    pytest.param(QUEUE, {"tenant": " t"}, r"submissions\[1\]\.tenant: must be printable", id="a padded tenant"),
    pytest.param(QUEUE, {"idempotency_key": "k" * 300}, r"idempotency_key: must be 1 to 253", id="a long key"),
    pytest.param("Shop/orders", {}, r"^queue: 'Shop/orders': the namespace", id="a namespace off the grammar"),
    pytest.param("shop/orders/x", {}, r"^queue: .*a DNS subdomain", id="a name off the grammar"),
]


@pytest.mark.parametrize(("queue", "fields", "message"), HOSTILE_SUBMISSIONS)
def test_the_store_refuses_what_the_api_refuses_and_adds_nothing_of_the_batch(
    store: QueueStore, queue: str, fields: dict[str, Any], message: str
) -> None:
    bad = Submission(**({"task": "record"} | fields))
    with pytest.raises(SubmissionRefused, match=message):
        store.submit(queue, [Submission(task="record"), bad], now=T0)
    assert store.counts(QUEUE)["ready"] == 0


def test_an_execution_id_of_another_occurrence_is_an_error_and_a_relaunch_of_the_same_is_not(store: QueueStore) -> None:
    own = execution_id("uid-1", T0)
    store.submit(QUEUE, [Submission(task="record", execution_id=own, idempotency_key=own)], now=T0)
    # The same occurrence again: in its queue, or in another of its namespace (task.queue changed).
    assert store.submit(QUEUE, [Submission(task="record", execution_id=own, idempotency_key=own)], now=T0) == [own]
    assert store.submit("shop/other", [Submission(task="record", execution_id=own, idempotency_key=own)], now=T0) == [
        own
    ]
    foreign = [
        ("team-b/orders", Submission(task="record", execution_id=own, idempotency_key=own)),  # another namespace
        ("shop/other", Submission(task="record", execution_id=own)),  # no key: not this occurrence's relaunch
        ("shop/other", Submission(task="record", execution_id=own, idempotency_key="other")),
    ]
    for queue, submission in foreign:
        with pytest.raises(ExecutionIdTaken, match=f"execution id {own} is enqueued already in queue shop/orders"):
            store.submit(queue, [Submission(task="record"), submission], now=T0)  # the whole batch rolls back
        assert store.counts(queue)["ready"] == 0
    assert store.counts(QUEUE)["ready"] == 1


def task_job(template: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "vigil.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": "reconcile", "namespace": "billing", "uid": "uid-1", "generation": 1,
                     "creationTimestamp": "2026-07-01T00:00:00Z"},
        "spec": {"every": "1h", "payloadTemplate": template, "task": {"queue": "reports", "name": "reconcile_daily"}},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("template", "named"),
    [
        pytest.param({"v": '{{ "\\x00" }}'}, "spec.payloadTemplate.v: holds NUL", id="NUL"),
        pytest.param({"v": '{{ "\\ud800" }}'}, "spec.payloadTemplate.v: holds a lone surrogate", id="surrogate"),
    ],
)
def test_a_task_occurrence_whose_rendered_payload_the_store_refuses_is_refused_not_retried(
    store: QueueStore, template: dict[str, Any], named: str
) -> None:
    obj = task_job(template)
    view, spec = job_view(obj)
    nominal = datetime(2026, 7, 31, 2, 0, tzinfo=UTC)
    fire = Fire(
        job=view,
        occurrence=occurrence_at(view.schedule, nominal, jitter=timedelta(seconds=3)),
        execution_id=ExecutionId(execution_id("uid-1", nominal)),
        late=False,
    )
    launch = TaskSubmitter(store, clock=FakeClock(nominal)).submit(obj, spec, fire)
    assert not launch.created and launch.refused is not None and launch.refused.startswith(named), launch.refused
    assert store.execution(fire.execution_id) is None


def test_the_http_payload_limit_is_the_cores(store: QueueStore) -> None:
    """One limit for every door: the API's constant is the core's (vigil.core.jsonvalues)."""
    from vigil.api import queue as queueapi
    from vigil.core import jsonvalues

    assert queueapi.MAX_PAYLOAD_BYTES == jsonvalues.MAX_PAYLOAD_BYTES
    payload = json.dumps({"a": "x" * (jsonvalues.MAX_PAYLOAD_BYTES - 8)})
    assert post(store, HEAD + f'"payload": {payload}}}')[0] == 201
