"""From a Workflow's spec to its pinned definition, and from that to the orchestrator's.

A workflow pins its definition when it starts: the inline steps, or the
referenced WorkflowDefinition version, are copied into ``status.definition``.
From then on only the pinned copy is read, so editing the spec or the
WorkflowDefinition never changes a running instance. The pinned copy is the
spec's own camelCase data (defaults filled in), so it reads like what the user
wrote; :func:`definition_of` turns it into the core's :class:`Definition`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from vigil.core.workflow import (
    Definition,
    FailureAction,
    StepDef,
)
from vigil.model.common import describe_validation_error
from vigil.model.jobspec import retry_policy
from vigil.model.steps import BLOCKS
from vigil.model.steps.task import TaskCall
from vigil.model.workflow import (
    DefinitionVersion,
    Step,
    WorkflowDefinitionSpec,
    WorkflowSpec,
    check_step_graph,
)


class InvalidWorkflow(ValueError):
    """The spec (or the definition it names) cannot run; ``field`` says where."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _dump(steps: list[Step]) -> list[dict[str, Any]]:
    return [step.model_dump(by_alias=True, mode="json", exclude_none=True) for step in steps]


def parse_workflow_spec(raw: Mapping[str, Any]) -> WorkflowSpec:
    try:
        return WorkflowSpec.model_validate(raw)
    except ValidationError as error:
        field, _, message = describe_validation_error(error)[0].partition(": ")
        raise InvalidWorkflow(field, message) from None


def pin(spec: WorkflowSpec, *, definition: Mapping[str, Any] | None) -> dict[str, Any]:
    """The definition to copy into status. ``definition`` is the referenced object, if any."""
    if spec.steps is not None:
        return {
            "source": {"inline": True},
            "steps": _dump(spec.steps),
            "onFailure": str(spec.on_failure),
        }
    ref = spec.definition_ref
    assert ref is not None  # the model guarantees one of the two
    if definition is None:
        raise InvalidWorkflow(
            "spec.definitionRef.name", f"WorkflowDefinition {ref.name!r} not found"
        )
    try:
        parsed = WorkflowDefinitionSpec.model_validate(definition.get("spec") or {})
    except ValidationError as error:
        problems = "; ".join(describe_validation_error(error))
        raise InvalidWorkflow(
            "spec.definitionRef", f"WorkflowDefinition {ref.name!r} is invalid: {problems}"
        ) from None
    version: DefinitionVersion | None = parsed.version(ref.version)
    if version is None:
        known = ", ".join(str(v.version) for v in parsed.versions)
        raise InvalidWorkflow(
            "spec.definitionRef.version",
            f"WorkflowDefinition {ref.name!r} has no version {ref.version} (it has {known})",
        )
    return {
        "source": {
            "name": ref.name,
            "version": ref.version,
            "uid": (definition.get("metadata") or {}).get("uid", ""),
        },
        "steps": _dump(version.steps),
        "onFailure": str(version.on_failure),
    }


def _seconds(value: Any) -> timedelta | None:
    return None if value is None else timedelta(seconds=value.total_seconds())


def _step_def(step: Step) -> StepDef:
    block = BLOCKS[step.type]
    return StepDef(
        id=step.id,
        kind=step.type,
        depends_on=tuple(step.depends_on),
        retry=retry_policy(
            step.retry.model_dump(by_alias=True, mode="json") if step.retry else {}
        ),
        timeout=_seconds(step.timeout),
        on_timeout=step.on_timeout,
        on_error=step.on_error,
        compensable=step.compensate is not None,
        expected_duration=_seconds(step.expected_duration),
        **block.step_def(getattr(step, block.field)),
    )


def pinned_steps(pinned: Mapping[str, Any]) -> list[Step]:
    steps = [Step.model_validate(raw) for raw in pinned.get("steps") or []]
    check_step_graph(steps)
    return steps


def definition_of(pinned: Mapping[str, Any], *, uid: str) -> Definition:
    """The orchestrator's view of a pinned definition."""
    return Definition(
        uid=uid,
        steps=tuple(_step_def(step) for step in pinned_steps(pinned)),
        on_failure=FailureAction(str(pinned.get("onFailure", "fail"))),
    )


def step_tasks(pinned: Mapping[str, Any]) -> dict[str, TaskCall]:
    """Each task step's block (queue, task, priority, payload), by step id."""
    return {raw["id"]: TaskCall.model_validate(raw["task"]) for raw in pinned.get("steps") or [] if raw.get("task")}


def step_templates(pinned: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Each pod step's (template, compensate template) as plain data, by step id."""
    found: dict[str, tuple[Any, Any]] = {}
    for raw in pinned.get("steps") or []:
        found[raw["id"]] = (raw.get("template"), raw.get("compensate"))
    return found
