"""The approval callback through real operator processes on the real API server.

A Workflow runs a pod step, then waits on an approval step: the leader creates the signing
key Secret and publishes the step's token Secret (owned by the Workflow); a tampered and an
expired token POSTed to a *standby's* HTTP API get 403 and change nothing; the published
token approves the step through that standby, the workflow succeeds, and its history records
`by: token:<name>`. A replayed token gets 409. Then, for an approval-only workflow: a token of
a deleted and re-created workflow of the same name gets 404, and deleting the key Secret
rotates the key — old tokens get 403 and the leader republishes a token that works. Last, an
escalation rewrites the token Secret at level 1, and the level-0 token still approves.
"""

from __future__ import annotations

import base64
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Replicas:
    """Operator processes of one fleet, each serving the HTTP API on a port of its own."""

    def __init__(self, fleet: OperatorFleet) -> None:
        self.fleet = fleet
        self.ports: dict[str, int] = {}

    def start(self) -> str:
        port = free_port()
        config = yaml.safe_load(self.fleet.config.read_text())
        config["http"]["apiPort"] = port
        per_process = self.fleet.workdir / f"operator-{port}.yaml"
        per_process.write_text(yaml.safe_dump(config))
        shared, self.fleet.config = self.fleet.config, per_process
        try:
            name = self.fleet.start().name
        finally:
            self.fleet.config = shared
        self.ports[name] = port
        wait_for(lambda: self.healthy(name), timeout=60, what=f"{name} serving HTTP")
        return name

    def healthy(self, name: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[name]}/healthz", timeout=2):
                return True
        except OSError:
            return False

    def post(self, name: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else b""
        request = urllib.request.Request(f"http://127.0.0.1:{self.ports[name]}{path}", data=data, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            with error:
                return error.code, json.loads(error.read())


@pytest.fixture
def replicas(cluster: KubeCluster, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Replicas]:
    """A leader and a standby: keys re-read every second, workflows rescanned and rechecked every 2 s."""
    fleet = OperatorFleet(
        cluster,
        tmp_path,
        approvals={"keyRefreshSeconds": 1, "recheckSeconds": 2},
        workflows={"rescanSeconds": 2},
    )
    started = Replicas(fleet)
    yield started
    fleet.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(fleet.logs())
    cluster.clear_namespace(fleet.namespace)


def leader_and_standby(replicas: Replicas) -> tuple[str, str]:
    first = replicas.start()
    leader = replicas.fleet.leader().name
    assert leader == first
    return leader, replicas.start()


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


def token_secret(cluster: KubeCluster, namespace: str, name: str) -> dict[str, str]:
    """The decoded data of the token Secret, once it exists."""

    def published() -> dict[str, str] | None:
        try:
            secret = cluster.core.read_namespaced_secret(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        data = {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
        data["ownerUid"] = secret.metadata.owner_references[0].uid
        return data

    return wait_for(published, timeout=60, what=f"Secret {namespace}/{name}")


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
    _, standby = leader_and_standby(replicas)
    create_workflow(
        cluster, namespace, "publish", steps=[pod_step("build"), approval_step("build"), pod_step("ship", "approve")]
    )
    waiting = wait_step(cluster, namespace, "publish", "approve", "Running")
    published = token_secret(cluster, namespace, "publish-approval-approve")
    token = published["token"]
    assert published["approveURL"] == f"/approvals/{token}/approve"
    assert published["rejectURL"] == f"/approvals/{token}/reject"
    assert published["ownerUid"] == waiting["metadata"]["uid"]

    before = history(get_workflow(cluster, namespace, "publish"))
    expired = mint(
        signing_key(cluster, replicas.fleet),
        namespace=namespace,
        workflow="publish",
        uid=waiting["metadata"]["uid"],
        step="approve",
        level=0,
        expires=datetime.now(UTC) - timedelta(seconds=1),
    )
    for bad, reason in ((tampered(token), "BadSignature"), (expired, "Expired")):
        status, body = replicas.post(standby, f"/approvals/{bad}/approve", {"by": "mallory"})
        assert (status, body["reason"]) == (403, reason), body
    assert history(get_workflow(cluster, namespace, "publish")) == before

    status, body = replicas.post(standby, f"/approvals/{token}/approve", {"by": "jira-bot", "reason": "TICKET-7"})
    assert status == 200, body
    assert (body["decision"], body["by"]) == ("approved", "token:jira-bot")

    done = wait_phase(cluster, namespace, "publish", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    [approved] = events_of(done, "Approved")
    assert approved["by"] == "token:jira-bot"
    assert (approved["via"], approved["tokenLevel"], approved["reason"]) == ("token", 0, "TICKET-7")
    assert done["status"]["steps"]["approve"]["decidedBy"] == "token:jira-bot"

    status, body = replicas.post(standby, f"/approvals/{token}/reject")
    assert (status, body["reason"]) == (409, "StepNotWaiting")
    assert len(events_of(get_workflow(cluster, namespace, "publish"), "Approved", "Rejected")) == 1


def test_tokens_die_with_their_workflow_instance_and_with_a_rotated_key(
    cluster: KubeCluster, namespace: str, replicas: Replicas
) -> None:
    leader, _ = leader_and_standby(replicas)
    create_workflow(cluster, namespace, "gate", steps=[approval_step()])
    first = token_secret(cluster, namespace, "gate-approval-approve")

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
    second = wait_for(
        lambda: (s := token_secret(cluster, namespace, "gate-approval-approve"))["ownerUid"] == again["metadata"]["uid"]
        and s,
        timeout=60,
        what="the re-created workflow's token",
    )
    status, body = replicas.post(leader, f"/approvals/{first['token']}/approve")
    assert (status, body["reason"]) == (404, "WorkflowNotFound"), body

    old_key = signing_key(cluster, replicas.fleet)
    cluster.core.delete_namespaced_secret(KEY_SECRET, replicas.fleet.namespace)
    rotated = wait_for(
        lambda: (s := token_secret(cluster, namespace, "gate-approval-approve"))["token"] != second["token"] and s,
        timeout=60,
        what="a token signed with the new key",
    )
    assert signing_key(cluster, replicas.fleet) != old_key
    status, body = replicas.post(leader, f"/approvals/{second['token']}/approve")
    assert (status, body["reason"]) == (403, "BadSignature"), body
    status, body = replicas.post(leader, f"/approvals/{rotated['token']}/reject", {"reason": "not this week"})
    assert status == 200, body
    done = wait_phase(cluster, namespace, "gate", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Failed"
    assert events_of(done, "Rejected")[0]["by"] == "token"


def test_a_token_minted_before_an_escalation_still_decides_and_the_secret_shows_the_new_level(
    cluster: KubeCluster, namespace: str, replicas: Replicas
) -> None:
    leader, _ = leader_and_standby(replicas)
    step = approval_step()
    step.update(timeout="3s", onTimeout="escalate")
    step["approval"]["escalation"] = [{"after": "1h", "approvers": ["user:lead"]}]
    create_workflow(cluster, namespace, "escalating", steps=[step])
    first = token_secret(cluster, namespace, "escalating-approval-approve")

    def escalated() -> bool:
        secret = cluster.core.read_namespaced_secret("escalating-approval-approve", namespace)
        return secret.metadata.annotations.get("vigil.dev/level") == "1"

    wait_for(escalated, timeout=60, what="the token Secret at level 1")
    assert token_secret(cluster, namespace, "escalating-approval-approve")["token"] != first["token"]
    status, body = replicas.post(leader, f"/approvals/{first['token']}/approve", {"by": "bot"})
    assert (status, body["tokenLevel"]) == (200, 0), body
    done = wait_phase(cluster, namespace, "escalating", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert events_of(done, "Approved")[0]["tokenLevel"] == 0
