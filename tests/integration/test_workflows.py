"""Workflows through a real operator on the real API server.

A diamond DAG runs to completion with outputs flowing to dependents; the
operator is SIGKILLed at random points of a 6-step diamond, ten rounds, and
every run still completes with exactly one pod per step; a failing step with
compensation runs the compensations in reverse order; an invalid workflow gets
an Invalid condition naming the cycle; editing a WorkflowDefinition leaves
running instances on their pinned version; a ScheduledJob's workflowTemplate
starts one workflow per occurrence; a step past its expectedDuration is Stuck;
retry and manual completion; the history reaches the history database, also
after the database was down while workflows ran.
"""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from tests.contract.postgres import PostgresServer
from tests.integration.conftest import KubeCluster
from tests.integration.operators import OperatorFleet
from tests.integration.workflows import (
    DEFINITIONS,
    GROUP,
    VERSION,
    append_request,
    create_workflow,
    emit,
    env_of,
    events_of,
    get_workflow,
    pod_step,
    pods_per_step,
    step_pods,
    wait_phase,
    wait_step,
)
from tests.waiting import wait_for
from vigil.core.history import WorkflowEventRecord
from vigil.core.ids import execution_id
from vigil.core.ports import HistoryUnavailable
from vigil.history.store import SqlHistory

FAST_RETRY = {"maxAttempts": 2, "backoff": {"initial": "1s", "max": "2s"}}


def diamond_steps() -> list[dict[str, object]]:
    """a -> (b, c) -> d: each step's output names itself and echoes what it was given."""
    out = 'printf \'{"step":"%s","inputs":%s}\' "$VIGIL_STEP" "$VIGIL_INPUTS" > "$TERMINATION_MESSAGE_PATH"'
    return [
        pod_step("a", command=out),
        pod_step("b", "a", command=out),
        pod_step("c", "a", command=out),
        pod_step("d", "b", "c", command=out),
    ]


