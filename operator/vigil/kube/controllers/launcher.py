"""From a fired occurrence to what runs it: an Execution, a Workflow or a task in the queue store.

`ExecutionLauncher` is the trigger's Launcher: it applies the job's
concurrency policy, then creates the Execution named from the execution id — a
second create is 409, so a repeated pass never makes a second one. The
dispatcher later starts attempts within capacity, and builds each attempt's pod
with `vigil.kube.controllers.executionpods`: an occurrence's path (trigger →
launcher → Execution → execution controller → dispatcher → pod) enters this
module once, at its start.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from kubernetes.client import AuthenticationV1Api, CustomObjectsApi, V1SelfSubjectReview
from kubernetes.client.exceptions import ApiException

from vigil.core import jsonvalues
from vigil.core.chain import Fire, Reason
from vigil.core.executions import ConcurrencyPolicy, Execution, ExecutionReason, cancel, concurrency
from vigil.core.ids import ExecutionId
from vigil.core.payload import (
    PayloadError,
    occurrence_variables,
    render_payload,
    render_template_string,
)
from vigil.core.ports import Clock, Conflict, Launch
from vigil.core.queue import QuotaExceeded, Submission, queue_key
from vigil.core.submissions import SubmissionRefused
from vigil.core.timeparse import format_rfc3339
from vigil.core.workflow import TERMINAL_WORKFLOW_PHASES
from vigil.core.workflowruns import workflow_concurrency
from vigil.kube.kits.conflicts import conflict_from, retry_on_conflict
from vigil.kube.stores.executions import ExecutionStore, execution_body, execution_from_object
from vigil.kube.stores.jobs import KubeCatalogue
from vigil.kube.stores.pods import (
    ANNOTATION_SCHEDULED_FOR,
    LABEL_EXECUTION,
    LABEL_JOB,
    LABEL_JOB_UID,
    delete_pod,
    label_value,
    owner_reference,
)
from vigil.kube.stores.results import JobResults
from vigil.model import GROUP, VERSION
from vigil.model.jobspec import TIER_OFF
from vigil.model.names import LABEL_PRIORITY, WORKFLOWS
from vigil.model.scheduledjob import ScheduledJobSpec

log = logging.getLogger(__name__)


class MissingJob(RuntimeError):
    """The job vanished between lookup and launch; the next pass records it."""


def _fire_variables(job: Mapping[str, Any], *, execution_id: str, fire: Fire) -> dict[str, Any]:
    meta, occ = job["metadata"], fire.occurrence
    return occurrence_variables(
        period_start=occ.period_start,
        period_end=occ.period_end,
        scheduled_for=occ.nominal,
        execution_id=execution_id,
        job_name=meta["name"],
        job_namespace=meta["namespace"],
    )


def occurrence_key(job: Mapping[str, Any], spec: ScheduledJobSpec, *, execution_id: str, fire: Fire) -> str:
    """The idempotency key one occurrence's pod gets: the rendered `idempotencyKey`, else the
    execution id. Checked like the payload (budgets, refused values), so that a key that cannot be
    made fails its occurrence at launch instead of leaving an Execution that never starts."""
    if not spec.idempotency_key:
        return execution_id
    variables = _fire_variables(job, execution_id=execution_id, fire=fire)
    key = render_template_string(spec.idempotency_key, variables, timezone=spec.timezone,
                                 field="spec.idempotencyKey", monotonic=time.monotonic)  # fmt: skip
    jsonvalues.check(key, path="spec.idempotencyKey")
    return key


def occurrence_payload(
    job: Mapping[str, Any], spec: ScheduledJobSpec, *, execution_id: str, fire: Fire
) -> dict[str, Any]:
    """The job's payload (or payloadTemplate) rendered for one occurrence, as a pod gets it."""
    variables = _fire_variables(job, execution_id=execution_id, fire=fire)
    rendered = render_payload(
        payload=spec.payload, template=spec.payload_template, variables=variables, timezone=spec.timezone,
        monotonic=time.monotonic,  # the render's wall-clock budget
    )
    # What the queue store and a pod's consumer refuse (NUL, lone surrogates, NaN, depth): UnsafeValue.
    field = "spec.payloadTemplate" if spec.payload_template is not None else "spec.payload"
    value: dict[str, Any] = jsonvalues.check_object(jsonvalues.check_text(rendered, path=field), path=field)
    return value


