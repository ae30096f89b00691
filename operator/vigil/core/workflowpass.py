"""The decisions of one workflow engine pass, apart from the I/O around them.

The engine (:mod:`vigil.kube.controllers.workflows`) reads a Workflow and its step pods, and
writes a status, pods and Events; everything it decides in between is here, as
functions of (definition, folded state, what was read, ``now``):

* :func:`start` — a workflow's first records: its start and the decisions it leads to;
* :func:`gather_inputs` — which inputs are new this pass (users' requests not yet
  recorded, results of the pods the state wants, timers whose time has come) and
  the decisions each leads to, appended to the state as they are recorded;
* :func:`next_pass` — when the workflow next needs a pass: the earliest of its
  timers and of the moments a running step passes its expectedDuration;
* :func:`build_status` — the whole new status from the folded state: history
  (compacted into the checkpoint past a budget, :data:`STATUS_LIMITS`), the per-step summaries, phase,
  progress and conditions merged by type; :func:`started_status` and
  :func:`invalid_status` for a workflow's first pass;
* :func:`plan_pods` — which wanted pods to start, and which running pods to stop;
* :func:`needs_pass` — which workflows the cache's resync queues;
* :class:`Pass` — what one pass recorded, as the engine reports it (metrics, approval tokens);
* :func:`announcements` — the Events a pass's records deserve;
* :data:`JOB_OUTCOMES` — how a workflow's end reads in its ScheduledJob's ``recent``
  (the patch itself: :mod:`vigil.model.jobpatches`).

No clock (``now`` is passed in), no Kubernetes, no I/O: the engine reads ``now``
once per pass and hands it down, so every rule here is a unit test away.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from vigil.core.checkpoint import Budget, Checkpoint, compact, entry_bytes
from vigil.core.conditions import ConditionReason, ConditionType, EventReason, set_condition
from vigil.core.ids import ExecutionId, pod_name
from vigil.core.orchestrator import (
    Wanted,
    WantedPod,
    current,
    progress,
    record_input,
    timers,
    wanted,
    wanted_pods,
)
from vigil.core.timeparse import format_rfc3339
from vigil.core.workflow import (
    RULES,
    TERMINAL_WORKFLOW_PHASES,
    Definition,
    Event,
    Record,
    StepPhase,
    StepState,
    WorkflowPhase,
    WorkflowState,
    fold,
    parse_output,
    records_from_data,
)

#: Rounds of input gathering per pass before writing (a result can make a timer due).
INPUT_ROUNDS = 10
#: A pass after a step's expectedDuration comes this long after it, so the step is past it.
STUCK_MARGIN = timedelta(seconds=1)
#: An invalid workflow is looked at again this often (a missing definition may appear).
INVALID_RECHECK = timedelta(seconds=30)
#: Step pods' successes that start nothing, while other step pods of the workflow still run, wait
#: at most this long to be recorded: with the next result that does start something, or ends the
#: workflow, they are one status write (:func:`results_can_wait`).
QUIET_RESULTS_WAIT = timedelta(seconds=5)


class HistoryFull(Exception):
    """The status cannot take more entries until the history database has the oldest."""


@dataclasses.dataclass(frozen=True)
class Pass:
    """What one pass recorded (for metrics, approval tokens and tests)."""

    namespace: str
    name: str
    records: tuple[Record, ...]
    stuck: tuple[str, ...]
    phase: str


@dataclasses.dataclass(frozen=True)
class StatusLimits:
    """How much history a Workflow's status holds.

    ``budget``: past it the oldest mirrored entries fold into the checkpoint;
    ``max_items``/``max_bytes``: the most entries a status holds while the history database is
    behind (the CRD's maxItems, and what keeps the object below etcd's 1.5 MB).
    """

    budget: Budget
    max_items: int
    max_bytes: int


#: When the oldest mirrored entries leave the status for the checkpoint (and outputs over 256
#: bytes leave with them): 500 entries or 256 KiB of them, leaving half of each.
HISTORY_BUDGET = Budget(items=500, bytes=256 * 1024, inline_output_bytes=256)
#: Most history entries a Workflow's status holds (the CRD's maxItems, :mod:`vigil.model.workflow`);
#: older ones are in the history database.
HISTORY_MAX_ITEMS = 2000
#: The most entry bytes a status holds while the database is behind: with the checkpoint (one
#: summary per step), the pinned definition and the spec, the object stays below etcd's 1.5 MB.
HISTORY_MAX_BYTES = 640 * 1024
#: The engine's limits: the budget, then the caps while the history database is behind.
STATUS_LIMITS = StatusLimits(budget=HISTORY_BUDGET, max_items=HISTORY_MAX_ITEMS, max_bytes=HISTORY_MAX_BYTES)


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


# --- inputs ------------------------------------------------------------------------------------

#: A user's request action, as the input it records.
REQUEST_EVENTS = {
    "approve": Event.APPROVED,
    "reject": Event.REJECTED,
    "retry": Event.RETRY_REQUESTED,
    "complete": Event.COMPLETED_MANUALLY,
    "cancel": Event.CANCEL_REQUESTED,
}


def request_input(request: Mapping[str, Any], now: datetime) -> Record:
    """The input a user's request in ``spec.requests`` records."""
    event = REQUEST_EVENTS[request["action"]]
    detail: dict[str, Any] = {"request": request["id"], "by": request.get("by", ""), "rules": RULES}
    for key in ("byGroups", "reason"):
        if request.get(key):
            detail[key] = request[key]
    if event is Event.COMPLETED_MANUALLY:
        detail["output"] = parse_output(request.get("output"))
    return Record(event, now, step=request.get("step"), detail=detail)


