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
database as they are recorded (``historyMirrored`` counts them from the first);
past a budget the oldest mirrored entries are folded into ``status.checkpoint``
and leave the status (:mod:`vigil.core.checkpoint`), and so do large step
outputs, which a dependent's pod then reads back from the database. While the
database is behind, entries stay, up to a hard cap: a pass that would pass it
records nothing and tries again later, so the workflow waits rather than
writing a status the API server would refuse on every pass. Passes are
level-triggered: pod and Workflow changes queue the workflow, timers queue it
at their recorded time, and a periodic rescan queues every unfinished one (that
is also how a fresh operator resumes all in-flight workflows). A finished
workflow leaves once its ttlAfterFinished has passed and its whole history is in
the database (:mod:`vigil.kube.workflowttl`, asked after each pass on it).
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

from vigil.core.checkpoint import Budget, Checkpoint, compact, entry_bytes, output_digest, resume
from vigil.core.conditions import set_condition
from vigil.core.history import WorkflowEventRecord
from vigil.core.ids import ExecutionId, pod_name
from vigil.core.orchestrator import (
    WantedPod,
    current,
    inputs_for,
    next_wakeup,
    progress,
    record_input,
    stuck_steps,
    timers,
    wanted_pods,
)
from vigil.core.ports import Clock, HistoryUnavailable, WorkflowHistorySink
from vigil.core.timeparse import format_rfc3339, parse_rfc3339
from vigil.core.workflow import (
    RULES,
    Definition,
    Event,
    Record,
    WorkflowState,
    fold,
    parse_output,
    records_from_data,
)
from vigil.core.workflowttl import Verdict
from vigil.kube.events import NORMAL, WARNING, EventRecorder
from vigil.kube.informer import Informer
from vigil.kube.pods import ANNOTATION_SCHEDULED_FOR
from vigil.kube.results import RECENT_SIZE
from vigil.kube.workflowpods import BY_WORKFLOW, pod_result, workflow_pod
from vigil.kube.workflowttl import WorkflowTtl
from vigil.kube.workqueue import WorkQueue
from vigil.model import GROUP, VERSION
from vigil.model.names import LABEL_PRIORITY, LABEL_WORKFLOW_UID
from vigil.model.workflow import HISTORY_MAX_ITEMS
from vigil.model.workflowspec import (
    InvalidWorkflow,
    definition_of,
    parse_workflow_spec,
    pin,
    step_templates,
)

log = logging.getLogger(__name__)

PLURAL = "workflows"
DEFINITIONS = "workflowdefinitions"
JOBS = "scheduledjobs"
#: How a workflow's end reads in its ScheduledJob's `recent` list.
JOB_OUTCOMES = {
    Event.WORKFLOW_SUCCEEDED: "Succeeded",
    Event.WORKFLOW_FAILED: "Failed",
    Event.WORKFLOW_COMPENSATED: "Failed",
    Event.WORKFLOW_CANCELLED: "Cancelled",
}
CONFLICT_TRIES = 8  # concurrent status writers tolerated in one pass
INPUT_ROUNDS = 10  # new inputs gathered per pass before writing (results can make timers due)
RETRY_AFTER_ERROR = timedelta(seconds=5)
#: When the oldest mirrored entries leave the status for the checkpoint (and outputs over 256
#: bytes leave with them): 500 entries or 256 KiB of them, leaving half of each.
HISTORY_BUDGET = Budget(items=500, bytes=256 * 1024, inline_output_bytes=256)
#: The most entry bytes a status holds while the database is behind: with the checkpoint (one
#: summary per step), the pinned definition and the spec, the object stays below etcd's 1.5 MB.
HISTORY_MAX_BYTES = 640 * 1024
#: Entries kept in a cache of outputs read back from the database.
OUTPUT_CACHE_ENTRIES = 256
CONDITION_INVALID = "Invalid"
CONDITION_STUCK = "Stuck"
FINISHED_PHASES = ("Succeeded", "Failed", "Compensated", "Cancelled")

