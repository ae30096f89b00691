"""Workflow requests, definition versions and workflow templates at admission, on the real API server.

Covers the workflow-requests ValidatingAdmissionPolicy (helm/vigil/files/admission/, applied as it
is by the session fixture) together with the CRDs' own rules, with people impersonated through the
admin kubeconfig:

* alice holds only the chart's <release>-workflow-approver ClusterRole (bound in the namespace),
  bob a Role with get/list/watch/create/patch/update and the editor's custom verbs retry,
  complete and cancel on workflows, pat the same Role without the custom verbs;
* a request must be written in one's own name and groups; approve and reject need the `approve`
  verb; retry, complete and cancel need the verb of their own name, and a complete of an
  approval step needs `approve` too; requests already present are not re-checked; a written
  request can be neither changed nor removed, nor the list emptied or dropped (each refusal
  names spec.requests); the checks hold on create and at the largest list the CRD allows;
* a WorkflowDefinition version keeps its steps (adding steps and versions is fine);
* a ScheduledJob runs exactly one of template, workflowTemplate and task, and a task names its
  queue and task.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import ADMISSION_POLICY, REPO, KubeCluster
from tests.waiting import wait_for
from vigil.model.workflow import (
    MESSAGE_ACTION_VERBS,
    MESSAGE_APPROVE_VERB,
    MESSAGE_BY_IS_WRITER,
    MESSAGE_COMPLETE_APPROVAL_VERB,
    MESSAGE_DEFINITION_STEPS_KEPT,
    MESSAGE_GROUPS_OF_WRITER,
    MESSAGE_OUTPUT_ONLY_ON_COMPLETE,
    MESSAGE_REQUEST_NEEDS_STEP,
    MESSAGE_REQUESTS_APPEND_ONLY,
    REQUESTS_MAX_ITEMS,
)

GROUP, VERSION = "vigil.dev", "v1alpha1"
JSON_PATCH = "application/json-patch+json"
#: The release the chart's approver role is rendered for (apart from any real install's names).
RELEASE = "admission-test"

ALICE, BOB, PAT = "alice", "bob", "pat"
#: What the editor Role grants on workflows: bob gets the custom verbs too, pat does not.
EDITOR_VERBS = ["get", "list", "watch", "create", "patch", "update"]
STEERING_VERBS = ["retry", "complete", "cancel"]
POD_TEMPLATE = {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}}
STEPS = [
    {"id": "render", "type": "pod", "template": POD_TEMPLATE},
    {
        "id": "approve",
        "type": "approval",
        "dependsOn": ["render"],
        "approval": {"approvers": ["group:editors"]},
    },
]

People = Callable[..., client.CustomObjectsApi]


def workflow(name: str, *, requests: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"steps": STEPS}
    if requests is not None:
        spec["requests"] = requests
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workflow", "metadata": {"name": name}, "spec": spec}


def request(request_id: str, action: str, by: str, **fields: Any) -> dict[str, Any]:
    item = {"id": request_id, "action": action, "by": by, **fields}
    if action != "cancel":
        item.setdefault("step", "approve")
    return item


def append(
    api: client.CustomObjectsApi, namespace: str, name: str, *items: dict[str, Any]
) -> dict[str, Any]:
    """Append ``items`` to spec.requests with a JSON patch, as `kubectl vigil approve` does."""
    current = api.get_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", name)
    if current["spec"].get("requests"):
        operations = [{"op": "add", "path": "/spec/requests/-", "value": item} for item in items]
    else:
        operations = [{"op": "add", "path": "/spec/requests", "value": list(items)}]
    result: dict[str, Any] = api.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "workflows", name, operations, _content_type=JSON_PATCH
    )
    return result


def refusal(call: Callable[[], object], status: int) -> str:
    """The API server's message when ``call`` is refused with ``status``."""
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == status, info.value.body
    return str(json.loads(info.value.body)["message"])