def test_a_diamond_runs_once_per_step_and_outputs_flow_to_dependents(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    create_workflow(cluster, namespace, "diamond", steps=diamond_steps())
    done = wait_phase(cluster, namespace, "diamond", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["progress"] == "4/4"
    table = cluster.kubectl("get", "vwf", "diamond", "-n", namespace).stdout.split("\n")
    assert table[0].split() == ["NAME", "PHASE", "PROGRESS", "CURRENT", "AGE"]
    assert table[1].split()[:3] == ["diamond", "Succeeded", "4/4"]
    assert pods_per_step(cluster, namespace, "diamond") == {"a": 1, "b": 1, "c": 1, "d": 1}
    outputs = {e["step"]: e.get("output") for e in events_of(done, "PodSucceeded")}
    assert outputs["a"] == {"step": "a", "inputs": {}}
    assert outputs["b"]["inputs"] == {"a": {"step": "a", "inputs": {}}}
    assert set(outputs["d"]["inputs"]) == {"b", "c"}
    d_pod = next(p for p in step_pods(cluster, namespace, "diamond") if p.metadata.labels["vigil.dev/step"] == "d")
    env = env_of(d_pod)
    assert env["VIGIL_EXECUTION_ID"].startswith("st-")
    assert json.loads(env["VIGIL_INPUTS"]) == {"b": outputs["b"], "c": outputs["c"]}


def six_step_diamond() -> list[dict[str, object]]:
    """start -> (left, right) -> (join) -> (report, archive): steps take a moment each."""
    work = emit({"ok": True}, then="sleep 0.5")
    return [
        pod_step("start", command=work),
        pod_step("left", "start", command=work),
        pod_step("right", "start", command=work),
        pod_step("join", "left", "right", command=work),
        pod_step("report", "join", command=work),
        pod_step("archive", "join", command=work),
    ]


def test_sigkilled_operators_never_rerun_a_completed_step(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    rng = random.Random(20261129)
    rounds = 10
    interrupted = 0
    for number in range(rounds):
        fleet.start()
        fleet.leader(timeout=60)
        name = f"kill-{number}"
        create_workflow(cluster, namespace, name, steps=six_step_diamond())
        # Kill the leader once history has grown by a random amount: mid-workflow.
        target = rng.randint(2, 14)
        wait_for(
            lambda n=name, t=target: len((get_workflow(cluster, namespace, n).get("status") or {}).get("history") or [])
            >= t
            or (get_workflow(cluster, namespace, n).get("status") or {}).get("phase") == "Succeeded",
            timeout=120,
            what=f"{name} to reach {target} history entries",
        )
        at_kill = get_workflow(cluster, namespace, name).get("status") or {}
        fleet.leader().kill()
        interrupted += at_kill.get("phase") != "Succeeded"
    assert interrupted >= rounds // 2, f"only {interrupted} of {rounds} kills landed mid-workflow"
    fleet.start()
    fleet.leader(timeout=60)
    for number in range(rounds):
        name = f"kill-{number}"
        done = wait_phase(cluster, namespace, name, "Succeeded", "Failed", timeout=180)
        assert done["status"]["phase"] == "Succeeded", name
        counts = pods_per_step(cluster, namespace, name)
        assert counts == {s: 1 for s in ("start", "left", "right", "join", "report", "archive")}, (name, counts)
        started = [e["step"] for e in events_of(done, "StepStarted")]
        assert sorted(started) == sorted(set(started)), (name, started)


def test_a_failing_step_compensates_the_finished_ones_in_reverse_order(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    compensate = {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}]}}
    create_workflow(
        cluster,
        namespace,
        "order",
        onFailure="compensate",
        steps=[
            pod_step("reserve", compensate=compensate),
            pod_step("charge", "reserve", compensate=compensate),
            pod_step("ship", "charge", command="exit 4", onError="compensate", retry=FAST_RETRY),
        ],
    )
    done = wait_phase(cluster, namespace, "order", "Compensated", "Failed", "Succeeded")
    assert done["status"]["phase"] == "Compensated"
    started = [e["step"] for e in events_of(done, "CompensationStarted")]
    assert started == ["charge", "reserve"]
    assert pods_per_step(cluster, namespace, "order", compensation=True) == {"charge": 1, "reserve": 1}
    assert [e["step"] for e in events_of(done, "StepFailed")] == ["ship"]


def test_a_cyclic_workflow_or_one_repeating_a_step_id_is_invalid_and_names_why(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    create_workflow(cluster, namespace, "loop", steps=[pod_step("a", "b"), pod_step("b", "a")])
    # A workflow's steps are one atomic list, so the API server admits a repeated id.
    create_workflow(cluster, namespace, "twice", steps=[pod_step("a"), pod_step("a")])
    create_workflow(cluster, namespace, "fine", steps=[pod_step("only")])

    def invalid(name: str) -> dict[str, object] | None:
        status = get_workflow(cluster, namespace, name).get("status") or {}
        found = [c for c in status.get("conditions") or [] if c["type"] == "Invalid" and c["status"] == "True"]
        return found[0] if found else None

    condition = wait_for(lambda: invalid("loop"), timeout=60, what="Invalid condition")
    assert "cycle" in str(condition["message"]) and "a -> b -> a" in str(condition["message"])
    condition = wait_for(lambda: invalid("twice"), timeout=60, what="Invalid condition")
    assert "spec.steps" in str(condition["message"]) and "duplicate step id 'a'" in str(condition["message"])
    assert wait_phase(cluster, namespace, "fine", "Succeeded")["status"]["phase"] == "Succeeded"
    assert pods_per_step(cluster, namespace, "twice") == {}


def test_a_running_instance_keeps_its_pinned_definition_when_the_definition_is_edited(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WorkflowDefinition",
        "metadata": {"name": "publish"},
        "spec": {"versions": [{"version": 1, "steps": [
            pod_step("first", command="sleep 2"),
            pod_step("second", "first", command=emit({"from": "v1"})),
        ]}]},
    }  # fmt: skip
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, DEFINITIONS, body)
    create_workflow(cluster, namespace, "pinned", definitionRef={"name": "publish", "version": 1})
    wait_for(
        lambda: (get_workflow(cluster, namespace, "pinned").get("status") or {}).get("definition"),
        timeout=60,
        what="the definition pinned",
    )
    # Merge patches (no resourceVersion): the operator writes the definition's status meanwhile.
    versions = body["spec"]["versions"]
    versions[0]["steps"][1] = pod_step("second", "first", command="exit 9")
    versions.append({"version": 2, "steps": [pod_step("other")]})
    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, DEFINITIONS, "publish", {"spec": {"versions": versions}}
    )

    versions[0]["steps"][1] = {**versions[0]["steps"][1], "id": "renamed"}
    with pytest.raises(ApiException) as refused:
        cluster.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, DEFINITIONS, "publish", {"spec": {"versions": versions}}
        )
    assert refused.value.status == 422
    assert "removed or renamed" in str(refused.value.body)

    done = wait_phase(cluster, namespace, "pinned", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["definition"]["source"]["version"] == 1
    outputs = {e["step"]: e.get("output") for e in events_of(done, "PodSucceeded")}
    assert outputs["second"] == {"from": "v1"}


def test_a_scheduled_workflow_starts_one_workflow_per_occurrence_named_from_its_execution_id(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    run_at = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
    job = cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "scheduledjobs", {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ScheduledJob",
        "metadata": {"name": "nightly-flow"},
        "spec": {
            "runAt": run_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "workflowTemplate": {"parameters": {"region": "eu"}, "steps": [
                pod_step("extract", command='printf \'%s\' "$VIGIL_PARAMETERS" > "$TERMINATION_MESSAGE_PATH"'),
                pod_step("load", "extract"),
            ]},
        },
    })  # fmt: skip
    expected = execution_id(job["metadata"]["uid"], run_at)
    done = wait_phase(cluster, namespace, expected, "Succeeded", "Failed", timeout=120)
    assert done["status"]["phase"] == "Succeeded"
    params = {e["step"]: e.get("output") for e in events_of(done, "PodSucceeded")}["extract"]
    assert params["region"] == "eu"
    assert params["scheduledFor"] == run_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert params["executionId"] == expected
    assert done["metadata"]["ownerReferences"][0]["name"] == "nightly-flow"
    listed = cluster.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "workflows")["items"]
    assert [w["metadata"]["name"] for w in listed] == [expected]

    def job_saw_it() -> dict[str, object] | None:
        status = cluster.custom.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "scheduledjobs", "nightly-flow"
        ).get("status") or {}
        return status if status.get("lastSuccessfulTime") else None

    job_status = wait_for(job_saw_it, timeout=30, what="the job's lastSuccessfulTime")
    assert job_status["lastSuccessfulTime"] == done["status"]["finishedAt"]
    assert [(r["executionId"], r["outcome"]) for r in job_status["recent"]] == [(expected, "Succeeded")]


