"""The `task` step: its plan carried out against a queue store, and its outcome as the step's result.

`vigil.kube.controllers.workflowtasks` submits a running task step's attempt to the queue store (execution id
and idempotency key: the step's stable execution id), makes the same execution ready again for a
later attempt, and reads the execution's state back as a `TaskSucceeded` / `TaskFailed` input.
Here the store is an in-memory twin with the real store's rules for what these calls touch (a
repeated id or (queue, key) adds nothing; `retry` only a dead or cancelled execution; `cancel`
only a ready or leased one), and a worker is the test settling executions. The orchestrator is
the real one, through the unit tests' simulated world (`workflowsim.World`):

* what an execution's state reports, one named row per case;
* a submission: its queue, tenant, ids, payload, and that a repeated pass adds nothing;
* success: the task's output (what it returned, as the store keeps it) is the step's output, under
  a pod step's bound, and a dependent task step's payload carries it in its `inputs`; null when
  the task returned nothing; failure with retries (one execution, its attempts the step's), a
  timeout (the step fails, the engine cancels the execution), compensation of a task step by its
  `compensate` pod, a payload the store refuses;
* the fold's `attempts_run` counts the task's attempts as it does a pod's.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.unit.workflowsim import FAST_RETRY, T0, UID, World, pod
from vigil.core.memory import FakeClock
from vigil.core.orchestrator import (
    WantedTask,
    execution_id_of,
    inputs_for,
    wanted_pods,
    wanted_tasks,
)
from vigil.core.queue import QueueState, QuotaExceeded, Submission, TaskState
from vigil.core.workflow import (
    OUTPUT_MAX_BYTES,
    Definition,
    ErrorAction,
    Event,
    FailureAction,
    Record,
    StepDef,
    StepKind,
    StepPhase,
    WorkflowPhase,
)
from vigil.kube.controllers.workflowtasks import (
    REASON_CANCELLED,
    REASON_FAILED,
    REASON_REFUSED,
    TASK_MAX_ATTEMPTS,
    WorkflowTasks,
    task_result,
)
from vigil.model.steps.task import TaskCall

WORKFLOW = {"metadata": {"name": "order-42", "namespace": "shop", "uid": UID}}
CALL = TaskCall(queue="payments", name="charge", payload={"currency": "EUR"})


def task(step_id: str, *deps: str, **options: Any) -> StepDef:
    return StepDef(id=step_id, kind=StepKind.TASK, depends_on=deps, **{"retry": FAST_RETRY, **options})


@dataclasses.dataclass
class Row:
    queue: str
    submission: Submission
    state: QueueState = QueueState.READY
    attempt: int = 1
    error: str | None = None
    output: Any = None


class MemoryTaskStore:
    """The queue store's calls the engine makes, with the real store's rules for them."""

    def __init__(self, *, refuse: Exception | None = None) -> None:
        self.rows: dict[str, Row] = {}
        self.refuse = refuse
        self.submits = 0

    def submit(self, queue: str, submissions: Sequence[Submission], *, now: datetime) -> list[str]:
        if self.refuse is not None:
            raise self.refuse
        ids = []
        for submission in submissions:
            self.submits += 1
            keyed = next(
                (i for i, r in self.rows.items() if r.queue == queue and submission.idempotency_key is not None
                 and r.submission.idempotency_key == submission.idempotency_key),
                None,
            )  # fmt: skip
            own = submission.execution_id or f"fresh-{len(self.rows)}"
            if keyed is None and own not in self.rows:
                self.rows[own] = Row(queue, submission)
            ids.append(keyed or own)
        return ids

    def states(self, execution_ids: Sequence[str]) -> Mapping[str, TaskState]:
        return {i: TaskState(r.state, r.attempt, r.error, r.output) for i, r in self.rows.items() if i in execution_ids}

    def retry(self, execution_id: str, *, now: datetime) -> object:
        row = self.rows[execution_id]
        if row.state in (QueueState.DEAD, QueueState.CANCELLED):
            row.state, row.attempt, row.error = QueueState.READY, row.attempt + 1, None
        return None

    def cancel(self, execution_id: str, *, now: datetime, by: str) -> object:
        row = self.rows.get(execution_id)
        if row is not None and row.state in (QueueState.READY, QueueState.LEASED):
            row.state = QueueState.CANCELLED
        return None

    # the worker's side
    def settle(self, execution_id: str, *, ok: bool, error: str = "boom", output: Any = None) -> None:
        row = self.rows[execution_id]
        assert row.state in (QueueState.READY, QueueState.LEASED), f"{execution_id} is {row.state}"
        row.state = QueueState.SUCCEEDED if ok else QueueState.DEAD
        row.error = None if ok else error
        row.output = output if ok else None


class TaskWorld:
    """The simulated world with the engine's task adapter over a memory store: each `step()`
    carries out what the state wants and records what the store reports, as a pass does."""

    def __init__(self, definition: Definition, store: MemoryTaskStore | None = None) -> None:
        self.world = World(definition)
        self.store = store or MemoryTaskStore()
        self.tasks = WorkflowTasks(self.store, clock=FakeClock(T0))

    def id_of(self, step: str) -> str:
        return execution_id_of(self.world.definition, step)

    def act(self) -> bool:
        """What the engine's `_act_tasks` does: the owed tasks carried out, each with its inputs (the
        outputs of the steps it depends on, from the state); whether one was refused."""
        definition, state = self.world.definition, self.world.state
        wanted = wanted_tasks(definition, state)
        found = self.tasks.read(wanted)
        owed = [
            (w, found.get(w.execution_id), CALL, inputs_for(definition, state, w.step))
            for w in wanted
            if self.tasks.owed(w, found.get(w.execution_id))
        ]
        return self.tasks.carry_out(owed, workflow=WORKFLOW, parameters={"p": "1"})

    def record(self) -> list[Record]:
        wanted = wanted_tasks(self.world.definition, self.world.state)
        found = self.tasks.read(wanted)
        made: list[Record] = []
        for want in wanted:
            result = self.tasks.result(want, found, now=self.world.now)
            if result is not None:
                made += [result, *self.world.feed(result)]
        return made

    def stop(self, records: Sequence[Record]) -> None:
        """What the engine's `_stop_tasks` does with a pass's records."""
        stops = (Event.STEP_CANCELLED, Event.STEP_FAILED, Event.STEP_SKIPPED)
        for r in records:
            if r.event in stops and r.step and self.world.definition.step(r.step).kind is StepKind.TASK:
                self.tasks.stop(self.id_of(r.step), by="workflow shop/order-42")


# --- what a state reports ------------------------------------------------------------------------

WANT = WantedTask("charge", 2, "st-1")


@pytest.mark.parametrize(
    ("found", "event", "reason"),
    [
        pytest.param(None, None, None, id="not-enqueued-yet"),
        pytest.param(TaskState(QueueState.READY, 2), None, None, id="ready-waits"),
        pytest.param(TaskState(QueueState.LEASED, 2), None, None, id="leased-runs"),
        pytest.param(TaskState(QueueState.SUCCEEDED, 2), Event.TASK_SUCCEEDED, None, id="succeeded"),
        pytest.param(TaskState(QueueState.DEAD, 2, "boom"), Event.TASK_FAILED, REASON_FAILED, id="dead-fails"),
        pytest.param(TaskState(QueueState.CANCELLED, 2), Event.TASK_FAILED, REASON_CANCELLED, id="cancelled-fails"),
        pytest.param(TaskState(QueueState.DEAD, 1), None, None, id="an-earlier-attempt's-death-is-not-this-one's"),
        pytest.param(TaskState(QueueState.SUCCEEDED, 1), Event.TASK_SUCCEEDED, None, id="an-earlier-success-is-one"),
    ],
)
def test_what_an_execution_reports(found: TaskState | None, event: Event | None, reason: str | None) -> None:
    result = task_result(WANT, found, now=T0)
    assert (result and result.event) == event
    if result is not None:
        assert (result.step, result.attempt, result.detail["task"]) == ("charge", 2, "st-1")
        assert result.detail.get("reason") == reason
        assert result.is_input


BIG = {"lines": ["x" * 100] * 50}  # about 5 KiB as JSON: past a step output's bound


@pytest.mark.parametrize(
    ("output", "recorded"),
    [
        pytest.param(None, None, id="none-no-output-key"),
        pytest.param({"charged": 12.5, "ids": [1, 2]}, {"charged": 12.5, "ids": [1, 2]}, id="an-object-whole"),
        pytest.param("receipt é", "receipt é", id="a-string"),
        pytest.param(0, 0, id="zero-is-an-output"),
        pytest.param(BIG, json.dumps(BIG, separators=(",", ":"))[:OUTPUT_MAX_BYTES], id="past-4KiB-cut-as-a-pods-is"),
    ],
)
def test_a_success_carries_the_tasks_output(output: Any, recorded: Any) -> None:
    result = task_result(WANT, TaskState(QueueState.SUCCEEDED, 2, None, output), now=T0)
    assert result is not None and result.event is Event.TASK_SUCCEEDED
    assert ("output" in result.detail) == (recorded is not None)
    assert result.detail.get("output") == recorded


# --- the submission ------------------------------------------------------------------------------


def test_a_steps_task_is_submitted_once_under_the_steps_execution_id() -> None:
    tw = TaskWorld(Definition(uid=UID, steps=(task("charge"),)))
    tw.act()
    tw.act()  # a pass repeated (a conflict, a crash before the write, a new leader)
    assert list(tw.store.rows) == [tw.id_of("charge")]
    assert tw.store.submits == 1  # the second pass read it enqueued
    tw.tasks.carry_out([(WantedTask("charge", 1, tw.id_of("charge")), None, CALL, {})], workflow=WORKFLOW, parameters={})
    assert tw.store.submits == 2  # a pass that did not read it (a crash, a new leader) submits it again:
    assert list(tw.store.rows) == [tw.id_of("charge")]  # stored once
    row = tw.store.rows[tw.id_of("charge")]
    assert row.queue == "shop/payments"
    assert (row.submission.execution_id, row.submission.idempotency_key) == (tw.id_of("charge"),) * 2
    assert row.submission.tenant == "shop"  # the workflow's namespace, whatever the block says
    assert row.submission.max_attempts == TASK_MAX_ATTEMPTS
    assert (row.submission.task, row.submission.priority) == ("charge", 0)
    assert row.submission.payload == {
        "workflow": "order-42", "namespace": "shop", "step": "charge", "inputs": {}, "parameters": {"p": "1"},
        "payload": {"currency": "EUR"},
    }  # fmt: skip


# --- what a task step does -----------------------------------------------------------------------


def test_a_task_step_succeeds_with_its_execution() -> None:
    tw = TaskWorld(Definition(uid=UID, steps=(task("charge"), pod("ship", "charge"))))
    tw.act()
    assert tw.record() == []  # ready: nothing to record
    tw.store.settle(tw.id_of("charge"), ok=True)
    tw.record()
    step = tw.world.state.steps["charge"]
    assert (step.phase, step.attempt, step.output, step.attempts_run) == (StepPhase.SUCCEEDED, 1, None, 1)
    assert tw.world.events(Event.TASK_SUCCEEDED) == [("TaskSucceeded", "charge")]
    assert [w.step for w in wanted_pods(tw.world.definition, tw.world.state)] == ["ship"]  # its dependent runs
    assert inputs_for(tw.world.definition, tw.world.state, "ship") == {"charge": None}  # it returned nothing


def test_a_task_steps_output_is_in_its_dependents_inputs() -> None:
    steps = (task("charge"), task("invoice", "charge"), pod("ship", "charge"))
    tw = TaskWorld(Definition(uid=UID, steps=steps))
    tw.act()
    tw.store.settle(tw.id_of("charge"), ok=True, output={"charged": 12.5, "receipt": "r-1"})
    tw.record()
    step = tw.world.state.steps["charge"]
    assert (step.phase, step.output) == (StepPhase.SUCCEEDED, {"charged": 12.5, "receipt": "r-1"})
    [succeeded] = [r for r in tw.world.history if r.event is Event.TASK_SUCCEEDED]
    assert succeeded.detail["output"] == {"charged": 12.5, "receipt": "r-1"}  # in the history: the timeline shows it
    tw.act()  # the dependent task step is submitted with charge's output in its payload's inputs
    invoice = tw.store.rows[tw.id_of("invoice")].submission.payload
    assert invoice["inputs"] == {"charge": {"charged": 12.5, "receipt": "r-1"}}
    # a pod step depending on it gets the same in VIGIL_INPUTS (the engine's `_inputs`)
    assert inputs_for(tw.world.definition, tw.world.state, "ship") == {"charge": {"charged": 12.5, "receipt": "r-1"}}
    tw.store.settle(tw.id_of("invoice"), ok=True, output="invoice-7")
    tw.record()
    assert tw.world.state.steps["invoice"].output == "invoice-7"


def test_a_failing_task_step_retries_as_one_execution_then_fails() -> None:
    tw = TaskWorld(Definition(uid=UID, steps=(task("charge"),)))
    execution = tw.id_of("charge")
    for attempt in (1, 2, 3):
        tw.act()
        row = tw.store.rows[execution]
        assert (row.state, row.attempt) == (QueueState.READY, attempt)  # the same execution, the step's attempt
        tw.store.settle(execution, ok=False, error=f"declined {attempt}")
        tw.record()
        if attempt < 3:
            assert tw.world.state.steps["charge"].phase is StepPhase.BACKOFF
            tw.act()  # backing off: nothing made ready early
            assert tw.store.rows[execution].state is QueueState.DEAD
            tw.world.run_until_timer()
    step = tw.world.state.steps["charge"]
    assert (step.phase, step.reason, step.attempts_run) == (StepPhase.FAILED, "AttemptsExhausted", 3)
    assert list(tw.store.rows) == [execution]
    failed = [r for r in tw.world.history if r.event is Event.TASK_FAILED]
    assert [(r.attempt, r.detail["message"]) for r in failed] == [(1, "declined 1"), (2, "declined 2"), (3, "declined 3")]
    assert tw.world.state.phase is WorkflowPhase.FAILED


def test_a_retried_task_step_succeeds_at_its_second_attempt() -> None:
    tw = TaskWorld(Definition(uid=UID, steps=(task("charge"),)))
    tw.act()
    tw.store.settle(tw.id_of("charge"), ok=False)
    tw.record()
    tw.world.run_until_timer()
    tw.act()
    tw.store.settle(tw.id_of("charge"), ok=True)
    tw.record()
    step = tw.world.state.steps["charge"]
    assert (step.phase, step.attempt) == (StepPhase.SUCCEEDED, 2)
    assert tw.world.state.phase is WorkflowPhase.SUCCEEDED


def test_a_task_step_past_its_timeout_fails_and_its_execution_is_cancelled() -> None:
    tw = TaskWorld(Definition(uid=UID, steps=(task("charge", timeout=timedelta(minutes=5)),)))
    tw.act()
    made = tw.world.run_until_timer()  # the deadline
    tw.stop(made)
    step = tw.world.state.steps["charge"]
    assert (step.phase, step.reason) == (StepPhase.FAILED, "TimedOut")
    assert tw.store.rows[tw.id_of("charge")].state is QueueState.CANCELLED
    assert tw.record() == []  # the step no longer waits for it


def test_a_succeeded_task_step_is_compensated_by_its_compensate_pod() -> None:
    steps = (task("charge", compensable=True), pod("ship", "charge", on_error=ErrorAction.FAIL))
    tw = TaskWorld(Definition(uid=UID, steps=steps, on_failure=FailureAction.COMPENSATE))
    tw.act()
    tw.store.settle(tw.id_of("charge"), ok=True)
    tw.record()
    tw.world.pod_result("ship", ok=False)
    assert tw.world.state.phase is WorkflowPhase.COMPENSATING
    [comp] = wanted_pods(tw.world.definition, tw.world.state)
    assert (comp.step, comp.compensation) == ("charge", True)
    assert comp.execution_id == execution_id_of(tw.world.definition, "charge", compensation=True)
    tw.world.pod_result("charge", ok=True)
    assert tw.world.state.phase is WorkflowPhase.COMPENSATED


def test_a_payload_the_store_refuses_fails_the_attempt() -> None:
    store = MemoryTaskStore(refuse=QuotaExceeded("shop", quota="maxPayloadBytes", limit=10, used=10, wanted=200))
    tw = TaskWorld(Definition(uid=UID, steps=(task("charge", on_error=ErrorAction.FAIL),)), store)
    assert tw.act()  # refused: the engine passes again at once
    tw.record()
    step = tw.world.state.steps["charge"]
    assert (step.phase, step.reason) == (StepPhase.FAILED, REASON_REFUSED)
    [failed] = [r for r in tw.world.history if r.event is Event.TASK_FAILED]
    assert "maxPayloadBytes" in failed.detail["message"]
    assert store.rows == {}