class TaskStore(Protocol):
    """The queue store as the launcher uses it (`vigil.queue.store.QueueStore`, handed in by the
    runtime: the adapters do not import each other)."""

    def submit(self, queue: str, submissions: Sequence[Submission], *, now: datetime) -> list[str]: ...


class TaskSubmitter:
    """A `task:` job's occurrences into the queue store: one ready execution each, its id the
    occurrence's execution id (also its idempotency key, so a repeated launch after a crash or a
    failover adds nothing), due at the occurrence's fire time. A store that cannot be reached
    raises: the trigger retries the entry with backoff, as it does a busy API server."""

    def __init__(self, store: TaskStore, *, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def submit(self, job: Mapping[str, Any], spec: ScheduledJobSpec, fire: Fire) -> Launch:
        task = spec.task
        assert task is not None
        meta = job["metadata"]
        try:
            payload = occurrence_payload(job, spec, execution_id=fire.execution_id, fire=fire)
        except (PayloadError, jsonvalues.UnsafeValue) as err:  # this occurrence's period renders badly: a retry would too
            return Launch(created=False, refused=str(err))
        submission = Submission(
            task=task.name,
            payload=payload,
            run_after=fire.occurrence.fire_at,
            priority=task.priority,
            tenant=meta["namespace"],  # who the job is, never what it says (vigil.core.tenancy)
            max_attempts=task.max_attempts,
            idempotency_key=fire.execution_id,
            execution_id=fire.execution_id,
        )
        queue = queue_key(meta["namespace"], task.queue)
        try:
            [execution] = self._store.submit(queue, [submission], now=self._clock.now())
        except SubmissionRefused as err:  # the store's own checks, or the id held by another occurrence
            return Launch(created=False, refused=str(err))
        except QuotaExceeded as err:  # the namespace's quota: this occurrence fails, never retried
            return Launch(created=False, refused=str(err), refused_reason=Reason.QUOTA_EXCEEDED)
        log.info(
            "fired %s/%s nominal=%s task %s to queue %s execution=%s",
            meta["namespace"], meta["name"], fire.occurrence.nominal.isoformat(), task.name, queue, execution,
        )  # fmt: skip
        return Launch(created=True)


def workflow_body(job: Mapping[str, Any], fire: Fire) -> dict[str, Any]:
    """The Workflow an occurrence of a workflowTemplate job starts, its period in parameters."""
    meta = job["metadata"]
    occ = fire.occurrence
    spec = dict((job.get("spec") or {}).get("workflowTemplate") or {})
    spec["parameters"] = {
        **(spec.get("parameters") or {}),
        "scheduledFor": format_rfc3339(occ.nominal),
        "periodStart": format_rfc3339(occ.period_start),
        "periodEnd": format_rfc3339(occ.period_end),
        "executionId": fire.execution_id,
        "job": meta["name"],
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workflow",
        "metadata": {
            "name": fire.execution_id,
            "namespace": meta["namespace"],
            "labels": {
                LABEL_JOB: label_value(meta["name"]),
                LABEL_JOB_UID: meta["uid"],
                LABEL_EXECUTION: fire.execution_id,
                LABEL_PRIORITY: (job.get("spec") or {}).get("priority", "normal"),
            },
            "annotations": {ANNOTATION_SCHEDULED_FOR: format_rfc3339(occ.nominal)},
            "ownerReferences": [owner_reference(job, "ScheduledJob")],
        },
        "spec": spec,
    }


class WorkflowCreator:
    """The Workflows of a workflowTemplate job: creates one per occurrence (False when it exists
    already), lists the job's, and cancels one that concurrencyPolicy Replace replaces."""

    def __init__(self, api: Any) -> None:
        self._api = api
        self._custom = CustomObjectsApi(api)
        self._username: str | None = None

    def create(self, body: dict[str, Any]) -> bool:
        try:
            self._custom.create_namespaced_custom_object(
                GROUP, VERSION, body["metadata"]["namespace"], WORKFLOWS, body
            )
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True

    def of_job(self, namespace: str, job_uid: str) -> dict[ExecutionId, str | None]:
        """The job's workflows (named by their occurrence's execution id) and their phases."""
        listed = self._custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, WORKFLOWS, label_selector=f"{LABEL_JOB_UID}={job_uid}"
        )
        return {
            ExecutionId(obj["metadata"]["name"]): (obj.get("status") or {}).get("phase")
            for obj in listed.get("items") or []
        }

    def cancel(self, namespace: str, name: str, *, replaced_by: ExecutionId, now: datetime) -> None:
        """Append a cancel request to the workflow, in the operator's own name (admission checks
        `by` and the `cancel` verb as it does for people); the engine records it and stops its
        pods. Its id derives from the new occurrence, so a repeated launch appends nothing more.
        Raises Conflict when the workflow keeps changing (the trigger repeats the launch), and
        the API server's refusal when it refuses the append itself (admission without the
        `cancel` verb, a full request list: the occurrence settles as Failed with its message)."""
        request_id = "replaced-" + hashlib.sha256(replaced_by.encode()).hexdigest()[:16]
        item = {
            "id": request_id,
            "action": "cancel",
            "by": self._whoami(),
            "reason": f"replaced by {replaced_by} (concurrencyPolicy Replace)",
            "at": format_rfc3339(now),
        }
        invalid: tuple[str, ApiException] | None = None  # a 422 and the version it was made at

        def attempt() -> None:
            nonlocal invalid
            try:
                obj = self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, WORKFLOWS, name)
            except ApiException as err:
                if err.status == 404:
                    return  # gone: nothing left to stop
                raise
            version = obj["metadata"]["resourceVersion"]
            if invalid is not None and invalid[0] == version:
                raise invalid[1]  # not a failed test of the version: the append itself is refused
            requests = (obj.get("spec") or {}).get("requests")
            finished = (obj.get("status") or {}).get("phase") in TERMINAL_WORKFLOW_PHASES
            if finished or any(r.get("id") == request_id for r in requests or []):
                return
            test = {"op": "test", "path": "/metadata/resourceVersion", "value": version}
            add = (
                {"op": "add", "path": "/spec/requests/-", "value": item}
                if requests is not None
                else {"op": "add", "path": "/spec/requests", "value": [item]}
            )
            try:
                self._custom.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, WORKFLOWS, name, [test, add],
                    _content_type="application/json-patch+json",
                )  # fmt: skip
            except ApiException as err:
                if err.status == 422:  # a failed test of the version, or a refused append: read again
                    invalid = (version, err)
                    raise Conflict(f"workflow {namespace}/{name}: version {version} is stale") from err
                conflict_from(err)
                raise
            log.info("replaced: cancel requested for workflow %s/%s (%s)", namespace, name, item["reason"])

        try:
            retry_on_conflict(attempt)
        except Conflict:
            raise Conflict(f"replace: workflow {namespace}/{name} kept changing; the trigger retries") from None

    def _whoami(self) -> str:
        """The operator's user name as the API server knows it (a SelfSubjectReview, asked once)."""
        if self._username is None:
            review = AuthenticationV1Api(self._api).create_self_subject_review(
                V1SelfSubjectReview(api_version="authentication.k8s.io/v1", kind="SelfSubjectReview")
            )
            info = review.status.user_info if review.status is not None else None
            if info is None or not info.username:
                raise RuntimeError("the API server did not say who the operator is (SelfSubjectReview)")
            self._username = str(info.username)
        return self._username


