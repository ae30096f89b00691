"""The execution controller: one reconcile per Execution key, fed by the Execution and pod caches.

Every change to an Execution or to one of its pods queues the Execution's key;
the reconcile reads both from the caches and decides with the pure core:

* the user's levers — `spec.cancel`, `spec.retryRequests` above what was observed;
* a retry whose stored time has come (Backoff → Ready), else a look again then;
* the current attempt's pod: ended → the attempt's outcome (Succeeded, Backoff
  with a stored retry time, Dead); gone → a failed attempt; pending past the limit
  → a failed attempt and the pod deleted; on its node for `running_after` and not
  ended → Running recorded. A pod that ends sooner is recorded straight from Ready,
  with its start taken from the pod: a short attempt costs one status write, and so
  does one that waited for the scheduler or its node (a burst's pods wait there).

A write that conflicts is retried by the queue with backoff, reading afresh.
Seeing the same pod state twice changes nothing: an attempt is recorded once.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from vigil.core.executions import (
    TERMINAL_PHASES,
    Execution,
    ExecutionReason,
    Phase,
    cancel,
    finish,
    is_retry_due,
    manual_retry,
    retry_due,
    start,
)
from vigil.core.ids import ExecutionId, pod_name
from vigil.core.podstatus import (
    DEFAULT_IMAGE_PULL_LIMIT,
    DEFAULT_PENDING_LIMIT,
    PodVerdict,
    attempt_result,
    classify_pod,
    deleted_verdict,
)
from vigil.core.ports import Clock, Conflict
from vigil.kube.controllers.workflowpods import workflow_pod_cache
from vigil.kube.kits.informer import Informer
from vigil.kube.kits.workqueue import WorkQueue
from vigil.kube.stores.executions import ExecutionStore, execution_cache, readable
from vigil.kube.stores.pods import (
    BY_EXECUTION,
    LABEL_EXECUTION,
    delete_pod,
    ended,
    live,
    pod_cache,
    pod_on_node_since,
    pod_started_at,
)
from vigil.kube.stores.results import JobResults
from vigil.kube.stores.started import Started, as_started
from vigil.model.jobspec import retry_policy
from vigil.model.names import EXECUTIONS

log = logging.getLogger(__name__)

Key = tuple[str, str]

#: A pod this process created but that no cache has shown this long is taken as gone.
VANISH_GRACE = timedelta(seconds=30)
#: How often a running attempt is looked at even without events (a pending pod's limit).
RECHECK = timedelta(seconds=15)
CONFLICT_RETRY_SECONDS = 0.05


class ExecutionController:
    def __init__(
        self,
        *,
        store: ExecutionStore,
        pods: Informer,
        started: Started,
        results: JobResults,
        core: Any,  # CoreApi (or the client's CoreV1Api): deletes pods
        clock: Clock,
        wake_dispatcher: Callable[[], None],
        running_after: timedelta = timedelta(seconds=5),
        pending_limit: timedelta = DEFAULT_PENDING_LIMIT,
        image_pull_limit: timedelta = DEFAULT_IMAGE_PULL_LIMIT,
        workers: int = 8,
    ) -> None:
        self._store = store
        self._pods = pods
        self._started = started
        self._results = results
        self._core = core
        self._clock = clock
        self._wake = wake_dispatcher
        self._running_after = running_after
        self._pending_limit = pending_limit
        self._image_pull_limit = image_pull_limit
        #: When this process first saw each Ready execution's pod on its node. Running is counted
        #: from there, not from the pod's `startTime`: an API server under load delivers pod events
        #: seconds late, the start and the end alike, and a short attempt seen on its node late is
        #: not written Running on a view that its end will overtake. (One entry per Ready execution
        #: with a pod on a node; single dict operations, which the queue's workers share safely.)
        self._seen_on_node: dict[Key, datetime] = {}
        self.queue: WorkQueue[Key] = WorkQueue(EXECUTIONS, self.reconcile, workers=workers)

    # -- what queues a key ------------------------------------------------------------------------

    def execution_changed(self, key: Key, obj: Mapping[str, Any], deleted: bool) -> None:
        if deleted:
            self._started.drop(key)
            self._seen_on_node.pop(key, None)
            return
        self.queue.add(key)

    def pod_changed(self, key: Key, pod: Mapping[str, Any], deleted: bool) -> None:
        execution = (pod["metadata"].get("labels") or {}).get(LABEL_EXECUTION)
        if execution:
            self.queue.add((key[0], execution))
        if deleted or ended(pod):
            self._wake()  # a slot may have freed

    # -- the reconcile ----------------------------------------------------------------------------

    def reconcile(self, key: Key) -> float | None:
        """Bring one execution up to date; returns seconds until it wants looking at again."""
        obj = self._store.cached(*key)
        found = readable([obj]) if obj is not None else []
        if not found:
            self._started.drop(key)
            self._seen_on_node.pop(key, None)
            return None
        obj, ex = found[0]
        if ex.phase is not Phase.READY:
            self._seen_on_node.pop(key, None)
        try:
            return self._reconcile(obj, ex)
        except Conflict:
            self._store.get(*key)  # the cache takes the fresh object; look again at once
            return CONFLICT_RETRY_SECONDS

    def _reconcile(self, obj: dict[str, Any], ex: Execution) -> float | None:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if spec.get("cancel") and str(ex.phase) not in TERMINAL_PHASES:
            self._cancel(obj, ex)
            return None
        if int(spec.get("retryRequests") or 0) > int(status.get("observedRetryRequests") or 0):
            self._retry(obj, ex, requested=int(spec["retryRequests"]))
            return None
        key = (ex.namespace, obj["metadata"]["name"])
        mark = self._started.get(key)
        if mark is not None and (ex.phase is not Phase.READY or mark.attempt != ex.attempt):
            self._started.drop(key)
            mark = None
        if ex.phase.terminal:
            self._stop_strays(ex)
            return None
        now = self._clock.now()
        if ex.phase is Phase.BACKOFF:
            if is_retry_due(ex, now):
                self._store.write(obj, retry_due(ex, now=now))
                self._wake()
                return None
            assert ex.retry_at is not None
            return max(0.05, (ex.retry_at - now).total_seconds())
        name = ex.pod or pod_name(ExecutionId(ex.execution_id), ex.attempt)
        pod = self._pods.get(ex.namespace, name)
        if pod is None:
            return self._without_pod(obj, ex, name, mark_at=mark.at if mark else None, now=now)
        return self._with_pod(obj, ex, pod, now=now)

    def _without_pod(
        self,
        obj: dict[str, Any],
        ex: Execution,
        name: str,
        *,
        mark_at: datetime | None,
        now: datetime,
    ) -> float | None:
        if ex.phase is Phase.READY:
            if mark_at is None:
                return None  # waiting for the dispatcher
            waited = now - mark_at
            if waited < VANISH_GRACE:
                return (VANISH_GRACE - waited).total_seconds()
            ex = start(ex, pod=name, now=mark_at)
        self._end(obj, ex, deleted_verdict())
        return None

    def _with_pod(
        self, obj: dict[str, Any], ex: Execution, pod: dict[str, Any], *, now: datetime
    ) -> float | None:
        name = pod["metadata"]["name"]
        running = ex if ex.phase is Phase.RUNNING else start(ex, pod=name, now=pod_started_at(pod))
        verdict = classify_pod(
            pod, now=now, pending_limit=self._pending_limit, image_pull_limit=self._image_pull_limit
        )
        if verdict.finished:
            self._end(obj, running, verdict)
            if verdict.stop_pod:  # failed while Pending (stuck, or an image it will never run)
                delete_pod(self._core, ex.namespace, name, grace=0)
            return None
        recheck = RECHECK.total_seconds()
        if verdict.fails_at is not None:  # a pod waiting on a limit is looked at when it runs out
            recheck = min(recheck, max(0.05, (verdict.fails_at - now).total_seconds()))
        if ex.phase is Phase.READY:
            if pod_on_node_since(pod) is None:
                return recheck  # waiting for the scheduler or its node: the node's write is an event
            age = now - self._seen_on_node.setdefault((ex.namespace, obj["metadata"]["name"]), now)
            if age < self._running_after:
                return min(recheck, (self._running_after - age).total_seconds())
            self._store.write(obj, running)
        return recheck

    def _end(self, obj: Mapping[str, Any], running: Execution, verdict: PodVerdict) -> None:
        policy = retry_policy(obj["spec"].get("retry") or {})
        ended = finish(
            running,
            attempt_result(verdict, attempt=running.attempt),
            policy=policy,
            now=self._clock.now(),
        )
        self._results.record(obj, ended)
        self._started.drop((running.namespace, obj["metadata"]["name"]))
        self._seen_on_node.pop((running.namespace, obj["metadata"]["name"]), None)
        self._wake()

    # -- the user's levers ------------------------------------------------------------------------

    def _cancel(self, obj: Mapping[str, Any], ex: Execution) -> None:
        """spec.cancel: stop the execution, delete its pod, never retry."""
        message = (obj.get("spec") or {}).get("cancelReason") or ExecutionReason.CANCELLED_BY_USER
        ex = as_started(ex, pods=self._pods, started=self._started)
        cancelled = cancel(
            ex, reason=ExecutionReason.CANCELLED_BY_USER, now=self._clock.now(), message=message
        )
        self._results.record(obj, cancelled)
        if ex.pod:
            delete_pod(self._core, ex.namespace, ex.pod)
        self._wake()

    def _retry(self, obj: Mapping[str, Any], ex: Execution, *, requested: int) -> None:
        """spec.retryRequests incremented: run a dead-lettered execution again, same execution id."""
        extra = {"observedRetryRequests": requested}
        if ex.phase is Phase.DEAD:
            self._store.write(obj, manual_retry(ex, now=self._clock.now()), extra=extra)
            self._wake()
        else:
            self._store.write(obj, ex, extra=extra)

    def _stop_strays(self, ex: Execution) -> None:
        """A finished execution has no live pod: one left running (created by a pass that chose
        it just before it was cancelled) is stopped."""
        for pod in self._pods.by_index(BY_EXECUTION, f"{ex.namespace}/{ex.execution_id}"):
            if live(pod):
                log.info("execution %s/%s is %s: stopping its pod %s", ex.namespace, ex.execution_id, ex.phase,
                         pod["metadata"]["name"])  # fmt: skip
                delete_pod(self._core, ex.namespace, pod["metadata"]["name"])


@dataclasses.dataclass
class ExecutionCaches:
    """The leader's watch-fed caches of Executions and their pods, and the pods it just made."""

    executions: Informer
    pods: Informer
    workflow_pods: Informer
    started: Started

    @classmethod
    def build(cls, api: Any, store: ExecutionStore) -> ExecutionCaches:
        caches = cls(
            executions=execution_cache(api),
            pods=pod_cache(api),
            workflow_pods=workflow_pod_cache(api),
            started=Started(),
        )
        store.cache = caches.executions
        return caches

    def when_synced(self, stop: threading.Event, then: Callable[[], None]) -> None:
        """Run `then` once both caches hold a first full list (a pass on half a cache would
        miscount what runs)."""
        while not stop.is_set():
            if all(
                cache.synced.wait(0.5) for cache in (self.executions, self.pods, self.workflow_pods)
            ):
                then()
                return
