"""The operator's HTTP API's one router: health, the Lease holder, executions and histories, approvals, /v1/.

    GET  /healthz, /readyz         200 "ok" while the process serves (open: the kubelet probes it)
    GET  /openapi.json             this API's OpenAPI 3.1 document (open: it holds no data;
                                   vigil.api.openapi, committed at docs/reference/openapi.json)
    GET  /leader                   the identity holding the trigger Lease
    GET  /executions/{id}          the Execution (spec and status) and its rows in the history
    GET  /namespaces/{ns}/executions/{id}
                                   database, in the namespace the caller may read
    GET  /namespaces/{ns}/scheduledjobs/{job}/executions?limit=N&continue=TOKEN
                                   the job's executions in the history database, newest first,
                                   a page at a time (limit 1..500, default 50); the answer's
                                   `continue` asks for the next page. Served from the history
                                   alone: it is where retention leaves what it deletes.
    GET  /namespaces/{ns}/workflows/{wf}/history?limit=N&continue=TOKEN
                                   the workflow's history entries in the history database, in
                                   order, a page at a time (limit 1..500, default 50), of the
                                   newest workflow of that name; the page holding entry 0
                                   also holds its pinned `definition` (null when it was
                                   mirrored before the database kept it). 404 when the
                                   database holds no entry of that name: what `kubectl vigil
                                   timeline` reads once ttlAfterFinished deleted the Workflow.
    POST /approvals/{token}/approve
    POST /approvals/{token}/reject the approval callback (docs/approvals.md): decides the one
                                   approval step the token was minted for, in the name of the
                                   one approver it is bound to. Optional JSON body
                                   {"by": "<that approver>", "reason": "..."}.
                                   200 the recorded decision; 400 bad body; 403 bad, tampered
                                   or expired token, a `by` that is not the token's approver,
                                   or an approver without the RBAC verb `approve`; 404
                                   workflow gone (or re-created: another uid); 409 the step is
                                   not waiting (decided, timed out, or in a later attempt than
                                   the token's), or the approver is no longer one of its
                                   approvers; 503 try again
    /v1/jobs, /v1/executions/..., /v1/namespaces/{ns}/taskqueues/{q}/...
                                   the volume tier's API for programs (vigil.api.queue; docs/queue.md)
    GET, POST /console/...         the web console's pages (vigil.api.console; docs/console.md):
                                   HTML for a browser, the viewer's token from an auth proxy's
                                   header or the login cookie, each page authorised as it reads

Each group of routes is a module of its own (vigil.api.executions, .histories, .approvals,
.queue); this one says which serves a request, authenticates the caller for the guarded ones
and answers /leader. The console's pages (`/console/...`, vigil.api.console; docs/console.md)
are one more such module, served when the runtime hands it its sources.

Who may call. Every endpoint but the health probes and the approval callback (whose signed
token is its own authority) needs the caller's Kubernetes bearer token
(``Authorization: Bearer ...``): the API server authenticates it (a TokenReview) and authorises
each request (a SubjectAccessReview, vigil.core.access), as delegated-auth servers such as
metrics-server and Argo Server do. No token, or one the API server does not accept: 401.
Authenticated but not allowed: 403. The review could not be made: 503.

* An execution needs ``get`` on ``executions.vigil.dev`` (that name) in its namespace, so
  whoever may ``kubectl get execution`` may read its timeline, and no one else. The answer holds
  only that namespace's object and history rows. By id alone, an id that exists nowhere the
  caller may read is 403, like one that exists elsewhere (the two must look alike); 404 is for
  those who may get executions in every namespace, or who ask in a namespace of their own. By
  id alone the namespaces tried are those holding an Execution of that id (from memory, or the
  API server) and the caller's own ServiceAccount's: the history database is asked only after
  one of them, or every namespace, is authorised (vigil.api.executions).
* A job's executions need ``list`` on ``executions.vigil.dev`` in its namespace: whoever may
  ``kubectl get executions`` there may page through the ones retention deleted, too.
* A workflow's history needs ``get`` on ``workflows.vigil.dev`` (that name) in its namespace:
  whoever may ``kubectl get workflow`` may read its history (and definition, which its status
  holds) after it is deleted, and no one else. 403 comes before 404, so a name's history is
  not learnt without that access.
* ``/leader`` needs ``get`` on the leader Lease in the operator's namespace.

Every replica serves it (standbys included), so the Service can route anywhere: a
decision is a conditional status write through the API server, which any replica can
make. Reach it with a token from inside the cluster (the chart's NetworkPolicy decides from
where), or through `kubectl port-forward`; the API server's service proxy does not pass the
caller's token on, so it cannot be used. Tokens are credentials: they are never logged.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vigil.api.app import Application
from vigil.api.approvals import APPROVAL_PATH, MAX_BODY_BYTES, ApprovalCallback, redacted
from vigil.api.console import Console, ConsoleSources
from vigil.api.executions import ExecutionRoutes
from vigil.api.guards import Guard, forbidden, unauthenticated
from vigil.api.histories import HistoryRoutes, JobExecutions, LogTails, WorkflowHistory
from vigil.api.problems import NO_ROUTE, Answer, problem
from vigil.api.queue import QueueApi
from vigil.api.transport import Limits, Serving, TlsFiles, serve
from vigil.core.access import ReviewUnavailable
from vigil.core.history import AttemptRecord
from vigil.probes import HEALTH_PATHS

log = logging.getLogger(__name__)

LEADER_PATH = "/leader"
OPENAPI_PATH = "/openapi.json"


class ApiServer:
    """Serves the endpoints above from the collaborators it is given.

    ``find_execution(id)`` is the Execution named `id` in whichever namespace (or None);
    ``get_execution(namespace, id)`` the one in `namespace`; ``execution_namespaces(id)`` the
    namespaces holding an Execution of that id, learnt from memory or the API server (never a
    database: by id alone it is what the caller is authorised on first). Without a ``guard`` every guarded
    endpoint answers 401: the API never serves unauthenticated by omission. ``queue_api`` serves
    the volume tier's /v1/ routes (None: they are not found).
    """

    def __init__(
        self,
        *,
        leader: Callable[[], str | None],
        find_execution: Callable[[str], Mapping[str, Any] | None],
        timeline: Callable[[str], list[AttemptRecord]],
        approvals: ApprovalCallback | None = None,
        guard: Guard | None = None,
        get_execution: Callable[[str, str], Mapping[str, Any] | None] | None = None,
        job_executions: JobExecutions | None = None,
        workflow_history: WorkflowHistory | None = None,
        log_tail: LogTails | None = None,
        queue_api: QueueApi | None = None,
        execution_namespaces: Callable[[str], Sequence[str]] | None = None,
        console: ConsoleSources | None = None,
    ) -> None:
        self._leader = leader
        self._executions = ExecutionRoutes(
            find_execution=find_execution, get_execution=get_execution, timeline=timeline,
            execution_namespaces=execution_namespaces,
        )  # fmt: skip
        self._histories = HistoryRoutes(
            job_executions=job_executions, workflow_history=workflow_history, log_tail=log_tail
        )
        self._approvals = approvals
        self._guard = guard
        self._queue_api = queue_api
        self._console = None if console is None else Console(console, guard, queue_api)

    @staticmethod
    @functools.cache
    def _contract() -> bytes:
        from vigil.api import openapi  # here, so `python -m vigil.api.openapi` runs it unimported

        return openapi.rendered()

    def answer(self, target: str, *, token: str | None = None) -> Answer:
        """(status, content type, body) for a GET of `target` (a path, and a query string for
        the routes that take one) by the holder of `token`."""
        path, _, query = target.partition("?")
        if path in HEALTH_PATHS:
            return 200, "text/plain", b"ok\n"
        if path == OPENAPI_PATH:  # open: it describes the routes and holds no data
            return 200, "application/json", self._contract()
        if self._queue_api is not None and self._queue_api.serves(path):
            return self._queue_api.answer("GET", path, token=token, query=query)
        if APPROVAL_PATH.match(path) and self._approvals is not None:
            return problem(405, "POST decides an approval; GET does nothing", "MethodNotAllowed")
        if path != LEADER_PATH and not (self._executions.serves(path) or self._histories.serves(path)):
            return problem(404, "no such route", NO_ROUTE)
        try:
            return self._guarded(path, query, token)
        except ReviewUnavailable as error:
            log.warning("HTTP API: cannot review a caller: %s", error)
            return problem(503, "cannot check the caller's credentials now; try again", "ReviewUnavailable")

    def _guarded(self, path: str, query: str, token: str | None) -> Answer:
        """A guarded route's answer: the caller authenticated first, then the route, which
        authorises before it reads anything."""
        guard = self._guard
        user = guard.authenticator.authenticate(token) if guard is not None and token else None
        if guard is None or user is None:
            return unauthenticated()
        if path == LEADER_PATH:
            if not guard.authorizer.allowed(user, guard.leader_lease):
                return forbidden(user, guard.leader_lease)
            return 200, "text/plain", f"{self._leader() or ''}\n".encode()
        if self._histories.serves(path):
            return self._histories.answer(guard, user, path, query)
        return self._executions.answer(guard, user, path)

    def answer_post(self, path: str, body: bytes, *, token: str | None = None) -> Answer:
        """(status, content type, body) for a POST of `body` to `path` by the holder of `token`."""
        if self._queue_api is not None and self._queue_api.serves(path):
            return self._queue_api.answer("POST", path, token=token, body=body)
        if len(body) > MAX_BODY_BYTES:
            return problem(400, f"the body must be at most {MAX_BODY_BYTES} bytes", "BadBody")
        match = APPROVAL_PATH.match(path)
        if match is None or self._approvals is None:
            return problem(404, "no such route", NO_ROUTE)
        return self._approvals.decide(match.group(1), match.group(2), body)

    @property
    def approvals(self) -> ApprovalCallback | None:
        """The approval callback this API serves (None: not served)."""
        return self._approvals

    def answer_delete(self, path: str, token: str | None) -> Answer:
        """(status, content type, body) for a DELETE of `path` by the holder of `token`."""
        if self._queue_api is not None and self._queue_api.serves(path):
            return self._queue_api.answer("DELETE", path, token=token)
        return problem(405, "DELETE is served only under /v1/", "MethodNotAllowed")

    def dispatch(self, method: str, path: str, query: str, token: str | None, body: bytes) -> Answer:
        """The answer to `method` on `path` (with its `query` string): the one router every
        request goes through (vigil.api.app runs it on an executor thread)."""
        if self._console is not None and self._console.serves(path):
            return self._console.answer(method, path, query, token, body)
        if method in ("GET", "HEAD"):
            return self.answer(f"{path}?{query}" if query else path, token=token)
        if method == "POST":
            return self.answer_post(path, body, token=token)
        if method == "DELETE":
            return self.answer_delete(path, token)
        return problem(405, f"{method} is not served here", "MethodNotAllowed")

    def application(self, limits: Limits | None = None) -> Application:
        """This API as an ASGI application within `limits` (default: Limits())."""
        return Application(self.dispatch, limits or Limits(), redact=redacted)

    def serve(self, port: int, limits: Limits | None = None, *, tls: TlsFiles | None = None) -> Serving:
        """Serve on `port` (0: any free one) from a thread, within `limits` (default: Limits()),
        over TLS with `tls` (else plain HTTP)."""
        limits = limits or Limits()
        app = self.application(limits)
        return serve(app, port, limits, tls=tls, on_close=app.close)
