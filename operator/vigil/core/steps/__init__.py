"""Workflow step kinds, one module each, and the registry that names them.

Each module (``pod``, ``approval``, ``wait``, ``task``) implements :class:`~vigil.core.steps.kind.StepKindSpec`;
the orchestrator, the pass and the timeline look a step's kind up here rather than branching on
it. A new kind is a module beside these and one line in :data:`KINDS` (and its model block in
``vigil.model.steps``): see "a new step kind" in ``docs/architecture.md``.
"""

from __future__ import annotations

from collections.abc import Mapping

from vigil.core.steps.approval import APPROVAL
from vigil.core.steps.kind import StepKindSpec
from vigil.core.steps.pod import POD
from vigil.core.steps.task import TASK
from vigil.core.steps.wait import WAIT
from vigil.core.workflow import StepKind

#: Every step kind, by the ``type`` its steps have.
KINDS: Mapping[StepKind, StepKindSpec] = {spec.kind: spec for spec in (POD, APPROVAL, WAIT, TASK)}


def spec_of(kind: StepKind) -> StepKindSpec:
    """The module behind a step kind."""
    return KINDS[kind]


def spec_named(name: object) -> StepKindSpec | None:
    """The module behind a kind as a status or record names it (a step's ``type``, a start's
    ``kind``); None for a name no kind has."""
    return next((spec for kind, spec in KINDS.items() if kind == name), None)
