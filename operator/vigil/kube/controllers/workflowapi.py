"""The workflow engine's API access: the Workflow informer, and the calls a pass makes.

The informer (:func:`workflow_cache`) is the engine's cache: a pass reads a Workflow from it
when it holds it whole, and makes a GET only for one it holds as a summary (finished, all
mirrored: a pass seldom needs it) or when the body proved stale (its conditional write met 409).
What it keeps of each Workflow (:func:`held`, :func:`kept_whole`):

* a workflow that may need a pass (unfinished, its spec changed since a pass saw it, or its
  history not all in the database) whole, as compact JSON (a quarter of a dict's size: a
  thousand waiting workflows with their histories were 15 MiB as dicts);
* a finished one whose history is all in the database only as what its time to live reads
  (identity, ``spec.ttlAfterFinished``, phase, finishedAt, observedGeneration, historyMirrored):
  its history can be a quarter of a megabyte, and nothing reads it until its spec changes.

Its handlers are told the whole object, without its managedFields, as the watch brings it.

:class:`WorkflowApi` holds the other calls: one Workflow or WorkflowDefinition, the status
write (whole and conditional: the engine's :class:`vigil.kube.controllers.workflowstatus.WorkflowStatusWriter`
is its one caller), a workflow's step pods (from the leader's step pod cache), and creating and
deleting step pods. Tests subclass it to count or fake those calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.ports import Conflict
from vigil.core.workflowpass import needs_pass
from vigil.kube.controllers.workflowpods import BY_WORKFLOW
from vigil.kube.kits.apiclient import custom_object_or_none
from vigil.kube.kits.coreapi import CoreApi
from vigil.kube.kits.informer import COPY_ANNOTATIONS, Informer, always, unmanaged
from vigil.kube.stores.pods import delete_pod
from vigil.model import GROUP, VERSION
from vigil.model.names import LABEL_WORKFLOW_UID, WORKFLOW_DEFINITIONS, WORKFLOWS

#: What the cache keeps of a Workflow it holds as its time to live only.
_SUMMARY_STATUS = ("phase", "finishedAt", "observedGeneration", "historyMirrored")
_SUMMARY_META = ("namespace", "name", "uid", "resourceVersion", "generation")


def kept_whole(obj: Mapping[str, Any]) -> bool:
    """Whether the Workflow cache keeps ``obj`` whole (see the module docstring), rather than as
    what its time to live reads. A summary never reads as whole: it has no history, and its spec
    was seen, so a pass never takes one for the workflow."""
    status = obj.get("status") or {}
    spec_seen = (obj.get("metadata") or {}).get("generation") == status.get("observedGeneration")
    return not spec_seen or needs_pass(status, mirroring=True, expired=False)


def held(obj: dict[str, Any]) -> dict[str, Any]:
    """What the Workflow cache keeps of ``obj`` (see the module docstring), without its
    managedFields and the annotations that copy the whole object."""
    status = obj.get("status") or {}
    meta = obj.get("metadata") or {}
    if kept_whole(obj):
        # A shallow copy: the cache packs it (``packed=always``), so nothing is shared once held.
        kept = {k: v for k, v in meta.items() if k != "managedFields"}
        if kept.get("annotations"):
            kept["annotations"] = {k: v for k, v in kept["annotations"].items() if k not in COPY_ANNOTATIONS}
        return {**obj, "metadata": kept}
    summary: dict[str, Any] = {
        "metadata": {k: meta[k] for k in _SUMMARY_META if k in meta},
        "status": {k: status[k] for k in _SUMMARY_STATUS if k in status},
    }
    ttl = (obj.get("spec") or {}).get("ttlAfterFinished")
    if ttl is not None:
        summary["spec"] = {"ttlAfterFinished": ttl}
    return summary


def workflow_cache(api: client.ApiClient | None, *, namespace: str | None = None) -> Informer:
    """The leader's Workflow informer (every namespace; a tool or a test may follow one). Without
    ``api``: a cache nothing lists, which only the engine's own reads and writes fill (a pass run
    by a tool or a test)."""
    if api is None:
        return Informer(_unlisted, what=WORKFLOWS, label_selector="", transform=held, packed=always)
    custom = client.CustomObjectsApi(api)

    def list_fn(**kwargs: Any) -> Any:
        if namespace is None:
            return custom.list_cluster_custom_object(GROUP, VERSION, WORKFLOWS, **kwargs)
        return custom.list_namespaced_custom_object(GROUP, VERSION, namespace, WORKFLOWS, **kwargs)

    return Informer(
        list_fn, what=WORKFLOWS, label_selector="", transform=held, packed=always, announce=unmanaged
    )


def _unlisted(**kwargs: Any) -> Any:
    raise RuntimeError("this Workflow cache is filled by its engine alone; it lists nothing")


class WorkflowApi:
    """The Kubernetes calls the engine makes, apart from reading its cache."""

    def __init__(self, api: client.ApiClient, *, pod_cache: Informer | None = None) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = CoreApi(api)
        self.pod_cache = pod_cache  # the leader's: step pods read from it, never listed per pass

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Workflow, or None when there is none of that name."""
        return self._get(WORKFLOWS, namespace, name)

    def definition(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The WorkflowDefinition, or None when there is none of that name."""
        return self._get(WORKFLOW_DEFINITIONS, namespace, name)

    def write_status(self, obj: Mapping[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Replace the whole status (a PUT: keys left out are removed), conditional on the
        resourceVersion ``obj`` was read at; the workflow as written. Conflict when it changed or
        went since: the pass starts again from a fresh read."""
        meta = obj["metadata"]
        try:
            written: dict[str, Any] = self.custom.replace_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], WORKFLOWS, meta["name"], {**obj, "status": status}
            )
        except ApiException as err:
            if err.status in (404, 409):
                raise Conflict(meta["name"]) from err
            raise
        return written

    def pods(self, namespace: str, uid: str) -> dict[str, dict[str, Any]]:
        if self.pod_cache is not None:
            return {p["metadata"]["name"]: p for p in self.pod_cache.by_index(BY_WORKFLOW, uid)}
        listed = self.core.list_namespaced_pod(namespace, label_selector=f"{LABEL_WORKFLOW_UID}={uid}")
        return {pod["metadata"]["name"]: pod for pod in listed.get("items") or []}

    def create_pod(self, namespace: str, body: dict[str, Any]) -> None:
        try:
            self.core.create_namespaced_pod(namespace, body)
        except ApiException as err:
            if err.status != 409:  # AlreadyExists: adopted
                raise

    def delete_pod(self, namespace: str, name: str) -> None:
        delete_pod(self.core, namespace, name)

    def _get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return custom_object_or_none(self.custom, GROUP, VERSION, namespace, plural, name)
