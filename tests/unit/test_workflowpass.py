"""The decisions of one workflow engine pass (vigil.core.workflowpass), without the API server.

Named scenarios for gathering inputs (requests once, pod results, due timers), the status of a
workflow that cannot start, which workflows a rescan queues, the Events a pass posts and how a
workflow's end reads in its ScheduledJob's `recent` list; then hypothesis properties over random
DAGs driven by random possible inputs: the next wake-up is the earliest of the timers and of the
moments a running step passes its expectedDuration, so never later than a pending timer; a start
is recorded first and its state is the fold of its records; the status's summary is a fold of
the step states, counting each step once (progress counts the finished ones); a status rebuilt
from itself is the same status (a pass with nothing new writes nothing); the built status is what
the CRD model accepts; and the history limits compact before they refuse a status.
"""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.workflowsim import T0, UID, World, dags, drive, pod
from vigil.core.checkpoint import resume
from vigil.core.conditions import ConditionReason, ConditionType
from vigil.core.orchestrator import WantedPod, timers, wanted_pods
from vigil.core.timeparse import format_rfc3339
from vigil.core.workflow import (
    Definition,
    Event,
    Record,
    StepDef,
    StepKind,
    StepPhase,
    WorkflowState,
    fold,
)
from vigil.core.workflowpass import (
    STATUS_LIMITS,
    HistoryFull,
    Recorded,
    StatusLimits,
    announcements,
    build_status,
    gather_inputs,
    invalid_status,
    needs_pass,
    next_pass,
    plan_pods,
    start,
    started_status,
    wanted_pod_name,
)
from vigil.model.workflow import WorkflowStatus

LIMITS = STATUS_LIMITS
FINISHED = {StepPhase.SUCCEEDED, StepPhase.SKIPPED, StepPhase.FAILED}


def chain(*ids: str, **options: Any) -> Definition:
    steps = [pod(ids[0], **options)] + [pod(b, a, **options) for a, b in itertools.pairwise(ids)]
    return Definition(uid=UID, steps=tuple(steps))


def status_of(world: World, *, stuck: tuple[str, ...] = (), previous: dict[str, Any] | None = None) -> dict[str, Any]:
    return build_status(
        previous or {},
        generation=1,
        definition=world.definition,
        state=world.state,
        recorded=Recorded(None, [], 0),
        entries=world.history,
        mirrored=0,
        stuck=stuck,
        limits=LIMITS,
        now=world.now,
    )


def succeeded(wanted: WantedPod) -> Record:
    return Record(Event.POD_SUCCEEDED, T0, wanted.step, wanted.attempt, {"pod": "p"})


class TestGatherInputs:
    def test_a_request_is_recorded_once(self) -> None:
        world = World(chain("a"))
        request = {"id": "r1", "action": "cancel", "by": "alice"}
        state = world.state
        first = gather_inputs(world.definition, state, requests=[request], result_of=lambda w: None, now=T0)
        again = gather_inputs(world.definition, state, requests=[request], result_of=lambda w: None, now=T0)
        assert first[0].event is Event.CANCEL_REQUESTED and first[0].detail["request"] == "r1"
        assert again == []

    def test_results_unblock_dependents_within_one_pass(self) -> None:
        world = World(chain("a", "b", "c"))
        state = world.state
        new = gather_inputs(world.definition, state, requests=[], result_of=succeeded, now=T0)
        assert [r.step for r in new if r.event is Event.POD_SUCCEEDED] == ["a", "b", "c"]
        assert state.finished

    def test_pods_still_running_record_nothing(self) -> None:
        world = World(chain("a", "b"))
        assert gather_inputs(world.definition, world.state, requests=[], result_of=lambda w: None, now=T0) == []

    def test_due_timers_fire_and_later_ones_wait(self) -> None:
        definition = Definition(
            uid=UID,
            steps=(pod("a"), *[
                StepDef(id=s, kind=StepKind.WAIT, wait_for=timedelta(seconds=n)) for s, n in (("w1", 10), ("w2", 60))
            ]),
        )
        world = World(definition)
        state = world.state
        new = gather_inputs(definition, state, requests=[], result_of=lambda w: None, now=T0 + timedelta(seconds=30))
        assert [(r.event, r.step) for r in new if r.event is Event.TIMER_FIRED] == [(Event.TIMER_FIRED, "w1")]
        assert next_pass(definition, state, T0 + timedelta(seconds=30)) == T0 + timedelta(seconds=60)


class TestNextPass:
    def test_nothing_to_wait_for_is_none(self) -> None:
        world = World(chain("a"))
        assert next_pass(world.definition, world.state, T0) is None

    def test_a_running_step_is_looked_at_just_after_its_expected_duration(self) -> None:
        world = World(chain("a", expected_duration=timedelta(minutes=5)))
        assert next_pass(world.definition, world.state, T0) == T0 + timedelta(minutes=5, seconds=1)
        # once past it, Stuck is raised by that pass; no further pass is needed for it
        assert next_pass(world.definition, world.state, T0 + timedelta(minutes=6)) is None