#: Decisions and inputs that deserve an Event: (type, reason).
EVENTS: dict[Event, tuple[str, str]] = {
    Event.STEP_FAILED: (WARNING, "StepFailed"),
    Event.STEP_SKIPPED: (NORMAL, "StepSkipped"),
    Event.ESCALATED: (WARNING, "ApprovalEscalated"),
    Event.REQUEST_REFUSED: (WARNING, "RequestRefused"),
    Event.APPROVED: (NORMAL, "StepApproved"),
    Event.REJECTED: (WARNING, "StepRejected"),
    Event.COMPLETED_MANUALLY: (NORMAL, "StepCompletedManually"),
    Event.RETRY_REQUESTED: (NORMAL, "StepRetryRequested"),
    Event.CANCEL_REQUESTED: (NORMAL, "CancelRequested"),
    Event.COMPENSATION_STARTED: (NORMAL, "CompensationStarted"),
    Event.COMPENSATION_FAILED: (WARNING, "CompensationFailed"),
    Event.WORKFLOW_SUCCEEDED: (NORMAL, "WorkflowSucceeded"),
    Event.WORKFLOW_FAILED: (WARNING, "WorkflowFailed"),
    Event.WORKFLOW_COMPENSATING: (WARNING, "WorkflowCompensating"),
    Event.WORKFLOW_COMPENSATED: (NORMAL, "WorkflowCompensated"),
    Event.WORKFLOW_CANCELLED: (NORMAL, "WorkflowCancelled"),
}

REQUEST_EVENTS = {
    "approve": Event.APPROVED,
    "reject": Event.REJECTED,
    "retry": Event.RETRY_REQUESTED,
    "complete": Event.COMPLETED_MANUALLY,
    "cancel": Event.CANCEL_REQUESTED,
}

Key = tuple[str, str]


class Conflict(Exception):
    """The workflow changed since it was read; the pass starts again."""


class HistoryFull(Exception):
    """The status cannot take more entries until the history database has the oldest."""


class OutputUnavailable(Exception):
    """A step output that left the status cannot be read back from the history database."""


@dataclasses.dataclass(frozen=True)
class Recorded:
    """What a Workflow's status holds of its history: the checkpoint, the entries after it, and
    how many entries, counted from the first, are in the history database."""

    checkpoint: Checkpoint | None
    entries: list[Record]
    mirrored: int

    @property
    def base(self) -> int:
        """The seq of the first entry in the status."""
        return self.checkpoint.seq if self.checkpoint else 0

    @classmethod
    def of(cls, status: Mapping[str, Any]) -> Recorded:
        return cls(
            Checkpoint.from_data(status.get("checkpoint")),
            records_from_data(status.get("history") or []),
            int(status.get("historyMirrored") or 0),
        )


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