def requests_of(cluster: KubeCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    obj = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", name)
    items: list[dict[str, Any]] = obj["spec"].get("requests", [])
    return items


# --------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def approver_role(cluster: KubeCluster) -> Iterator[str]:
    """The chart's workflow-approver ClusterRole, rendered by helm and applied as it is."""
    rendered = cluster.helm(
        "template", RELEASE, str(REPO / "helm" / "vigil"), "--show-only", "templates/rbac-users.yaml"
    ).stdout
    (role,) = [
        item
        for item in yaml.safe_load_all(rendered)
        if item and item["kind"] == "ClusterRole" and item["metadata"]["name"].endswith("-workflow-approver")
    ]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(role))
    yield str(role["metadata"]["name"])
    cluster.kubectl("delete", "clusterrole", role["metadata"]["name"], "--ignore-not-found")


def allowed(cluster: KubeCluster, user: str, verb: str, namespace: str) -> bool:
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            resource_attributes=client.V1ResourceAttributes(
                group=GROUP, resource="workflows", verb=verb, namespace=namespace
            ),
        )
    )
    result = client.AuthorizationV1Api(cluster.api).create_subject_access_review(review)
    return bool(result.status.allowed)


@pytest.fixture
def people(cluster: KubeCluster, namespace: str, approver_role: str) -> Iterator[People]:
    """RBAC for alice (approver role only), bob (editor, no approve) and pat (patch, no custom
    verbs); API clients as anyone."""
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    for name, verbs in (("workflow-editor", EDITOR_VERBS + STEERING_VERBS), ("workflow-patcher", EDITOR_VERBS)):
        rbac.create_namespaced_role(
            namespace,
            client.V1Role(
                metadata=client.V1ObjectMeta(name=name),
                rules=[client.V1PolicyRule(api_groups=[GROUP], resources=["workflows"], verbs=verbs)],
            ),
        )
    for binding, kind, role, user in (
        ("bob-edits", "Role", "workflow-editor", BOB),
        ("pat-patches", "Role", "workflow-patcher", PAT),
        ("alice-approves", "ClusterRole", approver_role, ALICE),
    ):
        rbac.create_namespaced_role_binding(
            namespace,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name=binding),
                role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind=kind, name=role),
                subjects=[client.RbacV1Subject(kind="User", name=user, api_group="rbac.authorization.k8s.io")],
            ),
        )
    wait_for(
        lambda: allowed(cluster, ALICE, "approve", namespace) and allowed(cluster, BOB, "cancel", namespace)
        and allowed(cluster, PAT, "patch", namespace),
        timeout=30,
        what="the RBAC bindings to take effect",
    )
    with cluster.impersonating() as impersonate:

        def as_user(user: str, group: str | None = None) -> client.CustomObjectsApi:
            return client.CustomObjectsApi(impersonate(user, group))

        yield as_user


@pytest.fixture
def publish(cluster: KubeCluster, namespace: str) -> str:
    """A Workflow without requests, created by the admin."""
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", workflow("publish"))
    return "publish"


@pytest.fixture(scope="module")
def admin_name(cluster: KubeCluster) -> str:
    review = json.loads(cluster.kubectl("auth", "whoami", "-o", "json").stdout)
    return str(review["status"]["userInfo"]["username"])


# --------------------------------------------------------------------------------------------
# The policy itself


def test_the_policy_type_checks_against_the_workflow_crd(cluster: KubeCluster) -> None:
    (policy, binding) = yaml.safe_load(ADMISSION_POLICY.read_text())["items"]
    name = policy["metadata"]["name"]
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}

    def checked() -> dict[str, Any] | None:
        status = json.loads(cluster.kubectl("get", "validatingadmissionpolicy", name, "-o", "json").stdout).get("status", {})
        return status if status.get("observedGeneration") else None

    status = wait_for(checked, timeout=30, what=f"type checking of {name}")
    assert status.get("typeChecking", {}).get("expressionWarnings") is None, status


# --------------------------------------------------------------------------------------------
# Authentication: by and byGroups