#: Answers that a retry will not change: the request itself is refused (a ResourceQuota or an
#: admission webhook says 403, a gone namespace 404, an object too large 413, invalid 422).
#: Everything else (408, 429, 5xx, a timeout) may pass, and the trigger retries it with backoff.
PERMANENT_REFUSALS = frozenset({400, 403, 404, 405, 413, 415, 422})


#: How the API server's authoriser words a denial (`User "…" cannot create resource "executions"
#: …`), unlike a quota ("exceeded quota") or an admission policy ("denied request"). A denial is
#: not for good: an API server just restarted answers it until its RBAC cache has synced (seen in
#: tests/faults/test_control_plane_faults.py: a burst's occurrences settled Failed, never fired),
#: and a Role still being applied does too. It is retried with backoff, as a 5xx is, and the
#: watchdog reports the job's launches as failing while it lasts; it never ends the occurrence.
AUTHORISATION_DENIED = " cannot create resource "


def permanent_refusal(err: ApiException) -> str | None:
    """The API server's message when `err` refuses the create for good, else None."""
    if err.status not in PERMANENT_REFUSALS:
        return None
    try:
        message = str(json.loads(err.body or "{}").get("message") or "")
    except ValueError:
        message = ""
    if err.status == 403 and AUTHORISATION_DENIED in message:
        return None
    return f"{err.status} {err.reason}: {message or err.body}"[:MAX_REFUSAL]


