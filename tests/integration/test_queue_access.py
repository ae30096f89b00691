"""Who may use the volume tier's HTTP API, through a real operator on the real API server and a
real PostgreSQL queue store.

The operator runs with the chart's own identity (tests/integration/operators.py), its
`queue.dsn` pointing at a fresh database it has never migrated (its first request migrates it).
Callers are ServiceAccounts with real tokens; each route's TokenReview and SubjectAccessReview
(on the subresource `taskqueues/executions` of `vigil.dev`, named after the queue, in its
namespace) go to the API server:

* no token, or one the API server does not know: 401;
* `stranger` (granted nothing) and `elsewhere` (who may submit to another queue only, by
  `resourceNames`): 403 for submitting to `orders`;
* `submitter` (`create` and `get` on `orders`): 201 through `vigil.client`, a repeated
  idempotency key 200 with the first job, the job and the timeline readable within the queue
  (by id alone 403: a grant naming one TaskQueue is not asked before the store is read), a bad
  field 422 naming it; cancelling needs `update`, so 403;
* `reader` (`get` on every TaskQueue of the namespace): reads the job and execution by id alone;
* `operator` (`get`, `update`, `delete` on `orders`): cancels and retries the execution and
  deletes the job; may not submit (403);
* the queue's listings (jobs, dead letters, stats) need `get` on it: the submitter reads them,
  `stranger` and `elsewhere` get 403;
* `editor`, who may update the TaskQueue object itself (the verb that used to cancel and retry),
  may not cancel; and none of the callers above may edit the TaskQueue: the rights are apart.

Nothing here needs the TaskQueue CRD: RBAC and SubjectAccessReviews work on the resource name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from kubernetes import client

from tests.contract.conftest import postgres
from tests.contract.postgres import PostgresServer
from tests.integration.conftest import KubeCluster
from tests.integration.operators import OperatorFleet
from tests.integration.test_http_access import GROUP, serving, token_of
from tests.queue.conftest import conninfo
from vigil.client import ApiError, Client
from vigil.queue.roles import RoleLimits, TenantRoles
from vigil.queue.store import QueueStore

__all__ = ["postgres"]

pytestmark = pytest.mark.postgres


def on_orders(*verbs: str, queue: str = "orders", resource: str = "taskqueues/executions") -> list[client.V1PolicyRule]:
    return [client.V1PolicyRule(api_groups=[GROUP], resources=[resource], verbs=list(verbs), resource_names=[queue])]


@pytest.fixture(params=["owner", "api-roles"])
def served(
    cluster: KubeCluster, namespace: str, tmp_path: Path, postgres: PostgresServer, request: pytest.FixtureRequest
) -> Iterator[str]:
    """The operator's API on a fresh store: reaching it as the owner, or (with the API's password,
    as the chart gives it) as the namespace's API role, the namespace provisioned as its TaskQueue's
    pass would provision it. The answers must not differ."""
    dsn = conninfo(postgres, postgres.create_database())
    queue: dict[str, object] = {"dsn": dsn}
    if request.param == "api-roles":
        QueueStore(dsn).migrate()
        TenantRoles(dsn).ensure(namespace, password="pw-ns", limits=RoleLimits())
        queue["apiPassword"] = "api-pw"
    fleet = OperatorFleet(cluster, tmp_path, queue=queue)
    with serving(fleet, request) as api:
        yield f"http://127.0.0.1:{api.port}"
    if request.param == "api-roles":  # the operator made its login role and served through it
        with psycopg.connect(dsn) as owner:
            made = owner.execute("SELECT count(*) FROM pg_roles WHERE rolname LIKE 'vigil\\_api\\_%'").fetchone()
        assert made == (1,)


def status_of(call: Callable[[], object]) -> int:
    """The status a call's answer had: 200 for any success, else the ApiError's."""
    try:
        call()
    except ApiError as error:
        return error.status
    return 200


def test_the_queue_api_authenticates_and_authorises_every_caller_on_the_taskqueue(
    cluster: KubeCluster, namespace: str, served: str
) -> None:
    submitter = Client(served, token=token_of(cluster, namespace, "submitter", on_orders("create", "get")))
    operator = Client(served, token=token_of(cluster, namespace, "operator", on_orders("get", "update", "delete")))
    stranger = Client(served, token=token_of(cluster, namespace, "stranger"))
    elsewhere = Client(served, token=token_of(cluster, namespace, "elsewhere", on_orders("create", queue="other")))

    def submit(caller: Client) -> Callable[[], object]:
        return lambda: caller.submit(namespace=namespace, queue="orders", task="record")

    assert status_of(submit(Client(served, token="not-a-token"))) == 401
    assert status_of(submit(stranger)) == 403
    assert status_of(submit(elsewhere)) == 403
    assert status_of(submit(operator)) == 403

    orders = (namespace, "orders")  # a grant on one TaskQueue acts within it (by id alone: 403, below)
    made = submitter.submit(namespace=namespace, queue="orders", task="record", idempotency_key="k", payload={"n": 1})
    assert made.created and made.job_id is not None
    again = submitter.submit(namespace=namespace, queue="orders", task="record", idempotency_key="k")
    assert (again.created, again.execution_id) == (False, made.execution_id)
    assert submitter.job(made.job_id, queue=orders).queue == "orders"
    assert submitter.execution(made.execution_id, queue=orders).state == "ready"
    with pytest.raises(ApiError) as bad:
        submitter.submit(namespace=namespace, queue="orders", task="record", priority="urgent")
    assert (bad.value.status, bad.value.field) == (422, "priority")

    assert status_of(lambda: stranger.execution(made.execution_id, queue=orders)) == 403
    assert status_of(lambda: submitter.cancel(made.execution_id, queue=orders)) == 403
    assert operator.cancel(made.execution_id, queue=orders).state == "cancelled"
    assert status_of(lambda: operator.cancel(made.execution_id, queue=orders)) == 409
    retried = operator.retry(made.execution_id, queue=orders)
    assert (retried.state, retried.attempt, retried.execution_id) == ("ready", 2, made.execution_id)
    assert status_of(lambda: submitter.delete_job(made.job_id or "", queue=orders)) == 403
    assert operator.delete_job(made.job_id, queue=orders).enabled is False
    assert submitter.execution(made.execution_id, queue=orders).cancelled_by == f"system:serviceaccount:{namespace}:operator"

    # By id alone the queue is not known before the store is read: a grant on one TaskQueue is
    # not enough (403, the store never asked), a namespace-wide one is, for a ServiceAccount there.
    assert status_of(lambda: submitter.execution(made.execution_id)) == 403
    reader = Client(served, token=token_of(cluster, namespace, "reader", [client.V1PolicyRule(
        api_groups=[GROUP], resources=["taskqueues/executions"], verbs=["get"])]))  # fmt: skip
    assert reader.execution(made.execution_id).execution_id == made.execution_id
    assert reader.job(made.job_id).queue == "orders"

    # The queue's listings need `get` on it: the submitter reads them, the others do not.
    [job] = submitter.queue_jobs(namespace, "orders").jobs
    assert (job.job_id, job.enabled, job.last_state) == (made.job_id, False, "cancelled")
    assert submitter.dead_letters(namespace, "orders").dead_letters == ()
    assert submitter.queue_stats(namespace, "orders") == ()
    for caller in (stranger, elsewhere):
        for listing in (caller.queue_jobs, caller.dead_letters, caller.queue_stats):
            assert status_of(functools.partial(listing, namespace, "orders")) == 403, listing

    # Editing the TaskQueue and acting on its executions are apart, both ways.
    editor = Client(served, token=token_of(cluster, namespace, "editor", on_orders("get", "update", resource="taskqueues")))
    assert status_of(lambda: editor.cancel(made.execution_id)) == 403
    for name in ("submitter", "operator"):
        review = client.AuthorizationV1Api(cluster.api).create_subject_access_review(
            client.V1SubjectAccessReview(
                spec=client.V1SubjectAccessReviewSpec(
                    user=f"system:serviceaccount:{namespace}:{name}",
                    resource_attributes=client.V1ResourceAttributes(
                        namespace=namespace, verb="update", group=GROUP, resource="taskqueues", name="orders"
                    ),
                )
            )
        )
        assert not review.status.allowed, name