class TestInvalidStatus:
    def test_names_the_problem_once(self) -> None:
        status = invalid_status({}, generation=2, message="spec.steps[0].id: empty", now=T0)
        assert status is not None
        invalid = next(c for c in status["conditions"] if c["type"] == ConditionType.INVALID)
        assert (invalid["status"], invalid["reason"], invalid["message"]) == (
            "True", ConditionReason.INVALID_SPEC, "spec.steps[0].id: empty"
        )
        assert status["phase"] == "Pending" and status["observedGeneration"] == 2
        assert invalid_status(status, generation=2, message="spec.steps[0].id: empty", now=T0) is None
        assert invalid_status(status, generation=2, message="another problem", now=T0) is not None

    def test_a_start_clears_it_and_pins_the_definition(self) -> None:
        invalid = invalid_status({}, generation=1, message="x", now=T0)
        assert invalid is not None
        world = World(chain("a"))
        status = started_status(
            invalid, generation=1, pinned={"steps": []}, definition=world.definition, state=world.state,
            records=world.history, limits=LIMITS, now=T0,
        )  # fmt: skip
        types = {c["type"]: c["status"] for c in status["conditions"]}
        assert types == {ConditionType.INVALID: "False"}
        assert status["definition"] == {"steps": []} and status["phase"] == "Running"


@pytest.mark.parametrize(
    ("status", "mirroring", "expired", "queued"),
    [
        pytest.param({}, False, False, True, id="new"),
        pytest.param({"phase": "Running"}, False, False, True, id="running"),
        pytest.param({"phase": "Succeeded", "history": [{}], "historyMirrored": 1}, True, False, False, id="done"),
        pytest.param({"phase": "Succeeded", "history": [{}, {}], "historyMirrored": 1}, True, False, True, id="done-unmirrored"),
        pytest.param({"phase": "Failed", "history": [{}, {}]}, False, False, False, id="done-no-database"),
        pytest.param({"phase": "Cancelled", "checkpoint": {"seq": 5}, "history": [{}], "historyMirrored": 6}, True, False, False,
                     id="done-checkpointed"),
        pytest.param({"phase": "Compensated"}, False, True, True, id="done-past-ttl"),
    ],
)  # fmt: skip
def test_which_workflows_a_rescan_queues(status: dict[str, Any], mirroring: bool, expired: bool, queued: bool) -> None:
    assert needs_pass(status, mirroring=mirroring, expired=expired) is queued


class TestAnnouncements:
    def test_failures_warn_and_stuck_is_said_once(self) -> None:
        new = [Record(Event.STEP_FAILED, T0, "a", 1, {"reason": "ExitCode1"}), Record(Event.POD_SUCCEEDED, T0, "b", 1)]
        said = announcements(new, stuck=("c",), before={})
        assert [(a.warning, a.reason) for a in said] == [(True, "StepFailed"), (True, "StepStuck")]
        assert "reason: ExitCode1" in said[0].message
        was_stuck = {"conditions": [{"type": ConditionType.STUCK, "status": "True"}]}
        assert announcements([], stuck=("c",), before=was_stuck) == []


def pod_in(phase: str, *, deleting: bool = False) -> dict[str, Any]:
    meta = {"deletionTimestamp": format_rfc3339(T0)} if deleting else {}
    return {"metadata": meta, "status": {"phase": phase}}


class TestPlanPods:
    def test_wanted_pods_start_once_and_unwanted_running_ones_stop(self) -> None:
        world = World(chain("a", "b"))
        (want,) = wanted_pods(world.definition, world.state)
        assert plan_pods(world.definition, world.state, {}).start == [want]
        adopted = plan_pods(world.definition, world.state, {wanted_pod_name(want): pod_in("Running")})
        assert adopted.start == [] and adopted.stop == []
        world.request(Event.CANCEL_REQUESTED, None, by="alice", request="r1")
        plan = plan_pods(world.definition, world.state, {
            wanted_pod_name(want): pod_in("Running"), "old-ended": pod_in("Succeeded"),
            "old-failed": pod_in("Failed"), "going": pod_in("Running", deleting=True),
        })  # fmt: skip
        assert plan.start == [] and plan.stop == [wanted_pod_name(want)]


def test_history_past_what_a_status_holds_is_refused() -> None:
    world = World(chain("a", "b", "c"))
    for step in ("a", "b", "c"):
        world.pod_result(step)
    tight = StatusLimits(budget=LIMITS.budget, max_items=2, max_bytes=LIMITS.max_bytes)
    with pytest.raises(HistoryFull, match="wait for the history database"):
        build_status({}, generation=1, definition=world.definition, state=world.state,
                     recorded=Recorded(None, [], 0), entries=world.history, mirrored=0, stuck=(), limits=tight, now=T0)  # fmt: skip


