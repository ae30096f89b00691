"""Reserved capacity and Execution specs at admission, on the real API server, as a tenant.

A tenant (a user impersonated through the admin kubeconfig, bound in its namespace to a Role with
what the chart's -edit role grants on ScheduledJobs and Executions) tries to take what is not
theirs:

* `priority: high` on a ScheduledJob or a hand-made Execution in a namespace the chart does not
  list (admission.highPriority.namespaces) is refused by the chart's high-priority
  ValidatingAdmissionPolicy, naming spec.priority; in a listed namespace it is accepted, and so
  are the other priorities everywhere;
* so are the other ways to the reserved slots: a Workflow labelled `vigil.dev/priority: high`
  (the label is a Workflow's dispatch priority), and a `task:` job's `spec.task.priority` above
  normal (below 0);
* an Execution's spec cannot be changed (its CRD's transition rules) except the user's levers:
  spec.cancel (with cancelReason) and spec.retryRequests, which only grows.

The policy is rendered from the chart (templates/admission-priority.yaml) for this module only and
removed afterwards: it binds cluster-wide, and other modules create high-priority jobs freely.
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
from tests.integration.jobs import job_body, make_namespace
from tests.waiting import wait_for

GROUP, VERSION = "vigil.dev", "v1alpha1"
CHART = REPO / "helm" / "vigil"
TEMPLATE = "templates/admission-priority.yaml"
#: The release the policy is rendered for (apart from any real install's names).
RELEASE = "capacity-test"
POLICY = f"{RELEASE}-vigil-high-priority"
TENANT = "tenant"

Tenant = Callable[[], client.CustomObjectsApi]


def execution(name: str, **spec: Any) -> dict[str, Any]:
    """A hand-made Execution (as `kubectl vigil backfill` makes them) of a job that need not exist."""
    body: dict[str, Any] = {
        "job": {"name": "report", "uid": "0000-report"},
        "executionId": name,
        "scheduledFor": "2026-08-01T02:00:00Z",
        "periodStart": "2026-08-01T00:00:00Z",
        "periodEnd": "2026-08-02T00:00:00Z",
        "source": "Backfill",
    }
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Execution", "metadata": {"name": name}, "spec": body}


@pytest.fixture(scope="module")
def listed(cluster: KubeCluster) -> Iterator[str]:
    """A namespace the chart lists in admission.highPriority.namespaces, with the policy applied."""
    name = make_namespace(cluster, "hp")
    rendered = cluster.helm(
        "template", RELEASE, str(CHART), "--namespace", "vigil-system", "--show-only", TEMPLATE,
        "--set", f"admission.highPriority.namespaces={{{name}}}",
    ).stdout  # fmt: skip
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    cluster.kubectl("apply", "-f", "-", input=rendered)
    wait_for(lambda: high_refused(cluster), timeout=60, what="the high-priority policy to be enforced")
    yield name
    for obj in objects:
        cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found")
    cluster.clear_namespace(name)


def high_refused(cluster: KubeCluster) -> bool:
    """Whether the API server already refuses a high-priority job in `default` (a dry run)."""
    try:
        cluster.custom.create_namespaced_custom_object(
            GROUP, VERSION, "default", "scheduledjobs",
            job_body("probe", runAt="2030-01-01T00:00:00Z", priority="high"), dry_run="All",
        )  # fmt: skip
    except ApiException as error:
        return error.status == 403 and POLICY in str(error.body)
    return False


def grant_tenant(cluster: KubeCluster, namespace: str) -> None:
    """The tenant's Role in `namespace`: what the chart's -view and -edit roles give on these kinds."""
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name=TENANT),
            rules=[
                client.V1PolicyRule(
                    api_groups=[GROUP],
                    resources=["scheduledjobs"],
                    verbs=["get", "list", "watch", "create", "update", "patch", "delete"],
                ),
                client.V1PolicyRule(
                    api_groups=[GROUP], resources=["executions"], verbs=["get", "list", "watch", "create", "patch"]
                ),
                client.V1PolicyRule(
                    api_groups=[GROUP], resources=["workflows"], verbs=["get", "create", "update", "patch"]
                ),
            ],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name=TENANT),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=TENANT),
            subjects=[client.RbacV1Subject(kind="User", name=TENANT, api_group="rbac.authorization.k8s.io")],
        ),
    )

    def effective() -> bool:
        review = client.AuthorizationV1Api(cluster.api).create_subject_access_review(
            client.V1SubjectAccessReview(
                spec=client.V1SubjectAccessReviewSpec(
                    user=TENANT,
                    resource_attributes=client.V1ResourceAttributes(
                        namespace=namespace, verb="patch", group=GROUP, resource="executions"
                    ),
                )
            )
        )
        return bool(review.status.allowed)

    wait_for(effective, timeout=30, what=f"the tenant's Role in {namespace}")


@pytest.fixture
def tenant(cluster: KubeCluster, namespace: str, listed: str) -> Iterator[client.CustomObjectsApi]:
    """The tenant's client, allowed to edit Vigil objects in `namespace` and in `listed`."""
    for where in (namespace, listed):
        grant_tenant(cluster, where)
    with cluster.impersonating() as as_user:
        yield client.CustomObjectsApi(as_user(TENANT))
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rbac.delete_namespaced_role_binding(TENANT, listed)
    rbac.delete_namespaced_role(TENANT, listed)


