"""The ``pod`` step: runs its template as a pod; the pod's end is the step's result.

When ready it records the step's stable execution id; while it runs it wants a pod
(:class:`WantedPod`), which the kube adapter creates through the dispatcher and whose result
(:func:`vigil.kube.controllers.workflowpods.pod_result`) comes back as a ``PodSucceeded``/``PodFailed`` input.
"""

from __future__ import annotations

from datetime import datetime

from vigil.core.steps.kind import WantedPod, execution_id_of
from vigil.core.workflow import Definition, StepDef, StepKind, StepPhase, StepState


class PodStep:
    kind = StepKind.POD
    awaits_decision = False
    has_pod_logs = True

    def start_detail(self, definition: Definition, step_def: StepDef, *, at: datetime) -> dict[str, object]:
        return {"executionId": execution_id_of(definition, step_def.id)}

    def wanted(self, definition: Definition, step_def: StepDef, step: StepState) -> WantedPod | None:
        if step.phase is not StepPhase.RUNNING:
            return None
        return WantedPod(step_def.id, step.attempt, execution_id_of(definition, step_def.id))

    def waiting_for(self, step: StepState) -> list[str]:
        return []


POD = PodStep()
