"""The workflow engine: record inputs, decide, write status, then act.

One pass over a Workflow (``reconcile``):

1. Read it. A workflow without a pinned definition is started: the inline
   steps or the referenced WorkflowDefinition version are copied into status.
2. Fold ``status.history`` into state. Gather the inputs that are new — users'
   requests in ``spec.requests`` not yet recorded, results of the step pods the
   state wants, timers whose time has come — and record each with the
   decisions it leads to (:func:`vigil.core.orchestrator.record_input`).
3. Write the status with the resourceVersion it was read at: a concurrent
   writer makes this a 409 and the pass starts again from the top, so two
   passes can never both record a decision.
4. Only then act: create the pods the state wants (a pod that exists is
   adopted: its name derives from the step's execution id and the attempt),
   delete running pods the state no longer wants, post Events.

Everything an action depends on is in the written status, so a crash at any
point is repaired by the next pass — in this process or a new one.

The status stays within etcd's object size. Entries are mirrored to the history
database as they are recorded, by a background writer that puts many workflows' entries in one
transaction (:mod:`vigil.kube.mirrorwriter`; ``historyMirrored`` counts them from the first once
they are in,
which carries the pinned definition, so the history can be read without the
Workflow once it is deleted); past a budget the oldest mirrored entries are folded into ``status.checkpoint``
and leave the status (:mod:`vigil.core.checkpoint`), and so do large step
outputs, which a dependent's pod then reads back from the database. While the
database is behind, entries stay, up to a hard cap: a pass that would pass it
records nothing and tries again later, so the workflow waits rather than
writing a status the API server would refuse on every pass. Passes are
level-triggered: a step pod's result (:meth:`WorkflowEngine.pod_changed`) and Workflow
changes queue the workflow, timers queue it
at their recorded time, and a periodic rescan queues every unfinished one (that
is also how a fresh operator resumes all in-flight workflows). A finished
workflow leaves once its ttlAfterFinished has passed and its whole history is in
the database (:mod:`vigil.kube.workflowttl`, asked after each pass on it).

Every status write rewrites the whole Workflow on the API server, so a pass writes only what
changes what happens next at once: step pods' successes that start nothing, while other step
pods of the workflow still run, are held back (for QUIET_RESULTS_WAIT at most) and recorded with
the next result (:func:`vigil.core.workflowpass.results_can_wait`). A fan whose pods end over a
few seconds is then one write, not one per pod.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.checkpoint import (
    OutputUnavailable,
    offloaded_seq,
    output_source,
    read_back_output,
    resume,
)
from vigil.core.conditions import ConditionReason
from vigil.core.orchestrator import WantedPod, inputs_for, record_input, stuck_steps
from vigil.core.podstatus import classify_pod
from vigil.core.ports import Clock, Conflict, HistoryUnavailable, WorkflowHistorySink
from vigil.core.workflow import (
    TERMINAL_WORKFLOW_PHASES,
    Definition,
    Record,
    WorkflowState,
)
from vigil.core.workflowmirror import history_rows
from vigil.core.workflowpass import (
    INVALID_RECHECK,
    JOB_OUTCOMES,
    QUIET_RESULTS_WAIT,
    STATUS_LIMITS,
    HistoryFull,
    Recorded,
    announcements,
    build_status,
    gather_inputs,
    invalid_status,
    needs_pass,
    next_pass,
    plan_pods,
    results_can_wait,
    start,
    started_status,
    wanted_pod_name,
)
from vigil.core.workflowttl import next_look
from vigil.kube.apiclient import custom_object_or_none
from vigil.kube.conflicts import conflict_from, retry_on_conflict
from vigil.kube.coreapi import CoreApi
from vigil.kube.events import NORMAL, WARNING, EventRecorder
from vigil.kube.informer import Informer, pack, skeleton, unmanaged, unpack
from vigil.kube.jobstatus import Change, JobStatusWriter, Step
from vigil.kube.mirrorwriter import MirrorBook, MirrorWriter, Offer
from vigil.kube.pods import ANNOTATION_SCHEDULED_FOR, delete_pod
from vigil.kube.workflowpods import BY_WORKFLOW, pod_result, workflow_of, workflow_pod
from vigil.kube.workflowttl import WorkflowTtl
from vigil.kube.workqueue import WorkQueue
from vigil.model import GROUP, VERSION
from vigil.model.jobpatches import workflow_end_patch
from vigil.model.names import (
    LABEL_PRIORITY,
    LABEL_WORKFLOW_UID,
    SCHEDULED_JOBS,
    WORKFLOW_DEFINITIONS,
    WORKFLOWS,
)
from vigil.model.scheduledjob import SCHEDULED_JOB
from vigil.model.workflowspec import (
    InvalidWorkflow,
    definition_of,
    parse_workflow_spec,
    pin,
    step_templates,
)

log = logging.getLogger(__name__)

#: A step pod that finished while others of its workflow still run: its pass waits this long, so
#: the results of a fan that ends together are recorded in one status write, not one each.
SIBLINGS_SETTLE_SECONDS = 0.2
PASS_TRIES = 8  # concurrent status writers tolerated in one pass
RETRY_AFTER_ERROR = timedelta(seconds=5)
#: Entries kept in a cache of outputs read back from the database.
OUTPUT_CACHE_ENTRIES = 256

Key = tuple[str, str]


@dataclasses.dataclass(frozen=True)
class Pass:
    """What one pass recorded (for metrics and tests)."""

    namespace: str
    name: str
    records: tuple[Record, ...]
    stuck: tuple[str, ...]
    phase: str


#: admit((namespace, workflow), pod bodies, priority): the pods a workflow wants started now,
#: replacing what it wanted before; the dispatcher creates them as capacity allows.
Admit = Callable[[tuple[str, str], list[dict[str, Any]], str], None]


def workflow_priority(obj: Mapping[str, Any]) -> str:
    """A workflow's dispatch priority: its job's, carried as a label; normal otherwise."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_PRIORITY) or "normal"


