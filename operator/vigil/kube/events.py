"""Kubernetes Events about Vigil's objects, with CamelCase reasons from one place."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

COMPONENT = "vigil-operator"
NORMAL = "Normal"
WARNING = "Warning"
MAX_MESSAGE = 1024


class EventRecorder:
    def __init__(self, api: client.ApiClient, *, instance: str) -> None:
        self._core = client.CoreV1Api(api)
        self._instance = instance

    def emit(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None:
        """Post an Event about `obj` (best effort: a failed Event is logged, never raised)."""
        meta = obj["metadata"]
        now = datetime.now(UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(
                name=f"{meta['name'][:200]}.{uuid.uuid4().hex[:16]}", namespace=meta["namespace"]
            ),
            involved_object=client.V1ObjectReference(
                api_version=obj.get("apiVersion"),
                kind=obj.get("kind"),
                name=meta["name"],
                namespace=meta["namespace"],
                uid=meta.get("uid"),
                resource_version=meta.get("resourceVersion"),
            ),
            reason=reason,
            message=message[:MAX_MESSAGE],
            type=type_,
            source=client.V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT,
            reporting_instance=self._instance,
            first_timestamp=now,
            last_timestamp=now,
            event_time=now.replace(microsecond=now.microsecond or 1),
            action=reason,
            count=1,
        )
        try:
            self._core.create_namespaced_event(meta["namespace"], body)
        except ApiException as err:
            log.warning("event %s on %s/%s not posted: %s", reason, meta["namespace"], meta["name"], err.reason)