def test_an_approver_appends_an_approval_in_their_own_name(
    cluster: KubeCluster, namespace: str, people: People, publish: str
) -> None:
    approval = request("approve-1", "approve", ALICE, byGroups=["editors"], reason="render checked", at="2026-08-01T10:00:00Z")
    append(people(ALICE, "editors"), namespace, publish, approval)
    assert requests_of(cluster, namespace, publish) == [approval]


@pytest.mark.parametrize(
    ("writer", "item"),
    [
        pytest.param(ALICE, request("approve-1", "approve", BOB), id="approval-in-another-name"),
        pytest.param(BOB, request("cancel-1", "cancel", ALICE), id="cancel-in-another-name"),
    ],
)
def test_a_request_in_someone_elses_name_is_refused(
    cluster: KubeCluster, namespace: str, people: People, publish: str, writer: str, item: dict[str, Any]
) -> None:
    message = refusal(lambda: append(people(writer), namespace, publish, item), 403)
    assert f"spec.requests[{item['id']}].by: {MESSAGE_BY_IS_WRITER} ({writer}), not {item['by']}" in message
    assert requests_of(cluster, namespace, publish) == []


def test_claiming_a_group_one_is_not_in_is_refused(
    cluster: KubeCluster, namespace: str, people: People, publish: str
) -> None:
    item = request("approve-1", "approve", ALICE, byGroups=["editors"])
    message = refusal(lambda: append(people(ALICE, "viewers"), namespace, publish, item), 403)
    assert f"spec.requests[approve-1].byGroups: every entry {MESSAGE_GROUPS_OF_WRITER}" in message
    assert "alice is not in group editors" in message


# --------------------------------------------------------------------------------------------
# Authorization: the approve verb


@pytest.mark.parametrize("action", ["approve", "reject"])
def test_deciding_an_approval_without_the_approve_verb_is_refused(
    cluster: KubeCluster, namespace: str, people: People, publish: str, action: str
) -> None:
    item = request(f"{action}-1", action, BOB)
    message = refusal(lambda: append(people(BOB), namespace, publish, item), 403)
    assert f"spec.requests[{action}-1]: {MESSAGE_APPROVE_VERB}" in message
    assert f"(user bob, workflow {namespace}/{publish})" in message
    assert requests_of(cluster, namespace, publish) == []


@pytest.mark.parametrize(
    "item",
    [
        pytest.param(request("retry-1", "retry", PAT, step="render"), id="retry"),
        pytest.param(request("complete-1", "complete", PAT, step="render", output="{}"), id="complete"),
        pytest.param(request("cancel-1", "cancel", PAT), id="cancel"),
    ],
)
def test_retry_complete_and_cancel_without_their_verb_are_refused(
    cluster: KubeCluster, namespace: str, people: People, publish: str, item: dict[str, Any]
) -> None:
    message = refusal(lambda: append(people(PAT), namespace, publish, item), 403)
    assert f"spec.requests[{item['id']}]: {MESSAGE_ACTION_VERBS[item['action']]}" in message
    assert f"(user pat, workflow {namespace}/{publish})" in message
    assert requests_of(cluster, namespace, publish) == []


def test_retry_complete_and_cancel_with_their_verbs_are_accepted(
    cluster: KubeCluster, namespace: str, people: People, publish: str
) -> None:
    items = [
        request("retry-1", "retry", BOB, step="render"),
        request("complete-1", "complete", BOB, step="render", output='{"renditions": 3}'),
        request("cancel-1", "cancel", BOB, reason="superseded"),
    ]
    for item in items:
        append(people(BOB), namespace, publish, item)
    assert requests_of(cluster, namespace, publish) == items


