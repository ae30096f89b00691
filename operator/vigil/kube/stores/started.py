"""Pods this process created whose Execution has not recorded them yet, and an execution as started.

The dispatcher creates an attempt's pod and records no status for it: creating the pod is the
start. Until the pod cache delivers the pod, or the Execution records it, the dispatcher's
marks here say it exists, so the slot stays held and a cancel or a replace knows the attempt
ran. The dispatcher writes the marks and the execution controller drops them; both read an
execution as started from here (`as_started`), so neither controller imports the other.
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime
from typing import Any

from vigil.core.executions import Execution, Phase, start
from vigil.core.ids import ExecutionId, pod_name
from vigil.kube.kits.informer import Informer
from vigil.kube.stores.pods import pod_started_at

Key = tuple[str, str]


@dataclasses.dataclass(frozen=True)
class Mark:
    attempt: int
    pod: str
    at: datetime


class Started:
    """Pods this process created whose execution has not recorded them yet (the pod cache may
    not have seen them either). Shared by the dispatcher and the execution controller."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: dict[Key, Mark] = {}

    def mark(self, key: Key, mark: Mark) -> None:
        with self._lock:
            self._marks[key] = mark

    def get(self, key: Key) -> Mark | None:
        with self._lock:
            return self._marks.get(key)

    def drop(self, key: Key) -> None:
        with self._lock:
            self._marks.pop(key, None)


def attempt_pod(pods: Informer, ex: Execution) -> dict[str, Any] | None:
    """The pod of the execution's current attempt, if the cache has it."""
    return pods.get(ex.namespace, ex.pod or pod_name(ExecutionId(ex.execution_id), ex.attempt))


def as_started(ex: Execution, *, pods: Informer, started: Started) -> Execution:
    """A Ready execution whose attempt's pod exists, with its start recorded as it happened (a
    cancel or a replace then says the attempt ran, and stops its pod); any other as it is."""
    if ex.phase is not Phase.READY:
        return ex
    pod = attempt_pod(pods, ex)
    if pod is not None:
        return start(ex, pod=pod["metadata"]["name"], now=pod_started_at(pod))
    mark = started.get((ex.namespace, ex.execution_id))
    if mark is not None and mark.attempt == ex.attempt:
        return start(ex, pod=mark.pod, now=mark.at)
    return ex
