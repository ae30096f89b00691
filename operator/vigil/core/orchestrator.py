"""The orchestrator: from a workflow's folded state to its next decisions.

:func:`decide` is pure: it reads the pinned definition and the state folded
from history, and returns the decisions to append — never reading a clock,
randomness or the network. The time of a decision is the time of the input
that caused it (the last record), so replaying a history gives back exactly
the decisions that were recorded. Retry backoff comes from a hash of the step's
execution id and attempt (as for scheduled executions), not from a random draw.

The adapter's loop is: record each new input, then ``decide`` and record what
it returns, *then* act (create pods, delete the pods of steps no longer
running). :func:`timers` says which inputs the clock will produce and when:
every wait is a timestamp in the recorded history, never a sleeping coroutine.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta

from vigil.core.executions import backoff_delay
from vigil.core.steps import spec_of
from vigil.core.steps.kind import COMPENSATION_KEY as COMPENSATION_KEY
from vigil.core.steps.kind import DueTimer as DueTimer
from vigil.core.steps.kind import Wanted as Wanted
from vigil.core.steps.kind import WantedPod as WantedPod
from vigil.core.steps.kind import WantedTask as WantedTask
from vigil.core.steps.kind import execution_id_of as execution_id_of
from vigil.core.timeparse import format_rfc3339
from vigil.core.workflow import (
    ACTIVE_PHASES,
    DONE_PHASES,
    Definition,
    ErrorAction,
    Event,
    FailureAction,
    Reason,
    Record,
    StepDef,
    StepPhase,
    StepState,
    TimeoutAction,
    Timer,
    WorkflowPhase,
    WorkflowState,
    apply,
    fold,
)

#: Decisions one call may make; a definition of 200 steps needs a few per step.
DECISIONS_MAX = 10_000


def decide(definition: Definition, state: WorkflowState, *, at: datetime) -> list[Record]:
    """The decisions ``state`` calls for, in order, folded into ``state`` as they are made."""
    made: list[Record] = []
    while len(made) < DECISIONS_MAX:
        record = _next_decision(definition, state, at)
        if record is None:
            return made
        apply(definition, state, record)
        made.append(record)
    raise RuntimeError(f"more than {DECISIONS_MAX} decisions at once: the fold does not converge")


def replay(definition: Definition, history: Sequence[Record]) -> WorkflowState:
    """Fold a whole history (a convenience for readers that need no decisions)."""
    return fold(definition, history)


def record_input(definition: Definition, state: WorkflowState, record: Record) -> list[Record]:
    """Fold one input and decide: the records to append, the input first."""
    if not record.is_input:
        raise ValueError(f"{record.event} is a decision, not an input")
    apply(definition, state, record)
    return [record, *decide(definition, state, at=record.at)]


# --- the next decision ------------------------------------------------------------------------


def _next_decision(definition: Definition, state: WorkflowState, at: datetime) -> Record | None:
    if state.refusals:
        refusal = state.refusals[0]
        detail = {"reason": str(refusal.reason), "message": refusal.message}
        if refusal.request:
            detail["request"] = refusal.request
        if refusal.by:
            detail["by"] = refusal.by
        return Record(Event.REQUEST_REFUSED, at, step=refusal.step, detail=detail)
    if state.phase is WorkflowPhase.RUNNING:
        return _running(definition, state, at)
    if state.phase is WorkflowPhase.COMPENSATING:
        return _compensating(definition, state, at)
    return None


def _running(definition: Definition, state: WorkflowState, at: datetime) -> Record | None:
    if state.cancel_requested:
        return _stop_active(definition, state, at, reason=Reason.CANCELLED) or _end_after_stop(
            definition, state, at, cancelled=True
        )
    failed = [s.id for s in definition.steps if state.steps[s.id].phase is StepPhase.FAILED]
    if failed:
        return _stop_active(
            definition, state, at, reason=Reason.WORKFLOW_FAILING
        ) or _end_after_stop(definition, state, at, cancelled=False, failed=failed)
    for step_def in definition.steps:
        record = _step_decision(definition, step_def, state.steps[step_def.id], state, at)
        if record is not None:
            return record
    if all(state.steps[s.id].phase in DONE_PHASES for s in definition.steps):
        return Record(Event.WORKFLOW_SUCCEEDED, at)
    return None


def _step_decision(
    definition: Definition, step_def: StepDef, step: StepState, state: WorkflowState, at: datetime
) -> Record | None:
    if step.phase is StepPhase.PENDING:
        if all(state.steps[dep].phase in DONE_PHASES for dep in step_def.depends_on):
            return _start(definition, step_def, step, at)
        return None
    if step.phase in ACTIVE_PHASES and step.deadline_passed:
        return _on_deadline(step_def, step, at)
    if step.phase is StepPhase.ATTEMPT_FAILED:
        return _on_attempt_failed(definition, step_def, step, at)
    if step.phase is StepPhase.RETRY_DUE:
        return _start(definition, step_def, step, at)
    return None


def _start(definition: Definition, step_def: StepDef, step: StepState, at: datetime) -> Record:
    attempt = step.attempt + 1
    detail: dict[str, object] = {"kind": str(step_def.kind)}
    started = step.started_at if step.phase is StepPhase.RETRY_DUE and step.started_at else at
    if step_def.timeout is not None:
        detail["deadline"] = format_rfc3339(started + step_def.timeout)
    detail.update(spec_of(step_def.kind).start_detail(definition, step_def, at=at))
    return Record(Event.STEP_STARTED, at, step=step_def.id, attempt=attempt, detail=detail)


def _on_deadline(step_def: StepDef, step: StepState, at: datetime) -> Record:
    escalating = step_def.on_timeout is TimeoutAction.ESCALATE
    if escalating and step.level < len(step_def.escalation):
        level = step_def.escalation[step.level]
        approvers = list(dict.fromkeys([*step.approvers, *level.approvers]))
        return Record(
            Event.ESCALATED,
            at,
            step=step_def.id,
            detail={
                "level": step.level + 1,
                "approvers": approvers,
                "added": list(level.approvers),
                "deadline": format_rfc3339(at + level.after),
            },
        )
    outcome = step_def.on_exhausted if escalating else step_def.on_timeout
    detail = {"reason": str(Reason.TIMED_OUT)}
    if outcome is TimeoutAction.SKIP:
        return Record(Event.STEP_SKIPPED, at, step=step_def.id, detail=detail)
    if outcome is TimeoutAction.APPROVE:
        output = {"decision": "approved", "by": "timeout", "reason": str(Reason.TIMED_OUT)}
        return Record(
            Event.STEP_SUCCEEDED,
            at,
            step=step_def.id,
            detail={**detail, "by": "timeout", "output": output},
        )
    return _fail(step_def, at, reason=Reason.TIMED_OUT)


def _fail(step_def: StepDef, at: datetime, *, reason: str, message: str = "") -> Record:
    detail: dict[str, object] = {"reason": reason}
    if message:
        detail["message"] = message
    if step_def.on_error is ErrorAction.COMPENSATE:
        detail["compensate"] = True
    return Record(Event.STEP_FAILED, at, step=step_def.id, detail=detail)


def _on_attempt_failed(
    definition: Definition, step_def: StepDef, step: StepState, at: datetime
) -> Record:
    if step_def.on_error is ErrorAction.SKIP:
        return Record(Event.STEP_SKIPPED, at, step=step_def.id, detail={"reason": step.reason})
    used = step.attempt - step.attempt_base
    retrying = step_def.on_error is ErrorAction.RETRY and not step.rejected
    if retrying and used < step_def.retry.max_attempts:
        delay = backoff_delay(
            step_def.retry, attempt=used, execution_id=execution_id_of(definition, step_def.id)
        )
        return Record(
            Event.RETRY_SCHEDULED,
            at,
            step=step_def.id,
            attempt=step.attempt + 1,
            detail={"retryAt": format_rfc3339(at + delay), "after": step.reason},
        )
    reason = step.reason if step.rejected or not retrying else Reason.ATTEMPTS_EXHAUSTED
    return _fail(step_def, at, reason=reason, message=step.message)


# --- ending -----------------------------------------------------------------------------------


def _stop_active(
    definition: Definition, state: WorkflowState, at: datetime, *, reason: Reason
) -> Record | None:
    for step_def in definition.steps:
        if state.steps[step_def.id].phase in ACTIVE_PHASES:
            return Record(
                Event.STEP_CANCELLED, at, step=step_def.id, detail={"reason": str(reason)}
            )
    return None


def _wants_compensation(
    definition: Definition, state: WorkflowState, failed: Sequence[str]
) -> bool:
    if definition.on_failure is FailureAction.COMPENSATE:
        return True
    return any(definition.step(s).on_error is ErrorAction.COMPENSATE for s in failed)


def _end_after_stop(
    definition: Definition,
    state: WorkflowState,
    at: datetime,
    *,
    cancelled: bool,
    failed: Sequence[str] = (),
) -> Record:
    """Once nothing is active: compensate (cancel always does), or end now."""
    if cancelled:
        detail = {"reason": str(Reason.CANCELLED), "by": state.cancelled_by or ""}
        if _to_compensate(definition, state):
            return Record(Event.WORKFLOW_COMPENSATING, at, detail=detail)
        return Record(Event.WORKFLOW_CANCELLED, at, detail=detail)
    detail = {"reason": f"step {failed[0]} failed"}
    if _wants_compensation(definition, state, failed) and _to_compensate(definition, state):
        return Record(Event.WORKFLOW_COMPENSATING, at, detail=detail)
    return Record(Event.WORKFLOW_FAILED, at, detail=detail)


def _to_compensate(definition: Definition, state: WorkflowState) -> list[str]:
    """Succeeded steps with a compensate pod, most recently succeeded first."""
    return [
        step_id
        for step_id in reversed(state.success_order)
        if definition.step(step_id).compensable
        and state.steps[step_id].phase is StepPhase.SUCCEEDED
    ]


def _compensating(definition: Definition, state: WorkflowState, at: datetime) -> Record | None:
    """One compensation at a time, in reverse order of success."""
    for step_id in _to_compensate(definition, state):
        step_def, comp = definition.step(step_id), state.steps[step_id].compensation
        if comp is None or comp.phase is StepPhase.RETRY_DUE:
            attempt = (comp.attempt if comp else 0) + 1
            execution = execution_id_of(definition, step_id, compensation=True)
            return Record(
                Event.COMPENSATION_STARTED,
                at,
                step=step_id,
                attempt=attempt,
                detail={"executionId": execution, "compensation": True},
            )
        if comp.phase is StepPhase.ATTEMPT_FAILED:
            if comp.attempt < step_def.retry.max_attempts:
                delay = backoff_delay(
                    step_def.retry,
                    attempt=comp.attempt,
                    execution_id=execution_id_of(definition, step_id, compensation=True),
                )
                return Record(
                    Event.COMPENSATION_RETRY_SCHEDULED,
                    at,
                    step=step_id,
                    attempt=comp.attempt + 1,
                    detail={"retryAt": format_rfc3339(at + delay), "compensation": True},
                )
            return Record(
                Event.COMPENSATION_FAILED,
                at,
                step=step_id,
                detail={"reason": comp.reason, "compensation": True},
            )
        if comp.phase in (StepPhase.RUNNING, StepPhase.BACKOFF):
            return None  # strictly one at a time
    failed = [
        s
        for s, st in state.steps.items()
        if st.compensation and st.compensation.phase is StepPhase.FAILED
    ]
    if failed:
        reason = f"{Reason.COMPENSATION_FAILED}: {', '.join(failed)}"
        return Record(Event.WORKFLOW_FAILED, at, detail={"reason": reason})
    if state.cancel_requested:
        return Record(Event.WORKFLOW_CANCELLED, at, detail={"reason": str(Reason.CANCELLED)})
    return Record(Event.WORKFLOW_COMPENSATED, at, detail={"reason": state.reason})


# --- what the adapter does with a state -------------------------------------------------------


def timers(state: WorkflowState) -> list[DueTimer]:
    """Every timer the state is waiting on, earliest first."""
    found: list[DueTimer] = []
    if state.phase not in (WorkflowPhase.RUNNING, WorkflowPhase.COMPENSATING):
        return found
    for step_id, step in state.steps.items():
        found.extend(_step_timers(step_id, step))
    return sorted(found, key=lambda timer: (timer.at, timer.step))


def _step_timers(step_id: str, step: StepState) -> Iterator[DueTimer]:
    # A kind that needs the clock records ``fireAt`` when it starts (the wait step does).
    if step.phase is StepPhase.RUNNING and step.fire_at is not None:
        yield DueTimer(step.fire_at, step_id, Timer.WAIT, attempt=step.attempt)
    if step.phase is StepPhase.BACKOFF and step.retry_at is not None:
        yield DueTimer(step.retry_at, step_id, Timer.RETRY, attempt=step.attempt + 1)
    if step.phase in ACTIVE_PHASES and step.deadline is not None and not step.deadline_passed:
        yield DueTimer(step.deadline, step_id, Timer.DEADLINE, level=step.level)
    comp = step.compensation
    if comp and comp.phase is StepPhase.BACKOFF and comp.retry_at is not None:
        yield DueTimer(
            comp.retry_at, step_id, Timer.RETRY, attempt=comp.attempt + 1, compensation=True
        )


def wanted(definition: Definition, state: WorkflowState) -> list[Wanted]:
    """Everything the state wants carried out: each running step's plan (a pod, a task), and the
    pod of each running compensation."""
    wanted: list[Wanted] = []
    for step_def in definition.steps:
        step = state.steps[step_def.id]
        plan = spec_of(step_def.kind).wanted(definition, step_def, step)
        if plan is not None:
            wanted.append(plan)
        comp = step.compensation
        if comp is not None and comp.phase is StepPhase.RUNNING:
            execution = execution_id_of(definition, step_def.id, compensation=True)
            wanted.append(WantedPod(step_def.id, comp.attempt, execution, compensation=True))
    return wanted


def wanted_pods(definition: Definition, state: WorkflowState) -> list[WantedPod]:
    return [plan for plan in wanted(definition, state) if isinstance(plan, WantedPod)]


def wanted_tasks(definition: Definition, state: WorkflowState) -> list[WantedTask]:
    return [plan for plan in wanted(definition, state) if isinstance(plan, WantedTask)]


def inputs_for(definition: Definition, state: WorkflowState, step_id: str) -> dict[str, object]:
    """``VIGIL_INPUTS`` of a step: the outputs of the steps it depends on, by step id."""
    return {dep: state.steps[dep].output for dep in definition.step(step_id).depends_on}


def stuck_steps(definition: Definition, state: WorkflowState, *, now: datetime) -> list[str]:
    """Running steps past their expectedDuration (an observation for the Stuck condition)."""
    stuck = []
    for step_def in definition.steps:
        step = state.steps[step_def.id]
        limit = step_def.expected_duration
        started = step.attempt_started_at
        if limit is not None and step.phase is StepPhase.RUNNING and started is not None:
            stuck.extend([step_def.id] if now - started > limit else [])
    return stuck


def progress(definition: Definition, state: WorkflowState) -> str:
    finished = {StepPhase.SUCCEEDED, StepPhase.SKIPPED, StepPhase.FAILED}
    done = sum(1 for s in definition.steps if state.steps[s.id].phase in finished)
    return f"{done}/{len(definition.steps)}"


def current(definition: Definition, state: WorkflowState) -> str:
    if state.phase is WorkflowPhase.COMPENSATING:
        running = [
            f"compensate/{s}"
            for s, st in state.steps.items()
            if st.compensation and st.compensation.phase in ACTIVE_PHASES
        ]
    else:
        running = [s.id for s in definition.steps if state.steps[s.id].phase in ACTIVE_PHASES]
    text = ",".join(running)
    return text if len(text) <= 256 else text[:253] + "..."


def next_wakeup(state: WorkflowState) -> datetime | None:
    found = timers(state)
    return found[0].at if found else None


def span(start: datetime | None, end: datetime | None) -> timedelta | None:
    return end - start if start is not None and end is not None else None
