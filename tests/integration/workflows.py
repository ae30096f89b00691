"""Helpers for tests that run Workflows through a real operator and inspect what happened."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from tests.integration.conftest import KubeCluster
from tests.waiting import wait_for
from vigil.core.history import WorkflowEventRecord
from vigil.core.ports import HistoryUnavailable
from vigil.history.store import SqlHistory
from vigil.kube.controllers.workflows import WorkflowEngine

GROUP, VERSION = "vigil.dev", "v1alpha1"
WORKFLOWS, DEFINITIONS = "workflows", "workflowdefinitions"
FINISHED = ("Succeeded", "Failed", "Compensated", "Cancelled")


class MovableClock:
    """A clock the test moves (``at``), from now to the second."""

    def __init__(self) -> None:
        self.at = datetime.now(UTC).replace(microsecond=0)

    def now(self) -> datetime:
        return self.at


def pod_step(step_id: str, *deps: str, command: str = "true", **extra: Any) -> dict[str, Any]:
    """A pod step running ``sh -c command``; ``$VIGIL_INPUTS`` and friends are in its env."""
    step: dict[str, Any] = {
        "id": step_id,
        "type": "pod",
        "template": {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", command]}]}},
    }
    if deps:
        step["dependsOn"] = list(deps)
    step.update(extra)
    return step


def emit(output: dict[str, Any], *, then: str = "") -> str:
    """A command that writes ``output`` as its termination message (the step's output)."""
    text = json.dumps(output).replace("'", "")
    return f"printf '%s' '{text}' > \"$TERMINATION_MESSAGE_PATH\"" + (f"; {then}" if then else "")


def create_workflow(cluster: KubeCluster, namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workflow", "metadata": {"name": name}, "spec": spec}
    obj: dict[str, Any] = cluster.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, WORKFLOWS, body)
    return obj


def get_workflow(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = cluster.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, WORKFLOWS, name)
    return obj


def wait_phase(cluster: KubeCluster, namespace: str, name: str, *phases: str, timeout: float = 120) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        try:
            obj = get_workflow(cluster, namespace, name)
        except ApiException as error:
            if error.status == 404:
                return None  # not created yet
            raise
        return obj if (obj.get("status") or {}).get("phase") in phases else None

    return wait_for(reached, timeout=timeout, what=f"workflow {name} in {phases}")


def wait_step(cluster: KubeCluster, namespace: str, name: str, step: str, phase: str, *, timeout: float = 120) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        obj = get_workflow(cluster, namespace, name)
        steps = (obj.get("status") or {}).get("steps") or {}
        return obj if (steps.get(step) or {}).get("phase") == phase else None

    return wait_for(reached, timeout=timeout, what=f"step {step} of {name} {phase}")


def history(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list((obj.get("status") or {}).get("history") or [])


def events_of(obj: dict[str, Any], *kinds: str) -> list[dict[str, Any]]:
    return [entry for entry in history(obj) if entry["event"] in kinds]


def step_pods(cluster: KubeCluster, namespace: str, name: str) -> list[Any]:
    uid = get_workflow(cluster, namespace, name)["metadata"]["uid"]
    return list(cluster.core.list_namespaced_pod(namespace, label_selector=f"vigil.dev/workflow-uid={uid}").items)


def pods_per_step(cluster: KubeCluster, namespace: str, name: str, *, compensation: bool = False) -> Counter[str]:
    flag = "true" if compensation else "false"
    return Counter(
        pod.metadata.labels["vigil.dev/step"]
        for pod in step_pods(cluster, namespace, name)
        if pod.metadata.labels.get("vigil.dev/compensation") == flag
    )


def env_of(pod: Any) -> dict[str, str]:
    return {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None}


def append_request(api: Any, namespace: str, name: str, **item: Any) -> dict[str, Any]:
    """Append one item to spec.requests with a JSON patch (as `kubectl vigil` does).

    Appending to an existing list (`/spec/requests/-`) is atomic on the server. Creating the list
    is guarded by a test of the resourceVersion, which fails with a bare 422 when the operator
    wrote the status meanwhile: then read again and retry.
    """
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    item = {"id": f"r-{uuid.uuid4().hex[:10]}", **item}
    for _ in range(5):
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, WORKFLOWS, name)
        if (obj.get("spec") or {}).get("requests") is not None:
            patch = [{"op": "add", "path": "/spec/requests/-", "value": item}]
        else:
            version = obj["metadata"]["resourceVersion"]
            patch = [
                {"op": "test", "path": "/metadata/resourceVersion", "value": version},
                {"op": "add", "path": "/spec/requests", "value": [item]},
            ]
        try:
            result: dict[str, Any] = custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, WORKFLOWS, name, patch, _content_type="application/json-patch+json"
            )
        except ApiException as error:
            if error.status in (409, 422) and len(patch) == 2 and "rejected our request" in str(error.body):
                continue  # the resourceVersion moved under us
            raise
        return result
    raise AssertionError(f"could not append a request to {namespace}/{name}: it kept changing")


def refused(error: ApiException) -> str:
    return str(error.body or error.reason)


class Outage:
    """The history database, which the test can take down and bring back."""

    def __init__(self, store: SqlHistory) -> None:
        self.store = store
        self.down = False

    def write_workflow_events(self, records: list[WorkflowEventRecord]) -> None:
        if self.down:
            raise HistoryUnavailable("connection refused")
        self.store.write_workflow_events(records)

    def workflow_event(self, workflow_uid: str, seq: int) -> WorkflowEventRecord | None:
        if self.down:
            raise HistoryUnavailable("connection refused")
        return self.store.workflow_event(workflow_uid, seq)


def watch_brings(engine: WorkflowEngine, obj: dict[str, Any]) -> None:
    """What the leader's Workflow informer does with a watch event of ``obj``: its cache keeps that
    version (when newer than the one it holds), and the engine is told (it queues a pass when the
    version is news to it)."""
    engine.cache.observe(obj)
    meta = obj["metadata"]
    engine.seen((meta["namespace"], meta["name"]), obj, False)
