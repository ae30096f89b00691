"""The console's pages of the volume tier and the watchdog: Dead letters, Task queues, Watchdog.

    GET  /console/dead-letters?namespace=            dead executions of every TaskQueue the
                                                     viewer may read, longest dead first
    POST /console/namespaces/{ns}/taskqueues/{q}/retry   run the checked ones again
    GET  /console/taskqueues?namespace=              each TaskQueue's status, its breakdown per
                                                     priority and tenant, its recurring jobs
    GET  /console/watchdog?namespace=                what is overdue, broken, stale, failing to
                                                     launch or suspended too long, and since when

The queue store is read, and retried, through the volume tier's own routes
(vigil.api.queue) with the viewer's token: the same TokenReview and the same
SubjectAccessReview on ``taskqueues/executions`` (``get`` to read, ``update`` to retry) as a
program calling `/v1/...`, so the console grants nothing the API does not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from vigil.api.console import fields, views
from vigil.api.console.access import Viewer, list_jobs_access
from vigil.api.console.sources import ConsoleReads, Obj
from vigil.api.queue import QueueApi
from vigil.core.access import Access
from vigil.model.names import GROUP, TASK_QUEUES

#: Dead letters shown per queue (the longest dead first); the CLI pages through the rest.
DEAD_ROWS = 100
#: Executions retried by one form at most.
RETRY_MAX = 100
#: The watchdog's conditions on a ScheduledJob, as the page names them.
WATCHED = {
    "Overdue": "overdue",
    "ScheduleChainBroken": "broken",
    "OutputStale": "stale",
    "LaunchFailing": "failing to launch",
    "DeadLettered": "dead-lettered",
    "SuspendedTooLong": "suspended too long",
}
#: The volume watchdog's conditions on a TaskQueue.
WATCHED_QUEUES = {"Behind": "behind", "JobsOverdue": "jobs overdue", "ChainBroken": "chain broken"}


def list_queues_access(namespace: str) -> Access:
    return Access(verb="list", group=GROUP, resource=TASK_QUEUES, namespace=namespace)


class VolumePages:
    """The reads behind the three pages; `queue_api` None: the volume tier is off."""

    def __init__(self, reads: ConsoleReads, queue_api: QueueApi | None) -> None:
        self._reads = reads
        self._queue_api = queue_api

    def queue_namespaces(self, viewer: Viewer, only: str) -> list[str]:
        listed = [ns for ns in self._reads.namespaces() if not only or ns == only]
        return [ns for ns in listed if viewer.may(list_queues_access(ns))]

    def _api(
        self, viewer: Viewer, method: str, path: str, query: str = ""
    ) -> tuple[int, Mapping[str, Any]]:
        if self._queue_api is None:
            return 503, {"detail": "the volume tier is off (no queue.dsn)"}
        status, _, body = self._queue_api.answer(
            method, path, token=viewer.token, query=query, body=b""
        )
        try:
            data = json.loads(body)
        except ValueError:
            data = {}
        return status, data if isinstance(data, Mapping) else {}

    def dead_letters(self, viewer: Viewer, only: str) -> list[dict[str, Any]]:
        """[{namespace, queue, status, detail, dead: [...]}] for every TaskQueue the viewer may list."""
        found = []
        for ns in self.queue_namespaces(viewer, only):
            for queue in self._reads.taskqueues(ns):
                name = str(queue["metadata"]["name"])
                status, data = self._api(
                    viewer,
                    "GET",
                    f"/v1/namespaces/{ns}/taskqueues/{name}/dead-letters",
                    f"limit={DEAD_ROWS}",
                )
                found.append({
                    "namespace": ns, "queue": name, "status": status, "detail": str(data.get("detail", "")),
                    "dead": list(data.get("deadLetters") or []) if status == 200 else [],
                })  # fmt: skip
        return found

    def retry(self, viewer: Viewer, namespace: str, queue: str, ids: Sequence[str]) -> list[str]:
        """Retry each execution of `ids` through the queue API; one line of outcome each."""
        lines = []
        for execution_id in ids:
            path = f"/v1/namespaces/{namespace}/taskqueues/{queue}/executions/{execution_id}/retry"
            status, data = self._api(viewer, "POST", path)
            lines.append(
                f"{execution_id}: retried"
                if status == 200
                else f"{execution_id}: refused ({status}): {data.get('detail', '')}"
            )
        return lines

    def taskqueues(self, viewer: Viewer, only: str) -> list[dict[str, Any]]:
        rows = []
        for ns in self.queue_namespaces(viewer, only):
            jobs = self._reads.jobs(ns)
            for queue in self._reads.taskqueues(ns):
                name = str(queue["metadata"]["name"])
                status, data = self._api(
                    viewer, "GET", f"/v1/namespaces/{ns}/taskqueues/{name}/stats"
                )
                recurring = [
                    views.job_row(job)
                    for job in jobs
                    if ((job.get("spec") or {}).get("task") or {}).get("queue") == name
                ]
                rows.append({
                    "namespace": ns, "name": name, "status": queue.get("status") or {},
                    "conditions": _conditions(queue), "breakdown": list(data.get("breakdown") or []) if status == 200 else None,
                    "recurring": recurring,
                })  # fmt: skip
        return rows

    def watchdog(self, viewer: Viewer, only: str) -> list[dict[str, str]]:
        """Every watched condition that holds, on the jobs and TaskQueues the viewer may list,
        the oldest first (what has waited longest)."""
        found: list[dict[str, str]] = []
        for ns in self._reads.namespaces():
            if only and ns != only:
                continue
            if viewer.may(list_jobs_access(ns)):
                for job in self._reads.jobs(ns):
                    found.extend(_alarms(job, "scheduledjob", WATCHED))
            if viewer.may(list_queues_access(ns)):
                for queue in self._reads.taskqueues(ns):
                    found.extend(_alarms(queue, "taskqueue", WATCHED_QUEUES))
        return sorted(found, key=lambda row: (row["since"], row["namespace"], row["name"]))


def _conditions(obj: Obj) -> list[str]:
    return [f"{c.get('type')}={c.get('status')}" for c in views.conditions_of(obj)]


def _alarms(obj: Obj, kind: str, watched: Mapping[str, str]) -> list[dict[str, str]]:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    rows = []
    for condition in views.conditions_of(obj):
        what = watched.get(str(condition.get("type")))
        if what is None or condition.get("status") != "True":
            continue
        message = str(condition.get("message") or "")
        if condition.get("type") == "SuspendedTooLong" and spec.get("suspendedBy"):
            message = f"{message} (suspended by {spec['suspendedBy']}: {spec.get('suspendReason') or 'no reason'})"
        rows.append({
            "namespace": str(meta.get("namespace", "")), "name": str(meta.get("name", "")), "kind": kind, "what": what,
            "reason": str(condition.get("reason") or ""), "message": message,
            "since": str(condition.get("lastTransitionTime") or ""),
        })  # fmt: skip
    return rows


def retry_form(body: str) -> tuple[list[str], str]:
    """The executions checked in a retry form (1 to RETRY_MAX ids), and its CSRF field."""
    ids, csrf = fields.many(body, "execution", limit=RETRY_MAX, also=frozenset({"csrf"}))
    if not ids:
        raise fields.BadField("execution", "check at least one dead letter")
    for one in ids:
        if not fields.EXECUTION_ID.fullmatch(one):
            raise fields.BadField("execution", "is not an execution id")
    return ids, csrf
