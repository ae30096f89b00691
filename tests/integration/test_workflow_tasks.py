"""Workflows with `task` steps on the real API server, the real PostgreSQL and a real worker.

The workflow engine runs its passes in the test process (as `test_workflow_writes` does) over
real Workflow objects, with the operator's queue store on a database of the test's own, and the
worker SDK runs the tasks (tests/queue/tasks.py) in-process, writing every attempt it runs to
the database's `runs` table:

* a chain of two task steps runs to success: each step is one execution in the store, its id
  the step's stable execution id, run once; a second engine (a new leader) passing the same
  workflow adds no execution;
* a chain of two task steps whose second gets the first's output: the first task's return value
  is recorded in its TaskSucceeded entry and is the second's payload's `inputs`; the second's
  output (echoing those inputs) is recorded in turn;
* a task that fails its first attempt: the step retries, the same execution runs again at
  attempt 2 and succeeds; the history has the TaskFailed then the TaskSucceeded;
* a workflow with a task step is Invalid while the engine has no queue store;
* through a real operator given the queue's DSN (its informer, work queue and the task poll
  driving the passes): a fan of task steps after a first one runs to success, one execution
  per step.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.queue.tasks  # noqa: F401  (registers the tasks the worker runs)
from tests.contract.conftest import postgres
from tests.contract.postgres import PostgresServer
from tests.integration.conftest import KubeCluster
from tests.integration.operators import OperatorFleet
from tests.integration.workflows import create_workflow, get_workflow, wait_phase
from tests.queue.tasks import DSN_ENV, create_tables
from tests.queue.workers import in_process, runs
from tests.waiting import wait_for
from vigil.core.ids import step_execution_id
from vigil.core.queue import queue_key
from vigil.kube.controllers.workflowapi import WorkflowApi
from vigil.kube.controllers.workflows import WorkflowEngine
from vigil.kube.controllers.workflowtasks import WorkflowTasks
from vigil.kube.kits.clocks import SystemClock
from vigil.queue.store import QueueStore

__all__ = ["postgres"]

QUICK_RETRY = {"maxAttempts": 2, "backoff": {"initial": "1s", "max": "1s"}}
FINISHED = ("Succeeded", "Failed", "Compensated", "Cancelled")


@pytest.fixture
def queue_dsn(postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """A database of the test's own with the queue schema and the tasks' `runs` table."""
    info = postgres.conninfo(postgres.create_database().rsplit("/", 1)[1])
    QueueStore(info).migrate()
    create_tables(info)
    monkeypatch.setenv(DSN_ENV, info)
    return info


@pytest.fixture
def engine(cluster: KubeCluster, queue_dsn: str) -> Iterator[WorkflowEngine]:
    clock = SystemClock()
    yield WorkflowEngine(
        WorkflowApi(cluster.api), clock=clock, events=None, tasks=WorkflowTasks(QueueStore(queue_dsn), clock=clock)
    )


def task_step(step_id: str, name: str, *deps: str, **extra: Any) -> dict[str, Any]:
    step: dict[str, Any] = {"id": step_id, "type": "task", "task": {"queue": "work", "name": name}}
    if deps:
        step["dependsOn"] = list(deps)
    return {**step, **extra}


def run_to_end(cluster: KubeCluster, engine: WorkflowEngine, namespace: str, name: str) -> dict[str, Any]:
    """Pass the workflow (as the engine's queue would, on its own wake-ups) until it finishes."""

    def finished() -> bool:
        engine.reconcile(namespace, name)
        return (get_workflow(cluster, namespace, name).get("status") or {}).get("phase") in FINISHED

    wait_for(finished, timeout=60, interval=0.2, what=f"workflow {name} to finish")
    return get_workflow(cluster, namespace, name)


def recorded(workflow: dict[str, Any], *events: str) -> list[tuple[str, str, int]]:
    return [(e["event"], e["step"], e["attempt"]) for e in workflow["status"]["history"] if e["event"] in events]


@pytest.mark.postgres
def test_task_steps_run_once_each_as_the_steps_executions(
    cluster: KubeCluster, namespace: str, engine: WorkflowEngine, queue_dsn: str
) -> None:
    created = create_workflow(cluster, namespace, "chain", steps=[task_step("a", "record"), task_step("b", "record", "a")])
    engine.reconcile(namespace, "chain")  # started: a's task submitted
    clock = SystemClock()
    again = WorkflowEngine(  # a new leader passes the same workflow: it submits a's task again
        WorkflowApi(cluster.api), clock=clock, events=None, tasks=WorkflowTasks(QueueStore(queue_dsn), clock=clock)
    )
    again.reconcile(namespace, "chain")
    store = QueueStore(queue_dsn)
    queue = queue_key(namespace, "work")
    assert store.counts(queue)["ready"] == 1
    with in_process(queue_dsn, queue):
        done = run_to_end(cluster, engine, namespace, "chain")
    assert done["status"]["phase"] == "Succeeded", done["status"].get("conditions")
    uid = created["metadata"]["uid"]
    ids = {step: step_execution_id(uid, step) for step in ("a", "b")}
    assert store.counts(queue) == {"ready": 0, "leased": 0, "succeeded": 2, "dead": 0, "cancelled": 0}
    for step, execution in ids.items():
        row = store.execution(execution)
        assert row is not None and (row["idempotency_key"], row["tenant"]) == (execution, namespace), step
    ran = [(eid, attempt) for eid, attempt, _, event in runs(queue_dsn) if event == "ran"]
    assert sorted(ran) == sorted((execution, 1) for execution in ids.values())  # each step ran once
    assert recorded(done, "TaskSucceeded") == [("TaskSucceeded", "a", 1), ("TaskSucceeded", "b", 1)]
    assert recorded(done, "StepStarted") == [("StepStarted", "a", 1), ("StepStarted", "b", 1)]


@pytest.mark.postgres
def test_a_task_steps_output_is_the_next_steps_input(
    cluster: KubeCluster, namespace: str, engine: WorkflowEngine, queue_dsn: str
) -> None:
    quote = task_step("quote", "echo")
    quote["task"]["payload"] = {"price": 12.5, "currency": "EUR"}
    created = create_workflow(cluster, namespace, "priced", steps=[quote, task_step("order", "echo", "quote")])
    with in_process(queue_dsn, queue_key(namespace, "work")):
        done = run_to_end(cluster, engine, namespace, "priced")
    assert done["status"]["phase"] == "Succeeded", done["status"].get("conditions")
    quoted = {"own": {"price": 12.5, "currency": "EUR"}, "inputs": {}}
    succeeded = {e["step"]: e.get("output") for e in done["status"]["history"] if e["event"] == "TaskSucceeded"}
    assert succeeded == {"quote": quoted, "order": {"own": {}, "inputs": {"quote": quoted}}}
    store = QueueStore(queue_dsn)
    uid = created["metadata"]["uid"]
    first, second = (store.execution(step_execution_id(uid, step)) for step in ("quote", "order"))
    assert first is not None and first["output"] == quoted  # kept by the store as the task returned it
    assert second is not None and second["payload"]["inputs"] == {"quote": quoted}  # what step 2 was given


@pytest.mark.postgres
def test_a_failed_task_is_retried_as_the_same_execution(
    cluster: KubeCluster, namespace: str, engine: WorkflowEngine, queue_dsn: str
) -> None:
    created = create_workflow(cluster, namespace, "flaky", steps=[task_step("pay", "fail_first", retry=QUICK_RETRY)])
    queue = queue_key(namespace, "work")
    with in_process(queue_dsn, queue):
        done = run_to_end(cluster, engine, namespace, "flaky")
    assert done["status"]["phase"] == "Succeeded", done["status"].get("conditions")
    execution = step_execution_id(created["metadata"]["uid"], "pay")
    assert [(attempt, event) for _, attempt, _, event in runs(queue_dsn, execution)] == [(1, "ran"), (2, "ran")]
    assert recorded(done, "TaskFailed", "RetryScheduled", "TaskSucceeded") == [
        ("TaskFailed", "pay", 1), ("RetryScheduled", "pay", 2), ("TaskSucceeded", "pay", 2),
    ]  # fmt: skip
    [failed] = [e for e in done["status"]["history"] if e["event"] == "TaskFailed"]
    assert failed["reason"] == "TaskFailed" and "the first attempt fails" in failed["message"]
    assert QueueStore(queue_dsn).counts(queue)["succeeded"] == 1
    assert done["status"]["steps"]["pay"]["attempts"] == 2


def test_a_task_step_is_invalid_without_the_volume_tier(cluster: KubeCluster, namespace: str) -> None:
    engine = WorkflowEngine(WorkflowApi(cluster.api), clock=SystemClock(), events=None)
    create_workflow(cluster, namespace, "tierless", steps=[task_step("a", "record")])
    engine.reconcile(namespace, "tierless")
    status = get_workflow(cluster, namespace, "tierless")["status"]
    [invalid] = [c for c in status["conditions"] if c["type"] == "Invalid"]
    assert invalid["status"] == "True" and "set queue.dsn" in invalid["message"]


@pytest.fixture
def task_fleet(
    cluster: KubeCluster, tmp_path: Path, queue_dsn: str, request: pytest.FixtureRequest
) -> Iterator[OperatorFleet]:
    """A leader with the volume tier on: this test's queue database."""
    fleet = OperatorFleet(cluster, tmp_path, queue={"dsn": queue_dsn})
    fleet.start()
    fleet.leader()
    yield fleet
    fleet.finish(request)


@pytest.mark.postgres
def test_a_fan_of_task_steps_through_a_real_operator(
    cluster: KubeCluster, namespace: str, task_fleet: OperatorFleet, queue_dsn: str
) -> None:
    steps = [task_step("s0", "record"), *(task_step(f"f{i}", "record", "s0") for i in range(6))]
    created = create_workflow(cluster, namespace, "fan", steps=steps)
    queue = queue_key(namespace, "work")
    with in_process(queue_dsn, queue):
        done = wait_phase(cluster, namespace, "fan", *FINISHED)
    assert done["status"]["phase"] == "Succeeded", done["status"].get("conditions")
    uid = created["metadata"]["uid"]
    ran = sorted(eid for eid, _, _, event in runs(queue_dsn) if event == "ran")
    assert ran == sorted(step_execution_id(uid, step["id"]) for step in steps)  # each once
    assert QueueStore(queue_dsn).counts(queue)["succeeded"] == len(steps)