def refusal(call: Callable[[], object]) -> tuple[int, str]:
    """The status and message of the API server's refusal of `call`; fails when it is accepted."""
    with pytest.raises(ApiException) as caught:
        call()
    return caught.value.status, str(caught.value.body)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# --------------------------------------------------------------------------------------------
# High priority


def test_a_tenant_cannot_give_a_job_high_priority_in_an_unlisted_namespace(
    tenant: client.CustomObjectsApi, namespace: str
) -> None:
    body = job_body(unique("grab"), runAt="2030-01-01T00:00:00Z", priority="high")
    status, message = refusal(
        lambda: tenant.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", body)
    )
    assert status == 403 and "spec.priority" in message and namespace in message


def test_a_tenant_cannot_raise_a_jobs_priority_to_high_in_an_unlisted_namespace(
    tenant: client.CustomObjectsApi, namespace: str
) -> None:
    name = unique("raise")
    tenant.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "scheduledjobs", job_body(name, runAt="2030-01-01T00:00:00Z")
    )
    status, message = refusal(
        lambda: tenant.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "scheduledjobs", name, {"spec": {"priority": "high"}}
        )
    )
    assert status == 403 and "spec.priority" in message
    tenant.patch_namespaced_custom_object(  # the other priorities stay the tenant's choice
        GROUP, VERSION, namespace, "scheduledjobs", name, {"spec": {"priority": "low"}}
    )


def test_a_tenant_cannot_hand_make_a_high_priority_execution_in_an_unlisted_namespace(
    tenant: client.CustomObjectsApi, namespace: str
) -> None:
    body = execution(unique("ex-grab"), priority="high")
    status, message = refusal(
        lambda: tenant.create_namespaced_custom_object(GROUP, VERSION, namespace, "executions", body)
    )
    assert status == 403 and "spec.priority" in message


def test_high_priority_is_accepted_in_a_listed_namespace(
    tenant: client.CustomObjectsApi, listed: str
) -> None:
    name = unique("urgent")
    job = tenant.create_namespaced_custom_object(
        GROUP, VERSION, listed, "scheduledjobs", job_body(name, runAt="2030-01-01T00:00:00Z", priority="high")
    )
    assert job["spec"]["priority"] == "high"
    ex = tenant.create_namespaced_custom_object(
        GROUP, VERSION, listed, "executions", execution(unique("ex-urgent"), priority="high")
    )
    assert ex["spec"]["priority"] == "high"


def workflow(name: str, priority: str) -> dict[str, Any]:
    """A one-step Workflow a tenant writes itself, with the dispatch priority label."""
    steps = [{"id": "run", "type": "pod", "template": {"spec": {"containers": [{"name": "m", "image": "busybox"}]}}}]
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workflow",
        "metadata": {"name": name, "labels": {"vigil.dev/priority": priority}}, "spec": {"steps": steps},
    }  # fmt: skip


