"""Who may decide an approval, whatever path the decision takes: attacks that must fail.

Against the real API server, with the chart's own RBAC for people (rbac-users.yaml rendered by
helm: the aggregated `edit` role and the `-workflow-approver` role), the workflow-requests
admission policy, and operators running under the chart's ServiceAccount. People act through
impersonation:

* bob holds the built-in `edit` role in the namespace (the chart's `-edit` role aggregates into
  it): he writes workflows and reads the namespace's Secrets, but holds no `approve`;
* alice and carol hold `edit` and the chart's approver role (`approve`, `complete`), and are
  named approvers of the step;
* mallory is a named approver with only `edit`; dave holds the approver role but is named
  nowhere; erin is a named approver whose token is delivered but who holds no `approve`.

Item by item (issue 11):

1. `complete` on an approval step: bob is refused at admission (it needs `approve`), so is
   mallory; dave passes admission and the operator refuses him (`RequestRefused`,
   `NotAnApprover`); alice completes it and the workflow goes on. The policy finds the step's
   type in the pinned definition of a definitionRef workflow too, and bob still completes a
   stuck pod step.
2. Tokens: none is in any Secret bob can read, in his namespace or the operator's. They reach
   a notifier webhook (a test HTTP server here), one per named approver, each bound to that
   approver: carol's token cannot record a decision in anyone else's name, erin's is refused
   for want of the verb, and carol's own decides the step as `carol`. A token lasts the step's
   timeout. After a key rotation the previous key's tokens still decide during the overlap.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.integration.approvals import Callback, Notifier, start_with_api
from tests.integration.conftest import REPO, KubeCluster
from tests.integration.operators import OperatorFleet
from tests.integration.workflows import (
    GROUP,
    VERSION,
    append_request,
    create_workflow,
    events_of,
    get_workflow,
    history,
    pod_step,
    wait_phase,
    wait_step,
)
from tests.waiting import wait_for

#: The release the chart's people roles are rendered for (apart from other tests' names).
RELEASE = "trust"
KEY_SECRET = "vigil-approval-key"

People = Callable[[str], client.ApiClient]


# --------------------------------------------------------------------------------------------
# People and their RBAC: the chart's roles


@pytest.fixture(scope="module")
def chart_roles(cluster: KubeCluster) -> Iterator[dict[str, str]]:
    """The chart's rbac-users.yaml (view, edit aggregated into the built-in roles; approver)."""
    rendered = cluster.helm(
        "template", RELEASE, str(REPO / "helm" / "vigil"), "--show-only", "templates/rbac-users.yaml"
    ).stdout
    roles = [item for item in yaml.safe_load_all(rendered) if item]
    cluster.kubectl("apply", "-f", "-", input=rendered)
    names = {item["metadata"]["name"].rsplit("-", 1)[-1]: item["metadata"]["name"] for item in roles}
    yield names
    for item in roles:
        cluster.kubectl("delete", "clusterrole", item["metadata"]["name"], "--ignore-not-found")


def bind(cluster: KubeCluster, namespace: str, user: str, cluster_role: str) -> None:
    client.RbacAuthorizationV1Api(cluster.api).create_namespaced_role_binding(namespace, {
        "metadata": {"name": f"{user}-{cluster_role}"[:63]},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    })  # fmt: skip


def allowed(cluster: KubeCluster, user: str, verb: str, namespace: str, resource: str = "workflows") -> bool:
    group = GROUP if resource == "workflows" else ""
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            resource_attributes=client.V1ResourceAttributes(
                group=group, resource=resource, verb=verb, namespace=namespace
            ),
        )
    )
    return bool(client.AuthorizationV1Api(cluster.api).create_subject_access_review(review).status.allowed)


@pytest.fixture
def people(cluster: KubeCluster, namespace: str, chart_roles: dict[str, str]) -> Iterator[People]:
    """bob, mallory, erin: `edit`; alice, carol: `edit` + approver; dave: approver only."""
    for user in ("alice", "bob", "carol", "mallory", "erin"):
        bind(cluster, namespace, user, "edit")
    for user in ("alice", "carol", "dave"):
        bind(cluster, namespace, user, chart_roles["approver"])
    wait_for(
        lambda: allowed(cluster, "bob", "patch", namespace)
        and allowed(cluster, "bob", "list", namespace, "secrets")
        and allowed(cluster, "carol", "approve", namespace),
        timeout=60,
        what="the chart's roles to be aggregated and bound",
    )
    with cluster.impersonating() as as_user:
        yield as_user


def refused_at_admission(call: Callable[[], object]) -> str:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 403, info.value.body
    return str(json.loads(info.value.body)["message"])