MAX_REFUSAL = 512  # characters of the API server's message kept with the Failed outcome


class ExecutionLauncher:
    """The trigger's Launcher: concurrency policy, then one Execution per occurrence.

    A create the cluster refuses for good is returned as `refused` (the occurrence settles as
    Failed); any other error is raised for the trigger to retry.
    """

    def __init__(
        self,
        *,
        store: ExecutionStore,
        catalogue: KubeCatalogue,
        clock: Clock,
        results: JobResults,
        pods: Any,  # CoreApi (or the client's CoreV1Api): deletes the pods of replaced executions
        on_ready: Callable[[], None] = lambda: None,
        as_started: Callable[[Execution], Execution] = lambda ex: ex,
        tasks: TaskSubmitter | None = None,  # None: the volume tier is off (no queue.dsn)
    ) -> None:
        self._as_started = as_started
        self._tasks = tasks
        self._store = store
        self._catalogue = catalogue
        self._clock = clock
        self._results = results
        self._pods = pods
        self._on_ready = on_ready
        self._workflows = WorkflowCreator(store.api_client)

    def launch(self, fire: Fire) -> Launch:
        try:
            return self._launch(fire)
        except ApiException as err:
            refused = permanent_refusal(err)
            if refused is None:
                raise
            log.warning("launch of %s/%s %s refused: %s", fire.job.namespace, fire.job.name, fire.execution_id, refused)
            return Launch(created=False, refused=refused)

    def _launch(self, fire: Fire) -> Launch:
        job = self._catalogue.cached(fire.job.namespace, fire.job.name)
        if job is None:
            raise MissingJob(f"{fire.job.namespace}/{fire.job.name}")
        spec = self._catalogue.spec_of(job)  # as the trigger parsed it, when it is this version
        if spec.task is not None:
            if self._tasks is None:  # the job controller marks such a job Invalid; this is a guard
                return Launch(created=False, refused=TIER_OFF)
            return self._tasks.submit(job, spec, fire)
        if spec.workflow_template is not None:
            return self._launch_workflow(job, fire, policy=spec.concurrency_policy)
        active = self._store.active_for_job(fire.job.namespace, fire.job.uid)
        decision = concurrency(
            spec.concurrency_policy,
            [execution_from_object(o) for o in active],
            incoming=ExecutionId(fire.execution_id),
        )
        if not decision.start:
            log.info("skipped %s/%s %s: %s", fire.job.namespace, fire.job.name, fire.execution_id, decision.reason)
            return Launch(created=False, skipped=str(decision.reason))
        try:  # the payload and key its pod will get, checked now: a value refused later would never start
            occurrence_payload(job, spec, execution_id=fire.execution_id, fire=fire)
            occurrence_key(job, spec, execution_id=fire.execution_id, fire=fire)
        except (PayloadError, jsonvalues.UnsafeValue) as err:
            return Launch(created=False, refused=str(err))
        for obj in active:
            if obj["metadata"]["name"] in decision.replace:
                self._replace(obj)
        occ = fire.occurrence
        body = execution_body(
            job=job,
            execution_id=fire.execution_id,
            scheduled_for=occ.nominal,
            period_start=occ.period_start,
            period_end=occ.period_end,
            source="Trigger",
        )
        created = self._store.create(body)
        if created:
            log.info(
                "fired %s/%s nominal=%s execution=%s",
                fire.job.namespace, fire.job.name, occ.nominal.isoformat(), fire.execution_id,
            )  # fmt: skip
            self._on_ready()
        return Launch(created=created)

    def _launch_workflow(self, job: Mapping[str, Any], fire: Fire, *, policy: ConcurrencyPolicy) -> Launch:
        """A workflowTemplate job: its concurrency policy over its workflows, then one Workflow
        per occurrence, named from its execution id.

        Forbid skips the occurrence (outcome Skipped, as for a pod job) while a workflow of the
        job is in flight; Replace asks each in flight to cancel (the engine stops its pods) and
        starts the new one; Allow starts it regardless, without looking. The Workflow's own name
        makes a repeated launch a 409, never a second workflow.
        """
        meta = job["metadata"]
        if ConcurrencyPolicy(policy) is not ConcurrencyPolicy.ALLOW:
            incoming = ExecutionId(fire.execution_id)
            workflows = self._workflows.of_job(meta["namespace"], meta["uid"])
            decision = workflow_concurrency(policy, workflows, incoming=incoming)
            if not decision.start:
                log.info("skipped %s/%s %s: %s", meta["namespace"], meta["name"], incoming, decision.reason)
                return Launch(created=False, skipped=str(decision.reason))
            for name in decision.replace:
                self._workflows.cancel(meta["namespace"], name, replaced_by=incoming, now=self._clock.now())
        created = self._workflows.create(workflow_body(job, fire))
        if created:
            log.info("fired %s/%s workflow %s", fire.job.namespace, fire.job.name, fire.execution_id)
        return Launch(created=created)

    def _replace(self, obj: Mapping[str, Any]) -> None:
        """concurrencyPolicy Replace: cancel the running execution and stop its pod.

        A conflicting write (a label changed, a pod ended) is read again and retried: the new
        execution is created only once the old one is cancelled, else the launch fails and the
        trigger repeats it.
        """
        meta = obj["metadata"]

        def attempt() -> Execution | None:
            """Cancel the execution as last read; it, or None when it ended or went meanwhile."""
            nonlocal obj
            execution = self._as_started(execution_from_object(obj))
            if execution.phase.terminal:
                return None
            try:
                self._results.record(obj, cancel(execution, reason=ExecutionReason.REPLACED, now=self._clock.now()))
            except Conflict:
                fresh = self._store.get(meta["namespace"], meta["name"])
                if fresh is None:
                    return None
                obj = fresh
                raise
            return execution

        try:
            execution = retry_on_conflict(attempt)
        except Conflict:
            raise Conflict(f"replace: {meta['namespace']}/{meta['name']} kept changing; the trigger retries") from None
        if execution is None:
            return
        if execution.pod:
            delete_pod(self._pods, execution.namespace, execution.pod)
