"""The workflow engine: the Workflow controller. Record inputs, decide, write status, then act.

It has the controller shape of the others (:mod:`vigil.kube.controllers.definitions`,
:mod:`vigil.kube.controllers.jobcontroller`): the Workflow informer (:func:`vigil.kube.controllers.workflowapi.workflow_cache`)
and the step pod cache feed keys to one work queue, and a reconcile (one *pass*) reads the
workflow from the cache, decides with the pure core (:mod:`vigil.core.workflowpass`), writes the
status once through its one writer, and acts. The runtime starts its threads: the queue's
workers, the informer, the history writer, and the informer's resync.

One pass over a Workflow (``reconcile``):

1. Read it from the cache. A workflow without a pinned definition is started: the inline
   steps or the referenced WorkflowDefinition version are copied into status.
2. Fold ``status.history`` into state. Gather the inputs that are new — users'
   requests in ``spec.requests`` not yet recorded, results of the step pods the
   state wants, ends of the tasks its task steps run (read from the queue store,
   :mod:`vigil.kube.controllers.workflowtasks`), timers whose time has come — and record each with the
   decisions it leads to (:func:`vigil.core.orchestrator.record_input`).
3. Write the status (:class:`vigil.kube.controllers.workflowstatus.WorkflowStatusWriter`) with the
   resourceVersion it was read at: a concurrent writer makes this a 409 and the pass starts
   again from a fresh read, so two passes can never both record a decision.
4. Only then act, by plan type: hand the pods the state wants to the dispatcher (a pod that
   exists is adopted: its name derives from the step's execution id and the attempt), delete
   running pods the state no longer wants; submit the tasks it wants to the queue store (keyed
   by the step's execution id: a second submit adds nothing), cancel those of steps it stopped;
   post Events, tell the ScheduledJob that started it of its end (through the job's one status
   writer).

Everything an action depends on is in the written status, so a crash at any
point is repaired by the next pass — in this process or a new one.

Passes are level-triggered: a step pod's result (:meth:`WorkflowEngine.pod_changed`) and
Workflow changes queue the workflow, timers queue it at their recorded time, a running task step
queues it every ``TASK_POLL`` (the store tells nobody of a task's end), and the informer's
resync (every ``workflows.rescanSeconds``, from the cache: no request) queues every workflow
that needs a pass; a new leader's first list queues every one in flight. The status stays
within etcd's object size: entries are mirrored to the history database as they are recorded
and the oldest leave the status once they are in (:mod:`vigil.kube.controllers.workflowhistory`). A
finished workflow leaves once its ttlAfterFinished has passed and its whole history is in the
database (:mod:`vigil.kube.controllers.workflowttl`, asked after each pass on it).

Every status write rewrites the whole Workflow on the API server, so a pass writes only what
changes what happens next at once: step pods' successes that start nothing, while other step
pods of the workflow still run, are held back (for QUIET_RESULTS_WAIT at most) and recorded with
the next result (:func:`vigil.core.workflowpass.results_can_wait`). A fan whose pods end over a
few seconds is then one write, not one per pod.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from vigil.core.checkpoint import resume
from vigil.core.conditions import ConditionReason
from vigil.core.orchestrator import (
    Wanted,
    WantedPod,
    WantedTask,
    execution_id_of,
    inputs_for,
    record_input,
    stuck_steps,
    wanted_tasks,
)
from vigil.core.podstatus import classify_pod
from vigil.core.ports import Clock, Conflict, WorkflowHistorySink
from vigil.core.queue import TaskState
from vigil.core.workflow import (
    TERMINAL_WORKFLOW_PHASES,
    Definition,
    Event,
    Record,
    StepKind,
    WorkflowState,
)
from vigil.core.workflowpass import (
    INVALID_RECHECK,
    JOB_OUTCOMES,
    QUIET_RESULTS_WAIT,
    STATUS_LIMITS,
    HistoryFull,
    Pass,
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
from vigil.kube.controllers.workflowapi import WorkflowApi, kept_whole, workflow_cache
from vigil.kube.controllers.workflowhistory import WorkflowHistory
from vigil.kube.controllers.workflowpods import BY_WORKFLOW, pod_result, workflow_of, workflow_pod
from vigil.kube.controllers.workflowstatus import WorkflowStatusWriter, typed
from vigil.kube.controllers.workflowtasks import WorkflowTasks
from vigil.kube.controllers.workflowttl import WorkflowTtl
from vigil.kube.kits.conflicts import retry_on_conflict
from vigil.kube.kits.events import NORMAL, WARNING, EventRecorder
from vigil.kube.kits.informer import Informer
from vigil.kube.kits.workqueue import WorkQueue
from vigil.kube.stores.jobstatus import Change, JobStatusWriter
from vigil.kube.stores.pods import ANNOTATION_SCHEDULED_FOR
from vigil.model.jobpatches import workflow_end_patch
from vigil.model.names import LABEL_PRIORITY, LABEL_WORKFLOW_UID, WORKFLOWS
from vigil.model.scheduledjob import SCHEDULED_JOB
from vigil.model.workflowspec import (
    InvalidWorkflow,
    definition_of,
    parse_workflow_spec,
    pin,
    step_tasks,
    step_templates,
)

log = logging.getLogger(__name__)

#: A step pod that finished while others of its workflow still run: its pass waits this long, so
#: the results of a fan that ends together are recorded in one status write, not one each.
SIBLINGS_SETTLE_SECONDS = 0.2
RETRY_AFTER_ERROR = timedelta(seconds=5)
WORKERS = 4  # passes at once (the runtime's: workflows.workers)

Key = tuple[str, str]

#: Why a workflow with task steps is Invalid while the operator has no queue store.
TIER_OFF = "spec.steps: a task step needs the volume tier: set queue.dsn"
#: Decisions that stop a running step: its task, if it has one, is cancelled.
STOPS = frozenset({Event.STEP_CANCELLED, Event.STEP_FAILED, Event.STEP_SKIPPED})

#: admit((namespace, workflow), pod bodies, priority): the pods a workflow wants started now,
#: replacing what it wanted before; the dispatcher creates them as capacity allows.
Admit = Callable[[tuple[str, str], list[dict[str, Any]], str], None]


def workflow_priority(obj: Mapping[str, Any]) -> str:
    """A workflow's dispatch priority: its job's, carried as a label; normal otherwise."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_PRIORITY) or "normal"


