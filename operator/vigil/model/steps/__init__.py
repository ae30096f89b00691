"""The blocks step kinds add to a Workflow's spec, one module per kind, and their registry.

The behaviour of each kind is in ``vigil.core.steps``; this package is what a step of the kind
says. A new kind is a module beside these, one line in :data:`BLOCKS` and its block's field on
``vigil.model.workflow.Step`` (see "a new step kind" in ``docs/architecture.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vigil.core.workflow import StepKind
from vigil.model.steps.approval import APPROVAL
from vigil.model.steps.block import StepBlock
from vigil.model.steps.pod import POD
from vigil.model.steps.task import TASK
from vigil.model.steps.wait import WAIT

#: Each kind's block, in the order the CRD's rules name them.
BLOCKS: Mapping[StepKind, StepBlock[Any]] = {
    StepKind.POD: POD,
    StepKind.APPROVAL: APPROVAL,
    StepKind.WAIT: WAIT,
    StepKind.TASK: TASK,
}
