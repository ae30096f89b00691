"""Reading ScheduledJobs from the API server for the trigger.

The catalogue fetches a job when one of its occurrences is due (so a pass costs
what is due, not what exists) and converts it with `vigil.model.jobspec`. A job that
fails validation is reported as invalid rather than raising: one bad object
must never stop the trigger. The last fetched object is kept briefly so the launcher and the ledger
do not fetch it again within the same pass.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.chain import JobLookup
from vigil.model import GROUP, VERSION
from vigil.model.jobspec import InvalidJob, job_view, parse_spec
from vigil.model.names import SCHEDULED_JOBS
from vigil.model.scheduledjob import ScheduledJobSpec

PLURAL = SCHEDULED_JOBS  # what the ledger, results and watchdog import from here
CACHE_SIZE = 4096  # jobs kept between a pass's lookup and its launch/ledger writes


class KubeCatalogue:
    def __init__(self, api: client.ApiClient) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._cache: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        self._specs: dict[tuple[str, str], ScheduledJobSpec] = {}
        self._lock = threading.Lock()

    def fetch(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self._custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            )
        except ApiException as err:
            if err.status == 404:
                with self._lock:
                    self._cache.pop((namespace, name), None)
                return None
            raise
        with self._lock:
            self._cache[(namespace, name)] = obj
            self._cache.move_to_end((namespace, name))
            while len(self._cache) > CACHE_SIZE:
                evicted, _ = self._cache.popitem(last=False)
                self._specs.pop(evicted, None)
        return obj

    def lookup(self, namespace: str, name: str) -> JobLookup:
        obj = self.fetch(namespace, name)
        if obj is None:
            return JobLookup(job=None)
        try:
            view, spec = job_view(obj)
        except InvalidJob:
            return JobLookup(job=None, invalid=True)
        with self._lock:
            self._specs[(namespace, name)] = spec
        return JobLookup(job=view)

    def cached(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._cache.get((namespace, name))

    def current_spec(self, namespace: str, name: str) -> ScheduledJobSpec | None:
        """The job's spec as the trigger last read it, else read now; None if gone or invalid."""
        spec = self.cached_spec(namespace, name)
        if spec is not None:
            return spec
        obj = self.fetch(namespace, name)
        if obj is None:
            return None
        try:
            return parse_spec(obj)
        except InvalidJob:
            return None

    def cached_spec(self, namespace: str, name: str) -> ScheduledJobSpec | None:
        with self._lock:
            return self._specs.get((namespace, name))
