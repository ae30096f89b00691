"""`kubectl vigil` workflow verbs as a real kubectl plugin, against the local control plane.

No operator runs. The request verbs are run with `--no-wait` to check what they
append to `spec.requests` — one item each, signed with the caller's user name
and groups as a SelfSubjectReview gives them, through the workflow-requests
admission policy the session fixture applies — and what they refuse before
writing anything (output that is not JSON, a step the workflow does not have,
a workflow that does not exist). A service account with only get and patch on
workflows shows admission's refusal of an approve without the `approve` verb and of
a retry without the `retry` verb, each printed as one line with exit 1 and a hint
naming the role that grants it; the account retries once it holds `retry`, and
approves once it holds `approve`. Waiting is checked by running one pass of the operator's own
workflow engine in the test, between the append and the verb's answer: an
approval recorded, an approval refused (exit 1), a request nobody records
(exit 1 after --timeout). An append after a stale read meets the API server's
bare 422 for a failed JSON Patch test, reads again and appends once. `timeline` reads a status written through the status
subresource, with a history recorded by the pure orchestrator.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from tests.integration.conftest import KubeCluster
from tests.integration.test_cli import SCRIPTS, kubectl_plugin
from tests.integration.workflows import watch_brings
from tests.unit.workflowsim import World
from tests.waiting import wait_for
from vigil.cli.cluster import Cluster, Identity
from vigil.cli.errors import EXIT_API_FAILURE, EXIT_BAD_INPUT
from vigil.cli.timeline import EVENT_COLUMNS, STEP_COLUMNS
from vigil.cli.workflows import Ask, append_request, request_item
from vigil.core.timeparse import parse_rfc3339
from vigil.core.workflow import Event
from vigil.kube.controllers.workflowapi import WorkflowApi
from vigil.kube.controllers.workflows import WorkflowEngine
from vigil.model.workflow import MESSAGE_ACTION_VERBS, MESSAGE_APPROVE_VERB, RequestAction
from vigil.model.workflowspec import definition_of

GROUP, VERSION, WORKFLOWS = "vigil.dev", "v1alpha1", "workflows"
REQUEST_ID = re.compile(r"^r-[a-z2-7]{10}$")
NO_WAIT_LINE = re.compile(r"^requested: (.+) \(request (r-[a-z2-7]{10}); not waiting for the operator\)$")
POD_TEMPLATE = {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}}


class WallClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


def whoami(api: client.ApiClient) -> tuple[str, list[str]]:
    """The user name and groups the API server sees for `api`, asked independently of the CLI."""
    review = client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview")
    )
    return review.status.user_info.username, list(review.status.user_info.groups or [])


def create_workflow(cluster: KubeCluster, namespace: str, name: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workflow", "metadata": {"name": name}, "spec": {"steps": steps}}
    obj: dict[str, Any] = cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, WORKFLOWS, body)
    return obj


def get_workflow(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, WORKFLOWS, name)
    return obj


def requests_of(cluster: KubeCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return list((get_workflow(cluster, namespace, name).get("spec") or {}).get("requests") or [])


def approval_steps(approver: str) -> list[dict[str, Any]]:
    """approve (an approval `approver` may decide) → cool (an hour's wait): no pods to run."""
    return [
        {"id": "approve", "type": "approval", "approval": {"approvers": [approver]}},
        {"id": "cool", "type": "wait", "dependsOn": ["approve"], "wait": {"duration": "1h"}},
    ]


@pytest.fixture
def admin(cluster: KubeCluster) -> tuple[str, list[str]]:
    return whoami(cluster.api)


@pytest.fixture
def video(cluster: KubeCluster, namespace: str, admin: tuple[str, list[str]]) -> str:
    create_workflow(cluster, namespace, "video-1", approval_steps(f"user:{admin[0]}"))
    return "video-1"


# --- appending requests -----------------------------------------------------------------------


def test_each_verb_appends_one_request_signed_by_the_caller(
    cluster: KubeCluster, namespace: str, video: str, admin: tuple[str, list[str]]
) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    verbs = [
        ("approve", video, "approve", "--reason", "checked the 480p render"),
        ("reject", video, "approve", "--reason", "too dark"),
        ("retry", video, "approve"),
        ("complete", video, "cool", "--output", '{"published": true}', "--reason", "done by hand"),
        ("cancel", video, "--reason", "wrong cut"),
    ]
    lines = []
    for verb in verbs:
        proc = kubectl_plugin(cluster, *verb, "-n", namespace, "--no-wait")
        assert proc.returncode == 0, proc.stderr
        lines.append(proc.stdout.strip())
    after = datetime.now(UTC)

    items = requests_of(cluster, namespace, video)
    matches = [NO_WAIT_LINE.match(line) for line in lines]
    assert all(matches), lines
    assert [m.group(1) for m in matches if m] == [
        "approve step approve of workflow/video-1",
        "reject step approve of workflow/video-1",
        "retry step approve of workflow/video-1",
        "complete step cool of workflow/video-1",
        "cancel workflow/video-1",
    ]
    assert [item["id"] for item in items] == [m.group(2) for m in matches if m]
    assert all(REQUEST_ID.match(item["id"]) for item in items)
    username, groups = admin
    assert all(item["by"] == username and item["byGroups"] == groups for item in items)
    assert all(before <= parse_rfc3339(item["at"]) <= after for item in items)
    assert [
        {key: value for key, value in item.items() if key not in ("id", "by", "byGroups", "at")} for item in items
    ] == [
        {"action": "approve", "step": "approve", "reason": "checked the 480p render"},
        {"action": "reject", "step": "approve", "reason": "too dark"},
        {"action": "retry", "step": "approve"},
        {"action": "complete", "step": "cool", "output": '{"published": true}', "reason": "done by hand"},
        {"action": "cancel", "reason": "wrong cut"},
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(("complete", "video-1", "cool", "--output", "{published: yes}"), "--output: not valid JSON", id="output-not-json"),
        pytest.param(("complete", "video-1", "cool", "--output", "NaN"), "--output: not valid JSON", id="output-nan"),
        pytest.param(("approve", "video-1", "publish", "--reason", "ok"), 'has no step "publish" (its steps: approve, cool)', id="unknown-step"),
        pytest.param(("retry", "video-9", "approve"), 'workflow "video-9" not found in namespace', id="unknown-workflow"),
        pytest.param(("cancel", "video-9"), 'no workflow, execution or scheduledjob named "video-9"', id="unknown-name"),
    ],
)
def test_what_cannot_be_a_request_exits_2_and_writes_nothing(
    cluster: KubeCluster, namespace: str, video: str, args: tuple[str, ...], expected: str
) -> None:
    proc = kubectl_plugin(cluster, *args, "-n", namespace, "--no-wait")

    assert proc.returncode == EXIT_BAD_INPUT, proc.stdout
    assert expected in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert requests_of(cluster, namespace, video) == []


