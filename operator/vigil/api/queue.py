"""The volume tier's HTTP API for programs: submit one-off jobs, read, delete, cancel and retry.

    POST   /v1/jobs                        submit a one-off job (its execution runs at runAt), or a
                                           recurring one (cron: catalogued with its next occurrence)
    GET    /v1/jobs/{id}                   the job and its newest executions
    DELETE /v1/jobs/{id}                   disable the job; cancel what of it has not finished
    GET    /v1/executions/{id}             the execution's timeline: state, lease, every attempt
    POST   /v1/executions/{id}/cancel      a ready or leased execution never runs (again)
    POST   /v1/executions/{id}/retry       a dead or cancelled execution runs again, same id
    GET    /v1/namespaces/{ns}/taskqueues/{q}/jobs?limit=N&continue=TOKEN
                                           the queue's jobs, newest first, a page at a time
    GET    /v1/namespaces/{ns}/taskqueues/{q}/dead-letters?limit=N&continue=TOKEN
                                           its dead executions, the longest dead first
    GET    /v1/namespaces/{ns}/taskqueues/{q}/stats
                                           ready, leased, dead and the oldest ready age per
                                           (priority, tenant)

Pages hold `limit` rows (1 to 500, default 50); an answer with more after it carries
`continue`, the token of the next page (opaque, bound to its listing).

A queue is declared by a TaskQueue NAME in namespace NS; its executions live in the queue
store (vigil.queue) under the key "NS/NAME". Every route authenticates the caller's bearer
token (a TokenReview) and asks the API server whether they may act on that queue's executions:
a SubjectAccessReview on the subresource ``taskqueues/executions`` (group ``vigil.dev``) named
NAME in NS, with these verbs:

    create  submit to the queue        get     read its jobs, executions and listings
    delete  delete its jobs            update  cancel and retry its executions

The subresource keeps these rights apart from editing the TaskQueue itself (``update`` on
``taskqueues`` pauses tenants and shortens retention): a Role rule on ``taskqueues/executions``
with ``resourceNames: [NAME]`` lets a program submit to that queue and nothing more. So RBAC is
the one place rights are granted; the chart's aggregated -edit role grants all four, -view
``get``.

A submission's tenant (whose cap it spends) is the caller's, never free text: its
ServiceAccount's namespace, or a tenant the TaskQueue binds to it (vigil.core.tenancy); naming
another is 403, unless the caller may ``update`` the TaskQueue itself. A priority above normal
(below 0) is 403 outside the namespaces the chart lists for high priority
(``queue.highPriorityNamespaces``, from ``admission.highPriority.namespaces``).

Answers are JSON; errors are ``{"error": message, "reason": Reason}``, and a bad field also
carries ``"field"``: 422 a field is wrong (named), 401 no token or one the API server does not
accept, 403 not allowed (an id that exists nowhere the caller may act is 403 too, like one
that exists elsewhere: the two must look alike; 404 is for who may act in every namespace),
404 the volume tier is off (no ``queue.dsn``: these routes do not exist here) or the id is
unknown, 405 another method, 409 the execution's state does not allow the cancel or retry,
429 the namespace is at its quota in the queue store (``quota`` names it; Retry-After says when
to try again), 503 the API server's reviews or the queue store cannot be reached now (try again).

The store's calls block; like the history routes, they run on the HTTP server's worker
threads (vigil.api.transport.Limits bounds how many at once). This module knows the store only
through the JobStore protocol (the runtime hands it a vigil.queue.QueueStore), so the HTTP
layer never imports a database driver.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import urllib.parse
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

from vigil.api.bodies import field_name, read_json
from vigil.api.problems import NO_ROUTE, Answer, json_answer, problem
from vigil.core import jsonvalues
from vigil.core.access import Access, Authenticator, Authorizer, ReviewUnavailable, User
from vigil.core.chain import CatchUp
from vigil.core.ports import Clock
from vigil.core.queue import (
    QUEUE_PAGE_DEFAULT,
    QUEUE_PAGE_MAX,
    AttemptRow,
    Change,
    DeadLetter,
    DeadLettersPage,
    ExecutionRecord,
    JobRecord,
    JobsPage,
    ListCursor,
    OneOffJob,
    QueueBreakdown,
    QueueJob,
    QueueUnavailable,
    QuotaExceeded,
    Recurrence,
    Submitted,
    queue_key,
    split_queue_key,
)
from vigil.core.recurring import AddedJob, RecurringJob
from vigil.core.tenancy import NoBindings, TenantDirectory, TenantRefused, resolve_tenant
from vigil.core.timeparse import parse_rfc3339
from vigil.model.durations import format_duration, parse_duration
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
PREFIX = "/v1/"
#: The query parameters of a listing.
PAGE_PARAMETERS = frozenset({"limit", "continue"})

NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
#: A TaskQueue's name: a DNS subdomain, as every object's name.
QUEUE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
TEXT_MAX_LENGTH = 253  # task, tenant and idempotency key: as long as an object name
#: Largest payload, as compact JSON: executions are rows, not blobs (the request itself is
#: capped by vigil.api.transport.Limits.max_request_bytes, 64 KiB by default).
MAX_PAYLOAD_BYTES = jsonvalues.MAX_PAYLOAD_BYTES
MAX_ATTEMPTS_LIMIT = 1000
SMALLINT = (-32768, 32767)
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


class QueueApi:
    """Serves the routes above from a store (None: the volume tier is off, every route 404)."""

    def __init__(
        self,
        store: JobStore | None,
        *,
        clock: Clock,
        authenticator: Authenticator | None,
        authorizer: Authorizer | None,
        tenants: TenantDirectory | None = None,
        high_priority_namespaces: frozenset[str] | None = None,
    ) -> None:
        """`tenants` reads the TaskQueues' tenant bindings (None: no queue declares any);
        `high_priority_namespaces` may submit above normal priority (None: every namespace)."""
        self._store = store
        self._clock = clock
        self._authenticator = authenticator
        self._authorizer = authorizer
        self._tenants: TenantDirectory = tenants if tenants is not None else NoBindings()
        self._high_priority = high_priority_namespaces

    @staticmethod
    def serves(path: str) -> bool:
        return path.startswith(PREFIX)

    def answer(self, method: str, path: str, *, token: str | None, body: bytes = b"", query: str = "") -> Answer:
        """(status, content type, body) for `method` on `path` (with its `query` string) by the
        holder of `token`."""
        store = self._store
        if store is None:
            return problem(
                404, "the volume tier is off: this operator has no queue store (settings queue.dsn)", VOLUME_TIER_OFF
            )
        route = _route(method, path)
        if isinstance(route, tuple):
            return route
        try:
            user = self._user(token)
            if user is None:
                return problem(
                    401, "a Kubernetes bearer token the API server accepts is required (Authorization: Bearer ...)",
                    "Unauthorized",
                )  # fmt: skip
            return route(self, store, user, path, body, query)
        except Refused as refused:
            return refused.answer
        except ReviewUnavailable as error:
            log.warning("queue API: cannot review a caller: %s", error)
            return problem(503, "cannot check the caller's credentials now; try again", "ReviewUnavailable")
        except QueueUnavailable as error:
            log.warning("queue API: the queue store is unavailable: %s", error)
            return problem(503, f"the queue store is unavailable: {error}; try again", QUEUE_UNAVAILABLE)
        except QuotaExceeded as error:  # 429: the server adds Retry-After (vigil.api.transport.RETRY_AFTER_SECONDS)
            return problem(
                429, f"{error}; try again once some of them finish", QUOTA_EXCEEDED,
                namespace=error.namespace, quota=error.quota, limit=error.limit, used=error.used,
            )  # fmt: skip

    def _user(self, token: str | None) -> User | None:
        if self._authenticator is None or self._authorizer is None or not token:
            return None
        return self._authenticator.authenticate(token)

    def _allowed(self, user: User, access: Access) -> bool:
        assert self._authorizer is not None  # _user() let no one through without it
        return self._authorizer.allowed(user, access)

    # The routes: each (store, user, path, body) -> Answer.

    def submit(self, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
        """401 before anything; then the queue named (422), then may they (403), then the rest."""
        try:
            data = _object(raw)
            namespace, name = _queue_of(data)
        except Invalid as error:
            return _invalid(error)
        access = executions_access("create", namespace, name)
        if not self._allowed(user, access):
            return _forbidden(user, access)
        try:
            tenant = self._tenant(user, _optional_text(data, "tenant"), namespace=namespace, name=name)
        except Invalid as error:
            return _invalid(error)
        now = self._clock.now()
        if "cron" in data:
            return self._submit_recurring(store, user, data, namespace=namespace, name=name, tenant=tenant, now=now)
        try:
            job = one_off_job(data, namespace=namespace, name=name, tenant=tenant, now=now)
        except Invalid as error:
            return _invalid(error)
        self._check_priority(job.priority, namespace)
        submitted = store.submit_job(job, now=now)
        if submitted.created:
            log.info("queue API: %s submitted job %s to %s", user.name, submitted.job_id, job.queue)
        body = {
            "jobId": submitted.job_id,
            "executionId": submitted.execution_id,
            "scheduledFor": _time(submitted.scheduled_for),
        }
        return json_answer(201 if submitted.created else 200, body)

    def _submit_recurring(
        self, store: JobStore, user: User, data: Mapping[str, Any], *, namespace: str, name: str, tenant: str,
        now: datetime,
    ) -> Answer:  # fmt: skip
        try:
            job = recurring_job(data, namespace=namespace, name=name, tenant=tenant)
            self._check_priority(job.priority, namespace)
            added = store.add_recurring(job, now=now)
        except Invalid as error:
            return _invalid(error)
        except ValueError as error:  # the catalogue's own last check: a cron with no occurrence ahead
            return _invalid(_recurring_invalid(error))
        if added.created:
            log.info("queue API: %s catalogued recurring job %s on %s", user.name, added.job_id, job.queue)
        return json_answer(201 if added.created else 200, {"jobId": added.job_id, "nextRun": _time(added.next_run)})

    def _tenant(self, user: User, named: str | None, *, namespace: str, name: str) -> str:
        """The submission's tenant: the caller's own (vigil.core.tenancy). Naming another is
        Refused (403) unless they may edit the TaskQueue, and with it every tenant's cap."""
        bindings = self._tenants.bindings(namespace, name)
        try:
            return resolve_tenant(named, user, queue_namespace=namespace, bindings=bindings)
        except TenantRefused as refused:
            if self._allowed(user, taskqueue_access("update", namespace, name)):
                return refused.named
            raise Refused(problem(
                403, f"{user.name} may not submit to {namespace}/{name} as {refused}: a tenant is who the caller "
                "is (its namespace, or a tenant the TaskQueue binds to it in spec.tenants.bindings)",
                FORBIDDEN, field="tenant",
            )) from None  # fmt: skip

    def _check_priority(self, priority: int, namespace: str) -> None:
        """Refused (403) for a priority above normal outside the chart's high-priority namespaces."""
        allowed = self._high_priority
        if allowed is None or priority >= PRIORITIES["normal"] or namespace in allowed:
            return
        raise Refused(problem(
            403, f"priority {priority} is above normal, which is reserved for the namespaces the Vigil chart "
            f"lists (admission.highPriority.namespaces); {namespace} is not one: use normal or low",
            FORBIDDEN, field="priority",
        ))  # fmt: skip

    def get_job(self, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
        job_id = _id(JOB_PATH, path)
        return json_answer(200, job_to_json(self._visible(user, "get", "job", job_id, store.job(job_id))))

    def delete_job(self, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
        job_id = _id(JOB_PATH, path)
        job = self._visible(user, "delete", "job", job_id, store.job(job_id))
        deleted = store.delete_job(job_id, now=self._clock.now(), by=user.name)
        if deleted is None:
            return _not_found("job", job_id)
        log.info("queue API: %s deleted job %s of %s", user.name, job_id, job.queue)
        return json_answer(200, job_to_json(deleted))

    def get_execution(self, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
        execution_id = _id(EXECUTION_PATH, path)
        record = self._visible(user, "get", "execution", execution_id, store.timeline(execution_id))
        return json_answer(200, execution_to_json(record))

    def act(self, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
        match = EXECUTION_ACTION_PATH.match(path)
        assert match is not None  # _route() sent only these paths here
        execution_id, action = match.group(1), match.group(2)
        if raw.strip() not in (b"", b"{}"):
            return _invalid(Invalid("body", f"{action} takes no body (or an empty JSON object)"))
        record = self._visible(user, "update", "execution", execution_id, store.timeline(execution_id))
        now = self._clock.now()
        if action == "cancel":
            change = store.cancel(execution_id, now=now, by=user.name)
        else:
            change = store.retry(execution_id, now=now)
        if change is None:
            return _not_found("execution", execution_id)
        if change.refusal is not None:
            return problem(409, f"execution {execution_id} cannot be {DONE[action]}: {change.refusal}", CONFLICT)
        log.info("queue API: %s %s execution %s of %s", user.name, DONE[action], execution_id, record.queue)
        return json_answer(200, execution_to_json(change.record))

    def listing(self, store: JobStore, user: User, path: str, raw: bytes, query: str) -> Answer:
        """A queue's jobs, dead letters or stats: `get` on its TaskQueue (403) first, then the
        query string (422 naming the parameter), then the store."""
        match = QUEUE_LISTING_PATH.match(path)
        assert match is not None  # _route() sent only these paths here
        namespace, name, kind = match.group(1), match.group(3), match.group(5)
        access = executions_access("get", namespace, name)
        if not self._allowed(user, access):
            return _forbidden(user, access)
        key = queue_key(namespace, name)
        head = {"namespace": namespace, "queue": name}
        try:
            if kind == "stats":
                _page_request(query, kind, allowed=frozenset())
                rows = store.queue_breakdown(key, now=self._clock.now(), limit=QUEUE_PAGE_MAX)
                return json_answer(200, head | {"breakdown": [breakdown_to_json(row) for row in rows]})
            limit, after = _page_request(query, kind, allowed=PAGE_PARAMETERS)
        except Invalid as error:
            return _invalid(error)
        if kind == "jobs":
            jobs = store.queue_jobs(key, limit=limit, after=after)
            return json_answer(200, _paged(head | {"jobs": [queue_job_to_json(j) for j in jobs.jobs]}, kind, jobs.after))
        dead = store.dead_letters(key, limit=limit, after=after)
        now = self._clock.now()
        body = head | {"deadLetters": [dead_letter_to_json(d, now=now) for d in dead.dead]}
        return json_answer(200, _paged(body, kind, dead.after))

    def _visible(self, user: User, verb: str, kind: str, ident: str, record: Record | None) -> Record:
        """`record` if `user` may `verb` its TaskQueue; else Refused, with 403. An unknown id (None)
        is 403 alike, so ids cannot be probed, unless they may `verb` taskqueues in every
        namespace: then 404."""
        if record is not None:
            namespace, name = split_queue_key(record.queue)
            if self._allowed(user, executions_access(verb, namespace, name)):
                return record
        elif self._allowed(user, executions_access(verb, "")):
            raise Refused(_not_found(kind, ident))
        raise Refused(problem(
            403,
            f"{user.name} may not {verb} {kind} {ident}: it does not exist in any queue where they may "
            f"{verb} {TASK_QUEUES}/{TASK_QUEUE_EXECUTIONS}.{GROUP}",
            FORBIDDEN,
        ))  # fmt: skip


Route = Callable[[QueueApi, JobStore, User, str, bytes, str], Answer]


def _route(method: str, path: str) -> Route | Answer:
    """The QueueApi method serving `method` on `path`, or the 404/405 answer."""
    routes: dict[str, Route]
    if path.rstrip("/") == JOBS_PATH:
        routes = {"POST": QueueApi.submit}
    elif JOB_PATH.match(path):
        routes = {"GET": QueueApi.get_job, "DELETE": QueueApi.delete_job}
    elif EXECUTION_PATH.match(path):
        routes = {"GET": QueueApi.get_execution}
    elif EXECUTION_ACTION_PATH.match(path):
        routes = {"POST": QueueApi.act}
    elif QUEUE_LISTING_PATH.match(path):
        routes = {"GET": QueueApi.listing}
    else:
        return problem(404, "no such route under /v1/", NO_ROUTE)
    if method not in routes:
        return problem(405, f"this route answers {', '.join(sorted(routes))}, not {method}", "MethodNotAllowed")
    return routes[method]


def _id(pattern: re.Pattern[str], path: str) -> str:
    match = pattern.match(path)
    assert match is not None  # _route() matched it already
    return match.group(1)


def _object(raw: bytes) -> dict[str, Any]:
    try:
        data = read_json(raw, field="body")
    except jsonvalues.UnsafeValue as error:
        raise Invalid(error.path, error.why) from None
    if not isinstance(data, dict):
        raise Invalid("body", "must be a JSON object")
    return data


def _page_request(query: str, kind: str, *, allowed: frozenset[str]) -> tuple[int, ListCursor | None]:
    """(limit, cursor) of a listing's query string; Invalid naming the parameter that is wrong."""
    try:
        params = urllib.parse.parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise Invalid("query", "the query string cannot be read") from None
    unknown = sorted(set(params) - allowed)
    if unknown:
        takes = f"only {' and '.join(sorted(allowed))} are accepted" if allowed else "it takes no parameters"
        raise Invalid(field_name(unknown[0], instead="query"), f"unknown parameter: {takes}")
    for field, values in params.items():
        if len(values) > 1:
            raise Invalid(field, "may be given once")
    limit = params.get("limit", [str(QUEUE_PAGE_DEFAULT)])[0]
    if not (limit.isascii() and limit.isdigit()) or not 1 <= int(limit) <= QUEUE_PAGE_MAX:
        raise Invalid("limit", f"must be a whole number from 1 to {QUEUE_PAGE_MAX}")
    token = params.get("continue", [""])[0]
    return int(limit), decode_cursor(token, kind) if token else None


def encode_cursor(cursor: ListCursor, kind: str) -> str:
    """The `continue` token of the page of listing `kind` after `cursor`: opaque, no secret in it."""
    raw = f"{kind}|{cursor.at.isoformat()}|{cursor.ident}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(token: str, kind: str) -> ListCursor:
    """The cursor a `continue` token of listing `kind` names; Invalid("continue") otherwise."""
    wrong = Invalid("continue", f"is not a token from an earlier page of this queue's {kind}")
    try:
        written, stamp, ident = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode().split("|", 2)
        at = datetime.fromisoformat(stamp)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise wrong from None
    if written != kind or at.tzinfo is None or not re.fullmatch(r"[-a-z0-9]{1,64}", ident):
        raise wrong
    return ListCursor(at, ident)


def _paged(body: dict[str, Any], kind: str, after: ListCursor | None) -> dict[str, Any]:
    return body if after is None else body | {"continue": encode_cursor(after, kind)}


def _queue_of(data: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, TaskQueue name) a submission names: what it is authorised against."""
    namespace = _required_text(data, "namespace")
    if not NAMESPACE.fullmatch(namespace):
        raise Invalid("namespace", "is not a namespace name (a DNS label)")
    name = _required_text(data, "queue")
    if not QUEUE_NAME.fullmatch(name):
        raise Invalid("queue", "is not a TaskQueue name (a DNS subdomain)")
    return namespace, name


def recurring_job(data: Mapping[str, Any], *, namespace: str, name: str, tenant: str) -> RecurringJob:
    """The recurring job a submission with `cron` describes; Invalid naming the first wrong field."""
    for field in ("runAt", "payload"):
        if field in data:
            raise Invalid(field, "a recurring job (cron) has no runAt or payload: its payloadTemplate is "
                          "rendered for each occurrence")  # fmt: skip
    unknown = sorted(set(data) - RECURRING_SUBMIT_FIELDS)
    if unknown:
        raise Invalid(field_name(unknown[0], instead="body"), f"unknown field; the fields are {', '.join(sorted(RECURRING_SUBMIT_FIELDS))}")
    template = data.get("payloadTemplate", {})
    _payload(template, field="payloadTemplate")
    max_attempts = data.get("maxAttempts")
    try:
        return RecurringJob(
            queue=queue_key(namespace, name),
            task=_required_text(data, "task"),
            cron=_text(data["cron"], "cron"),
            timezone=_text(data.get("timezone", "UTC"), "timezone"),
            payload_template=template,
            expected_max_interval=_interval(data.get("expectedMaxInterval")),
            priority=_priority(data.get("priority", "normal")),
            tenant=tenant,
            max_attempts=None if max_attempts is None else _max_attempts(max_attempts),
            idempotency_key=_optional_text(data, "idempotencyKey"),
        )
    except ValueError as error:
        if isinstance(error, Invalid):
            raise
        raise _recurring_invalid(error) from None


def _recurring_invalid(error: ValueError) -> Invalid:
    """A recurring job's "field: why" as the request names the field."""
    field, _, why = str(error).partition(": ")
    head, dot, rest = field.partition(".")
    return Invalid(RECURRING_NAMES.get(head, head) + dot + rest, why)


def _interval(value: Any) -> timedelta | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise Invalid("expectedMaxInterval", "must be a duration string, like '26h'")
    try:
        return parse_duration(value)
    except ValueError:
        raise Invalid("expectedMaxInterval", "must be a positive duration, like '26h' or '90s'") from None


def one_off_job(data: Mapping[str, Any], *, namespace: str, name: str, tenant: str, now: datetime) -> OneOffJob:
    """The one-off job a submission's body describes; Invalid naming the first wrong field."""
    unknown = sorted(set(data) - SUBMIT_FIELDS)
    if unknown:
        raise Invalid(field_name(unknown[0], instead="body"), f"unknown field; the fields are {', '.join(sorted(SUBMIT_FIELDS))}")
    task = _required_text(data, "task")
    return OneOffJob(
        queue=queue_key(namespace, name),
        task=task,
        payload=_payload(data.get("payload", {})),
        run_at=_run_at(data.get("runAt"), now=now),
        priority=_priority(data.get("priority", "normal")),
        tenant=tenant,
        max_attempts=None if data.get("maxAttempts") is None else _max_attempts(data["maxAttempts"]),
        idempotency_key=_optional_text(data, "idempotencyKey"),
    )


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise Invalid(field, "must be a string")
    if not value or len(value) > TEXT_MAX_LENGTH:
        raise Invalid(field, f"must be 1 to {TEXT_MAX_LENGTH} characters long")
    if not value.isprintable() or value != value.strip():
        raise Invalid(field, "must be printable, without leading or trailing spaces")
    return value


def _required_text(data: Mapping[str, Any], field: str) -> str:
    if field not in data:
        raise Invalid(field, "is required")
    return _text(data[field], field)


def _optional_text(data: Mapping[str, Any], field: str) -> str | None:
    value = data.get(field)
    return None if value is None else _text(value, field)


def _payload(value: Any, *, field: str = "payload") -> dict[str, Any]:
    """A JSON object the store will take (vigil.core.jsonvalues); Invalid naming the place, e.g. payload.a[3]."""
    try:
        return jsonvalues.check_object(value, path=field, max_bytes=MAX_PAYLOAD_BYTES)
    except jsonvalues.UnsafeValue as unsafe:
        raise Invalid(unsafe.path, unsafe.why) from None


def _run_at(value: Any, *, now: datetime) -> datetime:
    if value is None:
        return now
    if not isinstance(value, str):
        raise Invalid("runAt", "must be an RFC 3339 timestamp string, like '2026-08-01T02:00:00Z'")
    try:
        run_at = parse_rfc3339(value)
    except ValueError:
        raise Invalid("runAt", "must be an RFC 3339 timestamp with its offset, like '2026-08-01T02:00:00Z'") from None
    if now - run_at > PAST_RUN_AT:
        raise Invalid(
            "runAt", f"is more than {PAST_RUN_AT} in the past (the catch-up window): it would never run on time"
        )
    return run_at


def _priority(value: Any) -> int:
    if isinstance(value, str):
        if value not in PRIORITIES:
            raise Invalid("priority", f"is not one of {', '.join(PRIORITIES)} (or a whole number)")
        return PRIORITIES[value]
    if isinstance(value, bool) or not isinstance(value, int) or not SMALLINT[0] <= value <= SMALLINT[1]:
        raise Invalid(
            "priority", f"must be a whole number from {SMALLINT[0]} to {SMALLINT[1]} (lower runs first) or a name"
        )
    return value


def _max_attempts(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        raise Invalid("maxAttempts", f"must be a whole number from 1 to {MAX_ATTEMPTS_LIMIT}")
    return value


def _time(value: datetime | None) -> str | None:
    """An instant as RFC 3339 with its fractions (leases and attempts are sub-second)."""
    return value.astimezone(UTC).isoformat() if value is not None else None


def job_to_json(job: JobRecord) -> dict[str, Any]:
    namespace, name = split_queue_key(job.queue)
    return {
        "jobId": job.job_id,
        "namespace": namespace,
        "queue": name,
        "task": job.task,
        "payload": job.payload,
        "priority": job.priority,
        "tenant": job.tenant,
        "maxAttempts": job.max_attempts,
        "enabled": job.enabled,
        "createdAt": _time(job.created_at),
        **_recurrence_to_json(job.schedule),
        "executions": [
            {
                "executionId": e.execution_id,
                "state": str(e.state),
                "attempt": e.attempt,
                "scheduledFor": _time(e.scheduled_for),
            }
            for e in job.executions
        ],
    }


def _recurrence_to_json(recurrence: Recurrence | None) -> dict[str, Any]:
    if recurrence is None:
        return {}
    expected = recurrence.expected_max_interval
    return {
        "cron": recurrence.cron,
        "timezone": recurrence.timezone,
        "payloadTemplate": recurrence.payload_template,
        "expectedMaxInterval": format_duration(expected) if expected is not None else None,
        "nextRun": _time(recurrence.next_run),
    }


def attempt_to_json(row: AttemptRow) -> dict[str, Any]:
    return {
        "attempt": row.attempt,
        "worker": row.worker,
        "outcome": str(row.outcome),
        "startedAt": _time(row.started_at),
        "finishedAt": _time(row.finished_at),
        "error": row.error,
        "duplicate": row.duplicate,
    }


def execution_to_json(record: ExecutionRecord) -> dict[str, Any]:
    namespace, name = split_queue_key(record.queue)
    return {
        "executionId": record.execution_id,
        "jobId": record.job_id,
        "namespace": namespace,
        "queue": name,
        "task": record.task,
        "payload": record.payload,
        "priority": record.priority,
        "tenant": record.tenant,
        "idempotencyKey": record.idempotency_key,
        "state": str(record.state),
        "attempt": record.attempt,
        "maxAttempts": record.max_attempts,
        "scheduledFor": _time(record.scheduled_for),
        "runAfter": _time(record.run_after),
        "leaseOwner": record.lease_owner,
        "leaseExpiresAt": _time(record.lease_expires_at),
        "finishedAt": _time(record.finished_at),
        "lastError": record.last_error,
        "cancelledBy": record.cancelled_by,
        "attempts": [attempt_to_json(row) for row in record.attempts],
    }


def queue_job_to_json(job: QueueJob) -> dict[str, Any]:
    return {
        "jobId": job.job_id,
        "task": job.task,
        "enabled": job.enabled,
        "priority": job.priority,
        "tenant": job.tenant,
        "createdAt": _time(job.created_at),
        "lastExecutionId": job.last_execution_id,
        "lastState": None if job.last_state is None else str(job.last_state),
    }


def dead_letter_to_json(dead: DeadLetter, *, now: datetime) -> dict[str, Any]:
    return {
        "executionId": dead.execution_id,
        "task": dead.task,
        "tenant": dead.tenant,
        "priority": dead.priority,
        "attempt": dead.attempt,
        "maxAttempts": dead.max_attempts,
        "scheduledFor": _time(dead.scheduled_for),
        "diedAt": _time(dead.died_at),
        "ageSeconds": max(0, int((now - dead.died_at).total_seconds())),
        "error": dead.error,
    }


def breakdown_to_json(row: QueueBreakdown) -> dict[str, Any]:
    age = row.oldest_ready_age
    return {
        "priority": row.priority,
        "tenant": row.tenant,
        "ready": row.ready,
        "leased": row.leased,
        "dead": row.dead,
        "oldestReadySeconds": None if age is None else int(age.total_seconds()),
    }


def _invalid(error: Invalid) -> Answer:
    return problem(422, str(error), INVALID, field=error.field)


def _not_found(kind: str, ident: str) -> Answer:
    return problem(404, f"{kind} {ident} not found", NOT_FOUND)


def _forbidden(user: User, access: Access) -> Answer:
    resource = f"{access.resource}/{access.subresource}" if access.subresource else access.resource
    return problem(
        403,
        f"{user.name} may not {access.verb} {resource}.{access.group} {access.name} in namespace "
        f"{access.namespace}",
        FORBIDDEN,
    )
