"""A workflow whose history outgrows etcd's 1.5 MB object limit finishes, on the real API server.

Four pod steps in a chain, each failing 99 times with a 4 KiB termination message and then
succeeding with a 4 KiB output: about 2 MB of history, more than one etcd object may hold, so
a status that kept it all would be refused on every write and the workflow would be stuck for
good. The operator's own workflow engine runs the passes here, in the test process, with a
clock the test moves (backoff timers come at once) and a real SQLite history database; the
Workflow's status is written to the real API server. Pods are not run: the engine's pod calls
are replaced by a record of what it would create, and results are recorded as the operator
records them (`WorkflowEngine.submit`). Checked: the workflow succeeds; the object stays below
the limit at every write while more than the limit was written to the database; old entries
left the status for a checkpoint whose digest chains over exactly the database's entries; and
the last step's pod gets the full output of the step before it, read back from the database
after it left the status.

Then with the history database down: nothing may leave the status, so at the engine's cap
the next input is refused (the workflow waits; no write is attempted that the API server would
refuse), and once the database is back the entries reach it, leave the status, and the
workflow finishes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import KubeCluster
from tests.integration.workflows import (
    MovableClock,
    Outage,
    create_workflow,
    get_workflow,
    pod_step,
)
from vigil.core.checkpoint import chain, entry_bytes
from vigil.core.workflow import Event, Record, records_from_data
from vigil.core.workflowpass import HISTORY_MAX_BYTES
from vigil.history.store import SqlHistory
from vigil.kube.controllers.workflowapi import WorkflowApi
from vigil.kube.controllers.workflows import WorkflowEngine

ETCD_OBJECT_LIMIT = 1_500_000  # bytes: etcd's --max-request-bytes default (1.5 MiB), rounded down
STEPS = ("probe", "encode", "package", "publish")
ATTEMPTS = 100  # the most a step's retry policy allows
MESSAGE = "E" * 4000  # a termination message is at most 4 KiB
OUTPUT = {"manifest": "m" * 4000}


class NoPods(WorkflowApi):
    """The engine's Kubernetes calls, but for pods: none runs; what would be created is kept."""

    def __init__(self, cluster: KubeCluster) -> None:
        super().__init__(cluster.api)
        self.created: list[dict[str, Any]] = []
        self.largest = 0

    def pods(self, namespace: str, uid: str) -> dict[str, dict[str, Any]]:
        return {}

    def create_pod(self, namespace: str, body: dict[str, Any]) -> None:
        self.created.append(body)

    def delete_pod(self, namespace: str, name: str) -> None:
        return

    def write_status(self, obj: Any, status: dict[str, Any]) -> dict[str, Any]:
        self.largest = max(self.largest, len(json.dumps({**obj, "status": status})))
        return super().write_status(obj, status)


@pytest.fixture
def history(tmp_path: Path) -> Iterator[SqlHistory]:
    store = SqlHistory(f"sqlite:///{tmp_path}/history.db", retention_days=30)
    store.migrate()
    yield store
    store.close()


def env_of(body: dict[str, Any], name: str) -> str:
    return str(next(e["value"] for e in body["spec"]["containers"][0]["env"] if e["name"] == name))




def chain_of(steps: tuple[str, ...]) -> list[dict[str, Any]]:
    retry = {"maxAttempts": ATTEMPTS, "backoff": {"initial": "1s", "max": "1s"}}
    return [pod_step(step, *steps[:index][-1:], retry=retry) for index, step in enumerate(steps)]


def results(steps: tuple[str, ...]) -> Iterator[tuple[str, int]]:
    """(step, attempt) in the order the pods end: 99 failures, then a success, step by step."""
    for step in steps:
        for attempt in range(1, ATTEMPTS + 1):
            yield step, attempt


