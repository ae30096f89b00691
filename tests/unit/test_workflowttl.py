"""Workflow TTL: the pure rule.

`decide`: a finished workflow goes once its ttlAfterFinished has passed and its whole history is
in the database; a running one never goes, whatever the clock says; zero keeps it forever. Shown
with a table of named scenarios and as properties over any status and clock. `time_to_live`: the
workflow's own value wins over the default. `next_look`: after a pass over a finished workflow,
the next wake-up is never later than its own (its pending timers') nor than its time to live's
end, and there is none once it is deleted.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vigil.core.workflow import WorkflowPhase
from vigil.core.workflowttl import Decision, Verdict, WorkflowEnd, decide, next_look, time_to_live

T0 = datetime(2026, 12, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def end(phase: str | None, *, finished: datetime | None = T0, recorded: int = 5, mirrored: int = 5) -> WorkflowEnd:
    return WorkflowEnd(phase=phase, finished_at=finished, recorded=recorded, mirrored=mirrored)


@pytest.mark.parametrize(
    ("workflow", "ttl", "now", "verdict", "at"),
    [
        pytest.param(end("Succeeded"), HOUR, T0 + HOUR, Verdict.DELETE, None, id="succeeded, ttl passed: goes"),
        pytest.param(end("Failed"), HOUR, T0 + 2 * HOUR, Verdict.DELETE, None, id="failed goes too"),
        pytest.param(end("Cancelled"), HOUR, T0 + HOUR, Verdict.DELETE, None, id="cancelled goes too"),
        pytest.param(end("Compensated"), HOUR, T0 + HOUR, Verdict.DELETE, None, id="compensated goes too"),
        pytest.param(end("Succeeded"), HOUR, T0 + HOUR / 2, Verdict.WAIT, T0 + HOUR, id="before the ttl: wait until it"),
        pytest.param(
            end("Succeeded", mirrored=4), HOUR, T0 + 30 * HOUR, Verdict.AWAIT_HISTORY, None,
            id="history not all written: stays, however old",
        ),
        pytest.param(
            end("Running", finished=None), HOUR, T0 + 1000 * HOUR, Verdict.KEEP, None,
            id="running: never, whatever the clock",
        ),
        pytest.param(
            end("Compensating", finished=None), HOUR, T0 + 1000 * HOUR, Verdict.KEEP, None, id="compensating: never",
        ),
        pytest.param(end("Pending", finished=None), HOUR, T0 + 1000 * HOUR, Verdict.KEEP, None, id="pending: never"),
        pytest.param(
            end("Running", finished=T0), HOUR, T0 + 1000 * HOUR, Verdict.KEEP, None,
            id="a finishedAt on a running phase does not make it finished",
        ),
        pytest.param(
            end("Succeeded", finished=None), HOUR, T0 + 1000 * HOUR, Verdict.KEEP, None,
            id="finished without a finishedAt: kept (nothing to count from)",
        ),
        pytest.param(end("Succeeded"), None, T0 + 1000 * HOUR, Verdict.KEEP, None, id="no ttl: kept forever"),
    ],
)
def test_decide(workflow: WorkflowEnd, ttl: timedelta | None, now: datetime, verdict: Verdict, at: datetime | None) -> None:
    decision = decide(workflow, ttl=ttl, now=now)
    assert decision.verdict is verdict
    assert decision.at == at


@pytest.mark.parametrize(
    ("own", "default", "ttl"),
    [
        pytest.param(None, HOUR, HOUR, id="unset: the default"),
        pytest.param(2 * HOUR, HOUR, 2 * HOUR, id="its own wins"),
        pytest.param(timedelta(0), HOUR, None, id="its own zero: forever, whatever the default"),
        pytest.param(None, timedelta(0), None, id="default zero: forever"),
        pytest.param(None, None, None, id="no default: forever"),
        pytest.param(HOUR, None, HOUR, id="its own without a default"),
    ],
)
def test_time_to_live(own: timedelta | None, default: timedelta | None, ttl: timedelta | None) -> None:
    assert time_to_live(own, default) == ttl


phases = st.sampled_from([None, *(str(p) for p in WorkflowPhase)])
times = st.datetimes(  # hypothesis takes naive bounds; the values carry UTC
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)  # noqa: DTZ001 - hypothesis requires naive bounds; timezones= makes the values aware
)
ttls = st.none() | st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=30))


@st.composite
def ends(draw: st.DrawFn) -> WorkflowEnd:
    recorded = draw(st.integers(min_value=0, max_value=100))
    return WorkflowEnd(
        phase=draw(phases),
        finished_at=draw(st.none() | times),
        recorded=recorded,
        mirrored=draw(st.integers(min_value=0, max_value=recorded)),
    )


@given(ends(), ttls, times)
def test_only_a_finished_written_workflow_past_its_ttl_goes(workflow: WorkflowEnd, ttl: timedelta | None, now: datetime) -> None:
    if decide(workflow, ttl=ttl, now=now).verdict is Verdict.DELETE:
        assert workflow.finished and workflow.finished_at is not None and ttl is not None
        assert workflow.mirrored == workflow.recorded
        assert now >= workflow.finished_at + ttl


@given(ends(), ttls, times, st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=400)))
def test_once_it_may_go_it_may_go_later_too(workflow: WorkflowEnd, ttl: timedelta | None, now: datetime, later: timedelta) -> None:
    if decide(workflow, ttl=ttl, now=now).verdict is Verdict.DELETE:
        assert decide(workflow, ttl=ttl, now=now + later).verdict is Verdict.DELETE


@given(ends(), ttls, times)
def test_a_wait_ends_at_its_time(workflow: WorkflowEnd, ttl: timedelta | None, now: datetime) -> None:
    decision = decide(workflow, ttl=ttl, now=now)
    if decision.verdict is Verdict.WAIT:
        assert decision.at is not None and decision.at > now
        then = decide(workflow, ttl=ttl, now=decision.at).verdict
        assert then is (Verdict.DELETE if workflow.mirrored == workflow.recorded else Verdict.AWAIT_HISTORY)


@given(ends(), ttls, times, st.one_of(st.none(), times))
def test_the_next_look_is_never_later_than_the_wakeup_or_the_ttl(
    workflow: WorkflowEnd, ttl: timedelta | None, now: datetime, wake: datetime | None
) -> None:
    decision = decide(workflow, ttl=ttl, now=now)
    look = next_look(wake, decision)
    if decision.verdict is Verdict.DELETE:
        assert look is None
        return
    pending = [at for at in (wake, decision.at) if at is not None]
    assert look in pending if pending else look is None
    assert all(look is not None and look <= at for at in pending)


@pytest.mark.parametrize(
    ("wake", "decision", "look"),
    [
        pytest.param(T0, Decision(Verdict.DELETE), None, id="deleted: never again"),
        pytest.param(T0 + HOUR, Decision(Verdict.WAIT, at=T0), T0, id="ttl first"),
        pytest.param(T0, Decision(Verdict.WAIT, at=T0 + HOUR), T0, id="timer first"),
        pytest.param(None, Decision(Verdict.AWAIT_HISTORY), None, id="waiting on history: the rescan brings it"),
        pytest.param(T0, Decision(Verdict.KEEP), T0, id="kept forever: its own wake-up"),
    ],
)
def test_next_look(wake: datetime | None, decision: Decision, look: datetime | None) -> None:
    assert next_look(wake, decision) == look
