"""The WorkflowDefinition controller: it reports bad input.

A WorkflowDefinition is checked when its spec changed since it was last checked
(`metadata.generation` ahead of `status.observedGeneration`) for what its schema
cannot say (unknown dependencies, cycles): an ``Invalid`` condition and a Warning
Event name the problem, and workflows that reference the broken version are
refused when they start. It follows the leader's cache of definitions, as the job
controller follows ScheduledJobs; the status write is conditional on the version
read, and a conflict or a deletion waits for the next event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from vigil.core.conditions import ConditionReason, ConditionType, set_condition
from vigil.core.ports import Clock
from vigil.kube.kits.events import WARNING, EventRecorder
from vigil.kube.kits.informer import Informer, Key
from vigil.kube.kits.workqueue import WorkQueue
from vigil.model import GROUP, VERSION
from vigil.model.common import describe_validation_error
from vigil.model.names import WORKFLOW_DEFINITIONS
from vigil.model.workflow import WorkflowDefinitionSpec

WORKERS = 2  # definitions change rarely; a check is a validation and one status write


def definition_problem(spec: Mapping[str, Any]) -> str | None:
    """What is wrong with a WorkflowDefinition's spec, naming the field; None when valid."""
    try:
        WorkflowDefinitionSpec.model_validate(spec)
    except ValidationError as error:
        return "; ".join(describe_validation_error(error))
    return None


def unchecked(obj: Mapping[str, Any]) -> bool:
    """Whether the definition's spec changed since it was last checked."""
    generation = int(obj["metadata"].get("generation") or 0)
    return (obj.get("status") or {}).get("observedGeneration") != generation


def definition_cache(api: client.ApiClient) -> Informer:
    """The leader's cache of every WorkflowDefinition (all are users': no selector)."""
    custom = client.CustomObjectsApi(api)

    def list_fn(**kwargs: Any) -> Any:
        return custom.list_cluster_custom_object(GROUP, VERSION, WORKFLOW_DEFINITIONS, **kwargs)

    return Informer(list_fn, what=WORKFLOW_DEFINITIONS, label_selector="")


class DefinitionController:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        definitions: Informer,
        events: EventRecorder,
        clock: Clock,
        workers: int = WORKERS,
    ) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._definitions = definitions
        self._events = events
        self._clock = clock
        self.queue: WorkQueue[Key] = WorkQueue(WORKFLOW_DEFINITIONS, self.reconcile, workers=workers)
        definitions.add_handler(self.changed)

    def changed(self, key: Key, obj: dict[str, Any], deleted: bool) -> None:
        if not deleted and unchecked(obj):
            self.queue.add(key)

    def reconcile(self, key: Key) -> float | None:
        obj = self._definitions.get(*key)
        if obj is None or not unchecked(obj):
            return None
        meta, status = obj["metadata"], obj.get("status") or {}
        generation = int(meta.get("generation") or 0)
        problem = definition_problem(obj.get("spec") or {})
        conditions = set_condition(
            status.get("conditions") or [],
            type_=ConditionType.INVALID,
            status=problem is not None,
            reason=ConditionReason.INVALID_SPEC if problem else ConditionReason.VALID,
            message=problem or "",
            generation=generation,
            now=self._clock.now(),
        )
        patch = {
            "metadata": {"resourceVersion": meta["resourceVersion"]},
            "status": {"conditions": conditions, "observedGeneration": generation},
        }
        try:
            written = self._custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], WORKFLOW_DEFINITIONS, meta["name"], patch
            )
        except ApiException as err:
            if err.status in (404, 409):
                return None  # gone, or changed: the watch's next event checks again
            raise
        self._definitions.observe(written)
        if problem:
            self._events.emit(obj, type_=WARNING, reason=ConditionReason.INVALID_SPEC, message=problem)
        return None
