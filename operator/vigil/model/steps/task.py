"""The ``task`` step's block: the TaskQueue and task each attempt runs as, in the volume tier.

The orchestrator needs nothing of it; the engine submits each attempt from it
(``vigil.kube.workflowtasks``), as a `task:` ScheduledJob's occurrence is submitted: to a
TaskQueue of the workflow's own namespace, the namespace its tenant.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints

from vigil.model.common import ObjectName, SpecModel
from vigil.model.steps.block import StepBlock, no_fields
from vigil.model.taskqueue import TASK_NAME_MAX_LENGTH, TASK_NAME_PATTERN, TASK_PRIORITY_RANGE


class TaskCall(SpecModel):
    """A task on a TaskQueue of the volume tier, run by a `vigil worker` instead of a pod."""

    queue: ObjectName = Field(description="The TaskQueue's name, in the workflow's own namespace.")
    name: Annotated[
        str, StringConstraints(min_length=1, max_length=TASK_NAME_MAX_LENGTH, pattern=TASK_NAME_PATTERN)
    ] = Field(description="The task to run: the name a worker registered with @task (no control characters).")
    priority: int = Field(
        default=0,
        ge=TASK_PRIORITY_RANGE[0],
        le=TASK_PRIORITY_RANGE[1],
        description="The execution's priority in the queue: lower runs first (0 by default).",
    )
    payload: dict[str, Any] | None = Field(
        default=None,
        description="A JSON object handed to the task as `payload` (beside the workflow, the step, "
        "the outputs of the steps it depends on as `inputs`, and the workflow's `parameters`).",
    )


TASK: StepBlock[TaskCall] = StepBlock(field="task", step_def=no_fields)
