"""A simulated world for the pure orchestrator: it records inputs the way the operator does.

Used by the orchestrator's and the engine pass's unit and property tests (random DAGs:
:func:`dags`; random possible inputs: :func:`drive`). It keeps the history as the operator
keeps it in status (records only), refolds it from scratch whenever it needs the state,
and offers the inputs that are possible now: results of the pods the state wants,
timers that are due, and users' requests.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from vigil.core.executions import Backoff, RetryPolicy
from vigil.core.orchestrator import decide, record_input, timers, wanted_pods
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
    WorkflowState,
    fold,
)

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
UID = "0b7c6a52-1f0e-4f4e-9b7e-3a1c2d3e4f50"
FAST_RETRY = RetryPolicy(
    max_attempts=3, backoff=Backoff(initial=timedelta(seconds=1), max=timedelta(seconds=4))
)


def pod(step_id: str, *deps: str, **options: Any) -> StepDef:
    return StepDef(id=step_id, kind=StepKind.POD, depends_on=deps, **{"retry": FAST_RETRY, **options})


class World:
    """One workflow's history, and the operator's way of appending to it."""

    def __init__(self, definition: Definition, *, at: datetime = T0) -> None:
        self.definition = definition
        self.now = at
        self.history: list[Record] = []
        self.feed(Record(Event.WORKFLOW_STARTED, at))

    @property
    def state(self) -> WorkflowState:
        return fold(self.definition, self.history)

    def feed(self, record: Record) -> list[Record]:
        """Record an input and the decisions it leads to (as the operator does)."""
        added = record_input(self.definition, self.state, record)
        self.history.extend(added)
        return added[1:]

    def tick(self, seconds: float = 1) -> None:
        self.now += timedelta(seconds=seconds)

    def pod_result(self, step: str, *, ok: bool = True, output: Any = None) -> list[Record]:
        wanted = {w.step: w for w in wanted_pods(self.definition, self.state)}
        pod = wanted[step]
        detail: dict[str, Any] = {"compensation": True} if pod.compensation else {}
        if ok:
            return self.feed(
                Record(Event.POD_SUCCEEDED, self.now, step, pod.attempt, {**detail, "output": output})
            )
        return self.feed(
            Record(Event.POD_FAILED, self.now, step, pod.attempt, {**detail, "reason": "ExitCode1"})
        )

    def fire_due_timers(self) -> list[Record]:
        made: list[Record] = []
        for timer in timers(self.state):
            if timer.at <= self.now:
                made += self.feed(timer.record(now=self.now))
        return made

    def run_until_timer(self) -> list[Record]:
        """Advance the clock to the next timer and fire it."""
        pending = timers(self.state)
        assert pending, "no timer to wait for"
        self.now = max(self.now, pending[0].at)
        return self.fire_due_timers()

    def request(self, event: Event, step: str | None = None, **detail: Any) -> list[Record]:
        return self.feed(Record(event, self.now, step, None, detail))

    def events(self, *kinds: Event) -> list[tuple[str, str | None]]:
        return [(r.event.value, r.step) for r in self.history if not kinds or r.event in kinds]


def replayed_decisions_match(definition: Definition, history: list[Record]) -> None:
    """Replaying every input's prefix gives exactly the decisions recorded after it."""
    for index, record in enumerate(history):
        if not record.is_input:
            continue
        end = index + 1
        while end < len(history) and not history[end].is_input:
            end += 1
        state = fold(definition, history[: index + 1])
        again = decide(definition, state, at=record.at)
        assert again == history[index + 1 : end], f"replay differs after input #{index}"


# --- random workflows, for property tests -------------------------------------------------------


@st.composite
def dags(draw: st.DrawFn) -> Definition:
    count = draw(st.integers(min_value=1, max_value=7))
    steps = []
    for index in range(count):
        deps = draw(st.sets(st.integers(min_value=0, max_value=index - 1), max_size=3)) if index else set()
        kind = draw(st.sampled_from([StepKind.POD, StepKind.POD, StepKind.APPROVAL, StepKind.WAIT]))
        options: dict[str, Any] = {
            "on_error": draw(st.sampled_from(list(ErrorAction))),
            "compensable": draw(st.booleans()) and kind is StepKind.POD,
            "timeout": draw(st.sampled_from([None, timedelta(seconds=30)])),
            "expected_duration": draw(st.sampled_from([None, timedelta(seconds=25)])),
        }
        if kind is StepKind.APPROVAL:
            options |= {
                "approvers": ("user:alice",),
                "on_timeout": draw(st.sampled_from(list(TimeoutAction))),
                "escalation": (Level(approvers=("user:bob",), after=timedelta(seconds=20)),),
                "on_exhausted": draw(st.sampled_from([TimeoutAction.FAIL, TimeoutAction.SKIP])),
            }
        if kind is StepKind.WAIT:
            options["wait_for"] = timedelta(seconds=draw(st.integers(1, 60)))
        steps.append(
            StepDef(
                id=f"s{index}",
                kind=kind,
                depends_on=tuple(f"s{d}" for d in sorted(deps)),
                retry=FAST_RETRY,
                **options,
            )
        )
    on_failure = draw(st.sampled_from(list(FailureAction)))
    return Definition(uid=UID, steps=tuple(steps), on_failure=on_failure)


def drive(world: World, data: st.DataObject, *, moves: int = 60) -> None:
    """Feed random possible inputs until the workflow ends or ``moves`` run out."""
    for number in range(moves):
        state = world.state
        if state.finished:
            return
        options: list[tuple[str, Any]] = [("pod", w) for w in wanted_pods(world.definition, state)]
        options += [("timer", t) for t in timers(state)]
        options += [("approval", s) for s, st_ in state.steps.items() if st_.approvers and st_.phase is StepPhase.RUNNING]
        options += [("request", Event.CANCEL_REQUESTED), ("request", Event.RETRY_REQUESTED)]
        kind, choice = data.draw(st.sampled_from(options))
        world.tick(data.draw(st.integers(0, 40)))
        if kind == "pod":
            world.pod_result(choice.step, ok=data.draw(st.booleans()), output={"n": number})
        elif kind == "timer":
            world.now = max(world.now, choice.at)
            world.fire_due_timers()
        elif kind == "approval":
            event = data.draw(st.sampled_from([Event.APPROVED, Event.REJECTED]))
            by = data.draw(st.sampled_from(["alice", "bob", "mallory"]))
            world.request(event, choice, by=by, request=f"r{number}")
        else:
            step = data.draw(st.sampled_from([s.id for s in world.definition.steps]))
            world.request(choice, step, by="alice", request=f"r{number}")
