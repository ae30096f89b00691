"""What a step kind adds to a Workflow's spec: its block, and what the block tells the core.

Each kind's module (``pod``, ``approval``, ``wait``, ``task``) defines its block's pydantic model (the CRD
schema is generated from it, CEL rules and all) and a :class:`StepBlock` naming the ``Step``
field that holds it and the :class:`~vigil.core.workflow.StepDef` fields it fills. A step has
its kind's block and no other (``vigil.model.workflow.Step`` checks it, at admission and here).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Generic, TypeVar

Block = TypeVar("Block")


@dataclasses.dataclass(frozen=True)
class StepBlock(Generic[Block]):
    """A step kind's block in the spec."""

    #: The field of ``Step`` that holds the block (``template``, ``approval``, ``wait``, ``task``).
    field: str
    #: The core's view of the block: keyword arguments of ``StepDef`` beside the common ones.
    step_def: Callable[[Block], dict[str, Any]]


def no_fields(block: object) -> dict[str, Any]:
    """A block the orchestrator needs nothing of (a pod step's template goes to the pod)."""
    return {}
