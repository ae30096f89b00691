"""The workflow orchestrator (pure): fold + decide over recorded history.

Named scenarios for each policy (retry, skip, fail, compensate, timeouts, escalation,
approvals, manual requests, cancel), then hypothesis properties: for random DAGs and random
interleavings of results, replaying the recorded history yields exactly the recorded
decisions, and no completed step is ever started again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.workflowsim import (
    FAST_RETRY,
    T0,
    UID,
    World,
    dags,
    drive,
    pod,
    replayed_decisions_match,
)
from vigil.core.executions import RetryPolicy
from vigil.core.orchestrator import (
    current,
    execution_id_of,
    inputs_for,
    progress,
    stuck_steps,
    timers,
    wanted_pods,
)
from vigil.core.timeparse import format_rfc3339
from vigil.core.workflow import (
    Definition,
    ErrorAction,
    Event,
    FailureAction,
    Level,
    Record,
    StepDef,
    StepKind,
    StepPhase,
    TimeoutAction,
    WorkflowPhase,
    fold,
    parse_output,
)


def diamond(**options: Any) -> Definition:
    """a -> (b, c) -> d."""
    return Definition(
        uid=UID,
        steps=(pod("a"), pod("b", "a"), pod("c", "a"), pod("d", "b", "c")),
        **options,
    )


def running(world: World) -> set[str]:
    return {w.step for w in wanted_pods(world.definition, world.state)}


class TestHappyPath:
    def test_dependencies_start_only_when_their_steps_succeed(self) -> None:
        world = World(diamond())
        assert running(world) == {"a"}
        world.pod_result("a", output={"n": 1})
        assert running(world) == {"b", "c"}
        world.pod_result("b")
        assert running(world) == {"c"}
        world.pod_result("c")
        assert running(world) == {"d"}
        world.pod_result("d")
        assert world.state.phase is WorkflowPhase.SUCCEEDED
        assert progress(world.definition, world.state) == "4/4"

    def test_outputs_flow_to_direct_dependents(self) -> None:
        world = World(diamond())
        world.pod_result("a", output={"video": "v1"})
        world.pod_result("b", output=[1, 2])
        world.pod_result("c", output="plain")
        assert inputs_for(world.definition, world.state, "d") == {"b": [1, 2], "c": "plain"}
        assert inputs_for(world.definition, world.state, "b") == {"a": {"video": "v1"}}

    def test_step_execution_id_is_stable_across_attempts_and_distinct_per_step(self) -> None:
        world = World(diamond())
        first = wanted_pods(world.definition, world.state)[0]
        world.pod_result("a", ok=False)
        world.run_until_timer()
        second = wanted_pods(world.definition, world.state)[0]
        assert (first.attempt, second.attempt) == (1, 2)
        assert first.execution_id == second.execution_id == execution_id_of(world.definition, "a")
        assert execution_id_of(world.definition, "a") != execution_id_of(world.definition, "b")

    def test_current_names_the_running_steps(self) -> None:
        world = World(diamond())
        world.pod_result("a")
        assert current(world.definition, world.state) == "b,c"


class TestErrors:
    def test_retry_waits_a_recorded_backoff_then_runs_the_next_attempt(self) -> None:
        world = World(diamond())
        made = world.pod_result("a", ok=False)
        assert [r.event for r in made] == [Event.RETRY_SCHEDULED]
        retry_at = made[0].detail["retryAt"]
        assert format_rfc3339(timers(world.state)[0].at) == retry_at
        assert running(world) == set()
        world.run_until_timer()
        assert wanted_pods(world.definition, world.state)[0].attempt == 2

    def test_attempts_exhausted_fails_the_workflow_and_stops_running_steps(self) -> None:
        world = World(diamond())
        world.pod_result("a")
        for _ in range(FAST_RETRY.max_attempts - 1):
            world.pod_result("b", ok=False)
            world.run_until_timer()
        world.pod_result("b", ok=False)
        state = world.state
        assert state.phase is WorkflowPhase.FAILED
        assert state.steps["b"].phase is StepPhase.FAILED
        assert state.steps["b"].reason == "AttemptsExhausted"
        assert state.steps["c"].phase is StepPhase.CANCELLED
        assert state.steps["d"].phase is StepPhase.PENDING
        assert running(world) == set()

    def test_skip_lets_dependents_run(self) -> None:
        definition = Definition(
            uid=UID, steps=(pod("a", on_error=ErrorAction.SKIP), pod("b", "a"))
        )
        world = World(definition)
        world.pod_result("a", ok=False)
        assert world.state.steps["a"].phase is StepPhase.SKIPPED
        assert running(world) == {"b"}

    def test_fail_fails_at_once_without_retrying(self) -> None:
        world = World(Definition(uid=UID, steps=(pod("a", on_error=ErrorAction.FAIL),)))
        world.pod_result("a", ok=False)
        assert world.state.phase is WorkflowPhase.FAILED


class TestCompensation:
    def chain(self, *, on_failure: FailureAction, on_error: ErrorAction) -> Definition:
        return Definition(
            uid=UID,
            steps=(
                pod("reserve", compensable=True),
                pod("charge", "reserve", compensable=True),
                pod("ship", "charge", on_error=on_error, retry=RetryPolicy(max_attempts=1)),
            ),
            on_failure=on_failure,
        )

    @pytest.mark.parametrize(
        ("on_failure", "on_error"),
        [
            pytest.param(FailureAction.COMPENSATE, ErrorAction.RETRY, id="workflow-onFailure"),
            pytest.param(FailureAction.FAIL, ErrorAction.COMPENSATE, id="step-onError"),
        ],
    )
    def test_compensations_run_one_at_a_time_in_reverse_order(
        self, on_failure: FailureAction, on_error: ErrorAction
    ) -> None:
        world = World(self.chain(on_failure=on_failure, on_error=on_error))
        world.pod_result("reserve")
        world.pod_result("charge")
        world.pod_result("ship", ok=False)
        assert world.state.phase is WorkflowPhase.COMPENSATING
        assert [(w.step, w.compensation) for w in wanted_pods(world.definition, world.state)] == [
            ("charge", True)
        ]
        world.pod_result("charge")
        assert [w.step for w in wanted_pods(world.definition, world.state)] == ["reserve"]
        world.pod_result("reserve")
        assert world.state.phase is WorkflowPhase.COMPENSATED
        started = world.events(Event.COMPENSATION_STARTED)
        assert started == [("CompensationStarted", "charge"), ("CompensationStarted", "reserve")]

    def test_a_compensation_pod_has_its_own_execution_id(self) -> None:
        world = World(self.chain(on_failure=FailureAction.COMPENSATE, on_error=ErrorAction.RETRY))
        world.pod_result("reserve")
        world.pod_result("charge")
        world.pod_result("ship", ok=False)
        comp = wanted_pods(world.definition, world.state)[0]
        assert comp.execution_id == execution_id_of(world.definition, "charge", compensation=True)
        assert comp.execution_id != execution_id_of(world.definition, "charge")

    def test_a_failing_compensation_is_retried_then_recorded_and_the_rest_still_run(self) -> None:
        world = World(self.chain(on_failure=FailureAction.COMPENSATE, on_error=ErrorAction.RETRY))
        world.pod_result("reserve")
        world.pod_result("charge")
        world.pod_result("ship", ok=False)
        for _ in range(FAST_RETRY.max_attempts - 1):
            world.pod_result("charge", ok=False)
            world.run_until_timer()
        world.pod_result("charge", ok=False)
        world.pod_result("reserve")
        state = world.state
        assert state.phase is WorkflowPhase.FAILED
        assert "charge" in state.reason

    def test_cancel_stops_running_steps_and_compensates(self) -> None:
        world = World(self.chain(on_failure=FailureAction.FAIL, on_error=ErrorAction.RETRY))
        world.pod_result("reserve")
        world.request(Event.CANCEL_REQUESTED, by="alice", request="r1")
        state = world.state
        assert state.steps["charge"].phase is StepPhase.CANCELLED
        assert state.phase is WorkflowPhase.COMPENSATING
        world.pod_result("reserve")
        assert world.state.phase is WorkflowPhase.CANCELLED

    def test_cancel_with_nothing_to_compensate_just_cancels(self) -> None:
        world = World(diamond())
        world.request(Event.CANCEL_REQUESTED, by="alice", request="r1")
        assert world.state.phase is WorkflowPhase.CANCELLED
        assert running(world) == set()


def approval_flow(*, on_timeout: TimeoutAction = TimeoutAction.ESCALATE, **approval: Any) -> Definition:
    """The reference's video_publish: probe -> encode_480 -> approve (timeout, escalate)."""
    return Definition(
        uid=UID,
        steps=(
            pod("probe"),
            pod("encode_480", "probe"),
            StepDef(
                id="approve",
                kind=StepKind.APPROVAL,
                depends_on=("encode_480",),
                timeout=timedelta(hours=72),
                on_timeout=on_timeout,
                approvers=("user:alice", "group:editors"),
                escalation=(Level(approvers=("user:carol",), after=timedelta(hours=24)),),
                **approval,
            ),
        ),
    )