def test_cancel_with_workflow_skips_the_search(cluster: KubeCluster, namespace: str, video: str) -> None:
    proc = kubectl_plugin(cluster, "cancel", "--workflow", video, "-n", namespace, "--no-wait")

    assert proc.returncode == 0, proc.stderr
    (item,) = requests_of(cluster, namespace, video)
    assert item["action"] == "cancel"
    assert "step" not in item


class StaleFirstRead:
    """The CLI's view of the cluster, except that its first read of the workflow is `stale`."""

    def __init__(self, cluster: KubeCluster, stale: dict[str, Any]) -> None:
        self.custom = cluster.custom
        self._cluster = cluster
        self._stale: list[dict[str, Any]] = [stale]

    def workflow(self, name: str, namespace: str) -> dict[str, Any]:
        return self._stale.pop() if self._stale else get_workflow(self._cluster, namespace, name)


def test_an_append_after_a_stale_read_reads_again_and_appends_once(
    cluster: KubeCluster, namespace: str, video: str, admin: tuple[str, list[str]]
) -> None:
    stale = get_workflow(cluster, namespace, video)
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, WORKFLOWS, video, {"metadata": {"labels": {"touched": "yes"}}}
    )  # a new resourceVersion: the JSON Patch's test fails with a bare 422
    ask = Ask(RequestAction.RETRY, workflow=video, namespace=namespace, step="approve")
    item = request_item(ask, identity=Identity(admin[0], tuple(admin[1])), request_id="r-stalestale", at=datetime.now(UTC))

    append_request(cast(Cluster, StaleFirstRead(cluster, stale)), ask, item)

    assert requests_of(cluster, namespace, video) == [item]


# --- admission --------------------------------------------------------------------------------


