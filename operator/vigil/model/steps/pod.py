"""The ``pod`` step's block: ``template``, the pod to run (``vigil.model.common.PodTemplate``).

The orchestrator needs nothing of it; the engine builds each attempt's pod from it
(``vigil.model.workflowspec.step_templates``, ``vigil.kube.controllers.workflowpods``).
"""

from __future__ import annotations

from vigil.model.common import PodTemplate
from vigil.model.steps.block import StepBlock, no_fields

POD: StepBlock[PodTemplate] = StepBlock(field="template", step_def=no_fields)