def at_approval(definition: Definition) -> World:
    world = World(definition)
    world.pod_result("probe")
    world.pod_result("encode_480")
    return world


class TestApprovals:
    def test_an_approver_approves_and_the_decision_is_recorded(self) -> None:
        world = at_approval(approval_flow())
        world.request(Event.APPROVED, "approve", by="alice", reason="looks good", request="r1")
        state = world.state
        assert state.phase is WorkflowPhase.SUCCEEDED
        assert state.steps["approve"].decided_by == "alice"
        assert state.steps["approve"].output == {
            "decision": "approved",
            "by": "alice",
            "reason": "looks good",
        }

    def test_a_group_member_may_approve(self) -> None:
        world = at_approval(approval_flow())
        world.request(Event.APPROVED, "approve", by="dan", byGroups=["editors"], request="r1")
        assert world.state.phase is WorkflowPhase.SUCCEEDED

    def test_someone_not_an_approver_is_refused_and_it_is_recorded(self) -> None:
        world = at_approval(approval_flow())
        made = world.request(Event.APPROVED, "approve", by="mallory", request="r1")
        assert [r.event for r in made] == [Event.REQUEST_REFUSED]
        assert made[0].detail["reason"] == "NotAnApprover"
        assert world.state.steps["approve"].phase is StepPhase.RUNNING

    @pytest.mark.parametrize(
        ("who", "groups", "outcome"),
        [
            pytest.param("mallory", [], "NotAnApprover", id="an-editor"),
            pytest.param("carol", [], "NotAnApprover", id="a-later-level-before-it-applies"),
            pytest.param("alice", [], None, id="a-named-approver"),
            pytest.param("dan", ["editors"], None, id="a-member-of-an-approver-group"),
        ],
    )
    def test_completing_an_approval_step_by_hand_is_deciding_it(
        self, who: str, groups: list[str], outcome: str | None
    ) -> None:
        """Rules 2: a complete of an approval step needs an approver, like an approve."""
        world = at_approval(approval_flow())
        made = world.request(
            Event.COMPLETED_MANUALLY, "approve", by=who, byGroups=groups, output={"ok": True}, request="r1", rules=2
        )
        if outcome is None:
            assert world.state.phase is WorkflowPhase.SUCCEEDED
            assert world.state.steps["approve"].decided_by == who and world.state.steps["approve"].manual
        else:
            assert [(r.event, r.detail["reason"], r.detail["by"]) for r in made] == [
                (Event.REQUEST_REFUSED, outcome, who)
            ]
            assert world.state.steps["approve"].phase is StepPhase.RUNNING

    def test_completing_a_pending_approval_step_needs_one_of_its_own_approvers(self) -> None:
        world = World(approval_flow())  # probe runs; approve has not started
        refused = world.request(Event.COMPLETED_MANUALLY, "approve", by="mallory", request="r1", rules=2)
        assert refused[-1].detail["reason"] == "NotAnApprover"
        world.request(Event.COMPLETED_MANUALLY, "approve", by="alice", request="r2", rules=2)
        assert world.state.steps["approve"].phase is StepPhase.SUCCEEDED

    def test_a_completion_recorded_before_rules_2_folds_as_it_did(self) -> None:
        """A history an earlier operator wrote replays to the same state (no `rules` detail)."""
        world = at_approval(approval_flow())
        world.request(Event.COMPLETED_MANUALLY, "approve", by="mallory", request="r1")
        assert world.state.phase is WorkflowPhase.SUCCEEDED
        replayed_decisions_match(world.definition, world.history)

    def test_a_token_decision_is_checked_against_the_approvers_like_any_other(self) -> None:
        world = at_approval(approval_flow())
        token = {"via": "token", "tokenLevel": 0, "rules": 2}
        refused = world.request(Event.APPROVED, "approve", by="erin", approver="user:erin", **token)
        assert refused[-1].detail["reason"] == "NotAnApprover"
        world.request(Event.APPROVED, "approve", by="group:editors", byGroups=["editors"], approver="group:editors", **token)
        assert world.state.steps["approve"].decided_by == "group:editors"

    def test_a_token_decision_of_an_earlier_operator_folds_as_it_did(self) -> None:
        world = at_approval(approval_flow())
        world.request(Event.APPROVED, "approve", by="token:jira-bot", via="token", tokenLevel=0)
        assert world.state.phase is WorkflowPhase.SUCCEEDED

    def test_timeout_escalates_then_the_escalated_approver_may_approve(self) -> None:
        world = at_approval(approval_flow())
        refused = world.request(Event.APPROVED, "approve", by="carol", request="r0")
        assert refused[0].event is Event.REQUEST_REFUSED
        made = world.run_until_timer()
        assert [r.event for r in made] == [Event.ESCALATED]
        assert made[0].detail["approvers"] == ["user:alice", "group:editors", "user:carol"]
        assert world.now == T0 + timedelta(hours=72)
        world.request(Event.APPROVED, "approve", by="carol", request="r1")
        assert world.state.phase is WorkflowPhase.SUCCEEDED

    @pytest.mark.parametrize(
        ("exhausted", "phase"),
        [
            (TimeoutAction.FAIL, WorkflowPhase.FAILED),
            (TimeoutAction.SKIP, WorkflowPhase.SUCCEEDED),
            (TimeoutAction.APPROVE, WorkflowPhase.SUCCEEDED),
        ],
    )
    def test_after_the_last_level_the_exhausted_outcome_applies(
        self, exhausted: TimeoutAction, phase: WorkflowPhase
    ) -> None:
        world = at_approval(approval_flow(on_exhausted=exhausted))
        world.run_until_timer()  # escalate
        world.run_until_timer()  # last level's time runs out
        assert world.state.phase is phase
        assert world.now == T0 + timedelta(hours=96)

    def test_rejection_fails_the_step_without_retrying(self) -> None:
        world = at_approval(approval_flow())
        world.request(Event.REJECTED, "approve", by="alice", reason="no", request="r1")
        assert world.state.phase is WorkflowPhase.FAILED
        assert world.state.steps["approve"].reason == "Rejected"

    def test_timeout_fail_without_escalation(self) -> None:
        world = at_approval(approval_flow(on_timeout=TimeoutAction.FAIL))
        world.run_until_timer()
        assert world.state.steps["approve"].reason == "TimedOut"
        assert world.state.phase is WorkflowPhase.FAILED

    def test_an_approval_for_a_step_not_waiting_is_refused(self) -> None:
        world = World(approval_flow())
        made = world.request(Event.APPROVED, "approve", by="alice", request="r1")
        assert made[0].detail["reason"] == "StepNotWaiting"


