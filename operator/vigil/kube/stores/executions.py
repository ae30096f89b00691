"""Execution objects on the API server: create once, read by phase, write transitions.

An Execution is named from its execution id, so the trigger (or a backfill)
creating it twice gets 409 and there is still one. The operator reads them from a
watch-fed cache (retention bounds how many exist), never by listing per pass.
A transition is one status write carrying the resourceVersion read, so two
writers cannot both move the same execution; it is built from `ExecutionStatus`
and writes only what changes (`ExecutionStore.write`, the kind's one status writer).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.dispatch import Priority
from vigil.core.executions import (
    TERMINAL_PHASES,
    Execution,
    Phase,
    execution_from_dict,
    execution_to_dict,
    new_execution,
)
from vigil.core.ids import ExecutionId
from vigil.core.timeparse import format_rfc3339, parse_rfc3339
from vigil.kube.kits.conflicts import conflict_from
from vigil.kube.kits.informer import Informer
from vigil.kube.stores.pods import label_value, owner_reference
from vigil.model.execution import ExecutionStatus
from vigil.model.names import (
    EXECUTIONS,
    GROUP,
    LABEL_EXECUTION,
    LABEL_JOB,
    LABEL_JOB_UID,
    LABEL_MANAGED,
    LABEL_PRIORITY,
    MANAGED_BY,
    VERSION,
)
from vigil.model.statuspatch import changed_fields

log = logging.getLogger(__name__)

ACTIVE_PHASES = (Phase.READY, Phase.RUNNING, Phase.BACKOFF)
#: Status keys `execution_to_dict` leaves out when unset. The status is written as a merge patch,
#: where an absent key keeps its old value: each must be sent as null to be removed (a retryAt
#: left over from Backoff would make the stored execution unreadable).
OPTIONAL_STATUS_KEYS = ("retryAt", "startedAt", "finishedAt", "pod")


def execution_from_object(obj: Mapping[str, Any]) -> Execution:
    """The core's execution record of an object; a fresh one (no status yet) is Ready since creation."""
    status = obj.get("status") or {}
    if status.get("phase"):
        return execution_from_dict(status)
    spec = obj["spec"]
    return new_execution(
        ExecutionId(spec["executionId"]),
        namespace=obj["metadata"]["namespace"],
        job=spec["job"]["name"],
        scheduled_for=parse_rfc3339(spec["scheduledFor"]),
        now=parse_rfc3339(obj["metadata"]["creationTimestamp"]),
        priority=Priority(spec.get("priority", "normal")),
    )


def readable(objs: Iterable[dict[str, Any]]) -> list[tuple[dict[str, Any], Execution]]:
    """Each object with its execution record; one that cannot be read is logged and left out.

    A single malformed Execution must not stall dispatching or history writing for all the others.
    """
    return [(obj, ex) for obj in objs if (ex := _read(obj)) is not None]


def _read(obj: Mapping[str, Any]) -> Execution | None:
    try:
        return execution_from_object(obj)
    except (KeyError, ValueError) as err:
        meta = obj.get("metadata") or {}
        log.error("execution %s/%s is unreadable, skipped: %s", meta.get("namespace"), meta.get("name"), err)
        return None


class Readings:
    """`readable` for a reader that reads the same objects again and again (the dispatcher's
    passes read every execution in flight): each object is read once per resourceVersion, and only
    what the last call saw is remembered.

    In a 1,000-execution burst, reading them all on every pass was 13 % of the operator's CPU.
    Not thread-safe: one reader owns it.
    """

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[str, Execution]] = {}

    def read(self, objs: Iterable[dict[str, Any]]) -> list[tuple[dict[str, Any], Execution]]:
        seen: dict[tuple[str, str], tuple[str, Execution]] = {}
        out: list[tuple[dict[str, Any], Execution]] = []
        for obj in objs:
            meta = obj["metadata"]
            key, version = (meta["namespace"], meta["name"]), meta.get("resourceVersion")
            hit = self._last.get(key)
            ex = hit[1] if hit is not None and version is not None and hit[0] == version else _read(obj)
            if ex is None:
                continue
            if version is not None:
                seen[key] = (version, ex)
            out.append((obj, ex))
        self._last = seen
        return out


