"""Execution objects on the API server: create once, read by phase, write transitions.

An Execution is named from its execution id, so the trigger (or a backfill)
creating it twice gets 409 and there is still one. Its phase is mirrored into a
label so the dispatcher lists only what it needs (Ready, Running, Backoff) —
never the whole history. Transitions are written as one status patch carrying
the resourceVersion read, so two writers cannot both move the same execution.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.dispatch import Priority
from vigil.core.executions import (
    Execution,
    Phase,
    execution_from_dict,
    execution_to_dict,
    new_execution,
)
from vigil.core.ids import ExecutionId
from vigil.core.timeparse import format_rfc3339, parse_rfc3339
from vigil.kube.conflicts import conflict_from
from vigil.kube.pods import (
    LABEL_EXECUTION,
    LABEL_JOB,
    LABEL_JOB_UID,
    LABEL_MANAGED,
    MANAGED_BY,
    label_value,
    owner_reference,
)
from vigil.model import GROUP, VERSION

log = logging.getLogger(__name__)

PLURAL = "executions"
LABEL_PHASE = "vigil.dev/phase"
LABEL_PRIORITY = "vigil.dev/priority"
LABEL_HISTORY = "vigil.dev/history"  # "pending" until every attempt is in the history database
ACTIVE_PHASES = (Phase.READY, Phase.RUNNING, Phase.BACKOFF)
#: Status keys `execution_to_dict` leaves out when unset. The status is written as a merge patch,
#: where an absent key keeps its old value: each must be sent as null to be removed (a retryAt
#: left over from Backoff would make the stored execution unreadable).
OPTIONAL_STATUS_KEYS = ("retryAt", "startedAt", "finishedAt", "pod")


def execution_from_object(obj: Mapping[str, Any]) -> Execution:
    """The core's execution record of an object; a fresh one (no status yet) is Ready since creation."""
    status = obj.get("status") or {}
    if status.get("phase"):
        return execution_from_dict(status)
    spec = obj["spec"]
    return new_execution(
        ExecutionId(spec["executionId"]),
        namespace=obj["metadata"]["namespace"],
        job=spec["job"]["name"],
        scheduled_for=parse_rfc3339(spec["scheduledFor"]),
        now=parse_rfc3339(obj["metadata"]["creationTimestamp"]),
        priority=Priority(spec.get("priority", "normal")),
    )


def readable(objs: Iterable[dict[str, Any]]) -> list[tuple[dict[str, Any], Execution]]:
    """Each object with its execution record; one that cannot be read is logged and left out.

    A single malformed Execution must not stall dispatching or history writing for all the others.
    """
    out: list[tuple[dict[str, Any], Execution]] = []
    for obj in objs:
        try:
            out.append((obj, execution_from_object(obj)))
        except (KeyError, ValueError) as err:
            meta = obj.get("metadata") or {}
            log.error("execution %s/%s is unreadable, skipped: %s", meta.get("namespace"), meta.get("name"), err)
    return out


