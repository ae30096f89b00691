"""The protocol every step kind implements, and the plans a kind hands to an adapter.

A step kind (``pod``, ``approval``, ``wait``, ``task``) is one module of this package; the orchestrator,
the pass and the timeline ask the kind's module instead of branching on :class:`StepKind`. A
kind answers four questions, all pure:

* what it records when the step becomes ready (:meth:`StepKindSpec.start_detail`: the detail of
  its ``StepStarted`` record, e.g. a pod step's execution id, a wait step's ``fireAt``);
* what it wants an adapter to carry out while it runs, and so how its result comes back
  (:meth:`StepKindSpec.wanted`: a plan, :class:`WantedPod` or :class:`WantedTask`; the kube
  adapter of the plan's type carries it out and reports the outcome as an input). A kind whose result is the clock's records
  ``fireAt`` when it starts instead, and :class:`DueTimer` owes it a ``TimerFired`` input;
* how a step is shown: what a running one awaits (:meth:`StepKindSpec.waiting_for`, the
  timeline's words), whether it waits for a person's decision
  (:attr:`StepKindSpec.awaits_decision`: approval tokens, the console's approve and reject) and
  whether its attempts leave pod logs (:attr:`StepKindSpec.has_pod_logs`).

What every kind shares — dependencies, retries, timeouts, compensation — stays in the
orchestrator. The model block a kind reads from a Workflow's spec is in ``vigil.model.steps``.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Protocol

from vigil.core.ids import step_execution_id
from vigil.core.timeparse import format_rfc3339
from vigil.core.workflow import Definition, Event, Record, StepDef, StepKind, StepState, Timer

#: The key compensation execution ids derive from: ``compensate/<step>`` (no step id has a '/').
COMPENSATION_KEY = "compensate/{step}"


def execution_id_of(definition: Definition, step_id: str, *, compensation: bool = False) -> str:
    key = COMPENSATION_KEY.format(step=step_id) if compensation else step_id
    return step_execution_id(definition.uid, key)


@dataclasses.dataclass(frozen=True)
class WantedPod:
    """A pod the state says should exist (created if missing; its result is an input)."""

    step: str
    attempt: int
    execution_id: str
    compensation: bool = False


@dataclasses.dataclass(frozen=True)
class WantedTask:
    """A task on a TaskQueue the state says should run: the queue execution whose id and
    idempotency key are the step's stable execution id, at the step's attempt (submitted if
    missing, made ready again for a later attempt; its outcome is a ``TaskSucceeded`` or
    ``TaskFailed`` input). Which queue and task come from the step's block in the pinned spec."""

    step: str
    attempt: int
    execution_id: str


#: What a running step wants carried out, one adapter per type (``vigil.kube.controllers.workflowpods``,
#: ``vigil.kube.controllers.workflowtasks``).
Wanted = WantedPod | WantedTask


@dataclasses.dataclass(frozen=True)
class DueTimer:
    """An input the clock produces at ``at``."""

    at: datetime
    step: str
    timer: Timer
    attempt: int | None = None
    level: int | None = None
    compensation: bool = False

    def record(self, *, now: datetime) -> Record:
        detail: dict[str, object] = {"timer": str(self.timer), "due": format_rfc3339(self.at)}
        if self.level is not None:
            detail["level"] = self.level
        if self.compensation:
            detail["compensation"] = True
        return Record(Event.TIMER_FIRED, now, step=self.step, attempt=self.attempt, detail=detail)


class StepKindSpec(Protocol):
    """One kind of step: what it does when ready, what it wants done, how it is shown."""

    @property
    def kind(self) -> StepKind:
        """The ``type`` a step of this kind has in a Workflow's spec."""
        ...

    @property
    def awaits_decision(self) -> bool:
        """Whether a running step waits for a person's decision (approve or reject)."""
        ...

    @property
    def has_pod_logs(self) -> bool:
        """Whether its attempts run in pods, whose log tails a page may show."""
        ...

    def start_detail(self, definition: Definition, step_def: StepDef, *, at: datetime) -> dict[str, object]:
        """What the step's ``StepStarted`` record says, beside its kind and deadline."""
        ...

    def wanted(self, definition: Definition, step_def: StepDef, step: StepState) -> Wanted | None:
        """What an adapter must carry out for the running step (None: nothing)."""
        ...

    def waiting_for(self, step: StepState) -> list[str]:
        """What a running step awaits, in the timeline's words (beside its times)."""
        ...
