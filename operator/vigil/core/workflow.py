"""A workflow's state as a fold over its recorded history.

A running workflow keeps one record of truth: the append-only list of what
happened to it, in its status. Each entry is a :class:`Record` — plain data
(event, time, step, attempt, detail) — and is one of two kinds:

* an **input**: something the world reported — a pod's or a task's result, a timer whose
  time came, a user's request, the workflow being started;
* a **decision**: something the orchestrator chose in response — start a step,
  schedule a retry, escalate an approval, compensate, finish.

:func:`fold` replays records into a :class:`WorkflowState`; it is the only way
state is ever built, so an operator that starts fresh rebuilds every in-flight
workflow exactly, and a completed step stays completed. Inputs never choose
anything: they only move a step into a state in which the orchestrator
(:mod:`vigil.core.orchestrator`) has to choose, and that choice is recorded
before anyone acts on it.

No clock, randomness or I/O here: times come from the records themselves.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from vigil.core.executions import RetryPolicy
from vigil.core.timeparse import format_rfc3339, parse_rfc3339

#: Largest step output kept, in bytes of its JSON text (a termination message holds 4 KiB).
OUTPUT_MAX_BYTES = 4096
#: The rules an input is folded by, recorded in its ``rules`` detail. Rules 2: a manual
#: completion of an approval step needs an approver (an input without ``rules``, recorded by
#: an earlier operator, is folded as it was then, so a replayed history gives the same state).
RULES = 2


class StepKind(StrEnum):
    POD = "pod"
    APPROVAL = "approval"
    WAIT = "wait"
    TASK = "task"


class TimeoutAction(StrEnum):
    FAIL = "fail"
    SKIP = "skip"
    ESCALATE = "escalate"
    APPROVE = "approve"


class ErrorAction(StrEnum):
    RETRY = "retry"
    SKIP = "skip"
    FAIL = "fail"
    COMPENSATE = "compensate"


class FailureAction(StrEnum):
    FAIL = "fail"
    COMPENSATE = "compensate"


@dataclasses.dataclass(frozen=True)
class Level:
    """One escalation level: who is added, and how long they have before the next level."""

    approvers: tuple[str, ...]
    after: timedelta


@dataclasses.dataclass(frozen=True)
class StepDef:
    """One step of a pinned definition, as the orchestrator needs it."""

    id: str
    kind: StepKind
    depends_on: tuple[str, ...] = ()
    retry: RetryPolicy = dataclasses.field(default_factory=RetryPolicy)
    timeout: timedelta | None = None
    on_timeout: TimeoutAction = TimeoutAction.FAIL
    on_error: ErrorAction = ErrorAction.RETRY
    compensable: bool = False
    approvers: tuple[str, ...] = ()
    escalation: tuple[Level, ...] = ()
    #: What an escalated approval comes to when its last level's time runs out.
    on_exhausted: TimeoutAction = TimeoutAction.FAIL
    wait_for: timedelta | None = None
    wait_until: datetime | None = None
    expected_duration: timedelta | None = None


@dataclasses.dataclass(frozen=True)
class Definition:
    """The pinned DAG of one workflow instance (its uid keys execution ids and backoff)."""

    uid: str
    steps: tuple[StepDef, ...]
    on_failure: FailureAction = FailureAction.FAIL

    def step(self, step_id: str) -> StepDef:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)


class Event(StrEnum):
    # inputs: reported by the world
    WORKFLOW_STARTED = "WorkflowStarted"
    POD_SUCCEEDED = "PodSucceeded"
    POD_FAILED = "PodFailed"
    TASK_SUCCEEDED = "TaskSucceeded"
    TASK_FAILED = "TaskFailed"
    TIMER_FIRED = "TimerFired"
    APPROVED = "Approved"
    REJECTED = "Rejected"
    RETRY_REQUESTED = "RetryRequested"
    COMPLETED_MANUALLY = "CompletedManually"
    CANCEL_REQUESTED = "CancelRequested"
    # decisions: chosen by the orchestrator
    STEP_STARTED = "StepStarted"
    RETRY_SCHEDULED = "RetryScheduled"
    STEP_SUCCEEDED = "StepSucceeded"
    STEP_FAILED = "StepFailed"
    STEP_SKIPPED = "StepSkipped"
    STEP_CANCELLED = "StepCancelled"
    ESCALATED = "Escalated"
    REQUEST_REFUSED = "RequestRefused"
    COMPENSATION_STARTED = "CompensationStarted"
    COMPENSATION_RETRY_SCHEDULED = "CompensationRetryScheduled"
    COMPENSATION_FAILED = "CompensationFailed"
    WORKFLOW_SUCCEEDED = "WorkflowSucceeded"
    WORKFLOW_FAILED = "WorkflowFailed"
    WORKFLOW_COMPENSATING = "WorkflowCompensating"
    WORKFLOW_COMPENSATED = "WorkflowCompensated"
    WORKFLOW_CANCELLED = "WorkflowCancelled"


INPUTS = frozenset(
    {
        Event.WORKFLOW_STARTED,
        Event.POD_SUCCEEDED,
        Event.POD_FAILED,
        Event.TASK_SUCCEEDED,
        Event.TASK_FAILED,
        Event.TIMER_FIRED,
        Event.APPROVED,
        Event.REJECTED,
        Event.RETRY_REQUESTED,
        Event.COMPLETED_MANUALLY,
        Event.CANCEL_REQUESTED,
    }
)


class Timer(StrEnum):
    WAIT = "wait"  # a wait step's time came
    RETRY = "retry"  # a backoff ended
    DEADLINE = "deadline"  # a step's timeout (or its escalation level's time) passed


class Reason(StrEnum):
    TIMED_OUT = "TimedOut"
    REJECTED = "Rejected"
    ATTEMPTS_EXHAUSTED = "AttemptsExhausted"
    NOT_AN_APPROVER = "NotAnApprover"
    NOT_WAITING = "StepNotWaiting"
    NOT_FAILED = "StepNotFailed"
    NOT_ACTIVE = "StepNotActive"
    UNKNOWN_STEP = "UnknownStep"
    WORKFLOW_FINISHED = "WorkflowFinished"
    CANCELLED = "Cancelled"
    WORKFLOW_FAILING = "WorkflowFailing"
    COMPENSATION_FAILED = "CompensationFailed"


_TOP_KEYS = ("event", "at", "step", "attempt")


@dataclasses.dataclass(frozen=True)
class Record:
    """One history entry. ``detail`` is JSON-safe data (times in it are RFC 3339 strings)."""

    event: Event
    at: datetime
    step: str | None = None
    attempt: int | None = None
    detail: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def is_input(self) -> bool:
        return self.event in INPUTS

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"event": str(self.event), "at": format_rfc3339(self.at)}
        if self.step is not None:
            data["step"] = self.step
        if self.attempt is not None:
            data["attempt"] = self.attempt
        data.update(self.detail)
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Record:
        return cls(
            event=Event(data["event"]),
            at=parse_rfc3339(data["at"]),
            step=data.get("step"),
            attempt=data.get("attempt"),
            detail={k: v for k, v in data.items() if k not in _TOP_KEYS},
        )


def records_from_data(entries: Iterable[Mapping[str, Any]]) -> list[Record]:
    return [Record.from_data(entry) for entry in entries]


class StepPhase(StrEnum):
    PENDING = "Pending"  # dependencies not finished yet
    RUNNING = "Running"  # a pod runs, an approval is awaited, or a wait timer is set
    ATTEMPT_FAILED = "AttemptFailed"  # the orchestrator has to choose: retry, skip or fail
    BACKOFF = "Backoff"  # waiting for retryAt
    RETRY_DUE = "RetryDue"  # the orchestrator has to start the next attempt
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SKIPPED = "Skipped"
    CANCELLED = "Cancelled"


#: A step in one of these phases holds resources or a timer: it is stopped when the workflow ends.
ACTIVE_PHASES = frozenset(
    {StepPhase.RUNNING, StepPhase.ATTEMPT_FAILED, StepPhase.BACKOFF, StepPhase.RETRY_DUE}
)
#: Dependents of a step in one of these phases may start.
DONE_PHASES = frozenset({StepPhase.SUCCEEDED, StepPhase.SKIPPED})


class WorkflowPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    COMPENSATING = "Compensating"
    COMPENSATED = "Compensated"
    CANCELLED = "Cancelled"


TERMINAL_WORKFLOW_PHASES = frozenset(
    {
        WorkflowPhase.SUCCEEDED,
        WorkflowPhase.FAILED,
        WorkflowPhase.COMPENSATED,
        WorkflowPhase.CANCELLED,
    }
)


@dataclasses.dataclass
class Compensation:
    """The compensating run of one succeeded step: a recorded step of its own."""

    phase: StepPhase = StepPhase.PENDING
    attempt: int = 0
    retry_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    reason: str = ""


@dataclasses.dataclass
class StepState:
    phase: StepPhase = StepPhase.PENDING
    attempt: int = 0
    #: Attempts made before the last manual retry; the retry budget counts from here.
    attempt_base: int = 0
    started_at: datetime | None = None  # first start; timeouts count from here
    attempt_started_at: datetime | None = None
    finished_at: datetime | None = None
    retry_at: datetime | None = None
    fire_at: datetime | None = None  # wait steps
    deadline: datetime | None = None  # timeout, or the current escalation level's time
    deadline_passed: bool = False
    level: int = 0  # escalation level reached (0: the step's own approvers)
    approvers: tuple[str, ...] = ()
    rejected: bool = False
    output: Any = None
    #: Seq of the record the output came in (its full copy is that history entry).
    output_seq: int | None = None
    #: SHA-256 of the output's JSON when it left the status (:mod:`vigil.core.checkpoint`):
    #: ``output`` is then None and the history database's entry ``output_seq`` holds it.
    output_offloaded: str | None = None
    reason: str = ""
    message: str = ""
    decided_by: str | None = None
    manual: bool = False
    compensation: Compensation | None = None
    #: Attempts that ran something outside the operator (a pod or a task each): every start
    #: that names an ``executionId``. For "no completed step runs twice" checks and the timeline.
    attempts_run: int = 0


@dataclasses.dataclass(frozen=True)
class Refusal:
    """An input the orchestrator must turn down (recorded, with a reason)."""

    step: str | None
    request: str | None
    by: str | None
    reason: Reason
    message: str


@dataclasses.dataclass
class WorkflowState:
    phase: WorkflowPhase = WorkflowPhase.PENDING
    steps: dict[str, StepState] = dataclasses.field(default_factory=dict)
    requests: set[str] = dataclasses.field(default_factory=set)
    refusals: list[Refusal] = dataclasses.field(default_factory=list)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    reason: str = ""
    cancel_requested: bool = False
    cancelled_by: str | None = None
    #: The step whose failure asked for compensation although onFailure is fail.
    compensate_requested: bool = False
    #: Steps in the order they succeeded: compensation runs in the reverse.
    success_order: list[str] = dataclasses.field(default_factory=list)
    seq: int = 0  # records folded

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_WORKFLOW_PHASES


def parse_output(text: str | None) -> Any:
    """A pod's termination message as step output: its JSON, else the text itself; capped."""
    if text is None or not text.strip():
        return None
    raw = text.encode()[:OUTPUT_MAX_BYTES].decode(errors="ignore")
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def bounded_output(value: Any) -> Any:
    """A value handed in whole (a task's return value) as step output, under a pod's bound: itself
    when its JSON text fits OUTPUT_MAX_BYTES, else cut as a termination message is (the first
    OUTPUT_MAX_BYTES bytes of that text, as text: :func:`parse_output`)."""
    if value is None:
        return None
    return parse_output(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def time_of(detail: Mapping[str, Any], key: str) -> datetime | None:
    value = detail.get(key)
    return parse_rfc3339(value) if isinstance(value, str) else None


def normal_approver(approver: str) -> str:
    """An approvers entry in one spelling: ``user:NAME`` or ``group:NAME`` (a bare name is a user)."""
    kind, _, name = approver.partition(":")
    return approver if name and kind in ("user", "group") else f"user:{approver}"


def identity_of(approver: str) -> tuple[str, tuple[str, ...]]:
    """(by, byGroups) of a decision made as one approvers entry: ``user:carol`` decides as
    ``carol``; ``group:editors`` as ``group:editors`` with the group ``editors``."""
    kind, _, name = normal_approver(approver).partition(":")
    return (name, ()) if kind == "user" else (f"group:{name}", (name,))


def is_approver(approvers: Sequence[str], *, by: str | None, groups: Sequence[str]) -> bool:
    """Whether a user (or one of their groups) is among ``approvers`` (``user:x``, ``group:y``, ``x``)."""
    for approver in approvers:
        kind, _, name = normal_approver(approver).partition(":")
        if kind == "user" and name == by:
            return True
        if kind == "group" and name in groups:
            return True
    return False


def fold(
    definition: Definition, records: Iterable[Record], *, start: WorkflowState | None = None
) -> WorkflowState:
    """Replay ``records`` into the workflow's state: from the beginning, or on top of ``start``
    (the state the records before them folded into; it is copied, never changed)."""
    if start is None:
        state = WorkflowState(steps={step.id: StepState() for step in definition.steps})
    else:
        state = copy.deepcopy(start)
        for step in definition.steps:
            state.steps.setdefault(step.id, StepState())
    for record in records:
        apply(definition, state, record)
    return state


def apply(definition: Definition, state: WorkflowState, record: Record) -> None:
    """Fold one record into ``state`` (in place). Stale or duplicate inputs change nothing."""
    state.seq += 1
    request = record.detail.get("request")
    if isinstance(request, str):
        state.requests.add(request)
    handler = _FOLDS.get(record.event)
    if handler is not None:
        handler(definition, state, record)


# --- inputs -----------------------------------------------------------------------------------


def _started(definition: Definition, state: WorkflowState, record: Record) -> None:
    if state.phase is WorkflowPhase.PENDING:
        state.phase = WorkflowPhase.RUNNING
        state.started_at = record.at


def _step(state: WorkflowState, record: Record) -> StepState | None:
    return state.steps.get(record.step) if record.step is not None else None


def _attempt_succeeded(definition: Definition, state: WorkflowState, record: Record) -> None:
    step = _step(state, record)
    if step is None:
        return
    if record.detail.get("compensation"):
        comp = step.compensation
        if comp and comp.phase is StepPhase.RUNNING and comp.attempt == record.attempt:
            comp.phase = StepPhase.SUCCEEDED
            comp.finished_at = record.at
        return
    if step.phase is StepPhase.RUNNING and step.attempt == record.attempt:
        _succeed(state, record.step or "", step, record, output=record.detail.get("output"))


def _succeed(
    state: WorkflowState, step_id: str, step: StepState, record: Record, *, output: Any
) -> None:
    step.phase = StepPhase.SUCCEEDED
    step.output = output
    step.output_seq = state.seq - 1  # this record's: apply() counted it already
    step.output_offloaded = None
    step.finished_at = record.at
    step.deadline = step.retry_at = None
    step.deadline_passed = False
    state.success_order.append(step_id)


def _attempt_failed(definition: Definition, state: WorkflowState, record: Record) -> None:
    step = _step(state, record)
    if step is None:
        return
    reason = str(record.detail.get("reason", "Failed"))
    message = str(record.detail.get("message", ""))
    if record.detail.get("compensation"):
        comp = step.compensation
        if comp and comp.phase is StepPhase.RUNNING and comp.attempt == record.attempt:
            comp.phase = StepPhase.ATTEMPT_FAILED
            comp.reason = reason
        return
    if step.phase is StepPhase.RUNNING and step.attempt == record.attempt:
        step.phase = StepPhase.ATTEMPT_FAILED
        step.reason, step.message = reason, message


def _timer_fired(definition: Definition, state: WorkflowState, record: Record) -> None:
    step = _step(state, record)
    if step is None:
        return
    timer = record.detail.get("timer")
    if timer == Timer.WAIT and step.phase is StepPhase.RUNNING and step.fire_at is not None:
        _succeed(state, record.step or "", step, record, output=None)
    elif timer == Timer.RETRY and record.detail.get("compensation"):
        comp = step.compensation
        if comp and comp.phase is StepPhase.BACKOFF and comp.attempt + 1 == record.attempt:
            comp.phase = StepPhase.RETRY_DUE
    elif timer == Timer.RETRY:
        if step.phase is StepPhase.BACKOFF and step.attempt + 1 == record.attempt:
            step.phase = StepPhase.RETRY_DUE
    elif (
        timer == Timer.DEADLINE
        and step.phase in ACTIVE_PHASES
        and record.detail.get("level") == step.level
    ):
        step.deadline_passed = True


def _refuse(state: WorkflowState, record: Record, reason: Reason, message: str) -> None:
    state.refusals.append(
        Refusal(
            step=record.step,
            request=record.detail.get("request"),
            by=record.detail.get("by"),
            reason=reason,
            message=message,
        )
    )


def _approval_target(state: WorkflowState, record: Record) -> StepState | None:
    """The approval step a decision is for, if it is waiting and the author may decide."""
    step = _step(state, record)
    if step is None:
        _refuse(state, record, Reason.UNKNOWN_STEP, f"no step {record.step!r}")
        return None
    if step.phase is not StepPhase.RUNNING or not step.approvers:
        _refuse(
            state, record, Reason.NOT_WAITING, f"step {record.step} is not waiting for approval"
        )
        return None
    # A token decision of an earlier operator (no bound ``approver``) was checked by its token.
    legacy_token = record.detail.get("via") == "token" and "approver" not in record.detail
    if not legacy_token and not _by_approver(state, record, step.approvers):
        return None
    return step


def _by_approver(state: WorkflowState, record: Record, approvers: Sequence[str]) -> bool:
    """Whether the record's author is among ``approvers``; else a NotAnApprover refusal."""
    by = record.detail.get("by")
    if is_approver(approvers, by=by, groups=record.detail.get("byGroups") or []):
        return True
    _refuse(
        state,
        record,
        Reason.NOT_AN_APPROVER,
        f"{by} is not among the approvers of step {record.step} ({', '.join(approvers)})",
    )
    return False


def _approved(definition: Definition, state: WorkflowState, record: Record) -> None:
    step = _approval_target(state, record)
    if step is not None:
        step.decided_by = record.detail.get("by")
        step.reason = str(record.detail.get("reason", ""))
        output = {"decision": "approved", "by": step.decided_by, "reason": step.reason}
        _succeed(state, record.step or "", step, record, output=output)


def _rejected(definition: Definition, state: WorkflowState, record: Record) -> None:
    step = _approval_target(state, record)
    if step is not None:
        step.decided_by = record.detail.get("by")
        step.phase = StepPhase.ATTEMPT_FAILED
        step.rejected = True
        step.reason = Reason.REJECTED
        step.message = str(record.detail.get("reason", ""))


def _retry_requested(definition: Definition, state: WorkflowState, record: Record) -> None:
    step = _step(state, record)
    if step is None:
        _refuse(state, record, Reason.UNKNOWN_STEP, f"no step {record.step!r}")
    elif step.phase is not StepPhase.FAILED:
        _refuse(state, record, Reason.NOT_FAILED, f"step {record.step} is {step.phase}, not Failed")
    elif state.phase not in (WorkflowPhase.RUNNING, WorkflowPhase.FAILED):
        _refuse(state, record, Reason.WORKFLOW_FINISHED, f"the workflow is {state.phase}")
    else:
        step.phase = StepPhase.RETRY_DUE
        step.attempt_base = step.attempt
        step.deadline_passed = False
        step.rejected = False
        step.started_at = record.at  # the timeout counts afresh
        _reopen(state)


def _reopen(state: WorkflowState) -> None:
    if state.phase is WorkflowPhase.FAILED:
        state.phase = WorkflowPhase.RUNNING
        state.finished_at = None
        state.reason = ""
        for step in state.steps.values():
            if step.phase is StepPhase.CANCELLED:
                step.phase = StepPhase.PENDING
                step.deadline_passed = False


def _completed_manually(definition: Definition, state: WorkflowState, record: Record) -> None:
    step = _step(state, record)
    if step is None:
        _refuse(state, record, Reason.UNKNOWN_STEP, f"no step {record.step!r}")
        return
    finishable = step.phase in ACTIVE_PHASES or step.phase is StepPhase.PENDING
    reopening = step.phase is StepPhase.FAILED and state.phase in (
        WorkflowPhase.RUNNING,
        WorkflowPhase.FAILED,
    )
    if state.finished and not reopening:
        _refuse(state, record, Reason.WORKFLOW_FINISHED, f"the workflow is {state.phase}")
    elif not (finishable or reopening) or state.phase is WorkflowPhase.COMPENSATING:
        _refuse(state, record, Reason.NOT_ACTIVE, f"step {record.step} is {step.phase}")
    elif _may_complete(definition, state, record, step):
        if reopening:
            _reopen(state)
        step.manual = True
        step.decided_by = record.detail.get("by")
        _succeed(state, record.step or "", step, record, output=record.detail.get("output"))


def _may_complete(definition: Definition, state: WorkflowState, record: Record, step: StepState) -> bool:
    """Completing a step that has approvers (an approval step) decides it: only they may (the
    current ones, or the step's own before it starts). Inputs recorded before rules 2 are folded
    as they were."""
    rules = record.detail.get("rules")
    approvers = step.approvers or definition.step(record.step or "").approvers
    if not approvers or not isinstance(rules, int) or rules < 2:
        return True
    return _by_approver(state, record, approvers)


def _cancel_requested(definition: Definition, state: WorkflowState, record: Record) -> None:
    if state.finished or state.phase is WorkflowPhase.COMPENSATING:
        _refuse(state, record, Reason.WORKFLOW_FINISHED, f"the workflow is {state.phase}")
    else:
        state.cancel_requested = True
        state.cancelled_by = record.detail.get("by")


# --- decisions --------------------------------------------------------------------------------


def _step_started(definition: Definition, state: WorkflowState, record: Record) -> None:
    step = _step(state, record)
    if step is None:
        return
    step.phase = StepPhase.RUNNING
    step.attempt = record.attempt or 1
    step.attempt_started_at = record.at
    if step.started_at is None:
        step.started_at = record.at
    step.retry_at = None
    step.fire_at = time_of(record.detail, "fireAt")
    step.deadline = time_of(record.detail, "deadline")
    step.deadline_passed = False
    step.approvers = tuple(record.detail.get("approvers") or ())
    if "executionId" in record.detail:  # a start that names an execution runs a pod or a task
        step.attempts_run += 1


def _retry_scheduled(definition: Definition, state: WorkflowState, record: Record) -> None:
    step = _step(state, record)
    if step is not None:
        step.phase = StepPhase.BACKOFF
        step.retry_at = time_of(record.detail, "retryAt")


def _step_finished(phase: StepPhase) -> Any:
    def fold_finish(definition: Definition, state: WorkflowState, record: Record) -> None:
        step = _step(state, record)
        if step is None:
            return
        if phase is StepPhase.SUCCEEDED:
            step.decided_by = record.detail.get("by", step.decided_by)
            _succeed(state, record.step or "", step, record, output=record.detail.get("output"))
            return
        step.phase = phase
        step.finished_at = record.at
        step.reason = str(record.detail.get("reason", step.reason))
        step.deadline = step.retry_at = None
        step.deadline_passed = False

    return fold_finish


def _escalated(definition: Definition, state: WorkflowState, record: Record) -> None:
    step = _step(state, record)
    if step is not None:
        step.level = int(record.detail.get("level", step.level + 1))
        step.approvers = tuple(record.detail.get("approvers") or step.approvers)
        step.deadline = time_of(record.detail, "deadline")
        step.deadline_passed = False


def _request_refused(definition: Definition, state: WorkflowState, record: Record) -> None:
    if state.refusals:
        state.refusals.pop(0)


def _compensation_started(definition: Definition, state: WorkflowState, record: Record) -> None:
    step = _step(state, record)
    if step is None:
        return
    comp = step.compensation or Compensation()
    comp.phase = StepPhase.RUNNING
    comp.attempt = record.attempt or 1
    comp.retry_at = None
    if comp.started_at is None:
        comp.started_at = record.at
    step.compensation = comp


def _compensation_retry(definition: Definition, state: WorkflowState, record: Record) -> None:
    step = _step(state, record)
    if step is not None and step.compensation is not None:
        step.compensation.phase = StepPhase.BACKOFF
        step.compensation.retry_at = time_of(record.detail, "retryAt")


def _compensation_failed(definition: Definition, state: WorkflowState, record: Record) -> None:
    step = _step(state, record)
    if step is not None and step.compensation is not None:
        step.compensation.phase = StepPhase.FAILED
        step.compensation.finished_at = record.at


def _workflow_finished(phase: WorkflowPhase) -> Any:
    def fold_finish(definition: Definition, state: WorkflowState, record: Record) -> None:
        state.phase = phase
        state.reason = str(record.detail.get("reason", ""))
        if phase in TERMINAL_WORKFLOW_PHASES:
            state.finished_at = record.at

    return fold_finish


_FOLDS: dict[Event, Any] = {
    Event.WORKFLOW_STARTED: _started,
    # A task's outcome folds as a pod's result does: the attempt it names succeeded or failed.
    Event.POD_SUCCEEDED: _attempt_succeeded,
    Event.POD_FAILED: _attempt_failed,
    Event.TASK_SUCCEEDED: _attempt_succeeded,
    Event.TASK_FAILED: _attempt_failed,
    Event.TIMER_FIRED: _timer_fired,
    Event.APPROVED: _approved,
    Event.REJECTED: _rejected,
    Event.RETRY_REQUESTED: _retry_requested,
    Event.COMPLETED_MANUALLY: _completed_manually,
    Event.CANCEL_REQUESTED: _cancel_requested,
    Event.STEP_STARTED: _step_started,
    Event.RETRY_SCHEDULED: _retry_scheduled,
    Event.STEP_SUCCEEDED: _step_finished(StepPhase.SUCCEEDED),
    Event.STEP_FAILED: _step_finished(StepPhase.FAILED),
    Event.STEP_SKIPPED: _step_finished(StepPhase.SKIPPED),
    Event.STEP_CANCELLED: _step_finished(StepPhase.CANCELLED),
    Event.ESCALATED: _escalated,
    Event.REQUEST_REFUSED: _request_refused,
    Event.COMPENSATION_STARTED: _compensation_started,
    Event.COMPENSATION_RETRY_SCHEDULED: _compensation_retry,
    Event.COMPENSATION_FAILED: _compensation_failed,
    Event.WORKFLOW_SUCCEEDED: _workflow_finished(WorkflowPhase.SUCCEEDED),
    Event.WORKFLOW_FAILED: _workflow_finished(WorkflowPhase.FAILED),
    Event.WORKFLOW_COMPENSATING: _workflow_finished(WorkflowPhase.COMPENSATING),
    Event.WORKFLOW_COMPENSATED: _workflow_finished(WorkflowPhase.COMPENSATED),
    Event.WORKFLOW_CANCELLED: _workflow_finished(WorkflowPhase.CANCELLED),
}