class ExecutionStore:
    def __init__(self, api: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api)
        self.api_client = api

    def create(self, body: dict[str, Any]) -> bool:
        """Create an Execution; False if it already exists (a repeat of the same occurrence)."""
        namespace = body["metadata"]["namespace"]
        try:
            self._custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return obj

    def find(self, execution_id: str) -> dict[str, Any] | None:
        """The Execution with this id, in whichever namespace (ids are unique by construction)."""
        found = self.select(selector=f"{LABEL_EXECUTION}={execution_id}")
        return found[0] if found else None

    def select(self, *, selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
        if namespace:
            result = self._custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, label_selector=selector
            )
        else:
            result = self._custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, label_selector=selector)
        return list(result["items"])

    def in_phase(self, *phases: Phase) -> list[dict[str, Any]]:
        selector = f"{LABEL_PHASE} in ({','.join(str(p) for p in phases)})"
        return self.select(selector=selector)

    def active_for_job(self, namespace: str, job_uid: str) -> list[dict[str, Any]]:
        selector = f"{LABEL_JOB_UID}={job_uid},{LABEL_PHASE} in ({','.join(str(p) for p in ACTIVE_PHASES)})"
        return self.select(selector=selector, namespace=namespace)

    def write(
        self, obj: Mapping[str, Any], execution: Execution, *, extra: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Store a transition: status (conditional on the object's resourceVersion), then the phase label.

        The label is a mirror for listing, and the status subresource cannot write labels, so
        these are two writes. If a crash lands between them the label is stale and the history
        label does not say "pending": `repair_labels`, run on every Execution event (including
        the listing a new leader starts with), puts both right, so the transition still reaches
        the history database and `dead-letters`.
        """
        meta = obj["metadata"]
        cleared = dict.fromkeys(OPTIONAL_STATUS_KEYS)
        status = {**cleared, **execution_to_dict(execution), **(extra or {})}
        body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status}
        try:
            self._custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], body
            )
        except ApiException as err:
            conflict_from(err, f"execution {meta['namespace']}/{meta['name']} changed concurrently")
            raise
        return self.label(obj, {LABEL_PHASE: str(execution.phase), LABEL_HISTORY: "pending"})

    def repair_labels(self, obj: Mapping[str, Any]) -> bool:
        """Mirror status.phase into the labels if a crash left them behind; True if it did.

        A stale phase label means the last transition's second write never happened, so that
        transition's history was never marked for writing either: mark it pending again (a
        history row is an upsert, so writing one twice is harmless).
        """
        phase = (obj.get("status") or {}).get("phase")
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if not phase or labels.get(LABEL_PHASE) == phase:
            return False
        meta = obj["metadata"]
        log.warning(
            "execution %s/%s: phase label %s behind status %s (a write was interrupted); repairing",
            meta["namespace"], meta["name"], labels.get(LABEL_PHASE), phase,
        )  # fmt: skip
        self.label(obj, {LABEL_PHASE: phase, LABEL_HISTORY: "pending"}, version=meta["resourceVersion"])
        return True

    def label(
        self, obj: Mapping[str, Any], labels: Mapping[str, str], *, version: str | None = None
    ) -> dict[str, Any]:
        """Set labels; with `version`, only if the object is still at that resourceVersion."""
        meta = obj["metadata"]
        patch: dict[str, Any] = {"labels": dict(labels)}
        if version is not None:
            patch["resourceVersion"] = version
        try:
            updated: dict[str, Any] = self._custom.patch_namespaced_custom_object(
                GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], {"metadata": patch}
            )
        except ApiException as err:
            if err.status in (404, 409) and version is not None:
                return dict(obj)
            raise
        return updated

    def patch_spec(self, namespace: str, name: str, spec: dict[str, Any]) -> None:
        self._custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name, {"spec": spec})


def execution_body(
    *,
    job: Mapping[str, Any],
    execution_id: str,
    scheduled_for: datetime,
    period_start: datetime,
    period_end: datetime,
    source: str,
) -> dict[str, Any]:
    """A new Execution owned by its job: Ready (a missing status reads as Ready since creation)."""
    meta, spec = job["metadata"], job.get("spec") or {}
    priority = spec.get("priority", "normal")
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Execution",
        "metadata": {
            "name": execution_id,
            "namespace": meta["namespace"],
            "labels": {
                LABEL_JOB: label_value(meta["name"]),
                LABEL_JOB_UID: meta["uid"],
                LABEL_EXECUTION: execution_id,
                LABEL_PHASE: str(Phase.READY),
                LABEL_PRIORITY: priority,
                LABEL_HISTORY: "pending",
                LABEL_MANAGED: MANAGED_BY,
            },
            "ownerReferences": [owner_reference(job, "ScheduledJob")],
        },
        "spec": {
            "job": {"name": meta["name"], "uid": meta["uid"]},
            "executionId": execution_id,
            "scheduledFor": format_rfc3339(scheduled_for),
            "periodStart": format_rfc3339(period_start),
            "periodEnd": format_rfc3339(period_end),
            "priority": priority,
            "retry": spec.get("retry") or {},
            "source": source,
        },
    }
