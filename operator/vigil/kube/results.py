"""What became of an attempt, written to its Execution and to its ScheduledJob.

A pod's phase change (or its disappearance) is classified by the pure
`vigil.core.podstatus`, folded into the execution by `vigil.core.executions`
(Succeeded, Backoff with a stored retry time, Dead, Cancelled), and written
with a version precondition. The job's status follows — active and recent
executions, LAST SUCCESS (what the watchdog asserts), the DeadLettered
condition — through the leader's `JobStatusWriter`, or without one (tools,
tests) written here with the job's resourceVersion, read again on a conflict.
Events tell the story: Retrying, DeadLettered, Cancelled. A run asked for by hand
(`source: Manual`, `kubectl vigil run`) also enters the job's ledger, as Manual
with its request id, when its first transition is recorded.
Seeing the same pod event twice changes nothing: an attempt is recorded once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.conditions import ConditionReason, EventReason
from vigil.core.executions import Execution, Phase
from vigil.core.ports import Clock, Conflict
from vigil.core.timeparse import format_rfc3339
from vigil.kube.conflicts import conflict_from, retry_on_conflict
from vigil.kube.events import NORMAL, WARNING, EventRecorder
from vigil.kube.executions import ExecutionStore, execution_from_object
from vigil.kube.jobs import KubeCatalogue
from vigil.kube.jobstatus import JobStatusWriter
from vigil.model import GROUP, VERSION
from vigil.model.execution import ExecutionSource
from vigil.model.jobpatches import transition_patch
from vigil.model.names import ANNOTATION_REQUEST_ID, SCHEDULED_JOBS

log = logging.getLogger(__name__)


class JobResults:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        store: ExecutionStore,
        events: EventRecorder,
        clock: Clock,
        on_transition: Callable[[Execution, Execution], None] = lambda before, after: None,
        writer: JobStatusWriter | None = None,
        catalogue: KubeCatalogue | None = None,
    ) -> None:
        self._writer = writer
        self._catalogue = catalogue
        self._custom = client.CustomObjectsApi(api)
        self._store = store
        self._events = events
        self._clock = clock
        self._on_transition = on_transition

    def record(self, obj: Mapping[str, Any], ex: Execution) -> None:
        """Store an execution's transition, then tell its job and the world.

        With a `JobStatusWriter` the job's side is coalesced (one status write per job per
        interval for all its executions' transitions); without one it is written at once.
        """
        self._store.write(obj, ex)
        self._on_transition(execution_from_object(obj), ex)
        ref = obj["spec"]["job"]
        manual = manual_request(obj)
        if self._writer is not None:
            self._writer.add_transition(
                obj["metadata"]["namespace"], ref["name"], ref["uid"], ex, now=self._clock.now(),
                then=lambda job: self.announce(job, ex), manual=manual,
            )  # fmt: skip
            return
        job = self._job(obj["metadata"]["namespace"], ref["name"], ref["uid"])
        if job is None:
            return
        self.apply(job, [ex], manual={ex.execution_id: manual} if manual is not None else None)

    def apply(
        self, job: Mapping[str, Any], transitions: list[Execution], *, manual: Mapping[str, str] | None = None
    ) -> None:
        """One status write carrying `transitions` (in order), then their Events; `manual` maps
        the execution ids of runs asked for by hand to their request ids."""
        self._update_job(job, transitions, manual or {})
        for ex in transitions:
            self.announce(job, ex)

    def _job(self, namespace: str, name: str, uid: str, *, fresh: bool = False) -> dict[str, Any] | None:
        """The job under `uid`, from the catalogue's cache when it has one (unless `fresh`: then
        from the API server), else None."""
        if self._catalogue is not None:
            found = self._catalogue.fetch(namespace, name) if fresh else self._catalogue.read(namespace, name, uid=uid)
            return found if found is not None and found["metadata"]["uid"] == uid else None
        try:
            job: dict[str, Any] = self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, SCHEDULED_JOBS, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return job if job["metadata"]["uid"] == uid else None

    def _update_job(self, job: Mapping[str, Any], transitions: list[Execution], manual: Mapping[str, str]) -> None:
        """Fold `transitions` into the job's status and write the fields they change, conditional
        on the resourceVersion the status was read at: a concurrent writer makes it a Conflict, and
        the job is read again and the fold done again, so no other writer's change is lost."""
        meta = job["metadata"]
        current: Mapping[str, Any] | None = job

        def attempt() -> None:
            nonlocal current
            if current is None:
                current = self._job(meta["namespace"], meta["name"], meta["uid"], fresh=True)
            if current is None:
                return  # deleted (or deleted and created again): its status went with it
            try:
                self._write_job_status(current, self._job_patch(current, transitions, manual))
            except Conflict:
                current = None
                raise

        retry_on_conflict(attempt)

    def _job_patch(
        self, job: Mapping[str, Any], transitions: list[Execution], manual: Mapping[str, str]
    ) -> dict[str, Any]:
        status: dict[str, Any] = dict(job.get("status") or {})
        patch: dict[str, Any] = {}
        generation = int(job["metadata"].get("generation", 0))
        for ex in transitions:
            now = self._clock.now()
            patch.update(transition_patch(status, ex, generation=generation, now=now, manual=manual.get(ex.execution_id)))
            status.update(patch)
        return patch

    def _write_job_status(self, job: Mapping[str, Any], patch: dict[str, Any]) -> None:
        meta = job["metadata"]
        body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": patch}
        try:
            self._custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], SCHEDULED_JOBS, meta["name"], body
            )
        except ApiException as err:
            conflict_from(err, f"job {meta['namespace']}/{meta['name']} changed concurrently")
            raise

    def announce(self, job: Mapping[str, Any], ex: Execution) -> None:
        last = ex.attempts[-1] if ex.attempts else None
        detail = f"{last.reason}: {last.message}" if last and last.message else (last.reason if last else "")
        if ex.phase is Phase.BACKOFF and ex.retry_at is not None:
            self._events.emit(
                job, type_=WARNING, reason=EventReason.RETRYING,
                message=f"execution {ex.execution_id} attempt {ex.attempt - 1} failed ({detail}); "
                f"attempt {ex.attempt} at {format_rfc3339(ex.retry_at)}",
            )  # fmt: skip
        elif ex.phase is Phase.DEAD:
            self._events.emit(
                job, type_=WARNING, reason=ConditionReason.DEAD_LETTERED,
                message=f"execution {ex.execution_id} dead-lettered after {ex.attempt} attempts ({detail})",
            )  # fmt: skip
        elif ex.phase is Phase.CANCELLED:
            self._events.emit(job, type_=NORMAL, reason=EventReason.CANCELLED, message=f"execution {ex.execution_id}: {ex.reason}")
        log.info("execution %s/%s -> %s (%s)", ex.namespace, ex.execution_id, ex.phase, detail)


def manual_request(obj: Mapping[str, Any]) -> str | None:
    """The request id of an Execution asked for by hand (`source: Manual`), else None."""
    if (obj.get("spec") or {}).get("source") != ExecutionSource.MANUAL:
        return None
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(ANNOTATION_REQUEST_ID) or obj["metadata"]["name"])