class ExecutionStore:
    """Executions on the API server, read from the watch-fed cache when the operator has one.

    The CLI and a standalone watchdog have no cache: they list (by label, paged by the server).
    """

    def __init__(self, api: client.ApiClient, *, cache: Informer | None = None) -> None:
        self._custom = client.CustomObjectsApi(api)
        self.api_client = api
        self.cache = cache

    def create(self, body: dict[str, Any]) -> bool:
        """Create an Execution; False if it already exists (a repeat of the same occurrence)."""
        namespace = body["metadata"]["namespace"]
        try:
            created = self._custom.create_namespaced_custom_object(GROUP, VERSION, namespace, EXECUTIONS, body)
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        if self.cache is not None:
            self.cache.observe(created)
        return True

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as the API server has it now (a conflict's fresh read)."""
        try:
            obj: dict[str, Any] = self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, EXECUTIONS, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        if self.cache is not None:
            self.cache.observe(obj)
        return obj

    def cached(self, namespace: str, name: str) -> dict[str, Any] | None:
        """From the cache when there is one, else from the API server."""
        if self.cache is not None:
            return self.cache.get(namespace, name)
        return self.get(namespace, name)

    def find(self, execution_id: str) -> dict[str, Any] | None:
        """The Execution with this id, in whichever namespace (ids are unique by construction)."""
        found = self.select(selector=f"{LABEL_EXECUTION}={execution_id}")
        return found[0] if found else None

    def namespaces_of(self, execution_id: str) -> list[str]:
        """The namespaces holding an Execution labelled with this id (a look-alike can be made
        in another): from the watch-fed cache once it has listed (the leader's), else from one
        label-selected list. What the HTTP API authorises a caller on by id alone, before it asks
        the history database anything."""
        if self.cache is not None and self.cache.synced.is_set():
            found = self.cache.by_index(BY_EXECUTION_ID, execution_id)
        else:
            found = self.select(selector=f"{LABEL_EXECUTION}={execution_id}")
        return sorted({str(obj["metadata"]["namespace"]) for obj in found})

    def select(self, *, selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
        if namespace:
            result = self._custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, EXECUTIONS, label_selector=selector
            )
        else:
            result = self._custom.list_cluster_custom_object(GROUP, VERSION, EXECUTIONS, label_selector=selector)
        return list(result["items"])

    def every(self) -> list[dict[str, Any]]:
        """Every Execution Vigil made: the cache's, else one list."""
        if self.cache is not None:
            return self.cache.items()
        return self.select(selector=f"{LABEL_MANAGED}={MANAGED_BY}")

    def in_phase(self, *phases: Phase) -> list[dict[str, Any]]:
        if self.cache is not None:  # only those: the finished ones retained are most of the cache
            return [o for phase in phases for o in self.cache.by_index(BY_PHASE, str(phase))]
        wanted = {str(p) for p in phases}
        return [o for o in self.every() if phase_of(o) in wanted]

    def of_job(self, namespace: str, job_uid: str) -> list[dict[str, Any]]:
        """The job's Executions: what retention kept and what is in flight. Until the cache has
        listed once they come from the API server: a new leader fires at once, and an empty cache
        would let `Forbid` start a second execution beside one still running."""
        if self.cache is not None and self.cache.synced.is_set():
            return self.cache.by_index(BY_JOB, job_uid)
        return self.select(selector=f"{LABEL_JOB_UID}={job_uid}", namespace=namespace)

    def active_for_job(self, namespace: str, job_uid: str) -> list[dict[str, Any]]:
        active = {str(p) for p in ACTIVE_PHASES}
        return [o for o in self.of_job(namespace, job_uid) if phase_of(o) in active]

    def write(
        self, obj: Mapping[str, Any], execution: Execution, *, extra: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Store a transition: one status write, conditional on the object's resourceVersion.

        The one writer of an Execution's status. The phase lives only in the status (the printer
        columns and every reader use it), so a transition is one write; the answer goes into the
        cache at once. The status is built from `ExecutionStatus` as it is and as it would be,
        and only the fields that differ are written (`model/statuspatch.py`): a transition
        already on the object (the same pod event seen twice) writes nothing, and `obj` is
        the answer.
        """
        meta = obj["metadata"]
        cleared = dict.fromkeys(OPTIONAL_STATUS_KEYS)
        status = {**cleared, **execution_to_dict(execution), **(extra or {})}
        changed = changed_fields(ExecutionStatus, obj.get("status") or {}, status)
        if not changed:
            return dict(obj)
        body = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": changed}
        try:
            updated: dict[str, Any] = self._custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, meta["namespace"], EXECUTIONS, meta["name"], body
            )
        except ApiException as err:
            conflict_from(err, f"execution {meta['namespace']}/{meta['name']} changed concurrently")
            raise
        if self.cache is not None:
            self.cache.observe(updated)
        return updated

    def delete(self, obj: Mapping[str, Any]) -> None:
        """Delete this very object (uid precondition: never a new one of the same name); its
        pods go with it (they are its dependents)."""
        meta = obj["metadata"]
        try:
            self._custom.delete_namespaced_custom_object(
                GROUP, VERSION, meta["namespace"], EXECUTIONS, meta["name"],
                body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=meta["uid"])),
            )  # fmt: skip
        except ApiException as err:
            if err.status not in (404, 409):  # gone already, or a new object of the same name
                raise
        if self.cache is not None:
            self.cache.forget(meta["namespace"], meta["name"])

    def patch_spec(self, namespace: str, name: str, spec: dict[str, Any]) -> None:
        self._custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, EXECUTIONS, name, {"spec": spec})


def phase_of(obj: Mapping[str, Any]) -> str:
    """The stored phase; an Execution with no status yet is Ready."""
    return str((obj.get("status") or {}).get("phase") or Phase.READY)


def job_uid_of(obj: Mapping[str, Any]) -> str | None:
    return ((obj.get("spec") or {}).get("job") or {}).get("uid")


def finished(obj: Mapping[str, Any]) -> bool:
    """An Execution in a terminal phase: it changes no more, and retention keeps several a job."""
    return phase_of(obj) in TERMINAL_PHASES


BY_JOB = "job-uid"
BY_PHASE = "phase"
BY_EXECUTION_ID = "execution-id"


def execution_id_of(obj: Mapping[str, Any]) -> str | None:
    """The id an Execution is labelled with (its name, unless someone made a look-alike)."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(LABEL_EXECUTION)


def execution_cache(api: client.ApiClient) -> Informer:
    """The operator's cache of every Execution Vigil made, indexed by job uid, phase and id; the
    finished ones packed (retention keeps several a job; the in-flight ones are read often)."""
    custom = client.CustomObjectsApi(api)

    def list_fn(**kwargs: Any) -> Any:
        return custom.list_cluster_custom_object(GROUP, VERSION, EXECUTIONS, **kwargs)

    return Informer(
        list_fn,
        what=EXECUTIONS,
        label_selector=f"{LABEL_MANAGED}={MANAGED_BY}",
        indexes={BY_JOB: job_uid_of, BY_PHASE: phase_of, BY_EXECUTION_ID: execution_id_of},
        packed=finished,
    )


def execution_body(
    *,
    job: Mapping[str, Any],
    execution_id: str,
    scheduled_for: datetime,
    period_start: datetime,
    period_end: datetime,
    source: str,
) -> dict[str, Any]:
    """A new Execution owned by its job: Ready (a missing status reads as Ready since creation)."""
    meta, spec = job["metadata"], job.get("spec") or {}
    priority = spec.get("priority", "normal")
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Execution",
        "metadata": {
            "name": execution_id,
            "namespace": meta["namespace"],
            "labels": {
                LABEL_JOB: label_value(meta["name"]),
                LABEL_JOB_UID: meta["uid"],
                LABEL_EXECUTION: execution_id,
                LABEL_PRIORITY: priority,
                LABEL_MANAGED: MANAGED_BY,
            },
            "ownerReferences": [owner_reference(job, "ScheduledJob")],
        },
        "spec": {
            "job": {"name": meta["name"], "uid": meta["uid"]},
            "executionId": execution_id,
            "scheduledFor": format_rfc3339(scheduled_for),
            "periodStart": format_rfc3339(period_start),
            "periodEnd": format_rfc3339(period_end),
            "priority": priority,
            "retry": spec.get("retry") or {},
            "source": source,
        },
    }
