"""Who may write a `task:` ScheduledJob, on the real API server: the chart's task-submit policy.

A `task:` job submits to its TaskQueue on its author's behalf, and the operator cannot tell who
the author was, so the chart's ValidatingAdmissionPolicy (templates/admission-tasks.yaml) asks the
API server's authorizer at admission. A tenant (a user impersonated through the admin
kubeconfig) who may edit ScheduledJobs in its namespace:

* may not create a `task:` job, or point one at another queue, without `create` on
  `taskqueues/executions` for that TaskQueue (403 naming spec.task.queue); with it (a Role
  scoped by resourceNames), it may;
* may not set `spec.task.tenant` to anything but the job's namespace;
* writes pod jobs as before: the policy matches only jobs with a task;
* may not write a Workflow or WorkflowDefinition whose `task` steps name a queue it may not
  submit to (the task-steps policies, one per resource), and may with `create` on it.

The policies are rendered from the chart for this module only and removed afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import REPO, KubeCluster
from tests.integration.jobs import job_body
from tests.waiting import wait_for

GROUP, VERSION = "vigil.dev", "v1alpha1"
CHART = REPO / "helm" / "vigil"
TEMPLATE = "templates/admission-tasks.yaml"
RELEASE = "tasks-test"
POLICY = f"{RELEASE}-vigil-task-submit"
AUTHOR = "author"


@pytest.fixture(scope="module")
def policy(cluster: KubeCluster) -> Iterator[None]:
    rendered = cluster.helm(
        "template", RELEASE, str(CHART), "--namespace", "vigil-system", "--show-only", TEMPLATE
    ).stdout
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    cluster.kubectl("apply", "-f", "-", input=rendered)
    wait_for(lambda: enforced(cluster), timeout=60, what="the task-submit policy to be enforced")
    yield
    for obj in objects:
        cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found")


def enforced(cluster: KubeCluster) -> bool:
    """Whether the API server already refuses a dry run of a task job with another's tenant."""
    try:
        cluster.custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", "scheduledjobs", task_job("probe", tenant="elsewhere"), dry_run="All"
        )
    except ApiException as error:
        return error.status == 403 and POLICY in str(error.body)
    return False


def task_job(name: str, *, queue: str = "orders", **task: Any) -> dict[str, Any]:
    return job_body(name, runAt="2030-01-01T00:00:00Z", task={"queue": queue, "name": "record", **task})


def bind(cluster: KubeCluster, namespace: str, name: str, rules: list[client.V1PolicyRule]) -> None:
    """A Role `name` with `rules` in `namespace`, bound to the author."""
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rbac.create_namespaced_role(namespace, client.V1Role(metadata=client.V1ObjectMeta(name=name), rules=rules))
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name=name),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
            subjects=[client.RbacV1Subject(kind="User", name=AUTHOR, api_group="rbac.authorization.k8s.io")],
        ),
    )


def may(cluster: KubeCluster, namespace: str, verb: str, resource: str, subresource: str | None, name: str) -> bool:
    review = client.AuthorizationV1Api(cluster.api).create_subject_access_review(
        client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=AUTHOR,
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace, verb=verb, group=GROUP, resource=resource, subresource=subresource, name=name
                ),
            )
        )
    )
    return bool(review.status.allowed)


@pytest.fixture
def author(cluster: KubeCluster, namespace: str, policy: None) -> Iterator[client.CustomObjectsApi]:
    """The author's client: may edit ScheduledJobs in `namespace`, and nothing on its TaskQueues."""
    edit = ["get", "list", "create", "update", "patch", "delete"]
    bind(cluster, namespace, "jobs", [client.V1PolicyRule(api_groups=[GROUP], resources=["scheduledjobs"], verbs=edit)])
    wait_for(lambda: may(cluster, namespace, "create", "scheduledjobs", None, ""), timeout=30, what="the author's Role")
    with cluster.impersonating() as as_user:
        yield client.CustomObjectsApi(as_user(AUTHOR))


def grant_submit(cluster: KubeCluster, namespace: str, queue: str) -> None:
    rule = client.V1PolicyRule(
        api_groups=[GROUP], resources=["taskqueues/executions"], verbs=["create"], resource_names=[queue]
    )
    bind(cluster, namespace, "submit", [rule])
    wait_for(lambda: may(cluster, namespace, "create", "taskqueues", "executions", queue), timeout=30, what="submit")


