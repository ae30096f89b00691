"""The ``task`` step's block: the TaskQueue and task each attempt runs as, in the volume tier.

The orchestrator needs nothing of it; the engine submits each attempt from it
(``vigil.kube.controllers.workflowtasks``), as a `task:` ScheduledJob's occurrence is submitted: to a
TaskQueue of the workflow's own namespace, the namespace its tenant.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from vigil.model.steps.block import StepBlock, no_fields
from vigil.model.taskqueue import TaskTarget


class TaskCall(TaskTarget):
    """A task on a TaskQueue of the volume tier, run by a `vigil worker` instead of a pod."""

    payload: dict[str, Any] | None = Field(
        default=None,
        description="A JSON object handed to the task as `payload` (beside the workflow, the step, "
        "the outputs of the steps it depends on as `inputs`, and the workflow's `parameters`).",
    )


TASK: StepBlock[TaskCall] = StepBlock(field="task", step_def=no_fields)
