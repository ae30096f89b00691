"""What the volume tier's /v1/ routes share: their paths, the store's protocol, who may act.

The routes themselves are modules of their own (vigil.api.queuesubmit, .queuerecords,
.queuelistings), dispatched by vigil.api.queue; each is a function of (QueueContext, store,
user, path, body, query). Every route asks the API server whether the caller may act on the
queue's executions: a SubjectAccessReview on the subresource ``taskqueues/executions`` of the
TaskQueue, with the verbs ``create`` (submit), ``get`` (read), ``delete`` (delete jobs) and
``update`` (cancel, retry).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable
from datetime import datetime
from typing import Protocol, TypeVar

from vigil.api.problems import Answer, problem
from vigil.core import jsonvalues
from vigil.core.access import Access, Authorizer, User
from vigil.core.chain import CatchUp
from vigil.core.ports import Clock
from vigil.core.queue import (
    QUEUE_PAGE_MAX,
    Change,
    DeadLettersPage,
    ExecutionRecord,
    JobRecord,
    JobsPage,
    ListCursor,
    OneOffJob,
    QueueBreakdown,
    Submitted,
    split_queue_key,
)
from vigil.core.recurring import AddedJob, RecurringJob
from vigil.core.tenancy import TenantDirectory, service_account_of
from vigil.model.names import GROUP, TASK_QUEUE_EXECUTIONS, TASK_QUEUES

log = logging.getLogger(__name__)

ID = r"[a-z0-9][-a-z0-9]{0,62}"
JOBS_PATH = "/v1/jobs"
JOB_PATH = re.compile(rf"^/v1/jobs/({ID})/?$")
EXECUTION_PATH = re.compile(rf"^/v1/executions/({ID})/?$")
EXECUTION_ACTION_PATH = re.compile(rf"^/v1/executions/({ID})/(cancel|retry)/?$")
QUEUE_LISTING_PATH = re.compile(
    r"^/v1/namespaces/([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)/taskqueues/([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)"
    r"/(jobs|dead-letters|stats)/?$"
)
#: A queue's own path: its namespace (group 1) and TaskQueue name (group 3).
IN_QUEUE = r"^/v1/namespaces/([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)/taskqueues/([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)"
#: A job or execution by id within its queue: authorised on that queue before the store is read.
QUEUE_JOB_PATH = re.compile(rf"{IN_QUEUE}/jobs/({ID})/?$")
QUEUE_EXECUTION_PATH = re.compile(rf"{IN_QUEUE}/executions/({ID})/?$")
QUEUE_EXECUTION_ACTION_PATH = re.compile(rf"{IN_QUEUE}/executions/({ID})/(cancel|retry)/?$")
PREFIX = "/v1/"
#: The query parameters of a listing.
PAGE_PARAMETERS = frozenset({"limit", "continue"})

NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
#: A TaskQueue's name: a DNS subdomain, as every object's name.
QUEUE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
#: Largest payload, as compact JSON: executions are rows, not blobs (the request itself is
#: capped by vigil.api.transport.Limits.max_request_bytes, 64 KiB by default).
MAX_PAYLOAD_BYTES = jsonvalues.MAX_PAYLOAD_BYTES
#: Named priorities: lower runs first, and a number may be given instead.
PRIORITIES = {"high": -10, "normal": 0, "low": 10}
#: How far in the past a runAt may be: the declarative tier's default catch-up window. Older
#: is refused, never silently run late (or skipped).
PAST_RUN_AT = CatchUp().window
SUBMIT_FIELDS = frozenset(
    {"namespace", "queue", "task", "payload", "runAt", "priority", "maxAttempts", "idempotencyKey", "tenant"}
)
#: A body with `cron` is a recurring job, with these fields (its payload is a template, rendered
#: per occurrence with its period; it has no runAt).
RECURRING_SUBMIT_FIELDS = frozenset(
    {"namespace", "queue", "task", "cron", "timezone", "payloadTemplate", "expectedMaxInterval", "priority",
     "maxAttempts", "idempotencyKey", "tenant"}
)  # fmt: skip
#: The recurring job's own field names (vigil.core.recurring) as the request spells them.
RECURRING_NAMES = {
    "payload_template": "payloadTemplate",
    "expected_max_interval": "expectedMaxInterval",
    "max_attempts": "maxAttempts",
    "idempotency_key": "idempotencyKey",
}

VOLUME_TIER_OFF = "VolumeTierOff"
QUEUE_UNAVAILABLE = "QueueUnavailable"
QUOTA_EXCEEDED = "QuotaExceeded"
INVALID = "Invalid"
NOT_FOUND = "NotFound"
FORBIDDEN = "Forbidden"
CONFLICT = "Conflict"
DONE = {"cancel": "cancelled", "retry": "retried"}


class JobStore(Protocol):
    """What the routes need of the queue store (vigil.queue.store.QueueStore is one).

    Every call raises QueueUnavailable when the store cannot be reached.
    """

    def submit_job(self, job: OneOffJob, *, now: datetime) -> Submitted: ...

    def add_recurring(self, job: RecurringJob, *, now: datetime) -> AddedJob: ...

    def job(self, job_id: str) -> JobRecord | None: ...

    def delete_job(self, job_id: str, *, now: datetime, by: str) -> JobRecord | None: ...

    def timeline(self, execution_id: str) -> ExecutionRecord | None: ...

    def cancel(self, execution_id: str, *, now: datetime, by: str) -> Change | None: ...

    def retry(self, execution_id: str, *, now: datetime) -> Change | None: ...

    def queue_jobs(self, queue: str, *, limit: int, after: ListCursor | None = None) -> JobsPage: ...

    def dead_letters(self, queue: str, *, limit: int, after: ListCursor | None = None) -> DeadLettersPage: ...

    def queue_breakdown(self, queue: str, *, now: datetime, limit: int = QUEUE_PAGE_MAX) -> list[QueueBreakdown]: ...


class Invalid(ValueError):
    """A request field that is wrong; the message names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class HasQueue(Protocol):
    """A job or execution record: what authorisation reads of it."""

    @property
    def queue(self) -> str: ...