def refusal(call: Callable[[], object]) -> tuple[int, str]:
    with pytest.raises(ApiException) as caught:
        call()
    return caught.value.status, str(caught.value.body)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_a_task_job_needs_create_on_its_queues_executions(
    cluster: KubeCluster, author: client.CustomObjectsApi, namespace: str
) -> None:
    def create(body: dict[str, Any]) -> Any:
        return author.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", body)

    status, message = refusal(lambda: create(task_job(unique("t"))))
    assert status == 403 and "spec.task.queue" in message and "taskqueues/executions" in message
    create(job_body(unique("pod"), runAt="2030-01-01T00:00:00Z"))  # a pod job is not this policy's

    grant_submit(cluster, namespace, "orders")
    name = unique("t")
    assert create(task_job(name))["spec"]["task"]["queue"] == "orders"
    status, message = refusal(lambda: create(task_job(unique("t"), queue="payments")))
    assert status == 403 and "payments" in message
    status, message = refusal(
        lambda: author.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "scheduledjobs", name, {"spec": {"task": {"queue": "payments"}}}
        )
    )
    assert status == 403 and "spec.task.queue" in message


def test_a_task_jobs_tenant_is_its_namespace(
    cluster: KubeCluster, author: client.CustomObjectsApi, namespace: str
) -> None:
    grant_submit(cluster, namespace, "orders")

    def create(body: dict[str, Any]) -> Any:
        return author.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", body)

    status, message = refusal(lambda: create(task_job(unique("t"), tenant="someone-else")))
    assert status == 403 and "spec.task.tenant" in message
    assert create(task_job(unique("t"), tenant=namespace))["spec"]["task"]["tenant"] == namespace


def test_a_workflows_task_steps_need_create_on_their_queues_executions(
    cluster: KubeCluster, author: client.CustomObjectsApi, namespace: str
) -> None:
    """A Workflow or WorkflowDefinition whose task steps name a queue its writer may not submit to
    is refused (403 naming its steps); pod steps are not this policy's."""
    edit = ["get", "list", "create", "update", "patch", "delete"]
    rule = client.V1PolicyRule(api_groups=[GROUP], resources=["workflows", "workflowdefinitions"], verbs=edit)
    bind(cluster, namespace, "workflows", [rule])
    wait_for(lambda: may(cluster, namespace, "create", "workflows", None, ""), timeout=30, what="the author's Role")

    def steps(queue: str) -> list[dict[str, Any]]:
        pod = {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
        return [{"id": "a", "type": "pod", "template": pod},
                {"id": "b", "type": "task", "dependsOn": ["a"], "task": {"queue": queue, "name": "record"}}]  # fmt: skip

    def workflow(queue: str | None, **options: Any) -> Any:
        chosen = steps(queue) if queue else steps("orders")[:1]
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workflow", "metadata": {"name": unique("w")},
                "spec": {"steps": chosen}}  # fmt: skip
        return author.create_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", body, **options)

    def enforced() -> bool:
        try:
            workflow("orders", dry_run="All")
        except ApiException as error:
            return error.status == 403 and f"{RELEASE}-vigil-task-steps-workflows" in str(error.body)
        return False

    wait_for(enforced, timeout=60, what="the task-steps policy to be enforced")

    def definition(queue: str) -> Any:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkflowDefinition", "metadata": {"name": unique("d")},
                "spec": {"versions": [{"version": 1, "steps": steps(queue)}]}}  # fmt: skip
        return author.create_namespaced_custom_object(GROUP, VERSION, namespace, "workflowdefinitions", body)

    status, message = refusal(lambda: workflow("orders"))
    assert status == 403 and "spec.steps" in message and "taskqueues/executions" in message
    workflow(None)  # pod steps only: not this policy's
    grant_submit(cluster, namespace, "orders")
    assert workflow("orders")["spec"]["steps"][1]["task"]["queue"] == "orders"
    status, message = refusal(lambda: workflow("payments"))
    assert status == 403 and "spec.steps" in message
    definition("orders")
    status, message = refusal(lambda: definition("payments"))
    assert status == 403 and "spec.versions" in message