class WorkflowApi:
    """The Kubernetes calls the engine makes."""

    def __init__(self, api: client.ApiClient, *, pod_cache: Informer | None = None) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.pod_cache = pod_cache  # the leader's: step pods read from it, never listed per pass

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Workflow, or None when there is none of that name."""
        return self._get(PLURAL, namespace, name)

    def definition(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The WorkflowDefinition, or None when there is none of that name."""
        return self._get(DEFINITIONS, namespace, name)

    def list_all(self) -> Iterator[dict[str, Any]]:
        """Every Workflow, a page at a time (finished ones carry whole histories)."""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": LIST_PAGE}
            if token:
                kwargs["_continue"] = token
            page = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)
            yield from page["items"]
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def write_status(self, obj: Mapping[str, Any], status: dict[str, Any]) -> str:
        """Replace the whole status (a PUT: keys left out are removed), conditional on the
        resourceVersion ``obj`` was read at; the new resourceVersion."""
        meta = obj["metadata"]
        try:
            written: dict[str, Any] = self.custom.replace_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], PLURAL, meta["name"], {**obj, "status": status}
            )
        except ApiException as err:
            if err.status in (404, 409):
                raise Conflict(meta["name"]) from err
            raise
        return str(written["metadata"]["resourceVersion"])

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(JOBS, namespace, name)

    def patch_job_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, JOBS, name, {"status": status}
        )

    def pods(self, namespace: str, uid: str) -> dict[str, dict[str, Any]]:
        if self.pod_cache is not None:
            return {p["metadata"]["name"]: p for p in self.pod_cache.by_index(BY_WORKFLOW, uid)}
        listed = self.core.list_namespaced_pod(namespace, label_selector=f"{LABEL_WORKFLOW_UID}={uid}")
        found: dict[str, dict[str, Any]] = {}
        for pod in listed.items:
            data: dict[str, Any] = self.core.api_client.sanitize_for_serialization(pod)
            found[data["metadata"]["name"]] = data
        return found

    def create_pod(self, namespace: str, body: dict[str, Any]) -> None:
        try:
            self.core.create_namespaced_pod(namespace, body)
        except ApiException as err:
            if err.status != 409:  # AlreadyExists: adopted
                raise

    def delete_pod(self, namespace: str, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, namespace)
        except ApiException as err:
            if err.status != 404:
                raise

    def _get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return obj


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
    ) -> None:
        self.api = api
        self._admit = admit
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
            "workflows", self._process, workers=workers, ticks=lambda: self._clock.now().timestamp()
        )
        self._running = False
        #: The resourceVersion of each workflow's last status write of ours, until its watch
        #: event arrives: that event needs no pass (the pass that wrote it already acted).
        self._own: dict[Key, str] = {}
        #: Outputs read back from the database, by (workflow uid, seq), oldest first.
        self._outputs: dict[tuple[str, int], Any] = {}

    # --- queueing -----------------------------------------------------------------------------

    def changed(self, namespace: str, name: str, resource_version: str | None) -> None:
        """A watch saw the workflow change: queue a pass, unless the change is our own write."""
        with self._lock:
            if resource_version is not None and self._own.pop((namespace, name), None) == resource_version:
                return
        self.notify(namespace, name)

    def _wrote(self, obj: Mapping[str, Any], resource_version: str) -> None:
        meta = obj["metadata"]
        with self._lock:
            self._own[(meta["namespace"], meta["name"])] = resource_version

    def forget(self, namespace: str, name: str) -> None:
        """The workflow was deleted: nothing it wanted started is started any more."""
        if self._admit is not None:
            self._admit((namespace, name), [], "normal")

    def notify(self, namespace: str, name: str) -> None:
        self._queue.add((namespace, name))

    def idle(self) -> bool:
        return self._queue.idle()

    def rescan(self) -> int:
        """Queue every workflow that is unfinished, not yet mirrored, or finished and past its
        ttlAfterFinished; the count queued."""
        queued = 0
        now = self._clock.now()
        for obj in self.api.list_all():
            status = obj.get("status") or {}
            unfinished = status.get("phase") not in FINISHED_PHASES
            recorded = int((status.get("checkpoint") or {}).get("seq") or 0) + len(status.get("history") or [])
            unmirrored = self._history is not None and int(status.get("historyMirrored") or 0) < recorded
            expired = self._ttl is not None and self._ttl.due(obj, now)
            if unfinished or unmirrored or expired:
                meta = obj["metadata"]
                self.notify(meta["namespace"], meta["name"])
                queued += 1
        return queued

    def run(self, stop: threading.Event) -> None:
        self._running = True
        threading.Thread(target=self._queue.run, args=(stop,), name="workflow-queue", daemon=True).start()
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
        for _ in range(CONFLICT_TRIES):
            obj = self.api.get(namespace, name)
            if obj is None:
                return None
            try:
                return self._pass(obj)
            except Conflict:
                continue
        log.warning("workflow %s/%s: status kept changing; next pass later", namespace, name)
        return self._clock.now() + RETRY_AFTER_ERROR

    def submit(self, namespace: str, name: str, record: Record) -> list[Record]:
        """Record an input that arrived from outside (an approval callback) and what it led to.

        Returns the records appended (the input first), once they are in the API server;
        raises LookupError when the workflow or its definition is not there.
        """
        for _ in range(CONFLICT_TRIES):
            obj = self.api.get(namespace, name)
            status = (obj or {}).get("status") or {}
            if obj is None or not status.get("definition"):
                raise LookupError(f"workflow {namespace}/{name} not found or not started")
            definition = definition_of(status["definition"], uid=obj["metadata"]["uid"])
            recorded = Recorded.of(status)
            state = resume(definition, recorded.checkpoint, recorded.entries)
            added = record_input(definition, state, record)
            entries = [*recorded.entries, *added]
            mirrored = self._mirror(obj, recorded.base, recorded.entries, recorded.mirrored)
            try:
                new_status = self._status(obj, definition, state, recorded, entries, mirrored, (), record.at)
            except HistoryFull as full:
                raise RuntimeError(f"workflow {namespace}/{name}: {full}; try again") from None
            try:
                self._wrote(obj, self.api.write_status(obj, new_status))
            except Conflict:
                continue
            self._mirror(obj, recorded.base, entries, recorded.base + len(recorded.entries))
            self._announce(obj, added, (), status)
            self._report(obj, added, (), state)
            if self._running:
                self.notify(namespace, name)  # the pass acts on it; elsewhere the leader's watch does
            return added
        raise RuntimeError(f"workflow {namespace}/{name} kept changing; try again")

    def _pass(self, obj: dict[str, Any]) -> datetime | None:
        status = obj.get("status") or {}
        now = self._clock.now()
        if not status.get("definition"):
            return self._start(obj, now)
        uid = obj["metadata"]["uid"]
        pinned = status["definition"]
        definition = definition_of(pinned, uid=uid)
        recorded = Recorded.of(status)
        state = resume(definition, recorded.checkpoint, recorded.entries)
        pods = self.api.pods(obj["metadata"]["namespace"], uid)
        new = self._record_inputs(obj, definition, state, pods, now)
        stuck = tuple(stuck_steps(definition, state, now=now))
        mirrored = self._mirror(obj, recorded.base, recorded.entries, recorded.mirrored)
        entries = [*recorded.entries, *new]
        try:
            new_status = self._status(obj, definition, state, recorded, entries, mirrored, stuck, now)
        except HistoryFull as full:
            log.warning("workflow %s/%s: %s; nothing recorded, trying again later", obj["metadata"]["namespace"],
                        obj["metadata"]["name"], full)  # fmt: skip
            return now + RETRY_AFTER_ERROR
        if new_status != status:
            self._wrote(obj, self.api.write_status(obj, new_status))
            # Now recorded: mirror them at once, best effort. The counter in status catches up on
            # a later pass (rewriting is idempotent), and after an outage that pass writes them.
            self._mirror(obj, recorded.base, entries, recorded.base + len(recorded.entries))
        self._act(obj, pinned, definition, state, pods)
        self._announce(obj, new, stuck, status)
        self._report(obj, new, stuck, state)
        self._tell_job(obj, new)
        wake = self._next_pass(definition, state, now)
        if self._ttl is None or not state.finished:
            return wake
        ending = self._ttl.after_pass(obj, new_status, now)  # the status as it now stands
        if ending.verdict is Verdict.DELETE:
            return None
        return min((at for at in (wake, ending.at) if at is not None), default=None)

    def _tell_job(self, obj: Mapping[str, Any], new: Sequence[Record]) -> None:
        """A workflow started by a ScheduledJob ended: record it in the job's status, as an
        execution's end is (`recent`, and `lastSuccessfulTime` that the watchdog reads)."""
        ended = [r for r in new if r.event in JOB_OUTCOMES]
        owner = next(
            (o for o in obj["metadata"].get("ownerReferences") or [] if o.get("kind") == "ScheduledJob"),
            None,
        )
        if not ended or owner is None:
            return
        record = ended[-1]
        meta = obj["metadata"]
        job = self.api.job(meta["namespace"], owner["name"])
        if job is None or job["metadata"]["uid"] != owner.get("uid"):
            return
        status = job.get("status") or {}
        entry = {
            "executionId": meta["name"],
            "attempt": 1,
            "outcome": JOB_OUTCOMES[record.event],
            "scheduledFor": (meta.get("annotations") or {}).get(ANNOTATION_SCHEDULED_FOR)
            or format_rfc3339(record.at),
            "finishedAt": format_rfc3339(record.at),
            "reason": str(record.event),
        }
        recent = [r for r in status.get("recent") or [] if r.get("executionId") != meta["name"]]
        patch: dict[str, Any] = {"recent": [*recent, entry][-RECENT_SIZE:]}
        previous = status.get("lastSuccessfulTime")
        if record.event is Event.WORKFLOW_SUCCEEDED and (
            previous is None or parse_rfc3339(previous) < record.at
        ):
            patch["lastSuccessfulTime"] = format_rfc3339(record.at)
        self.api.patch_job_status(meta["namespace"], owner["name"], patch)

    def _report(
        self, obj: Mapping[str, Any], new: Sequence[Record], stuck: Sequence[str], state: WorkflowState
    ) -> None:
        if self._on_pass is not None:
            meta = obj["metadata"]
            self._on_pass(Pass(meta["namespace"], meta["name"], tuple(new), tuple(stuck), str(state.phase)))

    def _next_pass(self, definition: Definition, state: WorkflowState, now: datetime) -> datetime | None:
        wakes = [at for at in (next_wakeup(state),) if at is not None]
        for step in definition.steps:
            folded = state.steps[step.id]
            if step.expected_duration and folded.attempt_started_at and folded.phase == "Running":
                due = folded.attempt_started_at + step.expected_duration
                if due > now:
                    wakes.append(due + timedelta(seconds=1))
        return min(wakes) if wakes else None

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
        state = fold(definition, [])
        records = record_input(definition, state, Record(Event.WORKFLOW_STARTED, now))
        conditions = set_condition(
            status.get("conditions") or [],
            type_=CONDITION_INVALID,
            status=False,
            reason="Valid",
            message="",
            generation=meta.get("generation", 0),
            now=now,
        )
        new_status = self._status(obj, definition, state, Recorded(None, [], 0), records, 0, (), now)
        new_status["conditions"] = conditions
        new_status["definition"] = pinned
        self._wrote(obj, self.api.write_status(obj, new_status))
        self._mirror(obj, 0, records, 0)
        self._act(obj, pinned, definition, state, {})
        self._announce(obj, records, (), status)
        self._report(obj, records, (), state)
        return next_wakeup(state)

    def _invalid(
        self, obj: dict[str, Any], status: Mapping[str, Any], error: Exception, now: datetime
    ) -> datetime | None:
        meta = obj["metadata"]
        message = str(error)
        conditions = set_condition(
            status.get("conditions") or [],
            type_=CONDITION_INVALID,
            status=True,
            reason="InvalidSpec",
            message=message,
            generation=meta.get("generation", 0),
            now=now,
        )
        before = [c for c in status.get("conditions") or [] if c.get("type") == CONDITION_INVALID]
        if before and before[0].get("status") == "True" and before[0].get("message") == message:
            return now + timedelta(seconds=30)  # already reported; a missing definition may appear
        self._wrote(obj, self.api.write_status(
            obj,
            {**status, "phase": "Pending", "conditions": conditions, "observedGeneration": meta.get("generation")},
        ))
        if self._events is not None:
            self._events.emit(obj, type_=WARNING, reason="InvalidSpec", message=message)
        return now + timedelta(seconds=30)

    def _record_inputs(
        self,
        obj: Mapping[str, Any],
        definition: Definition,
        state: WorkflowState,
        pods: Mapping[str, Mapping[str, Any]],
        now: datetime,
    ) -> list[Record]:
        new: list[Record] = []
        for request in (obj.get("spec") or {}).get("requests") or []:
            if request.get("id") not in state.requests:
                new += record_input(definition, state, _request_input(request, now))
        for _ in range(INPUT_ROUNDS):
            found = [
                result
                for wanted in wanted_pods(definition, state)
                if (pod := pods.get(_pod_name(wanted))) is not None
                and (result := pod_result(pod, wanted, now=now)) is not None
            ]
            found += [timer.record(now=now) for timer in timers(state) if timer.at <= now]
            if not found:
                break
            for record in found:
                new += record_input(definition, state, record)
        return new

    def _mirror(self, obj: Mapping[str, Any], base: int, entries: Sequence[Record], mirrored: int) -> int:
        """Write the recorded-but-unmirrored entries to the database; the new mirrored count.

        ``entries`` are the history from seq ``base`` on; ``mirrored`` entries from the first
        are in the database already (never fewer than ``base``: only mirrored entries leave).
        """
        end = base + len(entries)
        if self._history is None or mirrored >= end:
            return mirrored
        meta = obj["metadata"]
        rows = [
            WorkflowEventRecord(
                namespace=meta["namespace"],
                workflow=meta["name"],
                workflow_uid=meta["uid"],
                seq=seq,
                event=str(record.event),
                step=record.step,
                attempt=record.attempt,
                at=record.at,
                data=record.to_data(),
            )
            for seq, record in enumerate(entries[max(0, mirrored - base) :], start=max(mirrored, base))
        ]
        try:
            self._history.write_workflow_events(rows)
        except HistoryUnavailable:
            return mirrored  # kept in status; written on a later pass
        return end

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
        """The new status: ``entries`` are the history after ``recorded.checkpoint``, the new
        ones included. Over the budget, the oldest mirrored ones go into the checkpoint;
        HistoryFull when what must stay is more than a status may hold."""
        meta = obj["metadata"]
        checkpoint, kept = compact(definition, recorded.checkpoint, entries, mirrored=mirrored, budget=HISTORY_BUDGET)
        held = sum(entry_bytes(record) for record in kept)
        if len(kept) > HISTORY_MAX_ITEMS or held > HISTORY_MAX_BYTES:
            raise HistoryFull(
                f"{len(kept)} history entries ({held} bytes) wait for the history database, which has "
                f"{mirrored} of {(checkpoint.seq if checkpoint else 0) + len(kept)}"
            )
        status = dict(obj.get("status") or {})
        conditions = set_condition(
            status.get("conditions") or [],
            type_=CONDITION_STUCK,
            status=bool(stuck),
            reason="PastExpectedDuration" if stuck else "OnTime",
            message=f"running past expectedDuration: {', '.join(stuck)}" if stuck else "",
            generation=meta.get("generation", 0),
            now=now,
        )
        status.update(
            {
                "observedGeneration": meta.get("generation"),
                "phase": str(state.phase),
                "history": [record.to_data() for record in kept],
                "historyMirrored": mirrored,
                "steps": {step_id: _step_summary(folded) for step_id, folded in state.steps.items()},
                "progress": progress(definition, state),
                "current": current(definition, state),
                "conditions": conditions,
            }
        )
        if checkpoint is not None:
            status["checkpoint"] = checkpoint.to_data()
        if state.started_at is not None:
            status["startedAt"] = format_rfc3339(state.started_at)
        if state.finished_at is not None:
            status["finishedAt"] = format_rfc3339(state.finished_at)
        else:
            status.pop("finishedAt", None)
        return status

    def _act(
        self,
        obj: Mapping[str, Any],
        pinned: Mapping[str, Any],
        definition: Definition,
        state: WorkflowState,
        pods: Mapping[str, Mapping[str, Any]],
    ) -> None:
        namespace = obj["metadata"]["namespace"]
        wanted = {_pod_name(w): w for w in wanted_pods(definition, state)}
        templates = step_templates(pinned)
        bodies: list[dict[str, Any]] = []
        for name, want in wanted.items():
            if name in pods:
                continue
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
        for name, pod in pods.items():
            finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
            if name not in wanted and not finished and not deleting:
                self.api.delete_pod(namespace, name)

    def _output(self, obj: Mapping[str, Any], state: WorkflowState, step_id: str) -> Any:
        """A step's output: from the state, or, when it left the status, from the database entry
        it came in (checked against the digest kept)."""
        step = state.steps[step_id]
        if step.output_offloaded is None or step.output_seq is None:
            return step.output
        key = (str(obj["metadata"]["uid"]), step.output_seq)
        with self._lock:
            if key in self._outputs:
                return self._outputs[key]
        where = f"output of step {step_id} (history entry {step.output_seq})"
        if self._history is None:
            raise OutputUnavailable(f"{where}: no history database")
        entry = self._history.workflow_event(*key)
        output = (entry.data or {}).get("output") if entry is not None else None
        if entry is None or output_digest(output) != step.output_offloaded:
            raise OutputUnavailable(f"{where}: missing or changed in the history database")
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
        for record in new:
            kind = EVENTS.get(record.event)
            if kind is not None:
                self._events.emit(obj, type_=kind[0], reason=kind[1], message=_describe(record))
        was_stuck = any(
            c.get("type") == CONDITION_STUCK and c.get("status") == "True"
            for c in before.get("conditions") or []
        )
        if stuck and not was_stuck:
            self._events.emit(
                obj,
                type_=WARNING,
                reason="StepStuck",
                message=f"running past expectedDuration: {', '.join(stuck)}",
            )


