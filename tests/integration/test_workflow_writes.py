"""What a workflow's passes write to the real API server, and what that costs it.

Each status write rewrites the whole Workflow on the API server (decoded, validated, its
managedFields rebuilt, encoded, sent to every watch), so the engine writes as few as it can:

* The status is one tracked field. Tracked field by field, the pinned definition and every
  step's summary were in the Workflow's managedFields, rebuilt on each write.
* A fan's results that start nothing are recorded together. A step pod's success that starts
  no step and does not end the workflow, while other step pods still run, is held (for
  QUIET_RESULTS_WAIT at most) and recorded with the next result; a failure never waits.

The operator's engine runs the passes here, in the test process, with a clock the test moves;
the Workflows are real objects on the real API server. Pods are not run: the engine's pod calls
are replaced by what the test says its step pods are (created, then ended as the test decides),
which is what its pod cache would say.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.integration.conftest import KubeCluster
from tests.integration.workflows import MovableClock, create_workflow, get_workflow, pod_step
from vigil.core.workflowpass import QUIET_RESULTS_WAIT
from vigil.kube.controllers.workflowapi import WorkflowApi
from vigil.kube.controllers.workflows import WorkflowEngine


class StepPods(WorkflowApi):
    """The engine's Kubernetes calls, but its step pods are the test's: created ones are kept,
    and `end` says how one ended. Status writes are counted."""

    def __init__(self, cluster: KubeCluster) -> None:
        super().__init__(cluster.api)
        self.created: dict[str, dict[str, Any]] = {}
        self.writes = 0

    def pods(self, namespace: str, uid: str) -> dict[str, dict[str, Any]]:
        return dict(self.created)

    def create_pod(self, namespace: str, body: dict[str, Any]) -> None:
        self.created.setdefault(body["metadata"]["name"], {**body, "status": {"phase": "Running"}})

    def delete_pod(self, namespace: str, name: str) -> None:
        return

    def write_status(self, obj: Any, status: dict[str, Any]) -> dict[str, Any]:
        self.writes += 1
        return super().write_status(obj, status)

    def end(self, step: str, phase: str = "Succeeded") -> None:
        [name] = [n for n, pod in self.created.items() if pod["metadata"]["labels"]["vigil.dev/step"] == step]
        code = 0 if phase == "Succeeded" else 3
        terminated = {"exitCode": code, "finishedAt": "2026-12-04T12:00:00Z"}
        status = {"phase": phase, "containerStatuses": [{"name": "main", "state": {"terminated": terminated}}]}
        self.created[name] = {**self.created[name], "status": status}


Setup = tuple[WorkflowEngine, StepPods, MovableClock]


def fan(width: int) -> list[dict[str, Any]]:
    """``s0``, then ``f0`` … ``f<width-1>`` all after it."""
    return [pod_step("s0"), *(pod_step(f"f{i}", "s0") for i in range(width))]


def step_phases(cluster: KubeCluster, namespace: str, name: str) -> dict[str, str]:
    steps = get_workflow(cluster, namespace, name)["status"]["steps"]
    return {step: summary["phase"] for step, summary in steps.items()}


@pytest.fixture
def engine_and_pods(cluster: KubeCluster) -> Setup:
    api, clock = StepPods(cluster), MovableClock()
    return WorkflowEngine(api, clock=clock, events=None), api, clock


def fanned_out(cluster: KubeCluster, namespace: str, setup: Setup, width: int) -> int:
    """A workflow ``w`` of a fan of ``width``, run until every fan pod is running; the status
    writes so far."""
    engine, pods, _ = setup
    create_workflow(cluster, namespace, "w", steps=fan(width))
    engine.reconcile(namespace, "w")  # started: s0's pod
    recorded(setup, namespace, "s0")  # s0's success starts the fan: recorded at once
    assert step_phases(cluster, namespace, "w") == {"s0": "Succeeded", **{f"f{i}": "Running" for i in range(width)}}
    assert len(pods.created) == 1 + width
    return pods.writes



def held(setup: Setup, namespace: str, step: str) -> datetime | None:
    """``step``'s pod succeeds a second later and a pass runs: it writes nothing (the result is
    held); when it wants the next pass."""
    engine, pods, clock = setup
    written = pods.writes
    pods.end(step)
    clock.at += timedelta(seconds=1)
    wake = engine.reconcile(namespace, "w")
    assert pods.writes == written, f"{step}'s success was written at once"
    return wake


def recorded(setup: Setup, namespace: str, step: str, phase: str = "Succeeded") -> None:
    """``step``'s pod ends (``phase``) a second later and a pass runs: it writes once."""
    engine, pods, clock = setup
    written = pods.writes
    pods.end(step, phase)
    clock.at += timedelta(seconds=1)
    engine.reconcile(namespace, "w")
    assert pods.writes == written + 1, f"{step}'s end and what waited took {pods.writes - written} writes"