class WorkflowEngine:
    """The Workflow controller: its handlers queue keys, its queue's workers run passes, never
    two on one workflow at once.

    ``cache``: the leader's Workflow informer, which feeds the engine (its handlers are added
    here; the runtime runs it, the queue and the history writer). Without one (a tool, a test,
    the approval callback's engine that only records decisions) the engine reads and writes
    through a cache of its own that nothing lists, and nothing runs its queue.
    """

    def __init__(
        self,
        api: WorkflowApi,
        *,
        clock: Clock,
        events: EventRecorder | None,
        cache: Informer | None = None,
        history: WorkflowHistorySink | None = None,
        mirror_in_background: bool = False,
        workers: int = WORKERS,
        on_pass: Callable[[Pass], None] | None = None,
        ttl: WorkflowTtl | None = None,
        admit: Admit | None = None,
        job_status: JobStatusWriter | None = None,
        tasks: WorkflowTasks | None = None,
    ) -> None:
        self.api = api
        #: Task steps' executions in the queue store (None: the volume tier is off, and a
        #: workflow with a task step is Invalid).
        self._tasks = tasks
        self._admit = admit
        #: The ScheduledJobs' one status writer: a workflow a job started tells it of its end
        #: (None: a tool or a test; nothing is told).
        self._job_status = job_status
        self._clock = clock
        self._events = events
        self._on_pass = on_pass
        #: Deletes finished workflows past their ttlAfterFinished (None: kept forever).
        self._ttl = ttl
        self._fed = cache is not None
        self.cache = cache if cache is not None else workflow_cache(None)
        self.status = WorkflowStatusWriter(api, cache=self.cache)
        self.history = WorkflowHistory(history, background=mirror_in_background, finished=self._pass_again)
        #: Passes, one workflow never on two workers; its delays run on the engine's clock.
        self.queue: WorkQueue[Key] = WorkQueue(
            WORKFLOWS, self._process, workers=workers, ticks=lambda: self._clock.now().timestamp()
        )
        self._lock = threading.Lock()
        #: Of each unfinished workflow: the resourceVersion a pass last handled (read it and
        #: acted, or wrote it), so a watch event of that version or an older one (its own write
        #: coming back) queues no pass. Dropped when it finishes.
        self._handled: dict[Key, str] = {}
        #: Of each workflow whose passes hold results back (:meth:`_hold`): since when.
        self._held_since: dict[Key, datetime] = {}
        if cache is not None:
            cache.add_handler(self.seen, on_resync=self.resynced)

    # --- what queues a pass -----------------------------------------------------------------------

    def seen(self, key: Key, obj: dict[str, Any], deleted: bool) -> None:
        """The Workflow informer's handler (its first list included: that is how a new leader
        resumes every workflow in flight): a pass is queued when the workflow needs one and this
        version is news (not one a pass handled already, such as its own write); a deletion is
        forgotten."""
        if deleted:
            self.forget(*key)
            return
        with self._lock:
            news = _newer(str(obj["metadata"].get("resourceVersion") or ""), self._handled.get(key))
        if news and self._needs_pass(obj, self._clock.now()):
            self.notify(*key)

    def resynced(self, key: Key, obj: dict[str, Any], deleted: bool) -> None:
        """The informer's resync: every workflow that needs a pass is queued, whatever version a
        pass handled last (the safety net behind the watch and the timers)."""
        if self._needs_pass(obj, self._clock.now()):
            self.notify(*key)

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
        return needs_pass(status, mirroring=self.history.sink is not None, expired=expired)

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
            self.queue.add_after(owner, SIBLINGS_SETTLE_SECONDS)
        else:
            self.notify(*owner)

    def forget(self, namespace: str, name: str) -> None:
        """The workflow was deleted: nothing it wanted started is started any more."""
        with self._lock:
            self._handled.pop((namespace, name), None)
            self._held_since.pop((namespace, name), None)
        self.history.forget((namespace, name))
        if self._admit is not None:
            self._admit((namespace, name), [], "normal")

    def notify(self, namespace: str, name: str) -> None:
        self.queue.add((namespace, name))

    def _pass_again(self, key: Key) -> None:
        """A finished workflow's entries are all in the database: a pass counts them in status
        (and its ttlAfterFinished may then delete it)."""
        self.notify(*key)

    def idle(self) -> bool:
        return self.queue.idle()

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

    def _read(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The workflow as the cache holds it when it holds it whole (unfinished, or finished with
        history still to mirror); one it holds as a summary, or lacks, as the API server has it."""
        cached = self.cache.get(namespace, name)
        if cached is not None and kept_whole(cached):
            return cached
        return self._get(namespace, name)

    def _get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The workflow as the API server has it now; the cache keeps it too."""
        obj = self.api.get(namespace, name)
        if obj is not None:
            self.cache.observe(obj)
        return obj

    # --- one pass ---------------------------------------------------------------------------------

    def reconcile(self, namespace: str, name: str) -> datetime | None:
        """One pass; the time the workflow next needs one (a timer), if any."""
        obj = self._read(namespace, name)

        def attempt() -> datetime | None:
            nonlocal obj
            if obj is None:
                obj = self._get(namespace, name)  # what the cache held proved stale
            if obj is None:
                return None
            try:
                return self._pass(obj)
            except Conflict:
                obj = None
                raise

        try:
            return retry_on_conflict(attempt)
        except Conflict:
            log.warning("workflow %s/%s: status kept changing; next pass later", namespace, name)
            return self._clock.now() + RETRY_AFTER_ERROR

    def submit(self, namespace: str, name: str, record: Record) -> list[Record]:
        """Record an input that arrived from outside (an approval callback) and what it led to.

        Returns the records appended (the input first), once they are in the API server;
        raises LookupError when the workflow or its definition is not there.
        """

        def attempt() -> list[Record]:
            obj = self._get(namespace, name)
            status = (obj or {}).get("status") or {}
            if obj is None or not status.get("definition"):
                raise LookupError(f"workflow {namespace}/{name} not found or not started")
            definition = definition_of(status["definition"], uid=obj["metadata"]["uid"])
            recorded = Recorded.of(status)
            state = resume(definition, recorded.checkpoint, recorded.entries)
            added = record_input(definition, state, record)
            entries = [*recorded.entries, *added]
            pinned = status["definition"]
            mirrored = self.history.mirror(obj, pinned, recorded.base, recorded.entries, recorded.mirrored)
            try:
                new_status = self._status(obj, definition, state, recorded, entries, mirrored, (), record.at)
            except HistoryFull as full:
                raise RuntimeError(f"workflow {namespace}/{name}: {full}; try again") from None
            self._write(obj, new_status)  # Conflict: read again, record again
            self.history.mirror(obj, pinned, recorded.base, entries, mirrored, finished=state.finished)
            self._stop_tasks(obj, definition, added)
            self._announce(obj, added, (), status)
            self._report(obj, added, (), state)
            if self._fed:
                self.notify(namespace, name)  # the pass acts on it; elsewhere the leader's watch does
            return added

        try:
            return retry_on_conflict(attempt)
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
        tasks = self._task_states(definition, state)
        new = gather_inputs(
            definition,
            state,
            requests=(obj.get("spec") or {}).get("requests") or [],
            result_of=lambda wanted: self._result(pods, tasks, wanted, now),
            now=now,
        )
        held = self._hold(obj, definition, state, new, now)
        if held is not None:
            return held
        stuck = tuple(stuck_steps(definition, state, now=now))
        mirrored = self.history.mirror(
            obj, pinned, recorded.base, recorded.entries, recorded.mirrored, finished=state.finished
        )
        entries = [*recorded.entries, *new]
        try:
            new_status = self._status(obj, definition, state, recorded, entries, mirrored, stuck, now)
        except HistoryFull as full:
            log.warning("workflow %s/%s: %s; nothing recorded, trying again later", meta["namespace"],
                        meta["name"], full)  # fmt: skip
            return now + RETRY_AFTER_ERROR
        if self._write(obj, new_status):
            # Now recorded: mirror them. The counter in status catches up on a later pass, and
            # after an outage that pass offers them again (rewriting is idempotent).
            self.history.mirror(obj, pinned, recorded.base, entries, mirrored, finished=state.finished)
        again = self._act(obj, pinned, definition, state, pods, tasks)
        self._stop_tasks(obj, definition, new)
        self._announce(obj, new, stuck, status)
        self._report(obj, new, stuck, state)
        self._tell_job(obj, new)
        wake = now if again else self._next_pass(definition, state, now)
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
        wake = self._next_pass(definition, state, now)
        return due if wake is None else min(wake, due)

    def _write(self, obj: Mapping[str, Any], new_status: dict[str, Any]) -> bool:
        """The status built from the folded state, through the Workflow's one status writer
        (written only when it differs from the one read); whether it was written. Conflict when
        the workflow changed meanwhile."""
        unfinished = str(new_status.get("phase")) not in TERMINAL_WORKFLOW_PHASES
        written = self.status.write(obj, typed(new_status))
        self._handled_at(obj if written is None else written, keep=unfinished)
        return written is not None

    def _handled_at(self, obj: Mapping[str, Any], *, keep: bool) -> None:
        """A pass handled ``obj`` (read and acted on it, or wrote it); ``keep``: the workflow is
        unfinished, so a watch event of this version queues no pass."""
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        with self._lock:
            if keep:
                self._handled[key] = str(meta["resourceVersion"])
            else:
                self._handled.pop(key, None)
        if not keep:
            self.history.settle(key, str(meta["uid"]), int((obj.get("status") or {}).get("historyMirrored") or 0))

    def _tell_job(self, obj: Mapping[str, Any], new: Sequence[Record]) -> None:
        """A workflow started by a ScheduledJob ended: record it in the job's status, as an
        execution's end is (`recent`, and `lastSuccessfulTime` that the watchdog reads)."""
        owner = next(
            (o for o in obj["metadata"].get("ownerReferences") or [] if o.get("kind") == SCHEDULED_JOB.kind),
            None,
        )
        if owner is None or self._job_status is None or not any(r.event in JOB_OUTCOMES for r in new):
            return
        meta = obj["metadata"]
        scheduled_for = (meta.get("annotations") or {}).get(ANNOTATION_SCHEDULED_FOR)

        def ended(status: Mapping[str, Any], _: int) -> dict[str, Any]:
            return workflow_end_patch(status, workflow=meta["name"], scheduled_for=scheduled_for, new=new) or {}

        change = Change(str(owner.get("uid")), ended, lambda job: None)
        self._job_status.add((meta["namespace"], owner["name"]), change)

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
            if self._tasks is None and any(step.kind is StepKind.TASK for step in definition.steps):
                raise ValueError(TIER_OFF)
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
        self.history.mirror(obj, pinned, 0, records, 0)
        again = self._act(obj, pinned, definition, state, {}, None)
        self._announce(obj, records, (), status)
        self._report(obj, records, (), state)
        return now if again else self._next_pass(definition, state, now)

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

    def _next_pass(self, definition: Definition, state: WorkflowState, now: datetime) -> datetime | None:
        """The next pass with nothing else happening: the core's (:func:`next_pass`), and no later
        than the task poll while a task step runs (the store tells nobody of a task's end)."""
        wake = next_pass(definition, state, now)
        if self._tasks is None or not wanted_tasks(definition, state):
            return wake
        poll = now + self._tasks.poll
        return poll if wake is None else min(wake, poll)

    def _task_states(self, definition: Definition, state: WorkflowState) -> dict[str, TaskState]:
        """The store's states of the tasks the state wants (none without a store or a task)."""
        wanted = wanted_tasks(definition, state)
        return self._tasks.read(wanted) if self._tasks is not None and wanted else {}

    def _result(
        self,
        pods: Mapping[str, Mapping[str, Any]],
        tasks: Mapping[str, TaskState],
        wanted: Wanted,
        now: datetime,
    ) -> Record | None:
        """What a plan reports, by its type: a pod's result, a task's end; None while it runs."""
        if isinstance(wanted, WantedTask):
            return None if self._tasks is None else self._tasks.result(wanted, tasks, now=now)
        return _pod_result(pods, wanted, now)

    def _act(
        self,
        obj: Mapping[str, Any],
        pinned: Mapping[str, Any],
        definition: Definition,
        state: WorkflowState,
        pods: Mapping[str, Mapping[str, Any]],
        tasks: Mapping[str, TaskState] | None,
    ) -> bool:
        """Carry out what the state wants, by plan type: pods (:meth:`_act_pods`), tasks
        (:meth:`_act_tasks`). True when a pass is owed at once (a task the store refused)."""
        self._act_pods(obj, pinned, definition, state, pods)
        return self._act_tasks(obj, pinned, definition, state, tasks)

    def _act_tasks(
        self,
        obj: Mapping[str, Any],
        pinned: Mapping[str, Any],
        definition: Definition,
        state: WorkflowState,
        tasks: Mapping[str, TaskState] | None,
    ) -> bool:
        """Submit the tasks the state wants that are not enqueued (those this pass did not read
        are read first), and make ready again those owed a later attempt."""
        wanted = wanted_tasks(definition, state)
        if not wanted or self._tasks is None:
            return False
        found = dict(tasks or {})
        unread = [w for w in wanted if w.execution_id not in found]
        if unread:
            found |= self._tasks.read(unread)
        owed = [(w, found.get(w.execution_id)) for w in wanted if self._tasks.owed(w, found.get(w.execution_id))]
        if not owed:
            return False
        calls = step_tasks(pinned)
        plans = [(w, was, calls[w.step], self._inputs(obj, definition, state, w.step)) for w, was in owed]
        return self._tasks.carry_out(plans, workflow=obj, parameters=pinned.get("parameters") or {})

    def _inputs(
        self, obj: Mapping[str, Any], definition: Definition, state: WorkflowState, step: str
    ) -> dict[str, Any]:
        """The outputs of the steps `step` depends on, by step: its pod's environment and its
        task's payload carry them alike."""
        return {dep: self.history.output(obj, state, dep) for dep in inputs_for(definition, state, step)}

    def _stop_tasks(self, obj: Mapping[str, Any], definition: Definition, new: Sequence[Record]) -> None:
        """Cancel the task of each task step a pass stopped (a timeout, a cancel, the workflow
        failing): a worker's acknowledgement then changes nothing."""
        if self._tasks is None:
            return
        by = f"workflow {obj['metadata']['namespace']}/{obj['metadata']['name']}"
        for record in new:
            if record.event in STOPS and record.step and definition.step(record.step).kind is StepKind.TASK:
                self._tasks.stop(execution_id_of(definition, record.step), by=by)

    def _act_pods(
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
            inputs = self._inputs(obj, definition, state, want.step)
            body = workflow_pod(
                workflow=obj,
                wanted=want,
                template=compensate if want.compensation else template,
                inputs=inputs,
                parameters=pinned.get("parameters") or {},
                output=self.history.output(obj, state, want.step) if want.compensation else None,
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


def _pod_result(pods: Mapping[str, Mapping[str, Any]], wanted: WantedPod, now: datetime) -> Record | None:
    """What the pod a step wants reports: its result, or None while it runs or does not exist."""
    pod = pods.get(wanted_pod_name(wanted))
    return None if pod is None else pod_result(pod, wanted, now=now)
