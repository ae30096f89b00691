"""The pod an execution attempt runs as, built from the job's pod template.

The pod's name derives from the execution id and the attempt, so creating it
twice is a 409, never a second pod. Every container gets the occurrence in its
environment — the stable execution id first, because that is what a job uses
to make itself idempotent — and the labels let anyone find every attempt of an
execution with one selector.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException

from vigil.core.ids import ExecutionId, pod_name
from vigil.core.timeparse import format_rfc3339, parse_rfc3339
from vigil.kube.kits.coreapi import CoreApi
from vigil.kube.kits.informer import Informer, slim
from vigil.model import GROUP, VERSION

# Declared in vigil.model.names; re-exported for the adapters that build or select pods.
from vigil.model.names import ANNOTATION_PERIOD as ANNOTATION_PERIOD
from vigil.model.names import ANNOTATION_SCHEDULED_FOR as ANNOTATION_SCHEDULED_FOR
from vigil.model.names import LABEL_ATTEMPT as LABEL_ATTEMPT
from vigil.model.names import LABEL_EXECUTION as LABEL_EXECUTION
from vigil.model.names import LABEL_JOB as LABEL_JOB
from vigil.model.names import LABEL_JOB_UID as LABEL_JOB_UID
from vigil.model.names import LABEL_MANAGED as LABEL_MANAGED
from vigil.model.names import MANAGED_BY as MANAGED_BY

ENV_NAMES = (
    "VIGIL_EXECUTION_ID",
    "VIGIL_ATTEMPT",
    "VIGIL_SCHEDULED_FOR",
    "VIGIL_PERIOD_START",
    "VIGIL_PERIOD_END",
    "VIGIL_PAYLOAD",
    "VIGIL_IDEMPOTENCY_KEY",
    "VIGIL_JOB",
)


def label_value(text: str) -> str:
    """A label-safe value: the text itself when it fits, else a stable hash of it."""
    if len(text) <= 63:
        return text
    return "h-" + hashlib.sha256(text.encode()).hexdigest()[:40]


def execution_env(
    *,
    execution_id: str,
    attempt: int,
    scheduled_for: datetime,
    period_start: datetime,
    period_end: datetime,
    payload_json: str,
    idempotency_key: str,
    job: str,
) -> list[dict[str, str]]:
    values = (
        execution_id,
        str(attempt),
        format_rfc3339(scheduled_for),
        format_rfc3339(period_start),
        format_rfc3339(period_end),
        payload_json,
        idempotency_key,
        job,
    )
    return [{"name": n, "value": v} for n, v in zip(ENV_NAMES, values, strict=True)]


def owner_reference(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """A controller ownerReference to ``obj``, one of Vigil's own objects of ``kind``.

    ``kind`` is the caller's to say (a job mapping handed around may lack its own). Every
    child blocks its owner's foreground deletion.
    """
    meta = obj["metadata"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def build_pod(
    *,
    template: Mapping[str, Any],
    owner: Mapping[str, Any],
    execution_id: str,
    attempt: int,
    env: list[dict[str, str]],
    timeout: timedelta | None,
    extra_labels: Mapping[str, str] | None = None,
    controller: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The pod manifest for one attempt. `owner` is the job object (kind, name, uid, namespace);
    `controller`, when given, is the object the pod belongs to instead (its Execution: deleting
    the Execution then deletes its pods through garbage collection)."""
    meta = owner["metadata"]
    tmeta = template.get("metadata") or {}
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    spec["restartPolicy"] = "Never"
    if timeout is not None:
        spec["activeDeadlineSeconds"] = max(1, int(timeout.total_seconds()))
    for container in spec.get("containers") or []:
        kept = [e for e in container.get("env") or [] if e.get("name") not in ENV_NAMES]
        container["env"] = kept + env
    labels = {
        **(tmeta.get("labels") or {}),
        LABEL_JOB: label_value(meta["name"]),
        LABEL_JOB_UID: meta["uid"],
        LABEL_EXECUTION: execution_id,
        LABEL_ATTEMPT: str(attempt),
        LABEL_MANAGED: MANAGED_BY,
        **(extra_labels or {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(ExecutionId(execution_id), attempt),
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [
                owner_reference(controller, "Execution")
                if controller is not None
                else owner_reference(owner, owner.get("kind", "ScheduledJob"))
            ],
        },
        "spec": spec,
    }


BY_EXECUTION = "execution"


def execution_key_of(pod: Mapping[str, Any]) -> str | None:
    """`namespace/execution-id` of an execution's pod (the index the controllers look pods up by)."""
    meta = pod["metadata"]
    execution = (meta.get("labels") or {}).get(LABEL_EXECUTION)
    return f"{meta.get('namespace')}/{execution}" if execution else None


def compact_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """An execution pod as the operator reads it: its metadata and status, and of its spec only the
    container names (the main container is the first). The rest of the spec, the rendered payload
    in its environment included (up to 32 KiB), is what the operator wrote and never reads back,
    and retention keeps several finished pods per job. A new object: `pod` is left as it is."""
    containers = [{"name": c.get("name")} for c in (pod.get("spec") or {}).get("containers") or ()]
    return slim({**pod, "spec": {"containers": containers}})


def pod_cache(api: Any) -> Informer:
    """The operator's cache of its executions' pods (not workflow pods: they have their own manager)."""
    return Informer(
        CoreApi(api).list_pod_for_all_namespaces,
        what="pods",
        label_selector=f"{LABEL_MANAGED}={MANAGED_BY},{LABEL_EXECUTION}",
        indexes={BY_EXECUTION: execution_key_of},
        transform=compact_pod,
        packed=ended,  # retention keeps several finished pods a job; the running ones are read often
    )


def delete_pod(core: Any, namespace: str, name: str, *, grace: int | None = None) -> None:
    """Delete a pod that may already be gone. Without `grace` the pod's own
    terminationGracePeriodSeconds applies: SIGTERM, then SIGKILL once it is over, as the job's
    author chose; `grace=0` is for a pod that never started."""
    try:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=grace)
    except ApiException as err:
        if err.status != 404:
            raise


def ended(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def live(pod: Mapping[str, Any]) -> bool:
    """Pending or Running, and not being deleted."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in ("Pending", "Running") and not pod["metadata"].get("deletionTimestamp")


def pod_on_node_since(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod's node took it (its `startTime`), or None while it waits for the scheduler or
    the node."""
    stamp = (pod.get("status") or {}).get("startTime")
    return parse_rfc3339(stamp) if stamp else None


def pod_started_at(pod: Mapping[str, Any]) -> datetime:
    """When an attempt started: its pod's start, else the pod's creation."""
    return pod_on_node_since(pod) or parse_rfc3339(pod["metadata"]["creationTimestamp"])