Record = TypeVar("Record", bound=HasQueue)


class Refused(Exception):
    """A route's early answer (403, 404) from a look-up the caller may not see."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer[0])
        self.answer = answer


def taskqueue_access(verb: str, namespace: str, name: str = "") -> Access:
    """`verb` on the TaskQueue object itself, named `name` in `namespace` ("" = every namespace)."""
    return Access(verb=verb, group=GROUP, resource=TASK_QUEUES, namespace=namespace, name=name)


def executions_access(verb: str, namespace: str, name: str = "") -> Access:
    """`verb` on the executions of TaskQueue `name` in `namespace` (``taskqueues/executions``):
    what every route of this API checks."""
    return Access(
        verb=verb, group=GROUP, resource=TASK_QUEUES, subresource=TASK_QUEUE_EXECUTIONS, namespace=namespace, name=name
    )


@dataclasses.dataclass(frozen=True)
class QueueContext:
    """What a route needs besides the store and the caller: the clock, the authorizer, the
    TaskQueues' tenant bindings and the namespaces that may submit above normal priority (None:
    every namespace)."""

    clock: Clock
    authorizer: Authorizer
    tenants: TenantDirectory
    high_priority: frozenset[str] | None

    def allowed(self, user: User, access: Access) -> bool:
        return self.authorizer.allowed(user, access)

    def by_id(self, user: User, verb: str, kind: str, ident: str, read: Callable[[], Record | None]) -> Record:
        """The record `read` finds, for a caller who named only its id; else Refused.

        The id names no queue, so the caller is authorised before the store is read on what
        does not need the record: `verb` on the executions of every TaskQueue in every
        namespace, or (a ServiceAccount) in its own namespace. Anyone else is 403 and the store
        is never asked; they act within the queue (/v1/namespaces/NS/taskqueues/QUEUE/...).
        An unknown id, or one of another namespace, is 403 alike, so ids cannot be probed,
        unless they may `verb` in every namespace: then an unknown id is 404."""
        everywhere = self.allowed(user, executions_access(verb, ""))
        account = None if everywhere else service_account_of(user)
        own = account[0] if account is not None and self.allowed(user, executions_access(verb, account[0])) else None
        if not everywhere and own is None:
            raise Refused(elsewhere(user, verb, kind, ident))
        record = read()
        if record is None:
            raise Refused(not_found(kind, ident) if everywhere else elsewhere(user, verb, kind, ident))
        if not everywhere and split_queue_key(record.queue)[0] != own:
            raise Refused(elsewhere(user, verb, kind, ident))
        return record


def elsewhere(user: User, verb: str, kind: str, ident: str) -> Answer:
    """403 for an id the caller may not act on by id alone, the same whether it exists elsewhere
    or nowhere (nothing of it is learnt)."""
    return problem(
        403,
        f"{user.name} may not {verb} {kind} {ident}: it does not exist in any queue where they may "
        f"{verb} {TASK_QUEUES}/{TASK_QUEUE_EXECUTIONS}.{GROUP} by id alone (that needs the verb in every "
        f"namespace, or for a ServiceAccount on every TaskQueue of its own); within its queue, ask "
        f"/v1/namespaces/NAMESPACE/taskqueues/QUEUE/{kind}s/{ident}",
        FORBIDDEN,
    )


def path_id(pattern: re.Pattern[str], path: str) -> str:
    match = pattern.match(path)
    assert match is not None  # the dispatch matched it already
    return match.group(1)


def invalid(error: Invalid) -> Answer:
    return problem(422, str(error), INVALID, field=error.field)


def not_found(kind: str, ident: str) -> Answer:
    return problem(404, f"{kind} {ident} not found", NOT_FOUND)


def forbidden(user: User, access: Access) -> Answer:
    resource = f"{access.resource}/{access.subresource}" if access.subresource else access.resource
    return problem(
        403,
        f"{user.name} may not {access.verb} {resource}.{access.group} {access.name} in namespace "
        f"{access.namespace}",
        FORBIDDEN,
    )
