"""The ``task`` step: runs as a task on a TaskQueue of the volume tier; its outcome is the result.

When ready it records the step's stable execution id, as a pod step does; while it runs it
wants a task (:class:`WantedTask`), which the kube adapter (:mod:`vigil.kube.controllers.workflowtasks`)
submits to the queue store with that id as its execution id and idempotency key, so a pass
repeated after a crash or a failover adds nothing. Each of the step's attempts is one attempt of
that one queue execution (a later attempt makes it ready again), so a worker sees the same
execution id on every attempt and the attempt number of the step. The execution's end comes back
as a ``TaskSucceeded``/``TaskFailed`` input. Retries, timeouts and compensation are the
orchestrator's, as for every kind.
"""

from __future__ import annotations

from datetime import datetime

from vigil.core.steps.kind import Wanted, WantedTask, execution_id_of
from vigil.core.workflow import Definition, StepDef, StepKind, StepPhase, StepState


class TaskStep:
    kind = StepKind.TASK
    awaits_decision = False
    has_pod_logs = False

    def start_detail(self, definition: Definition, step_def: StepDef, *, at: datetime) -> dict[str, object]:
        return {"executionId": execution_id_of(definition, step_def.id)}

    def wanted(self, definition: Definition, step_def: StepDef, step: StepState) -> Wanted | None:
        if step.phase is not StepPhase.RUNNING:
            return None
        return WantedTask(step_def.id, step.attempt, execution_id_of(definition, step_def.id))

    def waiting_for(self, step: StepState) -> list[str]:
        return []


TASK = TaskStep()
