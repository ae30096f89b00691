"""The trigger's progress on the API server: a heartbeat Lease the watchdog reads.

The watchdog may run in another process (`vigil watchdog`, its own Deployment), so what the
trigger reports about itself (`vigil.core.progress.TriggerProgress`) has to live in the API
server. It is written the way kubelets report that they are alive: a Lease
(`<leader lease>-progress`, in the operator's namespace) whose `renewTime` is the last report,
with the progress itself in annotations. No new RBAC: the operator already manages Leases there.

The trigger reports after every job it handles; this adapter writes at most once per
`every_seconds` (one small write every 10 s while the trigger runs, nothing more in a burst),
never blocks the trigger's threads on each other (a report arriving while another is being
written is dropped: the next one carries newer news), and never lets a failed write reach the
trigger.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from vigil.core.progress import TriggerProgress
from vigil.core.timeparse import parse_rfc3339
from vigil.kube.stores.buckets import format_millis

log = logging.getLogger(__name__)

PUBLISH_EVERY = timedelta(seconds=10)  # well inside the watchdog's grace (2 min), a write per 10 s
REQUEST_TIMEOUT_SECONDS = 5.0  # a slow API server must not hold the trigger thread that reports
ANNOTATION_AT = "vigil.dev/published-at"
ANNOTATION_HANDLED_BEFORE = "vigil.dev/handled-before"
ANNOTATION_BACKLOG = "vigil.dev/backlog"
ANNOTATION_RETRYING = "vigil.dev/retrying"  # a JSON list of namespace/name
ANNOTATION_RETRYING_COUNT = "vigil.dev/retrying-count"


def progress_lease_name(leader_lease: str) -> str:
    """The progress Lease of the trigger that elects on `leader_lease`."""
    return f"{leader_lease}-progress"


def progress_to_annotations(progress: TriggerProgress) -> dict[str, str]:
    return {
        ANNOTATION_AT: format_millis(progress.at),
        ANNOTATION_HANDLED_BEFORE: format_millis(progress.handled_before) if progress.handled_before else "",
        ANNOTATION_BACKLOG: str(progress.backlog),
        ANNOTATION_RETRYING: json.dumps(sorted(progress.retrying)),
        ANNOTATION_RETRYING_COUNT: str(progress.retrying_count),
    }


def progress_from_annotations(annotations: dict[str, str]) -> TriggerProgress | None:
    """The progress recorded in a Lease's annotations; None when absent or unreadable."""
    try:
        handled = annotations.get(ANNOTATION_HANDLED_BEFORE) or ""
        retrying = frozenset(str(job) for job in json.loads(annotations.get(ANNOTATION_RETRYING) or "[]"))
        return TriggerProgress(
            at=parse_rfc3339(annotations[ANNOTATION_AT]),
            handled_before=parse_rfc3339(handled) if handled else None,
            backlog=int(annotations.get(ANNOTATION_BACKLOG) or 0),
            retrying=retrying,
            retrying_count=max(len(retrying), int(annotations.get(ANNOTATION_RETRYING_COUNT) or 0)),
        )
    except (KeyError, ValueError, TypeError):
        return None


class LeaseProgress:
    """Writes the trigger's progress to its Lease (`publish`) and reads it back (`read`)."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        namespace: str,
        name: str,
        identity: str = "",
        every: timedelta = PUBLISH_EVERY,
    ) -> None:
        self._leases = client.CoordinationV1Api(api)
        self._namespace = namespace
        self._name = name
        self._identity = identity
        self._every = every
        self._writing = threading.Lock()
        self._last: datetime | None = None

    def publish(self, progress: TriggerProgress) -> None:
        """Write `progress` unless a write is under way or the last one is under `every` old."""
        if not self._writing.acquire(blocking=False):
            return
        try:
            if self._last is not None and progress.at - self._last < self._every:
                return
            self._write(progress)
            self._last = progress.at
        except ApiException as err:
            log.warning("trigger progress not published: %s %s", err.status, err.reason)
        except Exception as err:  # a timeout, a refused connection: the next report tries again
            log.warning("trigger progress not published: %s", err)
        finally:
            self._writing.release()

    def _write(self, progress: TriggerProgress) -> None:
        body: dict[str, Any] = {
            "metadata": {"name": self._name, "annotations": progress_to_annotations(progress)},
            "spec": {"holderIdentity": self._identity or None, "renewTime": _micro_time(progress.at)},
        }
        try:
            self._leases.patch_namespaced_lease(
                self._name, self._namespace, body, _request_timeout=REQUEST_TIMEOUT_SECONDS
            )
        except ApiException as err:
            if err.status != 404:
                raise
            self._leases.create_namespaced_lease(self._namespace, body, _request_timeout=REQUEST_TIMEOUT_SECONDS)

    def read(self) -> TriggerProgress | None:
        """The last progress published; None when none was (or it cannot be read: the audit then
        judges late heads as it did before there was progress to read)."""
        try:
            lease = self._leases.read_namespaced_lease(
                self._name, self._namespace, _request_timeout=REQUEST_TIMEOUT_SECONDS
            )
        except ApiException as err:
            if err.status != 404:
                log.warning("trigger progress unreadable: %s %s", err.status, err.reason)
            return None
        return progress_from_annotations(dict(lease.metadata.annotations or {}))


def _micro_time(at: datetime) -> datetime:
    """A Lease's MicroTime. The client serialises with isoformat(), which drops a zero fraction
    (and turns a string that looks like a time into one first); MicroTime wants the fraction."""
    return at.replace(microsecond=at.microsecond or 1)
