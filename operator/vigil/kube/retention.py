"""Deleting a job's finished Executions and their pods beyond its retention limits.

Run after the history flusher has written a job's executions: only then can an
execution go, and only then is there something new to prune. Each pass lists
one job's executions (by its uid label: what retention kept plus what is in
flight), asks `vigil.core.retention.to_delete`, and deletes the rest with their
pods. The deletes carry the object's uid as a precondition, so an execution
recreated under the same name is never removed by mistake. A job's own
deletion needs nothing here: its executions and pods are garbage-collected as
its dependents.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.retention import Finished, to_delete
from vigil.core.timeparse import parse_rfc3339
from vigil.kube.executions import LABEL_HISTORY, PLURAL, ExecutionStore, readable
from vigil.kube.jobs import KubeCatalogue
from vigil.kube.pods import LABEL_EXECUTION, LABEL_JOB_UID
from vigil.model import GROUP, VERSION
from vigil.model.jobspec import retention_limits

log = logging.getLogger(__name__)

def finished_of(obj: Mapping[str, Any]) -> Finished | None:
    """Retention's view of one Execution object (None if it cannot be read)."""
    found = readable([dict(obj)])
    if not found:
        return None
    _, ex = found[0]
    ended = (obj.get("status") or {}).get("finishedAt")
    return Finished(
        name=obj["metadata"]["name"],
        phase=ex.phase,
        ended=parse_rfc3339(ended) if ended else None,
        history_written=(obj["metadata"].get("labels") or {}).get(LABEL_HISTORY) == "written",
    )


class Pruner:
    def __init__(self, api: client.ApiClient, *, store: ExecutionStore, catalogue: KubeCatalogue) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._core = client.CoreV1Api(api)
        self._store = store
        self._catalogue = catalogue

    def prune(self, namespace: str, job: str, job_uid: str) -> int:
        """Delete the job's executions beyond its limits, with their pods; returns how many went."""
        spec = self._catalogue.current_spec(namespace, job)
        if spec is None:
            return 0  # gone (its executions go with it) or invalid: nothing is deleted
        limits = retention_limits(spec)
        selector = f"{LABEL_JOB_UID}={job_uid}"
        objs = {o["metadata"]["name"]: o for o in self._store.select(selector=selector, namespace=namespace)}
        views = [v for v in (finished_of(o) for o in objs.values()) if v is not None]
        doomed = to_delete(views, limits)
        for name in doomed:
            self._delete(objs[name])
        if doomed:
            log.info("retention: deleted %d executions of %s/%s (keeps %s)", len(doomed), namespace, job, limits)
        return len(doomed)

    def _delete(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        try:
            pods = self._core.list_namespaced_pod(namespace, label_selector=f"{LABEL_EXECUTION}={name}").items
            for pod in pods:
                self._delete_pod(namespace, pod.metadata.name)
            self._custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name,
                body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=meta["uid"])),
            )  # fmt: skip
        except ApiException as err:
            if err.status not in (404, 409):  # gone already, or a new object of the same name
                raise

    def _delete_pod(self, namespace: str, name: str) -> None:
        try:
            self._core.delete_namespaced_pod(name, namespace)
        except ApiException as err:
            if err.status != 404:
                raise
