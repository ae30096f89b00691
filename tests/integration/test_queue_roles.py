"""The chart's aggregated roles say who may act on a TaskQueue's executions, on the real API server.

rbac-users.yaml (rendered by helm, aggregated into the built-in roles by the controller manager)
and the task-submit admission policy (admission-tasks.yaml), applied for this module only:

* whoever holds the built-in `edit` role in a namespace may create, update and delete
  `taskqueues/executions` there (submit, cancel and retry, delete jobs), and so writes `task:`
  ScheduledJobs the policy admits;
* whoever holds `view` may `get` them (read jobs, timelines, listings) and nothing more: a
  `task:` job written by someone with only `view` on executions is refused at admission.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import REPO, KubeCluster
from tests.integration.jobs import job_body
from tests.waiting import wait_for

GROUP, VERSION = "vigil.dev", "v1alpha1"
RELEASE = "queue-roles"
TEMPLATES = ("templates/rbac-users.yaml", "templates/admission-tasks.yaml")


@pytest.fixture(scope="module")
def chart(cluster: KubeCluster) -> Iterator[None]:
    args = [arg for template in TEMPLATES for arg in ("--show-only", template)]
    rendered = cluster.helm("template", RELEASE, str(REPO / "helm" / "vigil"), "--namespace", "vigil-system", *args).stdout
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    cluster.kubectl("apply", "-f", "-", input=rendered)
    yield
    for obj in objects:
        cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found")


def bind(cluster: KubeCluster, namespace: str, user: str, cluster_role: str) -> None:
    client.RbacAuthorizationV1Api(cluster.api).create_namespaced_role_binding(namespace, {
        "metadata": {"name": f"{user}-{cluster_role}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    })  # fmt: skip


def may(cluster: KubeCluster, user: str, verb: str, namespace: str, subresource: str | None = "executions") -> bool:
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            resource_attributes=client.V1ResourceAttributes(
                group=GROUP, resource="taskqueues", subresource=subresource, verb=verb, namespace=namespace, name="orders"
            ),
        )
    )
    return bool(client.AuthorizationV1Api(cluster.api).create_subject_access_review(review).status.allowed)


def task_job() -> dict[str, object]:
    name = f"t-{uuid.uuid4().hex[:6]}"
    return job_body(name, runAt="2030-01-01T00:00:00Z", task={"queue": "orders", "name": "record"})


def test_edit_acts_on_a_queues_executions_and_view_reads_them(
    cluster: KubeCluster, namespace: str, chart: None
) -> None:
    bind(cluster, namespace, "ed", "edit")
    bind(cluster, namespace, "vi", "view")
    wait_for(
        lambda: may(cluster, "ed", "create", namespace) and may(cluster, "vi", "get", namespace),
        timeout=60, what="the chart's roles to be aggregated and bound",
    )  # fmt: skip
    assert [may(cluster, "ed", verb, namespace) for verb in ("create", "update", "delete", "get")] == [True] * 4
    assert [may(cluster, "vi", verb, namespace) for verb in ("create", "update", "delete", "get")] == [
        False, False, False, True,
    ]  # fmt: skip
    assert not may(cluster, "vi", "update", namespace, subresource=None)  # nor edit the TaskQueue

    # A writer of ScheduledJobs who may only read the queue's executions: the policy refuses.
    client.RbacAuthorizationV1Api(cluster.api).create_namespaced_role(namespace, {
        "metadata": {"name": "jobs"},
        "rules": [{"apiGroups": [GROUP], "resources": ["scheduledjobs"], "verbs": ["create"]}],
    })  # fmt: skip
    client.RbacAuthorizationV1Api(cluster.api).create_namespaced_role_binding(namespace, {
        "metadata": {"name": "vi-jobs"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jobs"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "vi"}],
    })  # fmt: skip

    def refused() -> bool:
        with cluster.impersonating() as as_user:
            viewer = client.CustomObjectsApi(as_user("vi"))
            try:
                viewer.create_namespaced_custom_object(
                    GROUP, VERSION, namespace, "scheduledjobs", task_job(), dry_run="All"
                )
            except ApiException as error:
                return error.status == 403 and "spec.task.queue" in str(error.body)
        return False

    wait_for(refused, timeout=60, what="the viewer's task job to be refused at admission (not by RBAC)")
    with cluster.impersonating() as as_user:  # the policy is enforced now; an editor's job goes through
        editor = client.CustomObjectsApi(as_user("ed"))
        made = editor.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", task_job())
        assert made["spec"]["task"]["queue"] == "orders"
