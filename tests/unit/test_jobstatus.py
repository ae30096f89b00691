"""The job's one status writer folds the trigger's plans and the executions' transitions, in order,
into one status patch; only plans whose record exists nowhere else are written before the mark."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from vigil.core.buckets import Outcome
from vigil.core.chain import CatchUp, CatchUpPolicy, EntryPlan, JobView, first_entry, plan_entry
from vigil.core.executions import (
    AttemptOutcome,
    AttemptResult,
    RetryPolicy,
    finish,
    new_execution,
    start,
)
from vigil.core.ids import ExecutionId
from vigil.core.schedule import Schedule
from vigil.core.timeparse import format_rfc3339
from vigil.kube.stores.jobstatus import Change, fold, urgent
from vigil.model.jobpatches import ledger_patch, transition_patch

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
EVERY = timedelta(minutes=1)


def job(**kwargs: Any) -> JobView:
    return JobView(
        namespace="ns", name="job", uid="uid-job", generation=1,
        schedule=Schedule.from_interval(EVERY, anchor=T0), schedule_hash="h1", jitter=timedelta(0),
        catch_up=CatchUp(policy=kwargs.pop("policy", CatchUpPolicy.ALL), window=timedelta(minutes=10), limit=100),
        **kwargs,
    )  # fmt: skip


def due_plan(view: JobView, now: datetime) -> EntryPlan:
    head = first_entry(view, now=now - EVERY)
    assert head is not None
    return plan_entry(head, view, now=now)


def ended(execution_id: str, at: datetime) -> Any:
    ex = new_execution(ExecutionId(execution_id), namespace="ns", job="job", scheduled_for=at, now=at)
    ex = start(ex, pod=f"{execution_id}-1", now=at)
    return finish(ex, AttemptResult(1, AttemptOutcome.SUCCEEDED, "Completed"), policy=RetryPolicy(), now=at + timedelta(seconds=3))


def plan_change(plan: EntryPlan, now: datetime) -> Change:
    return Change("uid-job", lambda status, gen: ledger_patch(status, plan, now, generation=gen), lambda job: None)


def transition_change(ex: Any, now: datetime) -> Change:
    return Change("uid-job", lambda status, gen: transition_patch(status, ex, generation=gen, now=now), lambda job: None)


def test_a_fire_and_its_end_fold_into_one_patch_with_the_chain_merged() -> None:
    now = T0 + EVERY
    plan = due_plan(job(), now)
    assert [f.occurrence.nominal for f in plan.fires] == [T0 + EVERY] and not urgent(plan)
    fire = plan.fires[0]
    status = {"chain": {"scheduleHash": "h1"}, "conditions": [{"type": "Ready", "status": "True"}]}

    patch = fold(status, [plan_change(plan, now), transition_change(ended(fire.execution_id, now), now)], generation=1)

    assert patch["chain"] == {"lastNominal": format_rfc3339(T0 + EVERY)}  # the handler's keys are left to it
    assert patch["lastScheduleTime"] == format_rfc3339(T0 + EVERY)
    assert patch["nextRun"] == format_rfc3339(T0 + 2 * EVERY)
    assert patch["active"] == []  # the fire made it active, its end took it out again
    assert [r["executionId"] for r in patch["recent"]] == [fire.execution_id]
    assert patch["lastSuccessfulTime"] == format_rfc3339(now + timedelta(seconds=3))
    assert [(e["outcome"], e["executionId"]) for e in patch["occurrences"]] == [("Fired", fire.execution_id)]
    assert "conditions" not in patch


@given(st.integers(min_value=1, max_value=12))
def test_folding_plans_one_by_one_equals_folding_them_at_once(count: int) -> None:
    """Coalescing changes nothing: the status after one write of n changes is the status after n writes."""
    view = job()
    changes = []
    for i in range(count):
        now = T0 + (i + 1) * EVERY
        plan = due_plan(view, now)
        changes.append(plan_change(plan, now))
        changes.append(transition_change(ended(plan.fires[0].execution_id, now), now))
    one_by_one: dict[str, Any] = {}
    for change in changes:
        step = fold(one_by_one, [change], generation=1)
        chain = step.pop("chain", None)
        one_by_one.update(step)
        if chain:
            one_by_one["chain"] = {**one_by_one.get("chain", {}), **chain}
    at_once = fold({}, changes, generation=1)
    assert at_once == one_by_one
    assert len(at_once["occurrences"]) == count and at_once["active"] == []


def test_only_a_plan_with_a_record_or_a_pause_is_written_before_the_mark() -> None:
    now = T0 + EVERY
    assert not urgent(due_plan(job(), now))
    late = job(policy=CatchUpPolicy.NONE)
    head = first_entry(late, now=T0)
    assert head is not None
    missed = plan_entry(head, late, now=now + 20 * EVERY)  # past the 10-minute catch-up window
    assert missed.records and {r.outcome for r in missed.records} == {Outcome.MISSED}
    assert urgent(missed)
    suspended = due_plan(job(suspended=True), now)
    assert suspended.pause_at is not None and urgent(suspended)
