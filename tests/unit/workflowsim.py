"""A simulated world for the pure orchestrator: it records inputs the way the operator does.

Used by the orchestrator's unit and property tests. It keeps the history as the operator
keeps it in status (records only), refolds it from scratch whenever it needs the state,
and offers the inputs that are possible now: results of the pods the state wants,
timers that are due, and users' requests.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from vigil.core.executions import Backoff, RetryPolicy
from vigil.core.orchestrator import decide, record_input, timers, wanted_pods
from vigil.core.workflow import (
    Definition,
    Event,
    Record,
    StepDef,
    StepKind,
    WorkflowState,
    fold,
)

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
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
