"""The ScheduledJob controller: seeds each job's chain and publishes its schedule and conditions.

It follows the leader's cache of ScheduledJobs (`kube/stores/jobs.job_cache`) and reconciles a job when
its spec changed since it was last acted on (`metadata.generation` ahead of
`status.observedGeneration`, the Kubernetes convention) or when a resumed job's chain is still
paused. A reconcile validates the job; on error it sets `Invalid` with the field named and posts
a Warning Event (a bad spec is not retried: it waits for the next edit). Otherwise it makes sure
the chain has a head for the current schedule, restarts a chain a suspension paused, and
publishes the schedule's summary and conditions. The trigger does the firing; this only seeds it.

Payload templates are rendered for validation on one thread of the controller's own, not on the
workers: a render holds the GIL throughout, so four at once bought no throughput, only four
renders' values alive at once (up to their budgets each), spread over the C library's heaps, each
of which then kept that high-water mark. A tenant editing hostile templates in a loop raised the
operator's peak memory by that much; on one thread it is one render's worth.

Each reconcile queues its first occurrence for the bucket store's group commit without waiting,
so a thousand new jobs share a few bucket writes; once the entry is in, the job's status is
written once through the job's one status writer (`kube/stores/jobstatus.py`), merged with whatever
else waits for the job.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Any

from vigil.core import jsonvalues
from vigil.core.chain import JobView, first_entry, resume_entry
from vigil.core.conditions import ConditionReason, ConditionType, EventReason, set_condition
from vigil.core.payload import (
    PayloadError,
    occurrence_variables,
    render_payload,
    render_template_string,
)
from vigil.core.ports import Clock
from vigil.core.schedule import occurrence_at
from vigil.core.timeparse import format_rfc3339, parse_rfc3339
from vigil.kube.kits.events import NORMAL, WARNING, EventRecorder
from vigil.kube.kits.informer import Informer, Key
from vigil.kube.kits.workqueue import WorkQueue
from vigil.kube.stores.buckets import KubeBucketStore
from vigil.kube.stores.jobstatus import Change, JobStatusWriter, Step
from vigil.model.jobspec import TIER_OFF, InvalidJob, check_tier, job_view
from vigil.model.names import SCHEDULED_JOBS
from vigil.model.scheduledjob import ScheduledJobSpec

log = logging.getLogger(__name__)

WORKERS = 4  # reconciles at once: each validates and queues; none waits for the API server
INSERT_RETRY_SECONDS = 1.0


def schedule_summary(spec: ScheduledJobSpec) -> str:
    if spec.run_at is not None:
        return f"at {format_rfc3339(spec.run_at)}"
    if spec.every is not None:
        return f"every {spec.model_dump(by_alias=True, mode='json')['every']}"
    crons = spec.cron if isinstance(spec.cron, list | tuple) else [spec.cron]
    return " | ".join(str(c) for c in crons)


def needs_reconcile(obj: Mapping[str, Any], *, queue_enabled: bool = False) -> bool:
    """Whether the job's spec changed since it was acted on, its resumed chain is still paused, or
    it is a `task:` job judged while the volume tier was in the other state (an operator restarted
    with `queue.dsn` set, or unset)."""
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"].get("generation"):
        return True
    if (obj.get("spec") or {}).get("task") and _judged_for_other_tier(status, queue_enabled=queue_enabled):
        return True
    paused = (status.get("chain") or {}).get("pausedAt")
    return bool(paused) and not (obj.get("spec") or {}).get("suspend", False)


def _judged_for_other_tier(status: Mapping[str, Any], *, queue_enabled: bool) -> bool:
    """Tier on, and the job is Invalid only because it was off; or tier off, and the job is not
    Invalid at all. A job Invalid for another reason stays as it is: the tier changes nothing."""
    invalid = next((c for c in status.get("conditions") or [] if c.get("type") == ConditionType.INVALID), None)
    if invalid is None or invalid.get("status") != "True":
        return not queue_enabled
    return queue_enabled and TIER_OFF in str(invalid.get("message") or "")


def _validate_payload(view: JobView, spec: ScheduledJobSpec, now: datetime) -> None:
    head = first_entry(view, now=now)
    nominal = head.nominal if head is not None else now.replace(microsecond=0)
    occurrence = occurrence_at(view.schedule, nominal, jitter=view.offset)
    variables = occurrence_variables(
        period_start=occurrence.period_start,
        period_end=occurrence.period_end,
        scheduled_for=occurrence.nominal,
        execution_id="ex-validation",
        job_name=view.name,
        job_namespace=view.namespace,
    )
    rendered = render_payload(
        payload=spec.payload, template=spec.payload_template, variables=variables, timezone=spec.timezone
    )
    # A value the queue store or a consumer refuses (NUL, a lone surrogate, too deep): Invalid, naming the place.
    jsonvalues.check_text(rendered, path="spec.payloadTemplate" if spec.payload_template is not None else "spec.payload")
    if spec.idempotency_key:  # rendered for the same occurrence, within the same budgets
        key = render_template_string(spec.idempotency_key, variables, timezone=spec.timezone, field="spec.idempotencyKey")
        jsonvalues.check(key, path="spec.idempotencyKey")


class JobController:
    def __init__(
        self,
        *,
        jobs: Informer,
        writer: JobStatusWriter,
        store: KubeBucketStore,
        events: EventRecorder,
        clock: Clock,
        workers: int = WORKERS,
        queue_enabled: bool = False,  # the volume tier is on (queue.dsn): `task:` jobs can run
    ) -> None:
        self._queue_enabled = queue_enabled
        self._jobs = jobs
        self._writer = writer
        self._store = store
        self._events = events
        self._clock = clock
        self.queue: WorkQueue[Key] = WorkQueue(SCHEDULED_JOBS, self._reconcile, workers=workers)
        self._renders = ThreadPoolExecutor(1, thread_name_prefix="job-templates")  # see the module doc
        jobs.add_handler(self.changed)

    def changed(self, key: Key, obj: dict[str, Any], deleted: bool) -> None:
        if not deleted and needs_reconcile(obj, queue_enabled=self._queue_enabled):
            self.queue.add(key)

    def _reconcile(self, key: Key) -> float | None:
        obj = self._jobs.get(*key)
        if obj is None or not needs_reconcile(obj, queue_enabled=self._queue_enabled):
            return None
        now = self._clock.now()
        uid = str(obj["metadata"]["uid"])
        generation = int(obj["metadata"].get("generation", 0))  # what this reconcile acts on
        try:
            view, spec = job_view(obj)
            check_tier(spec, queue_enabled=self._queue_enabled)
            if spec.payload_template is not None or spec.idempotency_key:
                self._renders.submit(_validate_payload, view, spec, now).result()
            else:
                _validate_payload(view, spec, now)
        except (InvalidJob, PayloadError, ValueError) as err:
            self._invalid_event(obj, str(err))  # the Event is queued before the condition is written
            self._writer.write_now(key, Change(uid, _invalid(str(err), generation, now), _nothing))
            return None
        chain = (obj.get("status") or {}).get("chain") or {}
        fields: dict[str, Any] = {}
        then = _nothing
        entry = None
        if chain.get("scheduleHash") != view.schedule_hash:
            entry = first_entry(view, now=now)
            if entry is not None:
                fields["nextRun"] = format_rfc3339(entry.fire_at)
            fields["chain"] = {"scheduleHash": view.schedule_hash, "pausedAt": None}
        elif not view.suspended and chain.get("pausedAt"):
            entry = resume_entry(view, paused_at=parse_rfc3339(chain["pausedAt"]), now=now)
            fields["chain"] = {"pausedAt": None}
            then = self._resumed_event
        change = Change(uid, _valid(spec, fields, generation, now), then)
        if entry is None:
            self._writer.write_now(key, change)
            return None
        # The status follows the entry's insert and never precedes it. The worker does not wait:
        # every job waiting meanwhile joins the same group commit, and the status goes through
        # the job's writer. An insert that fails leaves the job unobserved, so it is tried again.
        self._store.insert_later(entry).add_done_callback(lambda done: self._inserted(key, change, done))
        return None

    def _inserted(self, key: Key, change: Change, done: Future[str]) -> None:
        error = done.exception()
        if error is not None:
            log.warning("first occurrence of ScheduledJob %s/%s not inserted (%s); trying again", *key, error)
            self.queue.add_after(key, INSERT_RETRY_SECONDS)
            return
        self._writer.add(key, change)

    def _invalid_event(self, job: Mapping[str, Any], message: str) -> None:
        self._events.emit(job, type_=WARNING, reason=ConditionReason.INVALID_SPEC, message=message)
        log.warning("invalid ScheduledJob %s/%s: %s", job["metadata"]["namespace"], job["metadata"]["name"], message)

    def _resumed_event(self, job: Mapping[str, Any]) -> None:
        self._events.emit(job, type_=NORMAL, reason=EventReason.RESUMED, message="resumed; the catch-up policy decides the gap")


def _nothing(job: Mapping[str, Any]) -> None:
    return None


def _valid(spec: ScheduledJobSpec, fields: Mapping[str, Any], generation: int, now: datetime) -> Step:
    """The status of a valid job, as of the generation reconciled (not the one written over: an
    edit since is reconciled next)."""

    # What the step needs of the spec, taken now: a change can wait for its write behind
    # thousands of others (onboarding), and a parsed spec is kilobytes.
    summary, timezone, suspend = schedule_summary(spec), spec.timezone, spec.suspend
    suspend_message = spec.suspend_reason or "" if suspend else ""

    def step(status: Mapping[str, Any], _: int) -> dict[str, Any]:
        conditions = set_condition(
            list(status.get("conditions") or []), type_=ConditionType.INVALID, status=False,
            reason=ConditionReason.VALID, message="", generation=generation, now=now,
        )  # fmt: skip
        conditions = set_condition(
            conditions, type_=ConditionType.READY, status=True, reason=ConditionReason.SCHEDULED,
            message=f"scheduled: {summary} ({timezone})", generation=generation, now=now,
        )  # fmt: skip
        conditions = set_condition(
            conditions, type_=ConditionType.SUSPENDED, status=suspend,
            reason=ConditionReason.SUSPENDED if suspend else ConditionReason.ACTIVE,
            message=suspend_message, generation=generation, now=now,
        )  # fmt: skip
        return {
            **fields,
            "conditions": conditions,
            "schedule": summary,
            "observedGeneration": generation,
        }

    return step


def _invalid(message: str, generation: int, now: datetime) -> Step:
    def step(status: Mapping[str, Any], _: int) -> dict[str, Any]:
        conditions = set_condition(
            list(status.get("conditions") or []), type_=ConditionType.INVALID, status=True,
            reason=ConditionReason.INVALID_SPEC, message=message, generation=generation, now=now,
        )  # fmt: skip
        conditions = set_condition(
            conditions, type_=ConditionType.READY, status=False, reason=ConditionReason.INVALID_SPEC,
            message=message, generation=generation, now=now,
        )  # fmt: skip
        return {"conditions": conditions, "observedGeneration": generation, "nextRun": None}

    return step