def test_completing_an_approval_step_needs_the_approve_verb_too(
    cluster: KubeCluster, namespace: str, people: People, publish: str
) -> None:
    """bob holds `complete` but not `approve`: completing the approval step would decide it."""
    bypass = request("complete-1", "complete", BOB, output='{"decision": "approved"}')
    message = refusal(lambda: append(people(BOB), namespace, publish, bypass), 403)
    assert f"spec.requests[complete-1]: {MESSAGE_COMPLETE_APPROVAL_VERB}" in message
    assert requests_of(cluster, namespace, publish) == []
    approved = request("complete-2", "complete", ALICE)
    append(people(ALICE), namespace, publish, approved)
    assert requests_of(cluster, namespace, publish) == [approved]


def test_a_complete_at_create_needs_approve_when_the_step_types_are_not_known_yet(
    cluster: KubeCluster, namespace: str, people: People
) -> None:
    """A definitionRef workflow's steps are known only once the operator pins them."""
    body = workflow("by-ref", requests=[request("complete-1", "complete", BOB, step="render")])
    del body["spec"]["steps"]
    body["spec"]["definitionRef"] = {"name": "video-publish", "version": 1}
    create = people(BOB).create_namespaced_custom_object
    message = refusal(lambda: create(GROUP, VERSION, namespace, "workflows", body), 403)
    assert MESSAGE_COMPLETE_APPROVAL_VERB in message


def test_requests_already_present_are_not_checked_again(
    cluster: KubeCluster, namespace: str, people: People, publish: str
) -> None:
    append(people(ALICE), namespace, publish, request("approve-1", "approve", ALICE))
    append(people(BOB), namespace, publish, request("cancel-1", "cancel", BOB))
    assert [item["id"] for item in requests_of(cluster, namespace, publish)] == ["approve-1", "cancel-1"]


def test_requests_written_at_create_are_checked_too(
    cluster: KubeCluster, namespace: str, people: People
) -> None:
    bob = people(BOB)
    create = bob.create_namespaced_custom_object
    refused = workflow("by-bob", requests=[request("approve-1", "approve", BOB)])
    assert MESSAGE_APPROVE_VERB in refusal(lambda: create(GROUP, VERSION, namespace, "workflows", refused), 403)
    forged = workflow("by-bob", requests=[request("cancel-1", "cancel", ALICE)])
    assert MESSAGE_BY_IS_WRITER in refusal(lambda: create(GROUP, VERSION, namespace, "workflows", forged), 403)
    created = create(GROUP, VERSION, namespace, "workflows", workflow("by-bob", requests=[request("cancel-1", "cancel", BOB)]))
    assert created["spec"]["requests"] == [request("cancel-1", "cancel", BOB)]


# --------------------------------------------------------------------------------------------
# The CRD: immutable items, and their shape


def test_a_written_request_cannot_be_changed_even_by_its_author(
    cluster: KubeCluster, namespace: str, people: People, publish: str
) -> None:
    alice = people(ALICE)
    append(alice, namespace, publish, request("approve-1", "approve", ALICE))
    change = [{"op": "add", "path": "/spec/requests/0/reason", "value": "second thoughts"}]

    def change_as(api: client.CustomObjectsApi) -> Callable[[], object]:
        return lambda: api.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "workflows", publish, change, _content_type=JSON_PATCH
        )

    for api in (alice, cluster.custom):
        message = refusal(change_as(api), 422)
        assert "request approve-1 cannot be changed once written; append a new request" in message
    assert requests_of(cluster, namespace, publish) == [request("approve-1", "approve", ALICE)]