# --------------------------------------------------------------------------------------------
# 1. complete on an approval step


def approval(step_id: str, *approvers: str, **extra: Any) -> dict[str, Any]:
    return {"id": step_id, "type": "approval", "approval": {"approvers": list(approvers)}, **extra}


def test_completing_an_approval_step_needs_an_approver_holding_approve(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet, people: People
) -> None:
    fleet.start()
    fleet.leader()
    steps = [approval("approve", "user:alice", "user:mallory"), pod_step("ship", "approve")]
    create_workflow(cluster, namespace, "release", steps=steps)
    wait_step(cluster, namespace, "release", "approve", "Running")

    def complete(user: str) -> Callable[[], object]:
        return lambda: append_request(
            people(user), namespace, "release", action="complete", step="approve", by=user, output='{"ok": true}'
        )

    for user in ("bob", "mallory"):  # an editor; a named approver without the verb
        message = refused_at_admission(complete(user))
        assert "completing an approval step needs the 'approve' verb" in message, message
        assert f"user {user}, workflow {namespace}/release" in message

    complete("dave")()  # holds approve and complete, but is not an approver of this step
    refusal = wait_for(
        lambda: events_of(get_workflow(cluster, namespace, "release"), "RequestRefused"),
        timeout=60,
        what="dave's completion refused by the operator",
    )
    assert [(r["reason"], r["by"]) for r in refusal] == [("NotAnApprover", "dave")]
    obj = get_workflow(cluster, namespace, "release")
    assert obj["status"]["steps"]["approve"]["phase"] == "Running"
    assert obj["status"]["steps"]["ship"]["phase"] == "Pending"

    complete("alice")()
    done = wait_phase(cluster, namespace, "release", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["steps"]["approve"]["decidedBy"] == "alice"
    refused_ids = {r["request"] for r in events_of(done, "RequestRefused")}
    assert [e["by"] for e in events_of(done, "CompletedManually") if e["request"] not in refused_ids] == ["alice"]


def test_the_policy_reads_the_step_type_from_the_pinned_definition(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet, people: People
) -> None:
    steps = [pod_step("stuck", command="sleep 3600"), approval("approve", "user:alice", dependsOn=["stuck"])]
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "workflowdefinitions", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "WorkflowDefinition", "metadata": {"name": "gated"},
        "spec": {"versions": [{"version": 1, "steps": steps}]},
    })  # fmt: skip
    fleet.start()
    fleet.leader()
    bob = people("bob")
    create_workflow(cluster, namespace, "from-def", definitionRef={"name": "gated", "version": 1})
    wait_step(cluster, namespace, "from-def", "stuck", "Running")

    append_request(bob, namespace, "from-def", action="complete", step="stuck", by="bob", output='{"n": 1}')
    wait_step(cluster, namespace, "from-def", "approve", "Running")  # bob may finish a stuck pod step
    message = refused_at_admission(
        lambda: append_request(bob, namespace, "from-def", action="complete", step="approve", by="bob")
    )
    assert "completing an approval step needs the 'approve' verb" in message

    append_request(people("alice"), namespace, "from-def", action="complete", step="approve", by="alice")
    done = wait_phase(cluster, namespace, "from-def", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert [e["by"] for e in events_of(done, "CompletedManually")] == ["bob", "alice"]


# --------------------------------------------------------------------------------------------
# 2. tokens: delivered to a notifier, bound to one approver


@pytest.fixture
def notifier() -> Iterator[Notifier]:
    receiver = Notifier()
    yield receiver
    receiver.close()


def start_leader_with_api(fleet: OperatorFleet) -> Callback:
    callback = start_with_api(fleet)
    fleet.leader()
    return callback


NotifiedFleet = Callable[..., OperatorFleet]


@pytest.fixture
def notified_fleet(
    cluster: KubeCluster, tmp_path: Path, notifier: Notifier, request: pytest.FixtureRequest
) -> Iterator[NotifiedFleet]:
    """Operators whose approval tokens go to `notifier` (keys re-read every second), plus `approvals`."""
    made: list[OperatorFleet] = []

    def make(**approvals: Any) -> OperatorFleet:
        settings = {"notifier": {"url": notifier.url, "timeoutSeconds": 5}, "keyRefreshSeconds": 1, "recheckSeconds": 2}
        fleet = OperatorFleet(cluster, tmp_path, approvals={**settings, **approvals}, workflows={"rescanSeconds": 2})
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        fleet.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(fleet.logs())
        cluster.clear_namespace(fleet.namespace)


def secret_texts(api: client.ApiClient, namespace: str) -> list[str]:
    """Every value of every Secret `api` can list in `namespace`, decoded."""
    secrets = client.CoreV1Api(api).list_namespaced_secret(namespace).items
    return [base64.b64decode(value).decode(errors="replace") for s in secrets for value in (s.data or {}).values()]


def test_an_author_reading_the_secrets_of_their_namespace_finds_no_token(
    cluster: KubeCluster, namespace: str, notified_fleet: NotifiedFleet, notifier: Notifier, people: People
) -> None:
    fleet = notified_fleet()
    start_leader_with_api(fleet)
    bob = people("bob")
    client.CustomObjectsApi(bob).create_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Workflow", "metadata": {"name": "bobs"},
        "spec": {"steps": [approval("approve", "user:carol", timeout="1h"), pod_step("ship", "approve")]},
    })  # fmt: skip
    wait_step(cluster, namespace, "bobs", "approve", "Running")
    token = notifier.token_for("user:carol", workflow="bobs")["token"]

    assert not any(token in text or token.split(".")[1] in text for text in secret_texts(bob, namespace))
    labelled = client.CoreV1Api(bob).list_namespaced_secret(
        namespace, label_selector="app.kubernetes.io/managed-by=vigil-approvals"
    )
    assert labelled.items == []
    with pytest.raises(ApiException) as denied:  # nor in the operator's namespace
        client.CoreV1Api(bob).list_namespaced_secret(fleet.namespace)
    assert denied.value.status == 403
    assert all(token not in text for text in secret_texts(cluster.api, fleet.namespace))