def report(engine: WorkflowEngine, clock: MovableClock, namespace: str, step: str, attempt: int) -> None:
    """The pod of `attempt` ended (as the operator records it); then the pass after it."""
    clock.at += timedelta(seconds=2)
    if attempt < ATTEMPTS:
        detail: dict[str, Any] = {"reason": "ExitCode1", "message": MESSAGE}
        engine.submit(namespace, "big", Record(Event.POD_FAILED, clock.now(), step, attempt, detail))
        clock.at += timedelta(seconds=2)  # the backoff's timer is due: the pass starts the next attempt
    else:
        detail = {"output": {**OUTPUT, "step": step}}
        engine.submit(namespace, "big", Record(Event.POD_SUCCEEDED, clock.now(), step, attempt, detail))
    engine.reconcile(namespace, "big")


def test_a_workflow_past_the_object_limit_finishes(cluster: KubeCluster, namespace: str, history: SqlHistory) -> None:
    uid = create_workflow(cluster, namespace, "big", steps=chain_of(STEPS))["metadata"]["uid"]
    api, clock = NoPods(cluster), MovableClock()
    engine = WorkflowEngine(api, clock=clock, events=None, history=history)
    engine.reconcile(namespace, "big")  # starts it: probe's first attempt

    for step, attempt in results(STEPS):
        report(engine, clock, namespace, step, attempt)

    done = get_workflow(cluster, namespace, "big")
    status = done["status"]
    assert status["phase"] == "Succeeded", status.get("conditions")
    rows = history.workflow_events(namespace, "big", uid=uid)
    written = sum(len(json.dumps(row.data)) for row in rows)
    assert written > ETCD_OBJECT_LIMIT, written  # more history than one object may hold
    assert api.largest < ETCD_OBJECT_LIMIT and len(json.dumps(done)) < ETCD_OBJECT_LIMIT
    checkpoint = status["checkpoint"]
    assert checkpoint["seq"] + len(status["history"]) == len(rows) == status["historyMirrored"]
    folded = records_from_data(row.data for row in rows[: checkpoint["seq"]])
    assert checkpoint["digest"] == chain("", folded)
    assert "m" * 4000 not in json.dumps(checkpoint)  # outputs left with their entries
    publish = [body for body in api.created if body["metadata"]["labels"]["vigil.dev/step"] == "publish"]
    inputs = json.loads(env_of(publish[-1], "VIGIL_INPUTS"))
    assert inputs == {"package": {**OUTPUT, "step": "package"}}  # read back from the database


def test_while_the_database_is_down_the_workflow_waits_at_the_cap_then_finishes(
    cluster: KubeCluster, namespace: str, history: SqlHistory
) -> None:
    steps = STEPS[:2]
    create_workflow(cluster, namespace, "big", steps=chain_of(steps))
    api, clock, database = NoPods(cluster), MovableClock(), Outage(history)
    engine = WorkflowEngine(api, clock=clock, events=None, history=database)
    database.down = True
    engine.reconcile(namespace, "big")
    waited = []

    def held_at_the_cap(step: str) -> None:
        """Nothing left the status, it holds no more than the cap, and the step waits."""
        held = get_workflow(cluster, namespace, "big")["status"]
        assert "checkpoint" not in held and held["historyMirrored"] == 0
        assert sum(entry_bytes(entry) for entry in records_from_data(held["history"])) <= HISTORY_MAX_BYTES
        assert held["steps"][step]["phase"] == "Running"
        waited.append(held["steps"][step]["attempts"])
        database.down = False  # back: the next pass writes the entries and checkpoints them

    for step, attempt in results(steps):
        started = get_workflow(cluster, namespace, "big")["status"]["steps"][step]["attempts"]
        if started != attempt:  # the pass that should have started it recorded nothing
            held_at_the_cap(step)
            engine.reconcile(namespace, "big")
        try:
            report(engine, clock, namespace, step, attempt)
        except RuntimeError as error:  # the result itself could not be recorded
            assert "wait for the history database" in str(error), error
            held_at_the_cap(step)
            report(engine, clock, namespace, step, attempt)
    assert len(waited) == 1, waited
    done = get_workflow(cluster, namespace, "big")
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["checkpoint"]["seq"] > 0 and api.largest < ETCD_OBJECT_LIMIT