def test_what_the_api_server_tracks_of_a_workflow_status_does_not_grow_with_its_steps(
    cluster: KubeCluster, namespace: str, engine_and_pods: Setup
) -> None:
    """The engine writes the status whole, so the API server tracks it as one field: a status
    of 21 steps leaves the same managedFields entry as one of 1 (field by field, it held the
    pinned definition's keys and each step's summary)."""
    engine, _, _ = engine_and_pods
    create_workflow(cluster, namespace, "one", steps=[pod_step("s0")])
    create_workflow(cluster, namespace, "many", steps=fan(20))

    def tracked(name: str) -> str:
        engine.reconcile(namespace, name)
        obj = get_workflow(cluster, namespace, name)
        assert len(obj["status"]["steps"]) == len(obj["spec"]["steps"])
        [entry] = [m for m in obj["metadata"]["managedFields"] if m.get("subresource") == "status"]
        return json.dumps(entry["fieldsV1"], sort_keys=True)

    assert tracked("many") == tracked("one")


def test_a_fans_successes_that_start_nothing_are_recorded_with_the_last_one(
    cluster: KubeCluster, namespace: str, engine_and_pods: Setup
) -> None:
    _, _, clock = engine_and_pods
    fanned_out(cluster, namespace, engine_and_pods, 3)
    for step in ("f0", "f1"):  # held: f2 still runs, and nothing waits for these
        wake = held(engine_and_pods, namespace, step)
        assert wake is not None and wake <= clock.now() + QUIET_RESULTS_WAIT
    assert step_phases(cluster, namespace, "w")["f0"] == "Running"

    recorded(engine_and_pods, namespace, "f2")
    done = get_workflow(cluster, namespace, "w")["status"]
    assert done["phase"] == "Succeeded"
    assert {step: summary["phase"] for step, summary in done["steps"].items()} == dict.fromkeys(
        ("s0", "f0", "f1", "f2"), "Succeeded"
    )
    succeeded = [entry["step"] for entry in done["history"] if entry["event"] == "PodSucceeded"]
    assert sorted(succeeded) == ["f0", "f1", "f2", "s0"]  # each result once


def test_a_held_success_is_recorded_once_it_has_waited_long_enough(
    cluster: KubeCluster, namespace: str, engine_and_pods: Setup
) -> None:
    engine, pods, clock = engine_and_pods
    written = fanned_out(cluster, namespace, engine_and_pods, 2)
    wake = held(engine_and_pods, namespace, "f0")
    assert wake == clock.now() + QUIET_RESULTS_WAIT

    clock.at = wake
    engine.reconcile(namespace, "w")
    assert pods.writes == written + 1
    assert step_phases(cluster, namespace, "w") == {"s0": "Succeeded", "f0": "Succeeded", "f1": "Running"}


def test_a_failure_is_recorded_at_once_with_the_successes_held_before_it(
    cluster: KubeCluster, namespace: str, engine_and_pods: Setup
) -> None:
    fanned_out(cluster, namespace, engine_and_pods, 3)
    held(engine_and_pods, namespace, "f0")
    recorded(engine_and_pods, namespace, "f1", "Failed")
    history = get_workflow(cluster, namespace, "w")["status"]["history"]
    ends = {(entry["event"], entry["step"]) for entry in history if entry["event"] in ("PodSucceeded", "PodFailed")}
    assert ends == {("PodSucceeded", "s0"), ("PodSucceeded", "f0"), ("PodFailed", "f1")}  # in that one write
    # (what the failure decides — a retry, whose jittered backoff may already be due — is the policy's)