LIST_PAGE = 100  # Workflows per page of a rescan


def workflow_cache(api: client.ApiClient) -> Informer:
    """The leader's watch of every Workflow: it keeps only each one's identity and version (the
    engine keeps the bodies of those in flight, packed) and tells :meth:`WorkflowEngine.seen` the
    whole object, without its managedFields."""
    custom = client.CustomObjectsApi(api)

    def list_fn(**kwargs: Any) -> Any:
        return custom.list_cluster_custom_object(GROUP, VERSION, WORKFLOWS, **kwargs)

    return Informer(list_fn, what=WORKFLOWS, label_selector="", transform=skeleton, announce=unmanaged)


class WorkflowApi:
    """The Kubernetes calls the engine makes."""

    def __init__(self, api: client.ApiClient, *, pod_cache: Informer | None = None) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = CoreApi(api)
        self.pod_cache = pod_cache  # the leader's: step pods read from it, never listed per pass

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Workflow, or None when there is none of that name."""
        return self._get(WORKFLOWS, namespace, name)

    def definition(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The WorkflowDefinition, or None when there is none of that name."""
        return self._get(WORKFLOW_DEFINITIONS, namespace, name)

    def list_all(self) -> Iterator[dict[str, Any]]:
        """Every Workflow, a page at a time (finished ones carry whole histories)."""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": LIST_PAGE}
            if token:
                kwargs["_continue"] = token
            page = self.custom.list_cluster_custom_object(GROUP, VERSION, WORKFLOWS, **kwargs)
            yield from page["items"]
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def write_status(self, obj: Mapping[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Replace the whole status (a PUT: keys left out are removed), conditional on the
        resourceVersion ``obj`` was read at; the workflow as written. Conflict when it changed or
        went since: the pass starts again from a fresh read."""
        meta = obj["metadata"]
        try:
            written: dict[str, Any] = self.custom.replace_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], WORKFLOWS, meta["name"], {**obj, "status": status}
            )
        except ApiException as err:
            if err.status in (404, 409):
                raise Conflict(meta["name"]) from err
            raise
        return written

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(SCHEDULED_JOBS, namespace, name)

    def update_job_status(self, namespace: str, name: str, uid: str, step: Step) -> None:
        """Merge what `step` makes of the ScheduledJob's status into it, conditional on the
        resourceVersion it was read at; a conflict reads the job again and asks `step` again.
        Nothing when the job is gone (or is another of that name), or `step` changes nothing.
        For where there is no `JobStatusWriter` (tools, tests): the leader writes through it."""

        def attempt() -> None:
            job = self.job(namespace, name)
            if job is None or job["metadata"]["uid"] != uid:
                return
            patch = step(job.get("status") or {}, int(job["metadata"].get("generation", 0)))
            if not patch:
                return
            body = {"metadata": {"resourceVersion": job["metadata"]["resourceVersion"]}, "status": patch}
            try:
                self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, SCHEDULED_JOBS, name, body)
            except ApiException as err:
                conflict_from(err, f"job {namespace}/{name} changed concurrently")
                raise

        retry_on_conflict(attempt)

    def pods(self, namespace: str, uid: str) -> dict[str, dict[str, Any]]:
        if self.pod_cache is not None:
            return {p["metadata"]["name"]: p for p in self.pod_cache.by_index(BY_WORKFLOW, uid)}
        listed = self.core.list_namespaced_pod(namespace, label_selector=f"{LABEL_WORKFLOW_UID}={uid}")
        return {pod["metadata"]["name"]: pod for pod in listed.get("items") or []}

    def create_pod(self, namespace: str, body: dict[str, Any]) -> None:
        try:
            self.core.create_namespaced_pod(namespace, body)
        except ApiException as err:
            if err.status != 409:  # AlreadyExists: adopted
                raise

    def delete_pod(self, namespace: str, name: str) -> None:
        delete_pod(self.core, namespace, name)

    def _get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return custom_object_or_none(self.custom, GROUP, VERSION, namespace, plural, name)


class WorkflowEngine:
    """Runs every workflow's passes: a few worker threads, never two on one workflow at once."""

    def __init__(
        self,
        api: WorkflowApi,
        *,
        clock: Clock,
        events: EventRecorder | None,
        history: WorkflowHistorySink | None = None,
        workers: int = 4,
        rescan_seconds: float = 30.0,
        on_pass: Callable[[Pass], None] | None = None,
        ttl: WorkflowTtl | None = None,
        admit: Admit | None = None,
        job_status: JobStatusWriter | None = None,
    ) -> None:
        self.api = api
        self._admit = admit
        self._job_status = job_status
        self._clock = clock
        self._events = events
        self._history = history
        self._workers = workers
        self._rescan_seconds = rescan_seconds
        self._on_pass = on_pass
        #: Deletes finished workflows past their ttlAfterFinished (None: kept forever).
        self._ttl = ttl
        self._lock = threading.Lock()
        #: Passes, one workflow never on two workers; its delays run on the engine's clock.
        self._queue: WorkQueue[Key] = WorkQueue(
            WORKFLOWS, self._process, workers=workers, ticks=lambda: self._clock.now().timestamp()
        )
        self._running = False
        #: Of each unfinished workflow: the resourceVersion the engine last handled (a pass read it
        #: and acted, or wrote it), so a watch event of that version or an older one needs no
        #: pass; and the newest body known (from a watch event, a rescan's page or our own write),
        #: so a pass reads no GET unless its write meets a conflict. Dropped when it finishes.
        #: Bodies are held packed (compact JSON, a quarter of a dict's size): a thousand waiting
        #: workflows with their histories were 15 MiB as dicts.
        self._handled: dict[Key, str] = {}
        self._bodies: dict[Key, bytes] = {}
        #: Of each workflow: the entries this process wrote or offered that its status may not
        #: count yet (its historyMirrored lags at least a pass behind).
        self._mirrored = MirrorBook()
        #: Writes the entries passes record, many workflows' in one transaction; used once the
        #: engine runs (a pass called directly, by a tool or a test, writes its own).
        self._writer = None if history is None else MirrorWriter(history, done=self._mirror_written)
        #: Outputs read back from the database, by (workflow uid, seq), oldest first.
        self._outputs: dict[tuple[str, int], Any] = {}
        #: Of each workflow whose passes hold results back (:meth:`_hold`): since when.
        self._held_since: dict[Key, datetime] = {}

    # --- queueing -----------------------------------------------------------------------------

    def changed(
        self, namespace: str, name: str, resource_version: str | None, body: Mapping[str, Any] | None = None
    ) -> None:
        """A watch saw the workflow change: queue a pass, unless the engine has handled that
        version already (its own write, or one a pass has read since); ``body`` is kept for it."""
        if not self._learn((namespace, name), resource_version, body):
            return
        self.notify(namespace, name)

    def _learn(self, key: Key, resource_version: str | None, body: Mapping[str, Any] | None) -> bool:
        """Note a version of the workflow seen from outside a pass; whether it is news."""
        with self._lock:
            if resource_version is not None and not _newer(resource_version, self._handled.get(key)):
                return False
            if body is not None:
                self._bodies[key] = pack(body)
            else:  # a newer version than the one held, unseen: the next pass reads it
                self._bodies.pop(key, None)
            return True

    def _handled_at(self, obj: Mapping[str, Any], *, keep: bool) -> None:
        """A pass handled ``obj`` (read and acted on it, or wrote it); ``keep``: the workflow is
        unfinished, so its body is kept for the next pass."""
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        with self._lock:
            if keep:
                self._handled[key] = str(meta["resourceVersion"])
                self._bodies[key] = pack(obj)
            else:
                self._handled.pop(key, None)
                self._bodies.pop(key, None)
        if not keep:
            self._mirrored.settle(key, str(meta["uid"]), int((obj.get("status") or {}).get("historyMirrored") or 0))

    def forget(self, namespace: str, name: str) -> None:
        """The workflow was deleted: nothing it wanted started is started any more."""
        with self._lock:
            self._handled.pop((namespace, name), None)
            self._bodies.pop((namespace, name), None)
            self._held_since.pop((namespace, name), None)
        self._mirrored.forget((namespace, name))
        if self._admit is not None:
            self._admit((namespace, name), [], "normal")

    def notify(self, namespace: str, name: str) -> None:
        self._queue.add((namespace, name))

    def pod_changed(self, key: Key, pod: Mapping[str, Any], deleted: bool) -> None:
        """The step pod cache's handler: a pass for the pod's workflow once the pod has a result
        to record (it finished, or is gone or going); a moment later while other step pods of the
        workflow still run (`SIBLINGS_SETTLE_SECONDS`), so that a fan ending together is one write.
        A pod created, bound or started tells a pass nothing it would act on: the dispatcher, not
        the pass, sees that it exists."""
        owner = workflow_of(pod)
        now = self._clock.now()
        if owner is None or not (deleted or classify_pod(pod, now=now).finished):
            return
        uid = (pod["metadata"].get("labels") or {}).get(LABEL_WORKFLOW_UID)
        siblings = self.api.pod_cache.by_index(BY_WORKFLOW, uid) if self.api.pod_cache and uid else []
        if any(not classify_pod(p, now=now).finished for p in siblings if p["metadata"]["name"] != key[1]):
            self._queue.add_after(owner, SIBLINGS_SETTLE_SECONDS)
        else:
            self.notify(*owner)

    def idle(self) -> bool:
        return self._queue.idle()

    def seen(self, key: Key, obj: dict[str, Any], deleted: bool) -> None:
        """The leader's workflow cache saw a change (its first list included: that is how a new
        leader resumes every workflow in flight): a pass is queued when the workflow needs one,
        as the rescan judges; a deletion is forgotten."""
        if deleted:
            self.forget(*key)
        elif self._needs_pass(obj, self._clock.now()):
            self.changed(key[0], key[1], obj["metadata"].get("resourceVersion"), obj)

    def _needs_pass(self, obj: Mapping[str, Any], now: datetime) -> bool:
        """Its spec changed since a pass saw it (a finished workflow's ``spec.requests`` may retry a
        step), or unfinished, not yet mirrored, or finished and past its ttlAfterFinished
        (:func:`vigil.core.workflowpass.needs_pass`)."""
        status = obj.get("status") or {}
        if obj["metadata"].get("generation") != status.get("observedGeneration"):
            return True
        # Every watch event asks this: the TTL is worked out only for a finished workflow.
        finished = status.get("phase") in TERMINAL_WORKFLOW_PHASES
        expired = finished and self._ttl is not None and self._ttl.due(obj, now)
        return needs_pass(status, mirroring=self._history is not None, expired=expired)

    def rescan(self) -> int:
        """Queue every workflow that needs a pass (:meth:`_needs_pass`); the count queued."""
        queued = 0
        now = self._clock.now()
        for obj in self.api.list_all():
            if self._needs_pass(obj, now):
                meta = obj["metadata"]
                key = (meta["namespace"], meta["name"])
                with self._lock:
                    self._handled.pop(key, None)  # a rescan passes over every one it queues
                self._learn(key, None, obj)
                self.notify(*key)
                queued += 1
        return queued

    def run(self, stop: threading.Event, *, fed: bool = False) -> None:
        """Passes until ``stop``, and a rescan every rescanSeconds; ``fed``: a workflow cache feeds
        :meth:`seen`, whose first list queues what a first rescan would, so the first waits."""
        if self._writer is not None:
            threading.Thread(target=self._writer.run, args=(stop,), name="workflow-history", daemon=True).start()
        self._running = True
        threading.Thread(target=self._queue.run, args=(stop,), name="workflow-queue", daemon=True).start()
        if fed:
            stop.wait(self._rescan_seconds)
        while not stop.is_set():
            try:
                self.rescan()
            except Exception:
                log.exception("workflow rescan failed")
            stop.wait(self._rescan_seconds)

    def _process(self, key: Key) -> float | None:
        """One pass of the queue's: seconds until the workflow next needs one (a timer)."""
        try:
            wake = self.reconcile(*key)
        except Exception:
            log.exception("workflow %s/%s: pass failed; retrying", *key)
            wake = self._clock.now() + RETRY_AFTER_ERROR
        if wake is None:
            return None
        return max(0.0, (wake - self._clock.now()).total_seconds())

    # --- one pass -----------------------------------------------------------------------------

    def reconcile(self, namespace: str, name: str) -> datetime | None:
        """One pass; the time the workflow next needs one (a timer), if any."""
        with self._lock:
            held = self._bodies.pop((namespace, name), None)
        obj = None if held is None else unpack(held)

        def attempt() -> datetime | None:
            nonlocal obj
            if obj is None:
                obj = self.api.get(namespace, name)  # none known, or what was known is stale
            if obj is None:
                return None
            try:
                return self._pass(obj)
            except Conflict:
                obj = None
                raise

        try:
            return retry_on_conflict(attempt, tries=PASS_TRIES)
        except Conflict:
            log.warning("workflow %s/%s: status kept changing; next pass later", namespace, name)
            return self._clock.now() + RETRY_AFTER_ERROR

    def submit(self, namespace: str, name: str, record: Record) -> list[Record]:
        """Record an input that arrived from outside (an approval callback) and what it led to.

        Returns the records appended (the input first), once they are in the API server;
        raises LookupError when the workflow or its definition is not there.
        """

        def attempt() -> list[Record]:
            obj = self.api.get(namespace, name)
            status = (obj or {}).get("status") or {}
            if obj is None or not status.get("definition"):
                raise LookupError(f"workflow {namespace}/{name} not found or not started")
            definition = definition_of(status["definition"], uid=obj["metadata"]["uid"])
            recorded = Recorded.of(status)
            state = resume(definition, recorded.checkpoint, recorded.entries)
            added = record_input(definition, state, record)
            entries = [*recorded.entries, *added]
            pinned = status["definition"]
            mirrored = self._mirror(obj, pinned, recorded.base, recorded.entries, recorded.mirrored)
            try:
                new_status = self._status(obj, definition, state, recorded, entries, mirrored, (), record.at)
            except HistoryFull as full:
                raise RuntimeError(f"workflow {namespace}/{name}: {full}; try again") from None
            self._write(obj, new_status)  # Conflict: read again, record again
            self._mirror(obj, pinned, recorded.base, entries, mirrored, finished=state.finished)
            self._announce(obj, added, (), status)
            self._report(obj, added, (), state)
            if self._running:
                self.notify(namespace, name)  # the pass acts on it; elsewhere the leader's watch does
            return added

        try:
            return retry_on_conflict(attempt, tries=PASS_TRIES)
        except Conflict:
            raise RuntimeError(f"workflow {namespace}/{name} kept changing; try again") from None

    def _pass(self, obj: dict[str, Any]) -> datetime | None:
        status = obj.get("status") or {}
        now = self._clock.now()
        if not status.get("definition"):
            return self._start(obj, now)
        meta = obj["metadata"]
        pinned = status["definition"]
        definition = definition_of(pinned, uid=meta["uid"])
        recorded = Recorded.of(status)
        state = resume(definition, recorded.checkpoint, recorded.entries)
        pods = self.api.pods(meta["namespace"], meta["uid"])
        new = gather_inputs(
            definition,
            state,
            requests=(obj.get("spec") or {}).get("requests") or [],
            result_of=lambda wanted: _result(pods, wanted, now),
            now=now,
        )
        held = self._hold(obj, definition, state, new, now)
        if held is not None:
            return held
        stuck = tuple(stuck_steps(definition, state, now=now))
        mirrored = self._mirror(obj, pinned, recorded.base, recorded.entries, recorded.mirrored, finished=state.finished)
        entries = [*recorded.entries, *new]
        try:
            new_status = self._status(obj, definition, state, recorded, entries, mirrored, stuck, now)
        except HistoryFull as full:
            log.warning("workflow %s/%s: %s; nothing recorded, trying again later", meta["namespace"],
                        meta["name"], full)  # fmt: skip
            return now + RETRY_AFTER_ERROR
        if self._write(obj, new_status):
            # Now recorded: mirror them (offered to the background writer while the engine runs).
            # The counter in status catches up on a later pass, and after an outage that pass
            # offers them again (rewriting is idempotent).
            self._mirror(obj, pinned, recorded.base, entries, mirrored, finished=state.finished)
        self._act(obj, pinned, definition, state, pods)
        self._announce(obj, new, stuck, status)
        self._report(obj, new, stuck, state)
        self._tell_job(obj, new)
        wake = next_pass(definition, state, now)
        if self._ttl is None or not state.finished:
            return wake
        return next_look(wake, self._ttl.after_pass(obj, new_status, now))  # the status as it now stands

    def _hold(
        self, obj: Mapping[str, Any], definition: Definition, state: WorkflowState, new: Sequence[Record], now: datetime
    ) -> datetime | None:
        """When the results a pass found may wait for the next (:func:`results_can_wait`), and
        the first of them waited less than QUIET_RESULTS_WAIT: nothing is recorded or done, and
        the time of the pass that records them at the latest. None: the pass goes on. Held
        results stay in their pods, and a new leader finds them there."""
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        with self._lock:
            if not results_can_wait(definition, state, new):
                self._held_since.pop(key, None)
                return None
            due = self._held_since.setdefault(key, now) + QUIET_RESULTS_WAIT
            if now >= due:
                self._held_since.pop(key, None)
                return None
        self._handled_at(obj, keep=True)
        wake = next_pass(definition, state, now)
        return due if wake is None else min(wake, due)

    def _write(self, obj: Mapping[str, Any], new_status: dict[str, Any]) -> bool:
        """The Workflow's one status writer: the status built from the folded state, compared
        with the one read, and written (whole, conditional on the resourceVersion read) only
        when it differs; whether it was written. Conflict when the workflow changed meanwhile."""
        unfinished = str(new_status.get("phase")) not in TERMINAL_WORKFLOW_PHASES
        if new_status == (obj.get("status") or {}):
            self._handled_at(obj, keep=unfinished)
            return False
        self._handled_at(self.api.write_status(obj, new_status), keep=unfinished)
        return True

    def _tell_job(self, obj: Mapping[str, Any], new: Sequence[Record]) -> None:
        """A workflow started by a ScheduledJob ended: record it in the job's status, as an
        execution's end is (`recent`, and `lastSuccessfulTime` that the watchdog reads)."""
        owner = next(
            (o for o in obj["metadata"].get("ownerReferences") or [] if o.get("kind") == SCHEDULED_JOB.kind),
            None,
        )
        if owner is None or not any(r.event in JOB_OUTCOMES for r in new):
            return
        meta = obj["metadata"]
        scheduled_for = (meta.get("annotations") or {}).get(ANNOTATION_SCHEDULED_FOR)

        def ended(status: Mapping[str, Any], _: int) -> dict[str, Any]:
            return workflow_end_patch(status, workflow=meta["name"], scheduled_for=scheduled_for, new=new) or {}

        if self._job_status is not None:  # the leader: through the job's one status writer
            change = Change(str(owner.get("uid")), ended, lambda job: None)
            self._job_status.add((meta["namespace"], owner["name"]), change)
            return
        try:
            self.api.update_job_status(meta["namespace"], owner["name"], str(owner.get("uid")), ended)
        except Conflict:  # not the workflow's: its pass is done, so no new pass tells the job again
            log.warning("workflow %s/%s: job %s kept changing; its status misses this end", meta["namespace"],
                        meta["name"], owner["name"])  # fmt: skip

    def _report(
        self, obj: Mapping[str, Any], new: Sequence[Record], stuck: Sequence[str], state: WorkflowState
    ) -> None:
        if self._on_pass is not None:
            meta = obj["metadata"]
            self._on_pass(Pass(meta["namespace"], meta["name"], tuple(new), tuple(stuck), str(state.phase)))

    def _start(self, obj: dict[str, Any], now: datetime) -> datetime | None:
        meta = obj["metadata"]
        status = obj.get("status") or {}
        try:
            spec = parse_workflow_spec(obj.get("spec") or {})
            referenced = None
            if spec.definition_ref is not None:
                referenced = self.api.definition(meta["namespace"], spec.definition_ref.name)
            pinned = pin(spec, definition=referenced)
            pinned["parameters"] = dict(spec.parameters)
            definition = definition_of(pinned, uid=meta["uid"])
        except (InvalidWorkflow, ValueError) as error:
            return self._invalid(obj, status, error, now)
        state, records = start(definition, now)
        new_status = started_status(
            status,
            generation=meta.get("generation", 0),
            pinned=pinned,
            definition=definition,
            state=state,
            records=records,
            limits=STATUS_LIMITS,
            now=now,
        )
        self._write(obj, new_status)
        self._mirror(obj, pinned, 0, records, 0)
        self._act(obj, pinned, definition, state, {})
        self._announce(obj, records, (), status)
        self._report(obj, records, (), state)
        return next_pass(definition, state, now)

    def _invalid(
        self, obj: dict[str, Any], status: Mapping[str, Any], error: Exception, now: datetime
    ) -> datetime | None:
        message = str(error)
        new_status = invalid_status(status, generation=obj["metadata"].get("generation", 0), message=message, now=now)
        if new_status is not None:  # None: reported already
            self._write(obj, new_status)
            if self._events is not None:
                self._events.emit(obj, type_=WARNING, reason=ConditionReason.INVALID_SPEC, message=message)
        return now + INVALID_RECHECK


    def _mirror(
        self,
        obj: Mapping[str, Any],
        pinned: Mapping[str, Any],
        base: int,
        entries: Sequence[Record],
        mirrored: int,
        *,
        finished: bool = False,
    ) -> int:
        """Send the recorded-but-unmirrored entries to the database (the rows:
        :func:`vigil.core.workflowmirror.history_rows`); how many from the first are in it now.

        ``entries`` are the history from seq ``base`` on; ``mirrored`` entries from the first
        are in the database already, and so are those this process wrote. While the engine runs,
        the rows are offered to the background writer and counted by a later pass once written;
        otherwise they are written here. ``finished``: the workflow has ended, so no pass comes by
        itself: once the background writer has its entries in, it is passed again to count them;
        what a direct write wrote is not remembered (a later pass over it, the rescan's, writes
        those rows again, idempotently, and brings the count up).
        """
        end = base + len(entries)
        if self._history is None:
            return mirrored
        meta = obj["metadata"]
        key, uid = (meta["namespace"], meta["name"]), str(meta["uid"])
        mirrored = self._mirrored.counted(key, uid, mirrored, end)
        if mirrored >= end:
            return mirrored
        if self._running and self._writer is not None:
            start = self._mirrored.claim(key, uid, mirrored, end)
            if start < end:
                rows = history_rows(entries, base=base, mirrored=start, meta=meta, pinned=pinned)
                self._writer.offer(Offer(key, uid, start, end, rows, finished=finished))
            return mirrored
        rows = history_rows(entries, base=base, mirrored=mirrored, meta=meta, pinned=pinned)
        try:
            self._history.write_workflow_events(rows)
        except HistoryUnavailable:
            return mirrored  # kept in status; written on a later pass
        if finished:
            self._mirrored.forget(key)
        else:
            self._mirrored.wrote(key, uid, end)
        return end

    def _mirror_written(self, offer: Offer, written: bool) -> None:
        """The background writer's answer. A finished workflow is passed again once its entries
        are in, so its status counts them (and its ttlAfterFinished may then delete it)."""
        self._mirrored.done(offer, written)
        if written and offer.finished:
            self.notify(*offer.key)

    def _status(
        self,
        obj: Mapping[str, Any],
        definition: Definition,
        state: WorkflowState,
        recorded: Recorded,
        entries: Sequence[Record],
        mirrored: int,
        stuck: Sequence[str],
        now: datetime,
    ) -> dict[str, Any]:
        return build_status(
            obj.get("status") or {},
            generation=obj["metadata"].get("generation", 0),
            definition=definition,
            state=state,
            recorded=recorded,
            entries=entries,
            mirrored=mirrored,
            stuck=stuck,
            limits=STATUS_LIMITS,
            now=now,
        )


    def _act(
        self,
        obj: Mapping[str, Any],
        pinned: Mapping[str, Any],
        definition: Definition,
        state: WorkflowState,
        pods: Mapping[str, Mapping[str, Any]],
    ) -> None:
        namespace = obj["metadata"]["namespace"]
        plan = plan_pods(definition, state, pods)
        templates = step_templates(pinned)
        bodies: list[dict[str, Any]] = []
        for want in plan.start:
            template, compensate = templates[want.step]
            inputs = {dep: self._output(obj, state, dep) for dep in inputs_for(definition, state, want.step)}
            body = workflow_pod(
                workflow=obj,
                wanted=want,
                template=compensate if want.compensation else template,
                inputs=inputs,
                parameters=pinned.get("parameters") or {},
                output=self._output(obj, state, want.step) if want.compensation else None,
            )
            bodies.append(body)
        if self._admit is not None:
            # The dispatcher starts them within the same caps, priorities and fairness as every
            # execution; what this pass no longer wants is withdrawn.
            self._admit((namespace, obj["metadata"]["name"]), bodies, workflow_priority(obj))
        else:
            for body in bodies:
                self.api.create_pod(namespace, body)
        for name in plan.stop:
            self.api.delete_pod(namespace, name)

    def _output(self, obj: Mapping[str, Any], state: WorkflowState, step_id: str) -> Any:
        """A step's output: from the state, or, when it left the status, from the database entry
        it came in (checked against the digest kept: :func:`vigil.core.checkpoint.read_back_output`)."""
        step = state.steps[step_id]
        seq = offloaded_seq(step)
        if seq is None:
            return step.output
        key = (str(obj["metadata"]["uid"]), seq)
        with self._lock:
            if key in self._outputs:
                return self._outputs[key]
        if self._history is None:
            raise OutputUnavailable(f"{output_source(step_id, step)}: no history database")
        entry = self._history.workflow_event(*key)
        output = read_back_output(step_id, step, None if entry is None else entry.data or {})
        with self._lock:
            self._outputs[key] = output
            while len(self._outputs) > OUTPUT_CACHE_ENTRIES:
                self._outputs.pop(next(iter(self._outputs)))
        return output

    def _announce(
        self,
        obj: Mapping[str, Any],
        new: Sequence[Record],
        stuck: Sequence[str],
        before: Mapping[str, Any],
    ) -> None:
        if self._events is None:
            return
        for said in announcements(new, stuck=stuck, before=before):
            self._events.emit(obj, type_=WARNING if said.warning else NORMAL, reason=said.reason, message=said.message)


def _newer(resource_version: str, handled: str | None) -> bool:
    """Whether a version of a workflow is newer than the one handled. The resourceVersions of one
    object are etcd revisions that only grow; one that is not a number is compared for equality
    only (news unless it is the one handled)."""
    if handled is None:
        return True
    if resource_version.isdigit() and handled.isdigit():
        return int(resource_version) > int(handled)
    return resource_version != handled


def _result(pods: Mapping[str, Mapping[str, Any]], wanted: WantedPod, now: datetime) -> Record | None:
    """What the pod a step wants reports: its result, or None while it runs or does not exist."""
    pod = pods.get(wanted_pod_name(wanted))
    return None if pod is None else pod_result(pod, wanted, now=now)