def test_the_budget_compacts_before_a_status_is_refused() -> None:
    """Past the budget the oldest mirrored entries leave, so a status whose history the database
    keeps up with never reaches the caps that refuse a write; the CRD's maxItems is the cap."""
    assert STATUS_LIMITS.budget.items < STATUS_LIMITS.max_items
    assert STATUS_LIMITS.budget.bytes < STATUS_LIMITS.max_bytes
    history = WorkflowStatus.model_fields["history"].metadata
    assert any(getattr(bound, "max_length", None) == STATUS_LIMITS.max_items for bound in history)


# --- properties -------------------------------------------------------------------------------

PROPERTY_SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def stuck_moments(definition: Definition, state: WorkflowState) -> list[Any]:
    moments = []
    for step in definition.steps:
        folded = state.steps[step.id]
        if step.expected_duration and folded.phase is StepPhase.RUNNING and folded.attempt_started_at:
            moments.append(folded.attempt_started_at + step.expected_duration)
    return moments


@PROPERTY_SETTINGS
@given(definition=dags(), data=st.data(), later=st.integers(0, 120))
def test_next_wakeup_is_the_earliest_timer_or_expected_duration(definition: Definition, data: st.DataObject, later: int) -> None:
    world = World(definition)
    drive(world, data, moves=data.draw(st.integers(0, 30)))
    now = world.now + timedelta(seconds=later)
    wakes = [t.at for t in timers(world.state)] + [m + timedelta(seconds=1) for m in stuck_moments(definition, world.state) if m > now]
    assert next_pass(definition, world.state, now) == (min(wakes) if wakes else None)


@PROPERTY_SETTINGS
@given(definition=dags(), data=st.data())
def test_the_summary_is_a_fold_of_the_step_states(definition: Definition, data: st.DataObject) -> None:
    world = World(definition)
    drive(world, data)
    state = world.state
    status = status_of(world)
    assert {s: summary["phase"] for s, summary in status["steps"].items()} == {s: str(f.phase) for s, f in state.steps.items()}
    assert {s: summary["attempts"] for s, summary in status["steps"].items()} == {s: f.attempt for s, f in state.steps.items()}
    done = sum(1 for summary in status["steps"].values() if summary["phase"] in FINISHED)
    assert status["progress"] == f"{done}/{len(definition.steps)}"
    assert status["phase"] == str(state.phase)
    assert len(status["history"]) == len(world.history)
    WorkflowStatus.model_validate(status)  # what the CRD's schema is generated from


@PROPERTY_SETTINGS
@given(definition=dags(), data=st.data())
def test_a_pass_with_nothing_new_writes_nothing(definition: Definition, data: st.DataObject) -> None:
    world = World(definition)
    drive(world, data)
    stuck = tuple(s.id for s in definition.steps[:1])
    first = status_of(world, stuck=stuck)
    recorded = Recorded.of(first)
    state = resume(definition, recorded.checkpoint, recorded.entries)
    again = build_status(
        first, generation=1, definition=definition, state=state, recorded=recorded, entries=recorded.entries,
        mirrored=recorded.mirrored, stuck=stuck, limits=LIMITS, now=world.now + timedelta(hours=1),
    )  # fmt: skip
    assert again == first


@PROPERTY_SETTINGS
@given(definition=dags(), data=st.data())
def test_after_gathering_no_due_timer_or_finished_wanted_pod_is_left(definition: Definition, data: st.DataObject) -> None:
    world = World(definition)
    drive(world, data, moves=data.draw(st.integers(0, 20)))
    state = world.state
    now = world.now + timedelta(seconds=data.draw(st.integers(0, 90)))
    gather_inputs(definition, state, requests=[], result_of=lambda w: None, now=now)
    assert all(t.at > now for t in timers(state)) or state.finished


@PROPERTY_SETTINGS
@given(definition=dags())
def test_a_start_is_recorded_first_and_its_state_is_the_fold_of_its_records(definition: Definition) -> None:
    state, records = start(definition, T0)
    assert records[0] == Record(Event.WORKFLOW_STARTED, T0)
    assert state == fold(definition, records)
    assert state.started_at == T0


@PROPERTY_SETTINGS
@given(definition=dags(), data=st.data())
def test_the_summary_counts_every_step_once(definition: Definition, data: st.DataObject) -> None:
    world = World(definition)
    drive(world, data)
    status = status_of(world)
    phases = Counter(summary["phase"] for summary in status["steps"].values())
    assert sorted(status["steps"]) == sorted(step.id for step in definition.steps)
    assert sum(phases.values()) == len(definition.steps)
    done, total = (int(n) for n in status["progress"].split("/"))
    assert total == len(definition.steps) and done == sum(phases[str(p)] for p in FINISHED) <= total


@PROPERTY_SETTINGS
@given(definition=dags(), data=st.data(), later=st.integers(0, 120))
def test_the_next_wakeup_is_never_later_than_a_pending_timer(definition: Definition, data: st.DataObject, later: int) -> None:
    world = World(definition)
    drive(world, data, moves=data.draw(st.integers(0, 30)))
    wake = next_pass(definition, world.state, world.now + timedelta(seconds=later))
    assert all(wake is not None and wake <= timer.at for timer in timers(world.state))
