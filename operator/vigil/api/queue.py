"""The volume tier's HTTP API for programs: submit one-off jobs, read, delete, cancel and retry.

    POST   /v1/jobs                        submit a one-off job (its execution runs at runAt), or a
                                           recurring one (cron: catalogued with its next occurrence)
    GET    /v1/jobs/{id}                   the job and its newest executions
    DELETE /v1/jobs/{id}                   disable the job; cancel what of it has not finished
    GET    /v1/executions/{id}             the execution's timeline: state, lease, every attempt, output
    ...    /v1/namespaces/{ns}/taskqueues/{q}/jobs/{id}, .../executions/{id}[/cancel|/retry]
                                           the same within the queue: authorised on it before
                                           the store is read (vigil.api.queuerecords)
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

The routes are modules of their own (queuesubmit, queuerecords, queuelistings, over queuebase,
queuefields and queueshapes); this one dispatches to them. The store's calls block; like the
history routes, they run on the API's bounded executor (vigil.api.transport.Limits bounds how many at once). This module knows the store only
through the JobStore protocol (the runtime hands it a vigil.queue.QueueStore), so the HTTP
layer never imports a database driver.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from vigil.api import queuelistings, queuerecords, queuesubmit
from vigil.api.problems import NO_ROUTE, Answer, problem
from vigil.api.queuebase import (
    EXECUTION_ACTION_PATH,
    EXECUTION_PATH,
    JOB_PATH,
    JOBS_PATH,
    MAX_PAYLOAD_BYTES,
    NOT_FOUND,
    PREFIX,
    QUEUE_EXECUTION_ACTION_PATH,
    QUEUE_EXECUTION_PATH,
    QUEUE_JOB_PATH,
    QUEUE_LISTING_PATH,
    QUEUE_UNAVAILABLE,
    QUOTA_EXCEEDED,
    VOLUME_TIER_OFF,
    JobStore,
    QueueContext,
    Refused,
)
from vigil.api.queueshapes import decode_cursor, encode_cursor
from vigil.core.access import Authenticator, Authorizer, ReviewUnavailable, User
from vigil.core.ports import Clock
from vigil.core.queue import (
    QueueUnavailable,
    QueueUndeclared,
    QuotaExceeded,
)
from vigil.core.tenancy import NoBindings, TenantDirectory

log = logging.getLogger(__name__)

__all__ = ["MAX_PAYLOAD_BYTES", "JobStore", "QueueApi", "decode_cursor", "encode_cursor"]


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
        self._authenticator = authenticator
        self._context = None if authorizer is None else QueueContext(
            clock=clock,
            authorizer=authorizer,
            tenants=tenants if tenants is not None else NoBindings(),
            high_priority=high_priority_namespaces,
        )  # fmt: skip

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
            if user is None or self._context is None:
                return problem(
                    401, "a Kubernetes bearer token the API server accepts is required (Authorization: Bearer ...)",
                    "Unauthorized",
                )  # fmt: skip
            return route(self._context, store, user, path, body, query)
        except Refused as refused:
            return refused.answer
        except ReviewUnavailable as error:
            log.warning("queue API: cannot review a caller: %s", error)
            return problem(503, "cannot check the caller's credentials now; try again", "ReviewUnavailable")
        except QueueUndeclared as error:  # no TaskQueue in that namespace: the store has no role to act as
            return problem(404, str(error), NOT_FOUND)
        except QueueUnavailable as error:
            log.warning("queue API: the queue store is unavailable: %s", error)
            return problem(503, f"the queue store is unavailable: {error}; try again", QUEUE_UNAVAILABLE)
        except QuotaExceeded as error:  # 429: the server adds Retry-After (vigil.api.transport.RETRY_AFTER_SECONDS)
            return problem(
                429, f"{error}; try again once some of them finish", QUOTA_EXCEEDED,
                namespace=error.namespace, quota=error.quota, limit=error.limit, used=error.used,
            )  # fmt: skip

    def _user(self, token: str | None) -> User | None:
        if self._authenticator is None or self._context is None or not token:
            return None
        return self._authenticator.authenticate(token)


Route = Callable[[QueueContext, JobStore, User, str, bytes, str], Answer]


def _route(method: str, path: str) -> Route | Answer:
    """The route function serving `method` on `path`, or the 404/405 answer."""
    routes: dict[str, Route]
    if path.rstrip("/") == JOBS_PATH:
        routes = {"POST": queuesubmit.submit}
    elif JOB_PATH.match(path) or QUEUE_JOB_PATH.match(path):
        routes = {"GET": queuerecords.get_job, "DELETE": queuerecords.delete_job}
    elif EXECUTION_PATH.match(path) or QUEUE_EXECUTION_PATH.match(path):
        routes = {"GET": queuerecords.get_execution}
    elif EXECUTION_ACTION_PATH.match(path) or QUEUE_EXECUTION_ACTION_PATH.match(path):
        routes = {"POST": queuerecords.act}
    elif QUEUE_LISTING_PATH.match(path):
        routes = {"GET": queuelistings.listing}
    else:
        return problem(404, "no such route under /v1/", NO_ROUTE)
    if method not in routes:
        return problem(405, f"this route answers {', '.join(sorted(routes))}, not {method}", "MethodNotAllowed")
    return routes[method]
