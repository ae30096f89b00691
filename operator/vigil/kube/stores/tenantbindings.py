"""The tenants a TaskQueue binds to callers, read from the API server for the HTTP API.

The queue API derives a submission's tenant from the caller (vigil.core.tenancy), and needs the
TaskQueue's `spec.tenants.bindings` to do so. It reads the TaskQueue with the operator's own
credentials (it watches TaskQueues already) and keeps each answer for the same few seconds the
access reviews are kept, so a burst of submissions costs one read, and a changed binding counts
within that time. A TaskQueue that does not exist binds no one (the caller has its own tenant);
one whose bindings do not parse binds no one either, and is logged (the TaskQueue controller
reports it Invalid). An API server that cannot answer raises ReviewUnavailable: the HTTP API
answers 503, never a guessed tenant.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import TypeAdapter, ValidationError
from urllib3.exceptions import HTTPError

from vigil.core.access import ReviewUnavailable, TtlCache
from vigil.core.tenancy import TenantBinding
from vigil.model.names import GROUP, TASK_QUEUES, VERSION
from vigil.model.taskqueue import TenantBinding as TenantBindingModel

log = logging.getLogger(__name__)

_BINDINGS = TypeAdapter(list[TenantBindingModel])


class TaskQueueTenants:
    """The TenantDirectory port through GETs of TaskQueues, each answer cached for the TTL."""

    def __init__(
        self, api: client.ApiClient, *, timeout_seconds: float, cache: TtlCache[tuple[str, str], tuple[TenantBinding, ...]]
    ) -> None:
        self._api = client.CustomObjectsApi(api)
        self._timeout = timeout_seconds
        self._cache = cache

    def bindings(self, namespace: str, name: str) -> Sequence[TenantBinding]:
        hit, found = self._cache.get((namespace, name))
        if hit and found is not None:
            return found
        found = self._read(namespace, name)
        self._cache.put((namespace, name), found)
        return found

    def _read(self, namespace: str, name: str) -> tuple[TenantBinding, ...]:
        try:
            queue = self._api.get_namespaced_custom_object(
                GROUP, VERSION, namespace, TASK_QUEUES, name, _request_timeout=self._timeout
            )
        except ApiException as error:
            if error.status == 404:
                return ()
            raise ReviewUnavailable(f"reading TaskQueue {namespace}/{name} failed: {error.status} {error.reason}") from None
        except (HTTPError, OSError) as error:
            raise ReviewUnavailable(f"reading TaskQueue {namespace}/{name} failed: {type(error).__name__}") from None
        raw = ((queue.get("spec") or {}).get("tenants") or {}).get("bindings") or []
        try:
            return tuple(binding.core() for binding in _BINDINGS.validate_python(raw))
        except ValidationError as error:
            log.warning("TaskQueue %s/%s: spec.tenants.bindings ignored: %s", namespace, name, error)
            return ()
