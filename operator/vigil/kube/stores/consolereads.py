"""What the console reads from the API server, in the operator's name, for viewers it authorised.

The console (vigil.api.console) asks its SubjectAccessReviews first and reads through this
adapter after. Every replica serves the console, standbys too, and only the leader holds the
watch-fed caches; so the reads here are the API server's (a namespaced list or a get, each
bounded by the operator's client timeout), with the Execution store's own reads for a job's
executions (its cache when this replica has one). The namespaces holding Vigil objects come
from a cluster-wide list of each kind, paged (`LIST_PAGE` objects held at once) and kept
`NAMESPACES_TTL_SECONDS`, so a burst of page loads costs one list.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes import client

from vigil.kube.kits.apiclient import custom_object_or_none
from vigil.kube.stores.executions import ExecutionStore
from vigil.model import GROUP, VERSION
from vigil.model.names import SCHEDULED_JOBS, TASK_QUEUES, WORKFLOWS

#: How long the set of namespaces holding jobs or workflows is reused, in seconds: a new
#: namespace shows up within this; a page load within it costs no list.
NAMESPACES_TTL_SECONDS = 10.0
#: Objects per page of the namespaces' lists: one page is what that list holds in memory at once.
LIST_PAGE = 500


class KubeConsoleReads:
    """vigil.api.console.ConsoleReads through the operator's client."""

    def __init__(
        self,
        api: client.ApiClient,
        executions: ExecutionStore,
        *,
        ticks: Callable[[], float] = time.monotonic,
    ) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._executions = executions
        self._ticks = ticks
        self._lock = threading.Lock()
        self._namespaces: tuple[float, list[str]] | None = None

    def namespaces(self) -> Sequence[str]:
        with self._lock:
            if self._namespaces is not None and self._ticks() < self._namespaces[0]:
                return self._namespaces[1]
        found: set[str] = set()
        for plural in (SCHEDULED_JOBS, WORKFLOWS, TASK_QUEUES):
            found.update(self._namespaces_of(plural))
        names = sorted(found)
        with self._lock:
            self._namespaces = (self._ticks() + NAMESPACES_TTL_SECONDS, names)
        return names

    def _namespaces_of(self, plural: str) -> set[str]:
        """The namespaces holding a `plural`, a page of `LIST_PAGE` objects at a time: only the
        names are kept, so what is held at once is one page, however many objects there are."""
        found: set[str] = set()
        token: str | None = None
        while True:
            page = self._custom.list_cluster_custom_object(
                GROUP, VERSION, plural, limit=LIST_PAGE, **({"_continue": token} if token else {})
            )
            found.update(str(item["metadata"]["namespace"]) for item in page["items"])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return found

    def jobs(self, namespace: str) -> Sequence[dict[str, Any]]:
        return list(
            self._custom.list_namespaced_custom_object(GROUP, VERSION, namespace, SCHEDULED_JOBS)[
                "items"
            ]
        )

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(namespace, SCHEDULED_JOBS, name)

    def executions(self, namespace: str, job_uid: str) -> Sequence[dict[str, Any]]:
        return self._executions.of_job(namespace, job_uid)

    def workflows(self, namespace: str) -> Sequence[dict[str, Any]]:
        return list(
            self._custom.list_namespaced_custom_object(GROUP, VERSION, namespace, WORKFLOWS)[
                "items"
            ]
        )

    def workflow(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get(namespace, WORKFLOWS, name)

    def taskqueues(self, namespace: str) -> Sequence[dict[str, Any]]:
        return list(
            self._custom.list_namespaced_custom_object(GROUP, VERSION, namespace, TASK_QUEUES)[
                "items"
            ]
        )

    def _get(self, namespace: str, plural: str, name: str) -> dict[str, Any] | None:
        return custom_object_or_none(self._custom, GROUP, VERSION, namespace, plural, name)
