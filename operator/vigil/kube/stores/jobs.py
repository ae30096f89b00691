"""Reading ScheduledJobs for the trigger, the launcher, the dispatcher, the ledger and the job's status.

On the leader the catalogue reads from a watch-fed cache of every ScheduledJob (`job_cache`):
a due occurrence, its launch and its ledger cost no request. What the cache does not hold, or
holds under another uid (deleted and created again since), is read from the API server, so a
job the cache has not seen yet is never taken for deleted. Without a cache (tools, tests) every
lookup is a read, and the last objects read are kept briefly so one pass's launch and ledger do
not read again. The job is converted with `vigil.model.jobspec`; one that fails validation is
reported as invalid rather than raising: one bad object must never stop the trigger. The spec
the trigger's lookup parsed is kept with the version of the object it came from (`spec_of`):
the launch and the attempt's pod reuse it while the job is unchanged, instead of parsing again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.chain import JobLookup
from vigil.kube.kits.informer import Informer, always
from vigil.model import GROUP, VERSION
from vigil.model.jobspec import InvalidJob, check_tier, job_view, parse_spec
from vigil.model.names import SCHEDULED_JOBS
from vigil.model.scheduledjob import ScheduledJobSpec

CACHE_SIZE = 4096  # jobs kept between a pass's lookup and its launch/ledger writes


def job_cache(api: client.ApiClient) -> Informer:
    """The leader's cache of every ScheduledJob (all of them are Vigil's: no selector), packed:
    one object a job, read one at a time (the watchdog's pass reads them all)."""
    custom = client.CustomObjectsApi(api)

    def list_fn(**kwargs: Any) -> Any:
        return custom.list_cluster_custom_object(GROUP, VERSION, SCHEDULED_JOBS, **kwargs)

    return Informer(list_fn, what=SCHEDULED_JOBS, label_selector="", packed=always)


class KubeCatalogue:
    def __init__(self, api: client.ApiClient, *, cache: Informer | None = None, queue_enabled: bool = False) -> None:
        self._custom = client.CustomObjectsApi(api)
        #: Whether the volume tier is on (queue.dsn): without it a `task:` job is invalid.
        self._queue_enabled = queue_enabled
        self.cache = cache
        self._cache: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        #: The specs the trigger parsed last, for its launches, its ledger writes and the pods the
        #: dispatcher builds: the most recent CACHE_SIZE of them (every job's parsed spec would be
        #: about 5 KiB a job held for good), each with the version of the object it was parsed from.
        self._specs: OrderedDict[tuple[str, str], tuple[str, ScheduledJobSpec]] = OrderedDict()
        self._lock = threading.Lock()

    def fetch(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = self._custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, SCHEDULED_JOBS, name
            )
        except ApiException as err:
            if err.status == 404:
                with self._lock:
                    self._cache.pop((namespace, name), None)
                return None
            raise
        if self.cache is not None:
            self.cache.observe(obj)  # kept if newer than what the watch delivered
            return obj
        with self._lock:
            self._cache[(namespace, name)] = obj
            self._cache.move_to_end((namespace, name))
            while len(self._cache) > CACHE_SIZE:
                evicted, _ = self._cache.popitem(last=False)
                self._specs.pop(evicted, None)
        return obj

    def read(self, namespace: str, name: str, *, uid: str = "") -> dict[str, Any] | None:
        """The job from the watch-fed cache when it holds it (under `uid`, when given), else from
        the API server (always, without a cache: the objects kept between reads may be stale)."""
        if self.cache is not None and self.cache.synced.is_set():
            obj = self.cache.get(namespace, name)
            if obj is not None and (not uid or obj["metadata"]["uid"] == uid):
                return obj
        return self.fetch(namespace, name)

    def lookup(self, namespace: str, name: str, *, uid: str = "") -> JobLookup:
        obj = self.read(namespace, name, uid=uid)
        if obj is None:
            return JobLookup(job=None)
        try:
            view, spec = job_view(obj)
            check_tier(spec, queue_enabled=self._queue_enabled)
        except InvalidJob:
            return JobLookup(job=None, invalid=True)
        with self._lock:
            self._specs[(namespace, name)] = (_version(obj), spec)
            self._specs.move_to_end((namespace, name))
            while len(self._specs) > CACHE_SIZE:
                self._specs.popitem(last=False)
        return JobLookup(job=view)

    def cached(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.cache is not None and self.cache.synced.is_set():
            found = self.cache.get(namespace, name)
            if found is not None:
                return found
        with self._lock:
            return self._cache.get((namespace, name))

    def current_spec(self, namespace: str, name: str) -> ScheduledJobSpec | None:
        """The job's spec as the trigger last read it, else read now; None if gone or invalid."""
        spec = self.cached_spec(namespace, name)
        if spec is not None:
            return spec
        obj = self.read(namespace, name)
        if obj is None:
            return None
        try:
            return parse_spec(obj)
        except InvalidJob:
            return None

    def cached_spec(self, namespace: str, name: str) -> ScheduledJobSpec | None:
        with self._lock:
            kept = self._specs.get((namespace, name))
        return kept[1] if kept is not None else None

    def spec_of(self, obj: Mapping[str, Any]) -> ScheduledJobSpec:
        """The spec of this very object (its uid and resourceVersion) as the trigger parsed it,
        else parsed now: a launch and its pod parse the job once between them. Raises InvalidJob."""
        meta = obj["metadata"]
        with self._lock:
            kept = self._specs.get((meta["namespace"], meta["name"]))
        if kept is not None and meta.get("resourceVersion") and kept[0] == _version(obj):
            return kept[1]
        return parse_spec(obj)


def _version(obj: Mapping[str, Any]) -> str:
    """Which object, and which version of it, a spec was parsed from."""
    meta = obj["metadata"]
    return f"{meta.get('uid')}/{meta.get('resourceVersion')}"
