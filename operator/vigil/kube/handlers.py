"""kopf's part: its settings, and the collaborators its handlers (`kube/workflowhandlers.py`) get.

kopf follows WorkflowDefinitions only. ScheduledJobs, Executions, Workflows and pods are not
kopf's: the job controller (`kube/jobcontroller.py`), the execution controller
(`kube/executioncontroller.py`) and the workflow engine (`kube/workflows.py`) follow them through
the leader's own caches. kopf's own
bookkeeping lives in annotations (see `configure`), apart from the user-facing conditions.
"""

from __future__ import annotations

import dataclasses
import logging

import kopf

from vigil.core.ports import Clock
from vigil.kube.buckets import KubeBucketStore
from vigil.kube.events import EventRecorder


@dataclasses.dataclass
class Wiring:
    """The collaborators handlers need, passed in through kopf's memo."""

    store: KubeBucketStore
    events: EventRecorder
    clock: Clock


WATCH_SERVER_SECONDS = 300  # a watch request's lifetime, asked of the API server
LIST_PAGE = 500  # objects per page of kopf's initial listing: each page fits the request timeout


def configure(settings: kopf.OperatorSettings, *, request_timeout: float) -> None:
    """kopf's settings. Its requests share the operator's time bound (`request_timeout`, from the
    leader-election settings): every short request, every connect, and a watch its own lifetime
    plus that bound, so no half-open connection holds a kopf task forever. kopf already waits out
    a 429's Retry-After (as the least backoff) and retries it."""
    settings.networking.request_timeout = request_timeout
    settings.networking.connect_timeout = request_timeout
    settings.watching.connect_timeout = request_timeout
    settings.watching.server_timeout = WATCH_SERVER_SECONDS
    settings.watching.client_timeout = WATCH_SERVER_SECONDS + request_timeout
    settings.watching.chunk_size = LIST_PAGE
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.vigil.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kopf.vigil.dev", key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # our own Events carry the story; kopf's would repeat it
    settings.execution.max_workers = 8
