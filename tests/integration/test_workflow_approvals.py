"""Approvals end to end: the reference's video_publish workflow on the real API server.

probe -> encode_480 -> approve (a 72 h timeout that escalates, here in seconds). Users are
impersonated by the admin client; their rights come from real RBAC Roles, and the
admission policy the chart installs checks both the author and the `approve` verb.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import KubeCluster
from tests.integration.operators import OperatorFleet
from tests.integration.workflows import (
    append_request,
    create_workflow,
    emit,
    events_of,
    get_workflow,
    pod_step,
    wait_phase,
    wait_step,
)
from tests.waiting import wait_for


def video_publish(*, timeout: str, approvers: list[str], escalation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        pod_step("probe", command=emit({"duration": 61})),
        pod_step("encode_480", "probe", command=emit({"rendition": "480p"})),
        {
            "id": "approve",
            "type": "approval",
            "dependsOn": ["encode_480"],
            "timeout": timeout,
            "onTimeout": "escalate",
            "approval": {"approvers": approvers, "escalation": escalation},
        },
    ]


def grant(cluster: KubeCluster, namespace: str, user: str, verbs: list[str]) -> None:
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    name = f"wf-{user}"
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": name},
        "rules": [{"apiGroups": ["vigil.dev"], "resources": ["workflows"], "verbs": verbs}],
    })  # fmt: skip
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    })  # fmt: skip


@pytest.fixture
def as_user(cluster: KubeCluster) -> Iterator[Any]:
    """An API client acting as a user (impersonated by the admin)."""
    with cluster.impersonating() as impersonate:
        yield impersonate


def approve_as(api: client.ApiClient, namespace: str, name: str, user: str, **extra: Any) -> None:
    append_request(api, namespace, name, action="approve", step="approve", by=user, **extra)


def test_an_authorized_approver_completes_video_publish_and_others_are_refused(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet, as_user: Any
) -> None:
    grant(cluster, namespace, "alice", ["get", "list", "watch", "patch", "approve"])
    grant(cluster, namespace, "bob", ["get", "list", "watch", "patch"])
    grant(cluster, namespace, "mallory", ["get", "list", "watch", "patch", "approve"])
    fleet.start()
    fleet.leader()
    create_workflow(cluster, namespace, "video", steps=video_publish(timeout="72h", approvers=["user:alice"], escalation=[]))
    wait_step(cluster, namespace, "video", "approve", "Running")

    with pytest.raises(ApiException) as refused:
        approve_as(as_user("bob"), namespace, "video", "bob")
    assert refused.value.status in (403, 422)
    assert "'approve' verb" in str(refused.value.body)

    approve_as(as_user("mallory"), namespace, "video", "mallory", reason="me too")
    refusal = wait_for(
        lambda: events_of(get_workflow(cluster, namespace, "video"), "RequestRefused"),
        timeout=60,
        what="mallory's approval refused",
    )
    assert refusal[0]["reason"] == "NotAnApprover" and refusal[0]["by"] == "mallory"

    approve_as(as_user("alice"), namespace, "video", "alice", reason="ship it")
    done = wait_phase(cluster, namespace, "video", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    turned_down = {r["request"] for r in events_of(done, "RequestRefused")}
    approved = [a for a in events_of(done, "Approved") if a["request"] not in turned_down]
    assert [(a["by"], a["reason"]) for a in approved] == [("alice", "ship it")]
    assert done["status"]["steps"]["approve"]["decidedBy"] == "alice"


def test_a_timed_out_approval_escalates_and_the_escalated_approver_approves(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet, as_user: Any
) -> None:
    grant(cluster, namespace, "carol", ["get", "list", "watch", "patch", "approve"])
    fleet.start()
    fleet.leader()
    steps = video_publish(
        timeout="8s", approvers=["user:alice"], escalation=[{"after": "120s", "approvers": ["user:carol"]}]
    )
    create_workflow(cluster, namespace, "video", steps=steps)
    wait_step(cluster, namespace, "video", "approve", "Running")
    approve_as(as_user("carol"), namespace, "video", "carol")  # not yet one of the approvers
    refused = wait_for(
        lambda: events_of(get_workflow(cluster, namespace, "video"), "RequestRefused"),
        timeout=30,
        what="carol's early approval refused",
    )
    assert [r["by"] for r in refused] == ["carol"] and refused[0]["reason"] == "NotAnApprover"
    escalated = wait_for(
        lambda: events_of(get_workflow(cluster, namespace, "video"), "Escalated"),
        timeout=60,
        what="the approval escalated",
    )
    assert escalated[0]["level"] == 1 and "user:carol" in escalated[0]["approvers"]

    approve_as(as_user("carol"), namespace, "video", "carol", reason="covering for alice")
    done = wait_phase(cluster, namespace, "video", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["steps"]["approve"]["decidedBy"] == "carol"
    reasons = {e.reason for e in cluster.core.list_namespaced_event(namespace).items}
    assert "ApprovalEscalated" in reasons


def test_an_unknown_on_exhausted_outcome_is_refused_at_admission(cluster: KubeCluster, namespace: str) -> None:
    steps = video_publish(timeout="1h", approvers=["user:alice"], escalation=[{"after": "1h", "approvers": ["user:carol"]}])
    steps[2]["approval"]["onExhausted"] = "later"
    with pytest.raises(ApiException) as refused:
        create_workflow(cluster, namespace, "video", steps=steps)
    assert refused.value.status == 422
    body = str(refused.value.body).replace('\\"', '"')
    assert "spec.steps[2].approval.onExhausted" in body
    assert 'supported values: "fail", "skip", "approve"' in body
