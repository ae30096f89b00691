"""The pods of workflow steps: their manifests, and their results as recorded inputs.

A step's pod is named ``<step execution id>-<attempt>``; the execution id is a
pure function of (workflow uid, step id), so a restarted operator that creates
the pod of a running step again meets 409 AlreadyExists and adopts the pod it
finds, never a second one. Compensation pods have their own id, from
(workflow uid, ``compensate/<step>``).

The pods carry their own ``managed-by`` value, so the ScheduledJob pod handlers
never mistake them for job executions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from vigil.core.orchestrator import WantedPod
from vigil.core.podstatus import PodPhase, classify_pod
from vigil.core.workflow import Event, Record, parse_output
from vigil.kube.kits.coreapi import CoreApi
from vigil.kube.kits.informer import Informer
from vigil.kube.stores.pods import build_pod, label_value, live
from vigil.model.names import (
    LABEL_COMPENSATION,
    LABEL_JOB,
    LABEL_JOB_UID,
    LABEL_MANAGED,
    LABEL_STEP,
    LABEL_WORKFLOW,
    LABEL_WORKFLOW_UID,
    MANAGED_BY_WORKFLOWS,
)
from vigil.model.workflow import WORKFLOW


def workflow_pod(
    *,
    workflow: Mapping[str, Any],
    wanted: WantedPod,
    template: Mapping[str, Any],
    inputs: Mapping[str, Any],
    parameters: Mapping[str, str],
    output: Any = None,
) -> dict[str, Any]:
    """The manifest of one attempt of a step (or of its compensation)."""
    meta = workflow["metadata"]
    env = [
        {"name": "VIGIL_EXECUTION_ID", "value": wanted.execution_id},
        {"name": "VIGIL_ATTEMPT", "value": str(wanted.attempt)},
        {"name": "VIGIL_IDEMPOTENCY_KEY", "value": wanted.execution_id},
        {"name": "VIGIL_WORKFLOW", "value": meta["name"]},
        {"name": "VIGIL_STEP", "value": wanted.step},
        {"name": "VIGIL_INPUTS", "value": json.dumps(inputs, sort_keys=True)},
        {"name": "VIGIL_PARAMETERS", "value": json.dumps(dict(parameters), sort_keys=True)},
    ]
    if wanted.compensation:
        env += [
            {"name": "VIGIL_COMPENSATION", "value": "true"},
            {"name": "VIGIL_OUTPUT", "value": json.dumps(output, sort_keys=True)},
        ]
    pod = build_pod(
        template=template,
        owner={**workflow, "kind": WORKFLOW.kind},
        execution_id=wanted.execution_id,
        attempt=wanted.attempt,
        env=env,
        timeout=None,
        extra_labels={
            LABEL_MANAGED: MANAGED_BY_WORKFLOWS,
            LABEL_WORKFLOW: label_value(meta["name"]),
            LABEL_WORKFLOW_UID: meta["uid"],
            LABEL_STEP: wanted.step,
            LABEL_COMPENSATION: "true" if wanted.compensation else "false",
        },
    )
    labels = pod["metadata"]["labels"]
    labels.pop(LABEL_JOB, None)
    labels.pop(LABEL_JOB_UID, None)
    return pod


def pod_result(pod: Mapping[str, Any], wanted: WantedPod, *, now: datetime) -> Record | None:
    """The input a finished pod reports, or None while it runs."""
    verdict = classify_pod(pod, now=now)
    if not verdict.finished:
        return None
    detail: dict[str, Any] = {"pod": pod["metadata"]["name"]}
    if wanted.compensation:
        detail["compensation"] = True
    if verdict.phase is PodPhase.SUCCEEDED:
        output = parse_output(verdict.output)
        if output is not None:
            detail["output"] = output
        return Record(Event.POD_SUCCEEDED, now, wanted.step, wanted.attempt, detail)
    detail |= {"reason": verdict.reason, "message": verdict.message}
    if verdict.exit_code is not None:
        detail["exitCode"] = verdict.exit_code
    return Record(Event.POD_FAILED, now, wanted.step, wanted.attempt, detail)


#: The step pod cache's indexes: pods by their workflow's uid; and the pods that hold a dispatch
#: slot (`live`: Pending or Running, not being deleted), under the one value LIVE. The dispatcher
#: counts those each pass without reading the finished ones, which stay in the cache until their
#: workflow leaves (a day of finished workflows by default): a scan of every step pod was a seventh
#: of the operator's CPU in a 2,000-step run, and grew with every workflow kept.
BY_WORKFLOW = "workflow-uid"
LIVE = "live"


def _live(pod: Mapping[str, Any]) -> str | None:
    return LIVE if live(pod) else None


def workflow_of(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, workflow name) of a step pod, from its owner reference."""
    meta = pod["metadata"]
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == WORKFLOW.kind:
            return (meta["namespace"], owner["name"])
    return None


def workflow_pod_cache(api: Any) -> Informer:
    """The leader's cache of workflow step pods, indexed by workflow uid."""
    return Informer(
        CoreApi(api).list_pod_for_all_namespaces,
        what="workflow pods",
        label_selector=f"{LABEL_MANAGED}={MANAGED_BY_WORKFLOWS},{LABEL_WORKFLOW}",
        indexes={
            BY_WORKFLOW: lambda pod: (pod["metadata"].get("labels") or {}).get(LABEL_WORKFLOW_UID),
            LIVE: _live,
        },
    )
