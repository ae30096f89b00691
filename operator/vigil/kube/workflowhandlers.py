"""The kopf handler for WorkflowDefinitions: it reports bad input.

Workflows themselves are not kopf's: the leader's own watch (:func:`vigil.kube.workflows.workflow_cache`)
queues them for the engine. An event handler, not a change handler: kopf then keeps no annotation
of its own on the objects.

A WorkflowDefinition is checked when it changes for what its schema cannot say
(unknown dependencies, cycles): an ``Invalid`` condition and a Warning Event
name the problem, and workflows that reference the broken version are refused
when they start.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from vigil.core.conditions import ConditionReason, ConditionType, set_condition
from vigil.kube.events import WARNING
from vigil.model import GROUP, VERSION
from vigil.model.common import describe_validation_error
from vigil.model.names import WORKFLOW_DEFINITIONS
from vigil.model.workflow import WorkflowDefinitionSpec


def definition_problem(spec: Mapping[str, Any]) -> str | None:
    """What is wrong with a WorkflowDefinition's spec, naming the field; None when valid."""
    try:
        WorkflowDefinitionSpec.model_validate(spec)
    except ValidationError as error:
        return "; ".join(describe_validation_error(error))
    return None


@kopf.on.event(GROUP, VERSION, WORKFLOW_DEFINITIONS)
def definition_changed(body: kopf.Body, type: str | None, memo: Any, **_: Any) -> None:
    if type == "DELETED":
        return
    meta, status = body["metadata"], body.get("status") or {}
    generation = int(meta.get("generation") or 0)
    if status.get("observedGeneration") == generation:
        return
    problem = definition_problem(body.get("spec") or {})
    now: datetime = memo.wiring.clock.now()
    conditions = set_condition(
        status.get("conditions") or [],
        type_=ConditionType.INVALID,
        status=problem is not None,
        reason=ConditionReason.INVALID_SPEC if problem else ConditionReason.VALID,
        message=problem or "",
        generation=generation,
        now=now,
    )
    patch = {
        "metadata": {"resourceVersion": meta["resourceVersion"]},
        "status": {"conditions": conditions, "observedGeneration": generation},
    }
    try:
        memo.workflows.api.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, meta["namespace"], WORKFLOW_DEFINITIONS, meta["name"], patch
        )
    except ApiException as err:
        if err.status in (404, 409):
            return  # gone, or changed: the next event checks again
        raise
    if problem:
        memo.wiring.events.emit(dict(body), type_=WARNING, reason=ConditionReason.INVALID_SPEC, message=problem)