@pytest.mark.parametrize(
    "operations",
    [
        pytest.param([{"op": "remove", "path": "/spec/requests/0"}], id="remove-an-item"),
        pytest.param([{"op": "replace", "path": "/spec/requests", "value": []}], id="empty-the-list"),
        pytest.param([{"op": "remove", "path": "/spec/requests"}], id="drop-the-list"),
        pytest.param(
            [{"op": "replace", "path": "/spec/requests/0", "value": request("cancel-1", "cancel", BOB)}],
            id="replace-an-item",
        ),
    ],
)
def test_a_written_request_cannot_be_removed(
    cluster: KubeCluster, namespace: str, people: People, publish: str, operations: list[dict[str, Any]]
) -> None:
    """Whoever may patch the workflow — its editor, even the admin — cannot erase who asked for what."""
    bob = people(BOB)
    written = [request("approve-1", "approve", ALICE), request("retry-1", "retry", BOB, step="render")]
    append(people(ALICE), namespace, publish, written[0])
    append(bob, namespace, publish, written[1])
    for api in (bob, cluster.custom):
        patch = functools.partial(
            api.patch_namespaced_custom_object,
            GROUP, VERSION, namespace, "workflows", publish, operations, _content_type=JSON_PATCH,
        )  # fmt: skip
        message = refusal(patch, 422)
        assert "spec.requests: Invalid value: " in message and MESSAGE_REQUESTS_APPEND_ONLY in message, message
    assert requests_of(cluster, namespace, publish) == written


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        pytest.param({"id": "r", "action": "approve"}, MESSAGE_REQUEST_NEEDS_STEP, id="approve-without-step"),
        pytest.param({"id": "r", "action": "retry", "step": "render", "output": "{}"}, MESSAGE_OUTPUT_ONLY_ON_COMPLETE, id="output-on-retry"),
        pytest.param({"id": "R_1", "action": "cancel"}, "spec.requests[0].id", id="id-not-a-dns-label"),
        pytest.param({"id": "r", "action": "resume", "step": "render"}, "spec.requests[0].action", id="unknown-action"),
    ],
)
def test_a_malformed_request_is_refused_naming_the_field(
    cluster: KubeCluster, namespace: str, publish: str, admin_name: str, item: dict[str, Any], expected: str
) -> None:
    message = refusal(lambda: append(cluster.custom, namespace, publish, {**item, "by": admin_name}), 422)
    assert expected in message


def test_the_checks_fit_the_cost_budget_at_the_longest_request_list(
    cluster: KubeCluster, namespace: str, people: People, admin_name: str
) -> None:
    """499 requests with long ids already there; the policy compares each new id against all."""
    existing = [
        request(f"request-{index:03d}-{'x' * 50}", "retry" if index % 2 else "approve", admin_name, byGroups=["system:masters"])
        for index in range(REQUESTS_MAX_ITEMS - 1)
    ]
    cluster.custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "workflows", workflow("busy", requests=existing)
    )
    append(people(ALICE), namespace, "busy", request("approve-last", "approve", ALICE))
    assert len(requests_of(cluster, namespace, "busy")) == REQUESTS_MAX_ITEMS
    message = refusal(lambda: append(people(BOB), namespace, "busy", request("cancel-1", "cancel", BOB)), 422)
    assert f"must have at most {REQUESTS_MAX_ITEMS} items" in message


# --------------------------------------------------------------------------------------------
# WorkflowDefinition: a version keeps its steps


def definition(*versions: tuple[int, list[str]]) -> dict[str, Any]:
    return {
        "versions": [
            {"version": number, "steps": [{"id": step, "type": "pod", "template": POD_TEMPLATE} for step in steps]}
            for number, steps in versions
        ]
    }