def test_a_token_is_bound_to_one_approver_who_must_hold_the_verb(
    cluster: KubeCluster, namespace: str, notified_fleet: NotifiedFleet, notifier: Notifier, people: People
) -> None:
    callback = start_leader_with_api(notified_fleet())
    steps = [approval("approve", "user:carol", "user:erin", timeout="1h"), pod_step("ship", "approve")]
    create_workflow(cluster, namespace, "bound", steps=steps)
    waiting = wait_step(cluster, namespace, "bound", "approve", "Running")
    carols = notifier.token_for("user:carol", workflow="bound")
    erins = notifier.token_for("user:erin", workflow="bound")
    assert carols["token"] != erins["token"]
    assert carols["expires"] == waiting["status"]["steps"]["approve"]["deadline"]  # the timeout, not a week
    assert carols["approveURL"] == f"/approvals/{carols['token']}/approve"
    before = history(get_workflow(cluster, namespace, "bound"))

    for impostor in ("mallory", "erin", "user:erin", "token"):
        status, body = callback.post(f"/approvals/{carols['token']}/approve", {"by": impostor})
        assert (status, body["reason"]) == (403, "IdentityMismatch"), body
    status, body = callback.post(f"/approvals/{erins['token']}/approve")  # erin lacks `approve`
    assert (status, body["reason"]) == (403, "NotAuthorized"), body
    assert history(get_workflow(cluster, namespace, "bound")) == before

    status, body = callback.post(f"/approvals/{carols['token']}/approve", {"by": "carol", "reason": "ok"})
    assert status == 200, body
    assert body["by"] == "carol"
    done = wait_phase(cluster, namespace, "bound", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    [approved] = events_of(done, "Approved")
    assert (approved["by"], approved["via"], approved["approver"]) == ("carol", "token", "user:carol")
    assert done["status"]["steps"]["approve"]["decidedBy"] == "carol"


def test_after_a_key_rotation_the_previous_keys_tokens_decide_during_the_overlap(
    cluster: KubeCluster, namespace: str, notified_fleet: NotifiedFleet, notifier: Notifier, people: People
) -> None:
    fleet = notified_fleet(keyRotation={"period": "30s", "overlap": "1h"})
    callback = start_leader_with_api(fleet)
    create_workflow(cluster, namespace, "slow", steps=[approval("approve", "user:carol", timeout="1h")])
    wait_step(cluster, namespace, "slow", "approve", "Running")
    first = notifier.token_for("user:carol", workflow="slow")

    def rotated() -> bool:
        secret = cluster.core.read_namespaced_secret(KEY_SECRET, fleet.namespace)
        return "previous" in (secret.data or {})

    wait_for(rotated, timeout=90, what="the signing key to rotate")
    second = notifier.token_for("user:carol", workflow="slow", not_in=(first["token"],))
    assert second["id"] != first["id"]  # a new token, signed with the new key, was delivered
    status, body = callback.post(f"/approvals/{first['token']}/reject", {"reason": "old link"})
    assert status == 200, body
    done = wait_phase(cluster, namespace, "slow", "Failed", "Succeeded")
    assert done["status"]["steps"]["approve"]["decidedBy"] == "carol"
