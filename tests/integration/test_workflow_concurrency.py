"""A workflowTemplate job's concurrencyPolicy, through a real operator on the real API server.

A job fires every 3 s a workflow whose one step sleeps for a minute. Forbid: while the first
workflow runs, later occurrences are Skipped in the ledger with reason ConcurrencyForbid and no
second workflow exists. Replace: each new workflow starts after a cancel request (in the
operator's own name, admitted by the workflow-requests policy) was appended to the one running;
that one ends Cancelled and its step pod goes; an operator without the `cancel` verb is
refused by that policy, and the occurrence settles Failed with the refusal while the running
workflow goes on. Allow: workflows run side by side, and
`kubectl vigil cancel JOB` cancels every unfinished one (a cancel request in the caller's name
each), leaving a workflow of another job alone.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.integration.conftest import KubeCluster
from tests.integration.jobs import condition, get_job, ledger, patch_spec
from tests.integration.operators import OperatorFleet
from tests.integration.test_cli import kubectl_plugin
from tests.integration.workflows import (
    GROUP,
    VERSION,
    WORKFLOWS,
    get_workflow,
    pod_step,
    step_pods,
    wait_phase,
)
from tests.waiting import wait_for


def every_3s_sleeping(cluster: KubeCluster, namespace: str, name: str, policy: str) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ScheduledJob",
        "metadata": {"name": name},
        "spec": {
            "every": "3s",
            "jitter": "0s",
            "concurrencyPolicy": policy,
            "workflowTemplate": {"steps": [pod_step("work", command="sleep 60")]},
        },
    }
    job: dict[str, Any] = cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", body)
    return job


def workflows_by_schedule(cluster: KubeCluster, namespace: str) -> list[dict[str, Any]]:
    items = cluster.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, WORKFLOWS)["items"]
    return sorted(items, key=lambda w: w["metadata"]["annotations"]["vigil.dev/scheduled-for"])


def phase(obj: dict[str, Any]) -> str | None:
    return (obj.get("status") or {}).get("phase")


def suspend(cluster: KubeCluster, namespace: str, name: str) -> None:
    patch_spec(cluster, namespace, name, {"suspend": True, "suspendReason": "end of test"})


def test_forbid_skips_occurrences_while_a_workflow_of_the_job_runs(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    every_3s_sleeping(cluster, namespace, "single", "Forbid")
    first = wait_for(lambda: workflows_by_schedule(cluster, namespace), timeout=60, what="a first workflow")[0]
    name = first["metadata"]["name"]
    wait_phase(cluster, namespace, name, "Running", timeout=30)

    def two_skipped() -> list[dict[str, Any]] | None:
        skipped = [e for e in ledger(cluster, namespace, "single") if e["outcome"] == "Skipped"]
        return skipped if len(skipped) >= 2 else None

    skipped = wait_for(two_skipped, timeout=60, what="two Skipped occurrences")
    suspend(cluster, namespace, "single")
    assert {e["reason"] for e in skipped} == {"ConcurrencyForbid"}
    runs = workflows_by_schedule(cluster, namespace)
    assert [w["metadata"]["name"] for w in runs] == [name]
    assert phase(runs[0]) == "Running"


def test_replace_cancels_the_running_workflow_and_starts_the_new_one(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    every_3s_sleeping(cluster, namespace, "latest", "Replace")
    first = wait_for(lambda: workflows_by_schedule(cluster, namespace), timeout=60, what="a first workflow")[0]
    first_name = first["metadata"]["name"]
    wait_for(lambda: step_pods(cluster, namespace, first_name), timeout=30, what="the first workflow's pod")
    wait_for(lambda: len(workflows_by_schedule(cluster, namespace)) >= 2, timeout=30, what="a second workflow")
    second_name = workflows_by_schedule(cluster, namespace)[1]["metadata"]["name"]

    replaced = wait_phase(cluster, namespace, first_name, "Cancelled", timeout=30)
    (request,) = replaced["spec"]["requests"]
    assert request["action"] == "cancel"
    assert request["by"] == f"system:serviceaccount:{fleet.namespace}:{fleet.identity.service_account}"
    assert request["reason"] == f"replaced by {second_name} (concurrencyPolicy Replace)"
    cancelled = [e for e in replaced["status"]["history"] if e["event"] == "CancelRequested"]
    assert [e.get("request") for e in cancelled] == [request["id"]]

    def first_pods_stopped() -> bool:
        return all(p.metadata.deletion_timestamp or p.status.phase in ("Succeeded", "Failed")
                   for p in step_pods(cluster, namespace, first_name))  # fmt: skip

    wait_for(first_pods_stopped, timeout=60, what="the replaced workflow's pod stopped")
    suspend(cluster, namespace, "latest")

    def newest_running() -> list[dict[str, Any]] | None:
        runs = workflows_by_schedule(cluster, namespace)
        return runs if phase(runs[-1]) == "Running" and all(phase(w) == "Cancelled" for w in runs[:-1]) else None

    runs = wait_for(newest_running, timeout=60, what="the newest workflow running, every older one cancelled")
    assert get_workflow(cluster, namespace, second_name)["status"]["phase"] in ("Running", "Cancelled")
    assert all(len(w["spec"]["requests"]) == 1 for w in runs[:-1])  # one cancel each, however often launched


def test_allow_runs_workflows_of_the_job_side_by_side(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    every_3s_sleeping(cluster, namespace, "many", "Allow")

    def two_running() -> list[dict[str, Any]] | None:
        running = [w for w in workflows_by_schedule(cluster, namespace) if phase(w) == "Running"]
        return running if len(running) >= 2 else None

    running = wait_for(two_running, timeout=60, what="two workflows of the job running at once")
    suspend(cluster, namespace, "many")
    assert not any((w["spec"].get("requests") or []) for w in running)
    assert not [e for e in ledger(cluster, namespace, "many") if e["outcome"] == "Skipped"]


def test_cancel_of_a_workflow_template_job_cancels_its_unfinished_workflows(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    every_3s_sleeping(cluster, namespace, "many", "Allow")
    every_3s_sleeping(cluster, namespace, "other", "Forbid")

    def two_running() -> list[str] | None:
        running = [w["metadata"]["name"] for w in workflows_by_schedule(cluster, namespace)
                   if phase(w) == "Running" and w["metadata"]["labels"]["vigil.dev/job"] == "many"]  # fmt: skip
        return running if len(running) >= 2 else None

    wait_for(two_running, timeout=60, what="two workflows of the job running")
    suspend(cluster, namespace, "many")
    suspend(cluster, namespace, "other")
    wait_for(lambda: any(phase(w) == "Running" and w["metadata"]["labels"]["vigil.dev/job"] == "other"
                         for w in workflows_by_schedule(cluster, namespace)), timeout=30, what="the other job's")  # fmt: skip
    mine = [w["metadata"]["name"] for w in workflows_by_schedule(cluster, namespace) if w["metadata"]["labels"]["vigil.dev/job"] == "many"]

    proc = kubectl_plugin(cluster, "cancel", "many", "-n", namespace, "--reason", "bad deploy")
    me = client.AuthenticationV1Api(cluster.api).create_self_subject_review(
        client.V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview")
    ).status.user_info.username

    assert proc.returncode == 0, proc.stderr
    assert f"scheduledjob many: cancel requested for {len(mine)} unfinished workflow(s)" in proc.stdout
    for name in mine:
        assert name in proc.stdout
        done = wait_phase(cluster, namespace, name, "Cancelled", timeout=60)
        (request,) = done["spec"]["requests"]
        assert (request["action"], request["reason"], request["by"]) == ("cancel", "bad deploy", me)
    others = [w for w in workflows_by_schedule(cluster, namespace) if w["metadata"]["labels"]["vigil.dev/job"] == "other"]
    assert [phase(w) for w in others] == ["Running"]
    assert not others[0]["spec"].get("requests")

    again = kubectl_plugin(cluster, "cancel", "many", "-n", namespace)
    assert again.returncode == 0, again.stderr
    assert "no in-flight executions (Ready, Running or Backoff) and no unfinished workflows" in again.stdout


def test_a_replace_that_admission_refuses_settles_the_occurrence_failed_and_starts_nothing(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    """Without the `cancel` verb the operator's cancel request is refused by the workflow-requests
    policy, as anyone's is: the occurrence settles Failed with the refusal, no second workflow
    starts, and the running one goes on (nothing is replaced half-way)."""
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    role = next(o for o in fleet.identity.objects if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-operator"))
    rules = [dict(r, verbs=[v for v in r["verbs"] if v != "cancel"]) for r in role["rules"]]
    rbac.patch_cluster_role(role["metadata"]["name"], {"rules": rules})
    fleet.start()
    fleet.leader()
    every_3s_sleeping(cluster, namespace, "latest", "Replace")
    first = wait_for(lambda: workflows_by_schedule(cluster, namespace), timeout=60, what="a first workflow")[0]

    def two_failed() -> list[dict[str, Any]] | None:
        failed = [e for e in ledger(cluster, namespace, "latest") if e["outcome"] == "Failed"]
        return failed if len(failed) >= 2 else None

    failed = wait_for(two_failed, timeout=60, what="two refused occurrences settled Failed")
    suspend(cluster, namespace, "latest")
    assert all(e["reason"] == "LaunchRefused" for e in failed), failed
    launch_failing = condition(get_job(cluster, namespace, "latest"), "LaunchFailing")
    assert launch_failing and "cancelling needs the 'cancel' verb" in launch_failing["message"], launch_failing
    runs = workflows_by_schedule(cluster, namespace)
    assert [w["metadata"]["name"] for w in runs] == [first["metadata"]["name"]]
    assert phase(runs[0]) == "Running" and not runs[0]["spec"].get("requests")
