"""Kubernetes Events about Vigil's objects, with CamelCase reasons from one place.

The leader's recorder posts from a background thread (a `vigil.kube.kits.loops.Drain`): an Event
is best effort and never holds up firing or dispatching. When its queue is full (the API server
slow for long), the newest Events are dropped and counted in the log. Events are
stamped by the injected clock (the composition root's), not by reading the time.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from kubernetes import client

from vigil.core.ports import Clock
from vigil.core.timeparse import format_rfc3339
from vigil.kube.kits.clocks import SYSTEM_CLOCK
from vigil.kube.kits.coreapi import CoreApi
from vigil.kube.kits.loops import Drain

log = logging.getLogger(__name__)

COMPONENT = "vigil-operator"
NORMAL = "Normal"
WARNING = "Warning"
MAX_MESSAGE = 1024
QUEUED_EVENTS = 10_000  # waiting to be posted, when posted in the background


class EventRecorder:
    def __init__(
        self, api: client.ApiClient, *, instance: str, clock: Clock = SYSTEM_CLOCK, background: bool = False
    ) -> None:
        self._core = CoreApi(api)
        self._instance = instance
        self._clock = clock  # stamps each Event (firstTimestamp, lastTimestamp, eventTime)
        self._posts: Drain[tuple[str, dict[str, Any]]] | None = None
        self._dropped = 0
        if background:  # posted one at a time, by the drain's own thread, for the process's life
            self._posts = Drain("event post", self._post_one, most=1, capacity=QUEUED_EVENTS)
            self._posts.start("events")

    def emit(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str) -> None:
        """Post an Event about `obj` (best effort: a failed Event is logged, never raised)."""
        namespace, body = self._event(obj, type_=type_, reason=reason, message=message)
        if self._posts is None:
            self._post(namespace, body)
            return
        if not self._posts.put((namespace, body)):
            self._dropped += 1
            if self._dropped in (1, 10, 100) or self._dropped % 1000 == 0:
                log.warning("event queue full: %d events dropped so far", self._dropped)

    def _post_one(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        for namespace, body in batch:  # one: the drain's batches are of one Event
            self._post(namespace, body)

    def _event(
        self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str
    ) -> tuple[str, dict[str, Any]]:
        meta = obj["metadata"]
        now = self._clock.now()
        stamp = format_rfc3339(now)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name'][:200]}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion"),
                "kind": obj.get("kind"),
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "type": type_,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),  # a MicroTime
            "action": reason,
            "count": 1,
        }
        return meta["namespace"], body

    def _post(self, namespace: str, body: dict[str, Any]) -> None:
        try:
            self._core.create_namespaced_event(namespace, body)
        except Exception as err:  # best effort: a lost Event is logged, never raised
            log.warning("event %s on %s/%s not posted: %s", body["reason"], namespace, body["involvedObject"]["name"],
                        getattr(err, "reason", None) or err)  # fmt: skip