class TestTimersAndRequests:
    def test_wait_step_fires_at_its_recorded_time(self) -> None:
        definition = Definition(
            uid=UID,
            steps=(
                StepDef(id="nap", kind=StepKind.WAIT, wait_for=timedelta(minutes=5)),
                pod("after", "nap"),
            ),
        )
        world = World(definition)
        assert [t.at for t in timers(world.state)] == [T0 + timedelta(minutes=5)]
        world.tick(60)
        assert world.fire_due_timers() == []
        world.run_until_timer()
        assert running(world) == {"after"}

    def test_pod_step_timeout_fails_it_and_stops_its_pod(self) -> None:
        definition = Definition(uid=UID, steps=(pod("slow", timeout=timedelta(minutes=1)),))
        world = World(definition)
        world.run_until_timer()
        assert world.state.steps["slow"].reason == "TimedOut"
        assert running(world) == set()

    def test_retry_request_reruns_only_the_failed_step(self) -> None:
        world = World(diamond())
        world.pod_result("a")
        world.pod_result("c")
        for _ in range(FAST_RETRY.max_attempts - 1):
            world.pod_result("b", ok=False)
            world.run_until_timer()
        world.pod_result("b", ok=False)
        assert world.state.phase is WorkflowPhase.FAILED
        world.request(Event.RETRY_REQUESTED, "b", by="alice", request="r1")
        assert running(world) == {"b"}
        assert wanted_pods(world.definition, world.state)[0].attempt == FAST_RETRY.max_attempts + 1
        world.pod_result("b")
        world.pod_result("d")
        assert world.state.phase is WorkflowPhase.SUCCEEDED
        started = [s for _, s in world.events(Event.STEP_STARTED)]
        assert started.count("a") == 1 and started.count("c") == 1

    def test_complete_manually_records_the_output_and_who(self) -> None:
        world = World(diamond())
        world.request(Event.COMPLETED_MANUALLY, "a", by="alice", output={"k": 1}, request="r1")
        state = world.state
        assert state.steps["a"].manual and state.steps["a"].decided_by == "alice"
        assert state.steps["a"].output == {"k": 1}
        assert running(world) == {"b", "c"}

    def test_a_late_result_of_a_replaced_attempt_changes_nothing(self) -> None:
        world = World(diamond())
        world.request(Event.COMPLETED_MANUALLY, "a", by="alice", request="r1")
        before = world.state
        made = world.feed(Record(Event.POD_FAILED, world.now, "a", 1, {"reason": "ExitCode1"}))
        assert made == []
        assert world.state.steps == before.steps

    def test_retry_of_a_step_that_did_not_fail_is_refused(self) -> None:
        world = World(diamond())
        made = world.request(Event.RETRY_REQUESTED, "a", by="alice", request="r1")
        assert made[0].detail["reason"] == "StepNotFailed"
        assert "r1" in world.state.requests

    def test_stuck_steps_are_those_past_their_expected_duration(self) -> None:
        definition = Definition(
            uid=UID, steps=(pod("a", expected_duration=timedelta(minutes=10)), pod("b"))
        )
        world = World(definition)
        assert stuck_steps(definition, world.state, now=T0 + timedelta(minutes=9)) == []
        assert stuck_steps(definition, world.state, now=T0 + timedelta(minutes=11)) == ["a"]