def start(definition: Definition, now: datetime) -> tuple[WorkflowState, list[Record]]:
    """A workflow's first pass: the start recorded with the decisions it leads to, and the state
    they fold into."""
    state = fold(definition, [])
    return state, record_input(definition, state, Record(Event.WORKFLOW_STARTED, now))


def gather_inputs(
    definition: Definition,
    state: WorkflowState,
    *,
    requests: Iterable[Mapping[str, Any]],
    result_of: Callable[[Wanted], Record | None],
    now: datetime,
) -> list[Record]:
    """Record every input that is new at ``now`` and the decisions each leads to (``state`` is
    folded on as they are recorded); the records appended, in order.

    ``result_of`` tells what a wanted pod or task reports: its result, or None while it runs (or
    while there is no such pod or task). Requests come first, then rounds of results and due timers, until
    a round finds nothing (at most :data:`INPUT_ROUNDS`).
    """
    new: list[Record] = []
    for request in requests:
        if request.get("id") not in state.requests:
            new += record_input(definition, state, request_input(request, now))
    for _ in range(INPUT_ROUNDS):
        found = [result for plan in wanted(definition, state) if (result := result_of(plan)) is not None]
        found += [timer.record(now=now) for timer in timers(state) if timer.at <= now]
        if not found:
            break
        for record in found:
            new += record_input(definition, state, record)
    return new


# --- pods -------------------------------------------------------------------------------------

#: Pod phases after which a pod neither runs nor needs stopping.
ENDED_POD_PHASES = frozenset({"Succeeded", "Failed"})


def wanted_pod_name(wanted: WantedPod) -> str:
    """The name of the pod a step's attempt runs in: ``<execution id>-<attempt>``."""
    return pod_name(ExecutionId(wanted.execution_id), wanted.attempt)


@dataclasses.dataclass(frozen=True)
class PodPlan:
    """What a pass does about pods: start the wanted ones that do not exist (the dispatcher
    creates them as capacity allows), and stop the running ones the state no longer wants."""

    start: list[WantedPod]
    stop: list[str]


def plan_pods(definition: Definition, state: WorkflowState, pods: Mapping[str, Mapping[str, Any]]) -> PodPlan:
    """The pods to start and to stop, given the workflow's step pods by name (as read)."""
    wanted = {wanted_pod_name(w): w for w in wanted_pods(definition, state)}
    start = [want for name, want in wanted.items() if name not in pods]
    stop = [
        name
        for name, pod in pods.items()
        if name not in wanted
        and (pod.get("status") or {}).get("phase") not in ENDED_POD_PHASES
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]
    return PodPlan(start=start, stop=stop)


# --- when next ---------------------------------------------------------------------------------