def test_a_step_past_its_expected_duration_sets_stuck_and_cancel_stops_it(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    create_workflow(cluster, namespace, "slow", steps=[pod_step("crawl", command="sleep 120", expectedDuration="2s")])

    def stuck() -> dict[str, object] | None:
        status = get_workflow(cluster, namespace, "slow").get("status") or {}
        found = [c for c in status.get("conditions") or [] if c["type"] == "Stuck" and c["status"] == "True"]
        return found[0] if found else None

    assert "crawl" in str(wait_for(stuck, timeout=60, what="the Stuck condition")["message"])
    append_request(cluster.api, namespace, "slow", action="cancel", by="vigil-admin", reason="too slow")
    done = wait_phase(cluster, namespace, "slow", "Cancelled", "Failed", "Succeeded")
    assert done["status"]["phase"] == "Cancelled"
    assert done["status"]["steps"]["crawl"]["phase"] == "Cancelled"

    def pod_stopped() -> bool:
        pods = step_pods(cluster, namespace, "slow")
        return all(p.metadata.deletion_timestamp or p.status.phase in ("Succeeded", "Failed") for p in pods)

    wait_for(pod_stopped, timeout=60, what="the step's pod stopped")


def test_the_history_is_mirrored_into_the_history_database(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    create_workflow(cluster, namespace, "mirrored", steps=diamond_steps())
    done = wait_phase(cluster, namespace, "mirrored", "Succeeded", "Failed")
    history = SqlHistory(f"sqlite:///{fleet.workdir}/history.db", retention_days=30)

    def mirrored() -> list[WorkflowEventRecord] | None:
        try:  # written in the background: the workflow may finish before the first write made the table
            found = history.workflow_events(namespace, "mirrored")
        except HistoryUnavailable:
            return None
        return found if len(found) == len(done["status"]["history"]) else None

    try:
        rows = wait_for(mirrored, timeout=30, what="every history entry in the database")
    finally:
        history.close()
    assert [dict(row.data) for row in rows] == done["status"]["history"]
    assert [row.seq for row in rows] == list(range(len(rows)))
    assert {row.workflow_uid for row in rows} == {done["metadata"]["uid"]}


def test_retry_reruns_only_the_failed_step_and_complete_stands_in_for_a_stuck_one(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    echo_inputs = 'printf \'%s\' "$VIGIL_INPUTS" > "$TERMINATION_MESSAGE_PATH"'
    create_workflow(cluster, namespace, "ops", steps=[
        pod_step("fetch", command=emit({"rows": 3})),
        pod_step("flaky", "fetch", command='test "$VIGIL_ATTEMPT" -ge 3', retry=FAST_RETRY),
        pod_step("hang", "fetch", command="sleep 300"),
        pod_step("report", "flaky", "hang", command=echo_inputs),
    ])  # fmt: skip
    failed = wait_phase(cluster, namespace, "ops", "Failed", "Succeeded")
    assert failed["status"]["phase"] == "Failed"
    assert failed["status"]["steps"]["flaky"]["reason"] == "AttemptsExhausted"
    assert failed["status"]["steps"]["hang"]["phase"] == "Cancelled"

    append_request(cluster.api, namespace, "ops", action="retry", step="flaky", by="vigil-admin")
    wait_step(cluster, namespace, "ops", "hang", "Running")
    append_request(
        cluster.api, namespace, "ops", action="complete", step="hang", by="vigil-admin", output='{"done": "by hand"}'
    )
    done = wait_phase(cluster, namespace, "ops", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["steps"]["hang"]["manual"] is True
    assert done["status"]["steps"]["hang"]["decidedBy"] == "vigil-admin"
    report = {e["step"]: e.get("output") for e in events_of(done, "PodSucceeded")}["report"]
    assert report["hang"] == {"done": "by hand"}
    counts = pods_per_step(cluster, namespace, "ops")
    assert counts["fetch"] == 1 and counts["flaky"] == 3 and counts["report"] == 1


def test_workflows_run_while_the_history_database_is_down_and_it_catches_up(
    cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    server = PostgresServer.create()
    dsn = server.create_database(f"history_{uuid.uuid4().hex[:8]}")
    fleet = OperatorFleet(cluster, tmp_path, history={"dsn": dsn}, workflows={"rescanSeconds": 2})
    try:
        fleet.start()
        fleet.leader()
        server.stop()
        create_workflow(cluster, namespace, "offline", steps=diamond_steps())
        done = wait_phase(cluster, namespace, "offline", "Succeeded", "Failed")
        assert done["status"]["phase"] == "Succeeded"
        assert done["status"]["historyMirrored"] < len(done["status"]["history"])

        server.start()

        def caught_up() -> dict[str, object] | None:
            status = get_workflow(cluster, namespace, "offline")["status"]
            return status if status["historyMirrored"] == len(status["history"]) else None

        status = wait_for(caught_up, timeout=60, what="the history mirrored after the outage")
        history = SqlHistory(dsn, retention_days=30)
        try:
            rows = history.workflow_events(namespace, "offline")
        finally:
            history.close()
        assert [dict(row.data) for row in rows] == status["history"]
    finally:
        fleet.stop()
        cluster.clear_namespace(fleet.namespace)
        server.drop()


def test_a_definition_with_a_cycle_is_invalid_and_so_are_workflows_naming_it_or_a_missing_version(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet
) -> None:
    fleet.start()
    fleet.leader()
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WorkflowDefinition",
        "metadata": {"name": "looping"},
        "spec": {"versions": [{"version": 1, "steps": [pod_step("a", "b"), pod_step("b", "a")]}]},
    }
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, DEFINITIONS, body)
    good = {**body, "metadata": {"name": "good"}, "spec": {"versions": [{"version": 1, "steps": [pod_step("a")]}]}}
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, DEFINITIONS, good)
    create_workflow(cluster, namespace, "broken", definitionRef={"name": "looping", "version": 1})
    create_workflow(cluster, namespace, "lost", definitionRef={"name": "good", "version": 7})

    def invalid(plural: str, name: str) -> dict[str, object] | None:
        obj = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Invalid"]
        return found[0] if found and found[0]["status"] == "True" else None

    definition = wait_for(lambda: invalid(DEFINITIONS, "looping"), timeout=60, what="the definition Invalid")
    assert "spec.versions[0].steps" in str(definition["message"]) and "a -> b -> a" in str(definition["message"])
    broken = wait_for(lambda: invalid("workflows", "broken"), timeout=60, what="the broken reference Invalid")
    assert "WorkflowDefinition 'looping' is invalid: spec.versions[0].steps" in str(broken["message"])
    lost = wait_for(lambda: invalid("workflows", "lost"), timeout=60, what="the missing version Invalid")
    assert "spec.definitionRef.version" in str(lost["message"]) and "no version 7" in str(lost["message"])
    reasons = {e.reason for e in cluster.core.list_namespaced_event(namespace).items}
    assert "InvalidSpec" in reasons