def test_records_round_trip_as_plain_data() -> None:
    world = at_approval(approval_flow())
    world.request(Event.APPROVED, "approve", by="alice", request="r1")
    again = [Record.from_data(r.to_data()) for r in world.history]
    assert again == world.history
    assert fold(world.definition, again).phase is WorkflowPhase.SUCCEEDED


def test_output_is_json_when_it_parses_and_capped() -> None:
    assert parse_output('{"a": 1}') == {"a": 1}
    assert parse_output("hello") == "hello"
    assert parse_output("") is None
    assert len(parse_output("x" * 10_000)) == 4096


# --- properties -------------------------------------------------------------------------------


PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@PROPERTY_SETTINGS
@given(definition=dags(), data=st.data())
def test_replaying_history_yields_exactly_the_recorded_decisions(
    definition: Definition, data: st.DataObject
) -> None:
    world = World(definition)
    drive(world, data)
    replayed_decisions_match(definition, world.history)


@PROPERTY_SETTINGS
@given(definition=dags(), data=st.data())
def test_no_completed_step_is_ever_started_again(definition: Definition, data: st.DataObject) -> None:
    world = World(definition)
    drive(world, data)
    succeeded: set[str] = set()
    for index, record in enumerate(world.history):
        if record.event is Event.STEP_STARTED:
            assert record.step not in succeeded, f"{record.step} started after it succeeded"
        state = fold(definition, world.history[: index + 1])
        succeeded |= {s for s, st_ in state.steps.items() if st_.phase is StepPhase.SUCCEEDED}


@PROPERTY_SETTINGS
@given(definition=dags(), data=st.data())
def test_a_step_starts_only_after_its_dependencies_are_done(
    definition: Definition, data: st.DataObject
) -> None:
    world = World(definition)
    drive(world, data)
    for index, record in enumerate(world.history):
        if record.event is Event.STEP_STARTED:
            state = fold(definition, world.history[:index])
            for dep in definition.step(record.step or "").depends_on:
                assert state.steps[dep].phase in (StepPhase.SUCCEEDED, StepPhase.SKIPPED)


@PROPERTY_SETTINGS
@given(definition=dags(), data=st.data())
def test_a_finished_workflow_holds_nothing_running(definition: Definition, data: st.DataObject) -> None:
    world = World(definition)
    drive(world, data, moves=200)
    state = world.state
    if state.finished:
        assert wanted_pods(definition, state) == []
        assert timers(state) == []