def _pod_name(wanted: WantedPod) -> str:
    return pod_name(ExecutionId(wanted.execution_id), wanted.attempt)


def _request_input(request: Mapping[str, Any], now: datetime) -> Record:
    event = REQUEST_EVENTS[request["action"]]
    detail: dict[str, Any] = {"request": request["id"], "by": request.get("by", ""), "rules": RULES}
    for key in ("byGroups", "reason"):
        if request.get(key):
            detail[key] = request[key]
    if event is Event.COMPLETED_MANUALLY:
        detail["output"] = parse_output(request.get("output"))
    return Record(event, now, step=request.get("step"), detail=detail)


def _step_summary(folded: Any) -> dict[str, Any]:
    summary: dict[str, Any] = {"phase": str(folded.phase), "attempts": folded.attempt}
    for key, value in (
        ("startedAt", folded.started_at),
        ("finishedAt", folded.finished_at),
        ("retryAt", folded.retry_at),
        ("deadline", folded.deadline),
    ):
        if value is not None:
            summary[key] = format_rfc3339(value)
    if folded.reason:
        summary["reason"] = folded.reason
    if folded.decided_by:
        summary["decidedBy"] = folded.decided_by
    if folded.manual:
        summary["manual"] = True
    if folded.approvers:
        summary["approvers"] = list(folded.approvers)
        summary["level"] = folded.level
    if folded.compensation is not None:
        summary["compensation"] = str(folded.compensation.phase)
    return summary


def _describe(record: Record) -> str:
    parts = [str(record.event)]
    if record.step:
        parts.append(f"step {record.step}")
    for key in ("reason", "by", "message", "approvers"):
        value = record.detail.get(key)
        if value:
            parts.append(f"{key}: {value}")
    return "; ".join(parts)