@pytest.fixture
def video_publish(cluster: KubeCluster, namespace: str) -> Callable[[dict[str, Any]], object]:
    """A WorkflowDefinition with version 1 = (probe, encode); returns a spec replacer."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WorkflowDefinition",
        "metadata": {"name": "video-publish"},
        "spec": definition((1, ["probe", "encode"])),
    }
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "workflowdefinitions", body)

    def replace_spec(spec: dict[str, Any]) -> object:
        return cluster.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "workflowdefinitions", "video-publish", {"spec": spec}
        )

    return replace_spec


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(["probe"], id="step-removed"),
        pytest.param(["probe", "encode-480"], id="step-renamed"),
    ],
)
def test_a_definition_version_cannot_lose_a_step(
    video_publish: Callable[[dict[str, Any]], object], steps: list[str]
) -> None:
    message = refusal(lambda: video_publish(definition((1, steps))), 422)
    assert f"version 1: {MESSAGE_DEFINITION_STEPS_KEPT}" in message


def test_a_definition_grows_by_new_steps_and_new_versions(
    cluster: KubeCluster, namespace: str, video_publish: Callable[[dict[str, Any]], object]
) -> None:
    video_publish(definition((1, ["probe", "encode", "notify"])))
    video_publish(definition((1, ["probe", "encode", "notify"]), (2, ["probe", "encode-480"])))
    stored = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "workflowdefinitions", "video-publish")
    assert [(v["version"], [s["id"] for s in v["steps"]]) for v in stored["spec"]["versions"]] == [
        (1, ["probe", "encode", "notify"]),
        (2, ["probe", "encode-480"]),
    ]
    video_publish(definition((2, ["probe", "encode-480"])))  # a whole version may go


# --------------------------------------------------------------------------------------------
# ScheduledJob: template or workflowTemplate


def scheduled_job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ScheduledJob",
        "metadata": {"name": "nightly"},
        "spec": {"cron": "0 2 * * *", **spec},
    }


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"template": POD_TEMPLATE, "workflowTemplate": {"steps": STEPS}}, id="both"),
        pytest.param({}, id="neither"),
        pytest.param({"template": POD_TEMPLATE, "task": {"queue": "reports", "name": "build"}}, id="template-and-task"),
        pytest.param(
            {"workflowTemplate": {"steps": STEPS}, "task": {"queue": "reports", "name": "build"}},
            id="workflow-and-task",
        ),
    ],
)
def test_a_scheduled_job_runs_exactly_one_of_template_and_workflow_template(
    cluster: KubeCluster, namespace: str, spec: dict[str, Any]
) -> None:
    message = refusal(
        lambda: cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", scheduled_job(**spec)),
        422,
    )
    assert "exactly one of template, workflowTemplate or task must be set" in message


@pytest.mark.parametrize(
    ("task", "field"),
    [
        pytest.param({"name": "build"}, "spec.task.queue", id="without-queue"),
        pytest.param({"queue": "reports"}, "spec.task.name", id="without-name"),
        pytest.param({"queue": "Reports!", "name": "build"}, "spec.task.queue", id="bad-queue-name"),
        pytest.param({"queue": "reports", "name": "build", "priority": 40000}, "spec.task.priority", id="priority"),
    ],
)
def test_a_scheduled_job_task_needs_a_queue_and_a_name(
    cluster: KubeCluster, namespace: str, task: dict[str, Any], field: str
) -> None:
    message = refusal(
        lambda: cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", scheduled_job(task=task)),
        422,
    )
    assert field in message


def test_a_scheduled_job_with_a_task_alone_is_admitted(cluster: KubeCluster, namespace: str) -> None:
    created = cluster.custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "scheduledjobs", scheduled_job(task={"queue": "reports", "name": "build"})
    )
    assert created["spec"]["task"] == {"queue": "reports", "name": "build", "priority": 0}


@pytest.mark.parametrize(
    "template",
    [
        pytest.param({"steps": STEPS, "onFailure": "compensate", "parameters": {"quality": "480"}}, id="steps"),
        pytest.param({"definitionRef": {"name": "video-publish", "version": 1}}, id="definition-ref"),
    ],
)
def test_a_scheduled_job_may_start_a_workflow(
    cluster: KubeCluster, namespace: str, template: dict[str, Any]
) -> None:
    created = cluster.custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "scheduledjobs", scheduled_job(workflowTemplate=template)
    )
    assert "template" not in created["spec"]
    assert created["spec"]["workflowTemplate"]["onFailure"] == template.get("onFailure", "fail")


def test_a_workflow_template_has_no_requests(cluster: KubeCluster, namespace: str) -> None:
    body = scheduled_job(workflowTemplate={"steps": STEPS, "requests": [{"id": "r", "action": "cancel", "by": "x"}]})
    message = refusal(
        lambda: cluster.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "scheduledjobs", body, field_validation="Strict"
        ),
        400,
    )
    assert 'unknown field "spec.workflowTemplate.requests"' in message
