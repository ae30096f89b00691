"""The step kinds' registries (vigil.core.steps and vigil.model.steps): every kind is in both,
each kind's module answers for its own steps, and the spec's blocks and the core agree.

One row per kind: what a step records when it becomes ready, what it wants an adapter to carry
out while it runs, and how a running step is shown; then that every ``StepKind`` has a module in
each registry and a block field on ``Step``, so a kind added to the enum but not registered
fails here, not in a workflow.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from vigil.core.steps import KINDS, spec_named, spec_of
from vigil.core.steps.kind import WantedPod, WantedTask, execution_id_of
from vigil.core.workflow import Definition, StepDef, StepKind, StepPhase, StepState
from vigil.model.steps import BLOCKS
from vigil.model.workflow import STEP_TYPE_BLOCKS, Step
from vigil.model.workflowspec import definition_of, step_tasks

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _definition(step: StepDef) -> Definition:
    return Definition(uid="uid-1", steps=(step,))


@pytest.mark.parametrize(
    ("step", "detail"),
    [
        pytest.param(
            StepDef("build", StepKind.POD),
            {"executionId": execution_id_of(_definition(StepDef("build", StepKind.POD)), "build")},
            id="pod-names-its-execution",
        ),
        pytest.param(
            StepDef("sign", StepKind.APPROVAL, approvers=("user:alice", "group:ops")),
            {"approvers": ["user:alice", "group:ops"]},
            id="approval-names-its-approvers",
        ),
        pytest.param(
            StepDef("cool", StepKind.WAIT, wait_for=timedelta(minutes=5)),
            {"fireAt": "2026-01-01T00:05:00Z"},
            id="wait-for-fires-after-its-duration",
        ),
        pytest.param(
            StepDef("noon", StepKind.WAIT, wait_until=T0 + timedelta(hours=12)),
            {"fireAt": "2026-01-01T12:00:00Z"},
            id="wait-until-fires-at-its-time",
        ),
        pytest.param(
            StepDef("charge", StepKind.TASK),
            {"executionId": execution_id_of(_definition(StepDef("charge", StepKind.TASK)), "charge")},
            id="task-names-its-execution",
        ),
    ],
)
def test_what_a_kind_records_when_ready(step: StepDef, detail: dict[str, object]) -> None:
    assert spec_of(step.kind).start_detail(_definition(step), step, at=T0) == detail


@pytest.mark.parametrize(
    ("kind", "plan"),
    [
        pytest.param(StepKind.POD, WantedPod, id="pod-wants-its-attempt's-pod"),
        pytest.param(StepKind.APPROVAL, None, id="approval-wants-nothing-run"),
        pytest.param(StepKind.WAIT, None, id="wait-wants-nothing-run"),
        pytest.param(StepKind.TASK, WantedTask, id="task-wants-its-attempt's-task"),
    ],
)
def test_what_a_running_kind_wants_carried_out(kind: StepKind, plan: type[WantedPod | WantedTask] | None) -> None:
    step_def = StepDef("s", kind)
    definition = _definition(step_def)
    running = StepState(phase=StepPhase.RUNNING, attempt=2)
    expected = None if plan is None else plan("s", 2, execution_id_of(definition, "s"))
    assert spec_of(kind).wanted(definition, step_def, running) == expected
    assert spec_of(kind).wanted(definition, step_def, StepState(phase=StepPhase.SUCCEEDED)) is None


def test_how_a_running_approval_is_shown() -> None:
    step = StepState(phase=StepPhase.RUNNING, approvers=("user:alice",), level=1)
    assert spec_of(StepKind.APPROVAL).waiting_for(step) == ["awaiting user:alice", "escalated to level 1"]
    assert spec_of(StepKind.APPROVAL).waiting_for(StepState(phase=StepPhase.RUNNING)) == ["awaiting a decision"]
    assert spec_of(StepKind.POD).waiting_for(step) == []
    assert spec_of(StepKind.WAIT).waiting_for(step) == []
    assert spec_of(StepKind.TASK).waiting_for(step) == []


def test_every_kind_is_registered_on_both_sides() -> None:
    assert set(KINDS) == set(StepKind) == set(BLOCKS)
    assert all(spec.kind is kind for kind, spec in KINDS.items())
    assert {kind: block.field for kind, block in BLOCKS.items()} == STEP_TYPE_BLOCKS
    assert all(block.field in Step.model_fields for block in BLOCKS.values())


def test_a_block_fills_the_core_step() -> None:
    pinned = {
        "steps": [
            {"id": "build", "type": "pod", "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
            {"id": "sign", "type": "approval", "dependsOn": ["build"], "onTimeout": "escalate", "timeout": "1h",
             "approval": {"approvers": ["user:alice"], "onExhausted": "approve",
                          "escalation": [{"after": "30m", "approvers": ["group:ops"]}]}},
            {"id": "cool", "type": "wait", "dependsOn": ["sign"], "wait": {"duration": "5m"}},
            {"id": "charge", "type": "task", "dependsOn": ["cool"], "task": {"queue": "payments", "name": "charge"}},
        ]
    }  # fmt: skip
    build, sign, cool, charge = definition_of(pinned, uid="uid-1").steps
    assert (build.approvers, build.wait_for, build.wait_until) == ((), None, None)
    assert sign.approvers == ("user:alice",)
    assert [(lvl.approvers, lvl.after) for lvl in sign.escalation] == [(("group:ops",), timedelta(minutes=30))]
    assert str(sign.on_exhausted) == "approve"
    assert (cool.wait_for, cool.wait_until, cool.approvers) == (timedelta(minutes=5), None, ())
    assert (charge.kind, charge.approvers, charge.wait_for) == (StepKind.TASK, (), None)
    assert step_tasks(pinned)["charge"].model_dump() == {"queue": "payments", "name": "charge", "priority": 0, "payload": None}


@pytest.mark.parametrize(
    ("name", "decision", "logs"),
    [
        pytest.param("pod", False, True, id="pod-leaves-pod-logs"),
        pytest.param("approval", True, False, id="approval-awaits-a-decision"),
        pytest.param("wait", False, False, id="wait-neither"),
        pytest.param("task", False, False, id="task-neither-a-worker-runs-it"),
    ],
)
def test_how_a_kind_named_in_status_is_shown(name: str, decision: bool, logs: bool) -> None:
    spec = spec_named(name)
    assert spec is not None
    assert (spec.awaits_decision, spec.has_pod_logs) == (decision, logs)


def test_a_name_no_kind_has_is_none() -> None:
    assert spec_named("teleport") is None
    assert spec_named(None) is None
