"""The approval callback through real operator processes on the real API server.

A Workflow runs a pod step, then waits on an approval step whose approver alice holds the RBAC
verb `approve`: the leader creates the signing key Secret and sends alice's token to the
notifier (a webhook served by the test); a tampered and an expired token POSTed to a
*standby's* HTTP API get 403 and change nothing; alice's token approves the step through that
standby, the workflow succeeds, and its history records the decision in alice's name with
`via: token`. A replayed token gets 409. Then, for an approval-only workflow: a token of a
deleted and re-created workflow of the same name gets 404, and deleting the key Secret (the
emergency rotation) refuses old tokens at once (403) while the leader sends a new one that
works. Last, an escalation sends a token to the approver it adds, at level 1, and the token
alice got at level 0 still decides.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.integration.approvals import Callback, Notifier, start_with_api
from tests.integration.conftest import KubeCluster
from tests.integration.operators import OperatorFleet
from tests.integration.workflows import (
    GROUP,
    VERSION,
    WORKFLOWS,
    create_workflow,
    events_of,
    get_workflow,
    history,
    pod_step,
    wait_phase,
    wait_step,
)
from tests.waiting import wait_for
from vigil.core.approvaltokens import mint

KEY_SECRET = "vigil-approval-key"


class Replicas:
    """Operator processes of one fleet whose tokens go to one notifier, each with its HTTP API."""

    def __init__(self, fleet: OperatorFleet, notifier: Notifier) -> None:
        self.fleet = fleet
        self.notifier = notifier

    def leader_and_standby(self) -> tuple[Callback, Callback]:
        leader = start_with_api(self.fleet)
        assert self.fleet.leader().name == leader.process.name
        return leader, start_with_api(self.fleet)


@pytest.fixture
def replicas(cluster: KubeCluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Replicas]:
    """Keys re-read every second, workflows rescanned and rechecked every 2 s; a notifier."""
    notifier = Notifier()
    fleet = OperatorFleet(
        cluster,
        tmp_path,
        approvals={"keyRefreshSeconds": 1, "recheckSeconds": 2, "notifier": {"url": notifier.url}},
        workflows={"rescanSeconds": 2},
    )
    yield Replicas(fleet, notifier)
    fleet.stop()
    notifier.close()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(fleet.logs())
    cluster.clear_namespace(fleet.namespace)


def may_approve(cluster: KubeCluster, namespace: str, *users: str) -> None:
    """A Role with the verb `approve` on workflows, bound to `users`."""
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "approvers"},
        "rules": [{"apiGroups": [GROUP], "resources": [WORKFLOWS], "verbs": ["approve"]}],
    })  # fmt: skip
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "approvers"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "approvers"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user} for user in users],
    })  # fmt: skip


def approval_step(*deps: str) -> dict[str, Any]:
    step: dict[str, Any] = {
        "id": "approve",
        "type": "approval",
        "approval": {"approvers": ["user:alice"]},
        "timeout": "1h",
    }
    if deps:
        step["dependsOn"] = list(deps)
    return step


def signing_key(cluster: KubeCluster, fleet: OperatorFleet) -> bytes:
    secret = cluster.core.read_namespaced_secret(KEY_SECRET, fleet.namespace)
    return base64.b64decode(secret.data["key"])


def tampered(token: str) -> str:
    payload, signature = token.split(".")
    flipped = "B" if payload[5] != "B" else "C"
    return f"{payload[:5]}{flipped}{payload[6:]}.{signature}"


def test_a_posted_token_approves_the_step_through_a_standby_and_the_workflow_succeeds(
    cluster: KubeCluster, namespace: str, replicas: Replicas
) -> None:
    may_approve(cluster, namespace, "alice")
    _, standby = replicas.leader_and_standby()
    create_workflow(
        cluster, namespace, "publish", steps=[pod_step("build"), approval_step("build"), pod_step("ship", "approve")]
    )
    waiting = wait_step(cluster, namespace, "publish", "approve", "Running")
    sent = replicas.notifier.token_for("user:alice", workflow="publish")
    token = sent["token"]
    assert (sent["approveURL"], sent["rejectURL"]) == (f"/approvals/{token}/approve", f"/approvals/{token}/reject")
    assert (sent["namespace"], sent["uid"], sent["step"], sent["attempt"]) == (
        namespace, waiting["metadata"]["uid"], "approve", 1,
    )  # fmt: skip

    before = history(get_workflow(cluster, namespace, "publish"))
    expired = mint(
        signing_key(cluster, replicas.fleet),
        namespace=namespace,
        workflow="publish",
        uid=waiting["metadata"]["uid"],
        step="approve",
        approver="user:alice",
        level=0,
        expires=datetime.now(UTC) - timedelta(seconds=1),
    )
    for bad, reason in ((tampered(token), "BadSignature"), (expired, "Expired")):
        status, body = standby.post(f"/approvals/{bad}/approve")
        assert (status, body["reason"]) == (403, reason), body
    assert history(get_workflow(cluster, namespace, "publish")) == before

    status, body = standby.post(f"/approvals/{token}/approve", {"by": "alice", "reason": "TICKET-7"})
    assert status == 200, body
    assert (body["decision"], body["by"], body["approver"]) == ("approved", "alice", "user:alice")

    done = wait_phase(cluster, namespace, "publish", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    [approved] = events_of(done, "Approved")
    assert (approved["by"], approved["via"], approved["tokenLevel"], approved["reason"]) == (
        "alice", "token", 0, "TICKET-7",
    )  # fmt: skip
    assert done["status"]["steps"]["approve"]["decidedBy"] == "alice"

    status, body = standby.post(f"/approvals/{token}/reject")
    assert (status, body["reason"]) == (409, "StepNotWaiting")
    assert len(events_of(get_workflow(cluster, namespace, "publish"), "Approved", "Rejected")) == 1


def test_tokens_die_with_their_workflow_instance_and_with_a_deleted_key(
    cluster: KubeCluster, namespace: str, replicas: Replicas
) -> None:
    may_approve(cluster, namespace, "alice")
    leader, _ = replicas.leader_and_standby()
    create_workflow(cluster, namespace, "gate", steps=[approval_step()])
    first = replicas.notifier.token_for("user:alice", workflow="gate")

    cluster.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, WORKFLOWS, "gate")
    wait_for(
        lambda: not any(w["metadata"]["name"] == "gate" for w in cluster.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, WORKFLOWS
        )["items"]),
        timeout=60,
        what="workflow gate deleted",
    )
    create_workflow(cluster, namespace, "gate", steps=[approval_step()])
    # The engine reports no pass for a workflow's first (starting) pass, so the new instance's
    # token comes from the publisher's recheck (every 2 s here) rather than from its StepStarted.
    again = wait_step(cluster, namespace, "gate", "approve", "Running")
    second = replicas.notifier.token_for("user:alice", workflow="gate", not_in=(first["token"],))
    assert second["uid"] == again["metadata"]["uid"] != first["uid"]
    status, body = leader.post(f"/approvals/{first['token']}/approve")
    assert (status, body["reason"]) == (404, "WorkflowNotFound"), body

    old_key = signing_key(cluster, replicas.fleet)
    cluster.core.delete_namespaced_secret(KEY_SECRET, replicas.fleet.namespace)
    rotated = replicas.notifier.token_for("user:alice", workflow="gate", not_in=(first["token"], second["token"]))
    assert signing_key(cluster, replicas.fleet) != old_key
    status, body = leader.post(f"/approvals/{second['token']}/approve")
    assert (status, body["reason"]) == (403, "BadSignature"), body  # no overlap: the old key is gone
    status, body = leader.post(f"/approvals/{rotated['token']}/reject", {"reason": "not this week"})
    assert status == 200, body
    done = wait_phase(cluster, namespace, "gate", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Failed"
    assert events_of(done, "Rejected")[0]["by"] == "alice"


def test_an_escalation_sends_the_added_approver_a_token_and_the_first_still_decides(
    cluster: KubeCluster, namespace: str, replicas: Replicas
) -> None:
    may_approve(cluster, namespace, "alice", "lead")
    leader, _ = replicas.leader_and_standby()
    step = approval_step()
    step.update(timeout="3s", onTimeout="escalate")
    step["approval"]["escalation"] = [{"after": "1h", "approvers": ["user:lead"]}]
    create_workflow(cluster, namespace, "escalating", steps=[step])
    first = replicas.notifier.token_for("user:alice", workflow="escalating")
    assert (first["level"], first["approvers"]) == (0, ["user:alice"])

    leads = replicas.notifier.token_for("user:lead", workflow="escalating")
    assert (leads["level"], leads["approvers"]) == (1, ["user:alice", "user:lead"])
    assert [n["approver"] for n in replicas.notifier.received if n["workflow"] == "escalating"].count("user:alice") == 1
    status, body = leader.post(f"/approvals/{first['token']}/approve")
    assert (status, body["tokenLevel"], body["by"]) == (200, 0, "alice"), body
    done = wait_phase(cluster, namespace, "escalating", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert events_of(done, "Approved")[0]["tokenLevel"] == 0