def next_pass(definition: Definition, state: WorkflowState, now: datetime) -> datetime | None:
    """When the workflow next needs a pass with nothing else happening: its earliest timer, or
    just after a running step passes its expectedDuration (to raise Stuck); None: never."""
    wakes = [timer.at for timer in timers(state)[:1]]
    for step in definition.steps:
        folded = state.steps[step.id]
        if step.expected_duration and folded.attempt_started_at and folded.phase is StepPhase.RUNNING:
            due = folded.attempt_started_at + step.expected_duration
            if due > now:
                wakes.append(due + STUCK_MARGIN)
    return min(wakes) if wakes else None


#: Results that may be held back for the next write (a step pod's or a task's success).
QUIET_RESULTS = frozenset({Event.POD_SUCCEEDED, Event.TASK_SUCCEEDED})


def results_can_wait(definition: Definition, state: WorkflowState, new: Sequence[Record]) -> bool:
    """Whether what a pass found may wait to be recorded with the next result: only step pods' or
    tasks' successes, which decided nothing (no step started, the workflow did not end), while
    pods or tasks of other steps are still wanted, so another result is coming. ``state`` is folded over ``new``.

    Each status write rewrites the whole workflow on the API server, and a fan's pods end
    spread over seconds when they started so: recorded one by one, a fan of 8 was up to 8
    writes. A failure is never held (it may retry, compensate or cancel), and neither is a
    success that lets a dependent start."""
    quiet = bool(new) and all(record.event in QUIET_RESULTS for record in new)
    return quiet and bool(wanted(definition, state))


def needs_pass(status: Mapping[str, Any], *, mirroring: bool, expired: bool) -> bool:
    """Whether a workflow needs a pass (its cache's resync queues it): unfinished, not all mirrored to the history database
    (when there is one: ``mirroring``), or past its ttlAfterFinished (``expired``)."""
    if status.get("phase") not in TERMINAL_WORKFLOW_PHASES:
        return True
    recorded = int((status.get("checkpoint") or {}).get("seq") or 0) + len(status.get("history") or [])
    return (mirroring and int(status.get("historyMirrored") or 0) < recorded) or expired


# --- the status --------------------------------------------------------------------------------


def step_summary(folded: StepState) -> dict[str, Any]:
    """One step's entry in ``status.steps``."""
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


def stuck_message(stuck: Sequence[str]) -> str:
    return f"running past expectedDuration: {', '.join(stuck)}"


