"""The Workflow's one status writer: typed, compared with the old, written once.

A pass builds the whole new status from the folded state (:mod:`vigil.core.workflowpass`) and
hands it here as the pydantic model the CRD's schema is generated from
(:class:`vigil.model.workflow.WorkflowStatus`), so what is written is what the API server will
take. The writer compares it with the status the pass read (as the same model: two statuses
that say the same are equal however their keys were written) and writes only a difference:
the whole status, conditional on the resourceVersion read (kueue's ``UpdateStatusIfChanged``).
A concurrent writer makes that a :class:`vigil.core.ports.Conflict`, and the pass starts again
from a fresh read, so two passes never both record a decision.

What it wrote goes into the Workflow cache at once (``observe``), so the next pass reads its
own write even before the watch brings it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vigil.kube.controllers.workflowapi import WorkflowApi
from vigil.kube.kits.informer import Informer
from vigil.model.workflow import WorkflowStatus


def typed(status: Mapping[str, Any]) -> WorkflowStatus:
    """A status, as built by a pass or as read, as the model."""
    return WorkflowStatus.model_validate(status)


def wire(status: WorkflowStatus) -> dict[str, Any]:
    """The model as the API server stores it: camelCase, the fields that were set."""
    return status.model_dump(mode="json", by_alias=True, exclude_unset=True)


class WorkflowStatusWriter:
    """Writes a Workflow's status when it differs from the one read; counts its writes."""

    def __init__(self, api: WorkflowApi, *, cache: Informer) -> None:
        self._api = api
        self._cache = cache
        self.writes = 0

    def write(self, obj: Mapping[str, Any], status: WorkflowStatus) -> dict[str, Any] | None:
        """Write ``status`` onto ``obj`` (as read) unless it says what ``obj``'s does; the
        workflow as written, or None when nothing was. Conflict when it changed since."""
        if status == typed(obj.get("status") or {}):
            return None
        written = self._api.write_status(obj, wire(status))
        self._cache.observe(written)
        self.writes += 1
        return written
