"""What became of a launched pod, written back to its ScheduledJob's status.

A finished pod leaves the job's `active` list and joins `recent`; a Succeeded
one moves LAST SUCCESS, which is what the watchdog asserts. Writes are keyed by
execution id and attempt, so seeing the same pod event twice changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.ports import Clock
from vigil.core.timeparse import format_rfc3339, parse_rfc3339
from vigil.kube.jobs import PLURAL
from vigil.kube.pods import LABEL_ATTEMPT, LABEL_EXECUTION
from vigil.model import GROUP, VERSION

RECENT_SIZE = 20
FINISHED = ("Succeeded", "Failed")


def pod_outcome(pod: Mapping[str, Any]) -> tuple[str, str | None, str]:
    """(phase, finishedAt or None, reason) of a pod."""
    status = pod.get("status") or {}
    finished: str | None = None
    reason = status.get("reason") or ""
    for cs in status.get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated") or {}
        finished = terminated.get("finishedAt") or finished
        if terminated and not reason:
            reason = f"{terminated.get('reason', '')} (exit code {terminated.get('exitCode')})"
    return status.get("phase") or "Pending", finished, reason


class PodResults:
    def __init__(self, api: client.ApiClient, *, clock: Clock) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._clock = clock

    def observe(self, pod: Mapping[str, Any]) -> None:
        phase, finished, reason = pod_outcome(pod)
        owner = next(
            (o for o in pod["metadata"].get("ownerReferences") or [] if o.get("kind") == "ScheduledJob"), None
        )
        if phase not in FINISHED or owner is None:
            return
        namespace = pod["metadata"]["namespace"]
        try:
            job = self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, owner["name"])
        except ApiException as err:
            if err.status == 404:
                return
            raise
        if job["metadata"]["uid"] != owner.get("uid"):
            return
        labels = pod["metadata"].get("labels") or {}
        execution = labels.get(LABEL_EXECUTION, "")
        attempt = int(labels.get(LABEL_ATTEMPT, "1"))
        finished_at = finished or format_rfc3339(self._clock.now())
        status = job.get("status") or {}
        active = [a for a in status.get("active") or [] if a.get("executionId") != execution]
        entry = {
            "executionId": execution,
            "attempt": attempt,
            "outcome": phase,
            "scheduledFor": next(
                (a.get("scheduledFor") for a in status.get("active") or [] if a.get("executionId") == execution),
                None,
            ),
            "finishedAt": finished_at,
            "reason": reason,
        }
        recent = [r for r in status.get("recent") or [] if (r.get("executionId"), r.get("attempt")) != (execution, attempt)]
        recent = [*recent, {k: v for k, v in entry.items() if v is not None}][-RECENT_SIZE:]
        patch: dict[str, Any] = {"active": active, "recent": recent}
        if phase == "Succeeded":
            last = status.get("lastSuccessfulTime")
            if last is None or parse_rfc3339(last) < parse_rfc3339(finished_at):
                patch["lastSuccessfulTime"] = finished_at
        self._custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, owner["name"], {"status": patch}
        )