def build_status(
    previous: Mapping[str, Any],
    *,
    generation: int,
    definition: Definition,
    state: WorkflowState,
    recorded: Recorded,
    entries: Sequence[Record],
    mirrored: int,
    stuck: Sequence[str],
    limits: StatusLimits,
    now: datetime,
) -> dict[str, Any]:
    """The new status from the folded state; keys of ``previous`` it does not own are kept.

    ``entries`` are the history after ``recorded.checkpoint``, the new ones included. Over the
    budget, the oldest mirrored ones go into the checkpoint; :class:`HistoryFull` when what must
    stay is more than a status may hold.
    """
    checkpoint, kept = compact(definition, recorded.checkpoint, entries, mirrored=mirrored, budget=limits.budget)
    held = sum(entry_bytes(record) for record in kept)
    if len(kept) > limits.max_items or held > limits.max_bytes:
        raise HistoryFull(
            f"{len(kept)} history entries ({held} bytes) wait for the history database, which has "
            f"{mirrored} of {(checkpoint.seq if checkpoint else 0) + len(kept)}"
        )
    status = dict(previous)
    conditions = set_condition(
        status.get("conditions") or [],
        type_=ConditionType.STUCK,
        status=bool(stuck),
        reason=ConditionReason.PAST_EXPECTED_DURATION if stuck else ConditionReason.ON_TIME,
        message=stuck_message(stuck) if stuck else "",
        generation=generation,
        now=now,
    )
    status.update(
        {
            "observedGeneration": generation,
            "phase": str(state.phase),
            "history": [record.to_data() for record in kept],
            "historyMirrored": mirrored,
            "steps": {step_id: step_summary(folded) for step_id, folded in state.steps.items()},
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


def started_status(
    previous: Mapping[str, Any],
    *,
    generation: int,
    pinned: Mapping[str, Any],
    definition: Definition,
    state: WorkflowState,
    records: Sequence[Record],
    limits: StatusLimits,
    now: datetime,
) -> dict[str, Any]:
    """The status of a workflow's first pass: the definition pinned, Invalid cleared, and the
    start with its first decisions recorded (nothing mirrored yet)."""
    status = build_status(
        previous,
        generation=generation,
        definition=definition,
        state=state,
        recorded=Recorded(None, [], 0),
        entries=records,
        mirrored=0,
        stuck=(),
        limits=limits,
        now=now,
    )
    status["conditions"] = set_condition(
        previous.get("conditions") or [],
        type_=ConditionType.INVALID,
        status=False,
        reason=ConditionReason.VALID,
        message="",
        generation=generation,
        now=now,
    )
    status["definition"] = dict(pinned)
    return status


def invalid_status(
    previous: Mapping[str, Any], *, generation: int, message: str, now: datetime
) -> dict[str, Any] | None:
    """The status of a workflow that cannot start (``message`` names the field); None when it
    says so already."""
    before = [c for c in previous.get("conditions") or [] if c.get("type") == ConditionType.INVALID]
    if before and before[0].get("status") == "True" and before[0].get("message") == message:
        return None
    conditions = set_condition(
        previous.get("conditions") or [],
        type_=ConditionType.INVALID,
        status=True,
        reason=ConditionReason.INVALID_SPEC,
        message=message,
        generation=generation,
        now=now,
    )
    return {
        **previous,
        "phase": str(WorkflowPhase.PENDING),
        "conditions": conditions,
        "observedGeneration": generation,
    }


# --- what users are told -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Announcement:
    """An Event a pass posts about the workflow."""

    warning: bool
    reason: str
    message: str


#: Records that deserve an Event: (a Warning?, reason).
EVENTS: dict[Event, tuple[bool, str]] = {
    Event.STEP_FAILED: (True, "StepFailed"),
    Event.STEP_SKIPPED: (False, "StepSkipped"),
    Event.ESCALATED: (True, "ApprovalEscalated"),
    Event.REQUEST_REFUSED: (True, "RequestRefused"),
    Event.APPROVED: (False, "StepApproved"),
    Event.REJECTED: (True, "StepRejected"),
    Event.COMPLETED_MANUALLY: (False, "StepCompletedManually"),
    Event.RETRY_REQUESTED: (False, "StepRetryRequested"),
    Event.CANCEL_REQUESTED: (False, "CancelRequested"),
    Event.COMPENSATION_STARTED: (False, "CompensationStarted"),
    Event.COMPENSATION_FAILED: (True, "CompensationFailed"),
    Event.WORKFLOW_SUCCEEDED: (False, "WorkflowSucceeded"),
    Event.WORKFLOW_FAILED: (True, "WorkflowFailed"),
    Event.WORKFLOW_COMPENSATING: (True, "WorkflowCompensating"),
    Event.WORKFLOW_COMPENSATED: (False, "WorkflowCompensated"),
    Event.WORKFLOW_CANCELLED: (False, "WorkflowCancelled"),
}


def describe(record: Record) -> str:
    """A record as an Event's message."""
    parts = [str(record.event)]
    if record.step:
        parts.append(f"step {record.step}")
    for key in ("reason", "by", "message", "approvers"):
        value = record.detail.get(key)
        if value:
            parts.append(f"{key}: {value}")
    return "; ".join(parts)


def announcements(
    new: Sequence[Record], *, stuck: Sequence[str], before: Mapping[str, Any]
) -> list[Announcement]:
    """The Events for a pass's records, and StepStuck once when a step becomes stuck (``before``:
    the status the pass read)."""
    out = [
        Announcement(EVENTS[record.event][0], EVENTS[record.event][1], describe(record))
        for record in new
        if record.event in EVENTS
    ]
    was_stuck = any(
        c.get("type") == ConditionType.STUCK and c.get("status") == "True" for c in before.get("conditions") or []
    )
    if stuck and not was_stuck:
        out.append(Announcement(True, EventReason.STEP_STUCK, stuck_message(stuck)))
    return out


# --- the ScheduledJob that started it ----------------------------------------------------------

#: How a workflow's end reads in its ScheduledJob's `recent` list.
JOB_OUTCOMES = {
    Event.WORKFLOW_SUCCEEDED: "Succeeded",
    Event.WORKFLOW_FAILED: "Failed",
    Event.WORKFLOW_COMPENSATED: "Failed",
    Event.WORKFLOW_CANCELLED: "Cancelled",
}