def task_job(name: str, priority: int) -> dict[str, Any]:
    return job_body(name, runAt="2030-01-01T00:00:00Z", task={"queue": "orders", "name": "record", "priority": priority})


def test_a_tenant_cannot_label_a_workflow_high_in_an_unlisted_namespace(
    tenant: client.CustomObjectsApi, namespace: str
) -> None:
    status, message = refusal(
        lambda: tenant.create_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", workflow(unique("wf"), "high"))
    )
    assert status == 403 and "vigil.dev/priority" in message and namespace in message
    name = unique("wf-low")
    tenant.create_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", workflow(name, "low"))
    status, message = refusal(
        lambda: tenant.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "workflows", name, {"metadata": {"labels": {"vigil.dev/priority": "high"}}}
        )
    )
    assert status == 403 and "vigil.dev/priority" in message


def test_a_tenant_cannot_give_a_task_job_a_priority_above_normal_in_an_unlisted_namespace(
    tenant: client.CustomObjectsApi, namespace: str
) -> None:
    status, message = refusal(
        lambda: tenant.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", task_job(unique("t"), -1))
    )
    assert status == 403 and "spec.task.priority" in message and namespace in message
    name = unique("t-normal")
    tenant.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", task_job(name, 5))
    status, message = refusal(
        lambda: tenant.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "scheduledjobs", name, {"spec": {"task": {"priority": -10}}}
        )
    )
    assert status == 403 and "spec.task.priority" in message


def test_raised_workflows_and_task_jobs_are_accepted_in_a_listed_namespace(
    tenant: client.CustomObjectsApi, listed: str
) -> None:
    made = tenant.create_namespaced_custom_object(GROUP, VERSION, listed, "workflows", workflow(unique("wf"), "high"))
    assert made["metadata"]["labels"]["vigil.dev/priority"] == "high"
    job = tenant.create_namespaced_custom_object(GROUP, VERSION, listed, "scheduledjobs", task_job(unique("t"), -10))
    assert job["spec"]["task"]["priority"] == -10


# --------------------------------------------------------------------------------------------
# Execution specs


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"priority": "high"}, id="priority"),
        pytest.param({"priority": "low"}, id="priority-down"),
        pytest.param({"scheduledFor": "2026-09-01T02:00:00Z"}, id="scheduledFor"),
        pytest.param({"periodEnd": "2027-01-01T00:00:00Z"}, id="periodEnd"),
        pytest.param({"job": {"name": "someone-elses", "uid": "0000-other"}}, id="job"),
        pytest.param({"retry": {"maxAttempts": 50}}, id="retry"),
        pytest.param({"source": "Trigger"}, id="source"),
    ],
)
def test_a_tenant_cannot_change_an_executions_spec(
    tenant: client.CustomObjectsApi, namespace: str, change: dict[str, Any]
) -> None:
    name = unique("ex-fixed")
    tenant.create_namespaced_custom_object(GROUP, VERSION, namespace, "executions", execution(name))
    status, message = refusal(
        lambda: tenant.patch_namespaced_custom_object(GROUP, VERSION, namespace, "executions", name, {"spec": change})
    )
    field = next(iter(change))
    assert status == 422 and f"spec.{field}" in message and "immutable" in message


def test_the_users_levers_still_work_and_retry_requests_only_grow(
    tenant: client.CustomObjectsApi, namespace: str
) -> None:
    name = unique("ex-levers")
    tenant.create_namespaced_custom_object(GROUP, VERSION, namespace, "executions", execution(name))

    def patch(spec: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = tenant.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "executions", name, {"spec": spec}
        )
        return obj

    assert patch({"retryRequests": 2})["spec"]["retryRequests"] == 2
    status, message = refusal(lambda: patch({"retryRequests": 1}))
    assert status == 422 and "spec.retryRequests" in message
    cancelled = patch({"cancel": True, "cancelReason": "not needed"})
    assert cancelled["spec"]["cancel"] is True and cancelled["spec"]["cancelReason"] == "not needed"