@pytest.fixture
def editor(cluster: KubeCluster, namespace: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a service account that may get and patch workflows, and nothing else."""
    core, rbac = cluster.core, client.RbacAuthorizationV1Api(cluster.api)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="editor")))
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "workflow-editor"},
        "rules": [{"apiGroups": [GROUP], "resources": [WORKFLOWS], "verbs": ["get", "patch"]}],
    })  # fmt: skip
    bind(cluster, namespace, "workflow-editor", "Role")
    kubeconfig = cluster.token_kubeconfig(namespace, "editor", tmp_path / "editor.kubeconfig")
    yield {**cluster.env, "KUBECONFIG": str(kubeconfig), "PATH": f"{SCRIPTS}:{cluster.env['PATH']}"}


def bind(cluster: KubeCluster, namespace: str, role: str, kind: str) -> None:
    client.RbacAuthorizationV1Api(cluster.api).create_namespaced_role_binding(namespace, {
        "metadata": {"name": f"editor-{role}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "editor", "namespace": namespace}],
    })  # fmt: skip


def plugin_as(cluster: KubeCluster, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cluster.bin / "kubectl"), "vigil", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_admission_refuses_an_approval_or_a_retry_without_its_verb_and_the_cli_says_so(
    cluster: KubeCluster, namespace: str, video: str, editor: dict[str, str]
) -> None:
    refused = plugin_as(cluster, editor, "approve", video, "approve", "--reason", "ok", "--no-wait")

    assert refused.returncode == EXIT_API_FAILURE
    assert "Traceback" not in refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("kubectl vigil: the API server refused the request: ")
    assert MESSAGE_APPROVE_VERB in line
    assert f"user system:serviceaccount:{namespace}:editor" in line
    assert "workflow-approver ClusterRole" in line  # the hint
    assert requests_of(cluster, namespace, video) == []

    refused = plugin_as(cluster, editor, "retry", video, "approve", "--no-wait")  # patch is not enough
    assert refused.returncode == EXIT_API_FAILURE
    (line,) = refused.stderr.strip().splitlines()
    assert MESSAGE_ACTION_VERBS["retry"] in line and "built-in edit role grants it" in line
    assert requests_of(cluster, namespace, video) == []
    for role, verb in (("workflow-retrier", "retry"), ("workflow-approver", "approve")):
        client.RbacAuthorizationV1Api(cluster.api).create_namespaced_role(namespace, {
            "metadata": {"name": role},
            "rules": [{"apiGroups": [GROUP], "resources": [WORKFLOWS], "verbs": [verb]}],
        })  # fmt: skip
        bind(cluster, namespace, role, "Role")

    def appended(*args: str) -> subprocess.CompletedProcess[str] | None:
        proc = plugin_as(cluster, editor, *args, "--no-wait")
        return proc if proc.returncode == 0 else None

    wait_for(lambda: appended("retry", video, "approve"), timeout=30, what="the retry verb to take effect")
    approved = wait_for(
        lambda: appended("approve", video, "approve", "--reason", "ok"), timeout=30, what="the approve verb to take effect"
    )
    assert approved.stdout.startswith("requested: approve step approve of workflow/video-1")
    assert [(item["action"], item["by"]) for item in requests_of(cluster, namespace, video)] == [
        ("retry", f"system:serviceaccount:{namespace}:editor"),
        ("approve", f"system:serviceaccount:{namespace}:editor"),
    ]


# --- waiting for the operator -----------------------------------------------------------------


@pytest.fixture
def engine(cluster: KubeCluster) -> WorkflowEngine:
    """The operator's workflow engine, for single passes run by the test."""
    return WorkflowEngine(WorkflowApi(cluster.api), clock=WallClock(), events=None)


def answered_after_one_pass(
    cluster: KubeCluster, engine: WorkflowEngine, namespace: str, name: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run a waiting verb; once its request is in spec.requests, run one operator pass."""
    known = {item["id"] for item in requests_of(cluster, namespace, name)}
    env = {**cluster.env, "PATH": f"{SCRIPTS}:{cluster.env['PATH']}"}
    with subprocess.Popen(
        [str(cluster.bin / "kubectl"), "vigil", *args, "-n", namespace, "--timeout", "60"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        wait_for(
            lambda: {item["id"] for item in requests_of(cluster, namespace, name)} - known or proc.poll() is not None,
            timeout=30,
            what="the request to be appended",
        )
        # What the operator's watch does: the engine's cache takes the newer version, then the pass.
        changed = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "workflows", name)
        watch_brings(engine, changed)
        engine.reconcile(namespace, name)
        stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_a_waiting_verb_prints_what_the_operator_recorded(
    cluster: KubeCluster, namespace: str, video: str, engine: WorkflowEngine, admin: tuple[str, list[str]]
) -> None:
    engine.reconcile(namespace, video)  # starts it: the approval step waits

    refused = answered_after_one_pass(cluster, engine, namespace, video, "approve", video, "cool", "--reason", "early")
    approved = answered_after_one_pass(cluster, engine, namespace, video, "approve", video, "approve", "--reason", "ok")

    assert refused.returncode == EXIT_API_FAILURE, refused.stdout
    (line,) = refused.stderr.strip().splitlines()
    assert re.fullmatch(
        r"kubectl vigil: request r-[a-z2-7]{10} \(approve step cool of workflow/video-1\) was refused by the operator: "
        r"StepNotWaiting: step cool is not waiting for approval",
        line,
    ), line
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.splitlines() == [
        "approved step approve of workflow/video-1 (recorded as Approved)",
        "then: StepStarted cool",
    ]
    timeline = kubectl_plugin(cluster, "timeline", video, "-n", namespace)
    assert timeline.returncode == 0, timeline.stderr
    header, _, columns, *rows = timeline.stdout.splitlines()
    assert header.startswith("workflow " + namespace + "/video-1: Running, started ")
    assert header.endswith("progress 1/2, current: cool")
    assert columns.split() == STEP_COLUMNS
    assert rows[0].split()[:4] == ["approve", "approval", "Succeeded", "1"]
    assert rows[0].endswith(f"approved by {admin[0]}: ok")
    assert rows[1].split()[:4] == ["cool", "wait", "Running", "1"]
    assert "running for" in rows[1] and "(in 59m" in rows[1]


def test_a_request_nobody_records_ends_with_exit_1_after_the_timeout(
    cluster: KubeCluster, namespace: str, video: str
) -> None:
    proc = kubectl_plugin(cluster, "cancel", video, "-n", namespace, "--timeout", "1")

    assert proc.returncode == EXIT_API_FAILURE
    assert "has not recorded it within 1s (is it running?)" in proc.stderr
    assert [item["action"] for item in requests_of(cluster, namespace, video)] == ["cancel"]  # it stays


# --- timeline ---------------------------------------------------------------------------------


def recorded_status(cluster: KubeCluster, namespace: str, name: str, steps: list[dict[str, Any]]) -> World:
    """Write a status whose history the pure orchestrator recorded: encode fails once, then succeeds."""
    obj = create_workflow(cluster, namespace, name, steps)
    pinned = {"source": {"inline": True}, "steps": steps, "onFailure": "fail"}
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
    world = World(definition_of(pinned, uid=obj["metadata"]["uid"]), at=at)
    world.tick(4)
    world.pod_result("encode", ok=False)
    world.run_until_timer()
    world.tick(6)
    world.pod_result("encode", output={"url": "s3://media/video-2.mp4"})
    status = {"definition": pinned, "phase": str(world.state.phase), "history": [r.to_data() for r in world.history]}
    cluster.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, WORKFLOWS, name, {"status": status})
    return world


def test_timeline_reads_the_recorded_history(cluster: KubeCluster, namespace: str) -> None:
    steps = [
        {"id": "encode", "type": "pod", "template": POD_TEMPLATE, "retry": {"maxAttempts": 3, "backoff": {"initial": "1s", "max": "2s"}}},
        {"id": "review", "type": "approval", "dependsOn": ["encode"], "approval": {"approvers": ["group:editors"]}},
    ]
    world = recorded_status(cluster, namespace, "video-2", steps)

    table = kubectl_plugin(cluster, "timeline", "video-2", "-n", namespace)
    events = kubectl_plugin(cluster, "timeline", "video-2", "-n", namespace, "--events")

    assert table.returncode == 0, table.stderr
    header, _, columns, encode, review = table.stdout.splitlines()
    assert header.endswith("progress 1/2, current: review")
    assert columns.split() == STEP_COLUMNS
    assert encode.split()[:4] == ["encode", "pod", "Succeeded", "2"]
    assert encode.endswith("last failure (attempt 1): ExitCode1")
    assert review.split()[:4] == ["review", "approval", "Running", "1"]
    assert "awaiting group:editors" in review
    assert events.returncode == 0, events.stderr
    _, _, columns, *rows = events.stdout.splitlines()
    assert columns.split() == EVENT_COLUMNS
    assert [row.split()[1] for row in rows] == [str(record.event) for record in world.history]
    assert rows[0].split()[1] == Event.WORKFLOW_STARTED
