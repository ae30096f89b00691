"""Issue #38: one tenant's hostile `task` steps beside another tenant's canary, on the real API
server, the real PostgreSQL, a real operator (the volume tier on) and real workers.

In the hostile tenant's namespace:

* workflows whose task step's payload is what the store cannot keep — a NUL in a string, nesting
  80 deep, 40 KiB — each end Failed with the refusal naming the place in the payload
  (`steps[work].task.payload.note: holds NUL ...`), or are refused at admission naming the step's
  field; nothing reaches the queue and nothing runs;
* a workflow whose task steps return what the store cannot keep (a NUL, a lone surrogate, NaN, a
  set, an object, 40 KiB of text) succeeds: each step's work ran once, its output is null in the
  store and absent from the workflow, and the step after them runs; a step whose output is valid
  but 8 KiB has it cut to the 4 KiB bound of a step's output.

Meanwhile another namespace's canary job fires every occurrence on time, a workflow of task steps
in that namespace runs to success on its own queue, and the leader never restarts.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.contract.conftest import postgres
from tests.integration.canary import Canary
from tests.integration.conftest import KubeCluster
from tests.integration.operators import OperatorFleet
from tests.integration.test_workflow_tasks import FINISHED, queue_dsn, task_step
from tests.integration.workflows import create_workflow, wait_phase
from tests.queue.tasks import HOSTILE
from tests.queue.workers import in_process, runs
from vigil.core.ids import step_execution_id
from vigil.core.queue import queue_key
from vigil.core.workflow import OUTPUT_MAX_BYTES
from vigil.queue.store import QueueStore

__all__ = ["postgres", "queue_dsn"]

pytestmark = pytest.mark.postgres

ONCE = {"maxAttempts": 1}


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


#: A task step's payload the store cannot keep, and what the refusal says of it.
HOSTILE_PAYLOADS: dict[str, tuple[dict[str, Any], str]] = {
    "nul": ({"note": "a\x00b"}, "steps[work].task.payload.note: holds NUL"),
    "deep": (nested(80), "steps[work].task.payload.a.a."),
    "large": ({"blob": "x" * 40_000}, "steps[work].task: is "),
}


def payload_step(payload: dict[str, Any]) -> dict[str, Any]:
    step = task_step("work", "record", retry=ONCE)
    step["task"]["payload"] = payload
    return step


def ended(cluster: KubeCluster, namespace: str, name: str, spec: dict[str, Any]) -> tuple[str, str]:
    """Create the workflow; how it ended (refused at admission, or its final phase) and the message
    of its refusal or its failed step."""
    try:
        create_workflow(cluster, namespace, name, **spec)
    except ApiException as error:
        assert error.status in (400, 422), error.body
        return "refused", str(json.loads(error.body).get("message", error.body))
    done = wait_phase(cluster, namespace, name, *FINISHED)
    failed = [e for e in done["status"]["history"] if e["event"] in ("TaskFailed", "StepFailed")]
    return done["status"]["phase"], " ".join(str(e.get("message")) for e in failed)


def test_hostile_task_payloads_and_outputs_harm_no_other_tenant(
    cluster: KubeCluster, namespace: str, fleet: OperatorFleet, queue_dsn: str
) -> None:
    leader = fleet.start(queue={"dsn": queue_dsn})
    fleet.leader()
    canary = Canary.start(cluster)
    try:
        hostile_queue, canary_queue = queue_key(namespace, "work"), queue_key(canary.namespace, "work")
        outputs = [task_step(f"out-{kind}", "returns_hostile") for kind in HOSTILE]
        for step in outputs:
            step["task"]["payload"] = {"kind": step["id"].removeprefix("out-")}
        big = task_step("big", "echo")
        big["task"]["payload"] = {"blob": "y" * 8_000}
        after = task_step("after", "echo", *(s["id"] for s in outputs), "big")
        created = create_workflow(cluster, namespace, "outputs", steps=[*outputs, big, after])
        steady = create_workflow(
            cluster, canary.namespace, "steady", steps=[task_step("a", "record"), task_step("b", "record", "a")]
        )
        with in_process(queue_dsn, hostile_queue), in_process(queue_dsn, canary_queue):
            refusals = {
                kind: ended(cluster, namespace, f"payload-{kind}", {"steps": [payload_step(payload)]})
                for kind, (payload, _) in HOSTILE_PAYLOADS.items()
            }
            done = wait_phase(cluster, namespace, "outputs", *FINISHED)
            calm = wait_phase(cluster, canary.namespace, "steady", *FINISHED)

        for kind, (outcome, message) in refusals.items():
            assert outcome in ("refused", "Failed"), (kind, outcome, message)
            assert HOSTILE_PAYLOADS[kind][1] in message, (kind, message)
        print(f"hostile payloads: { {kind: outcome for kind, (outcome, _) in refusals.items()} }")

        assert done["status"]["phase"] == "Succeeded", done["status"].get("conditions")
        store = QueueStore(queue_dsn)
        uid = created["metadata"]["uid"]
        succeeded = {e["step"]: e for e in done["status"]["history"] if e["event"] == "TaskSucceeded"}
        for step in outputs:
            row = store.execution(step_execution_id(uid, step["id"]))
            assert row is not None and row["state"] == "succeeded" and row["output"] is None, (step["id"], row)
            assert "output" not in succeeded[step["id"]], succeeded[step["id"]]
        ran = Counter(eid for eid, _, _, event in runs(queue_dsn) if event == "ran")
        assert all(ran[step_execution_id(uid, s["id"])] == 1 for s in outputs), ran  # each did its work once
        cut = succeeded["big"]["output"]
        assert isinstance(cut, str) and len(cut.encode()) <= OUTPUT_MAX_BYTES, cut[:80]
        assert succeeded["after"]["output"] is not None  # the step after the hostile ones ran

        assert calm["status"]["phase"] == "Succeeded", calm["status"].get("conditions")
        assert store.counts(canary_queue)["succeeded"] == 2
        assert store.counts(hostile_queue)["dead"] == 0  # a refused payload never reached the queue
        canary.assert_fired_on_time()
        assert leader.alive and fleet.leader() is leader, "the hostile tenant cost the leader its life"
        assert steady["metadata"]["uid"]
    finally:
        canary.remove()
