"""Deleting a job's finished Executions and their pods beyond its retention limits.

Asked after the history flusher has written a job's executions (and after a log
tail settles): only then can an execution go, and only then is there something
new to prune. `want` queues the job; a few workers of a keyed queue prune the
jobs, one job on one worker at a time, so the deletes keep up with the rate
executions finish even when each request takes tens of milliseconds (one thread
deleting in turn held retention near 10 per second, and finished objects piled
up). Each pass reads one job's executions from the cache (what retention kept
plus what is in flight), asks `vigil.core.retention.to_delete`, and deletes the
rest; their pods are their dependents and follow. The deletes carry the object's uid as a precondition, so an execution
recreated under the same name is never removed by mistake. A job's own
deletion needs nothing here: its executions and pods are garbage-collected as
its dependents.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from vigil.core.retention import Finished, to_delete
from vigil.core.timeparse import parse_rfc3339
from vigil.kube.kits.coreapi import CoreApi
from vigil.kube.kits.informer import Informer
from vigil.kube.kits.workqueue import WorkQueue
from vigil.kube.stores.executions import ExecutionStore, readable
from vigil.kube.stores.jobs import KubeCatalogue
from vigil.kube.stores.pods import BY_EXECUTION, delete_pod
from vigil.model.jobspec import retention_limits

log = logging.getLogger(__name__)

#: Jobs pruned at once: each deletes its own executions in turn.
WORKERS = 4
#: A job to prune: (namespace, name, uid).
JobKey = tuple[str, str, str]

def finished_of(obj: Mapping[str, Any], *, written: Callable[[Mapping[str, Any]], bool]) -> Finished | None:
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
        history_written=written(obj),
    )


class Pruner:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        store: ExecutionStore,
        catalogue: KubeCatalogue,
        written: Callable[[Mapping[str, Any]], bool],
        pods: Informer | None = None,
        workers: int = WORKERS,
    ) -> None:
        self._core = CoreApi(api)
        self._store = store
        self._catalogue = catalogue
        self._written = written
        self._pods = pods
        self.queue: WorkQueue[JobKey] = WorkQueue("pruner", self._reconcile, workers=workers)

    def want(self, namespace: str, job: str, job_uid: str) -> None:
        """Look at this job's executions soon (queued once however often asked; never waits)."""
        self.queue.add((namespace, job, job_uid))

    def _reconcile(self, key: JobKey) -> None:
        self.prune(*key)

    def prune(self, namespace: str, job: str, job_uid: str) -> int:
        """Delete the job's executions beyond its limits, with their pods; returns how many went."""
        spec = self._catalogue.current_spec(namespace, job)
        if spec is None:
            return 0  # gone (its executions go with it) or invalid: nothing is deleted
        limits = retention_limits(spec)
        objs = {o["metadata"]["name"]: o for o in self._store.of_job(namespace, job_uid)}
        views = [v for v in (finished_of(o, written=self._written) for o in objs.values()) if v is not None]
        doomed = to_delete(views, limits)
        for name in doomed:
            self._delete(objs[name])
        if doomed:
            log.info("retention: deleted %d executions of %s/%s (keeps %s)", len(doomed), namespace, job, limits)
        return len(doomed)

    def _delete(self, obj: Mapping[str, Any]) -> None:
        """The Execution, and any pod of it that is not its dependent (pods made before pods
        belonged to their Execution): its own pods go with it by garbage collection."""
        meta = obj["metadata"]
        if self._pods is not None:
            for pod in self._pods.by_index(BY_EXECUTION, f"{meta['namespace']}/{meta['name']}"):
                owners = pod["metadata"].get("ownerReferences") or []
                if not any(o.get("uid") == meta["uid"] for o in owners):
                    delete_pod(self._core, meta["namespace"], pod["metadata"]["name"])
        self._store.delete(obj)
