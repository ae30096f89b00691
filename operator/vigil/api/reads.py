"""The operator's small HTTP API: health, the Lease holder, executions and workflow history, approvals.

    GET  /healthz, /readyz         200 "ok" while the process serves (open: the kubelet probes it)
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
  those who may get executions in every namespace, or who ask in a namespace of their own.
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

import base64
import binascii
import dataclasses
import logging
import re
import urllib.parse
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

from vigil.api.app import Application
from vigil.api.approvals import APPROVAL_PATH, MAX_BODY_BYTES, ApprovalCallback, redacted
from vigil.api.bodies import field_name
from vigil.api.problems import NO_ROUTE, Answer, json_answer, problem
from vigil.api.queue import QueueApi
from vigil.api.transport import Limits, Serving, serve
from vigil.core.access import Access, Authenticator, Authorizer, ReviewUnavailable, User
from vigil.core.history import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    AttemptRecord,
    ExecutionPage,
    ExecutionSummary,
    HistoryCursor,
    WorkflowCursor,
    WorkflowEventRecord,
    WorkflowHistoryPage,
)
from vigil.core.ports import HistoryUnavailable
from vigil.model.names import EXECUTIONS, GROUP, WORKFLOWS
from vigil.probes import HEALTH_PATHS

log = logging.getLogger(__name__)

EXECUTION_ID = r"[a-z0-9][-a-z0-9]{0,62}"
NAMESPACE = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
EXECUTION_PATH = re.compile(rf"^/executions/({EXECUTION_ID})/?$")
NAMESPACED_EXECUTION_PATH = re.compile(rf"^/namespaces/({NAMESPACE})/executions/({EXECUTION_ID})/?$")
JOB_NAME = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"  # a DNS subdomain, as every object name
JOB_EXECUTIONS_PATH = re.compile(rf"^/namespaces/({NAMESPACE})/scheduledjobs/({JOB_NAME})/executions/?$")
JOB_EXECUTIONS_PARAMETERS = frozenset({"limit", "continue"})
WORKFLOW_HISTORY_PATH = re.compile(rf"^/namespaces/({NAMESPACE})/workflows/({JOB_NAME})/history/?$")
#: A workflow's uid in a `continue` token (Kubernetes writes UUIDs).
WORKFLOW_UID = r"[-a-zA-Z0-9]{1,128}"
#: The approval callback's route (vigil.api.approvals) lives beside these.

Cursor = TypeVar("Cursor")
#: ``job_executions(namespace, job, limit, after)``: a page of the job's history (SqlHistory's).
JobExecutions = Callable[[str, str, int, HistoryCursor | None], ExecutionPage]
#: ``workflow_history(namespace, workflow, limit, after)``: a page of a workflow's history
#: entries (SqlHistory's ``workflow_history``).
WorkflowHistory = Callable[[str, str, int, WorkflowCursor | None], WorkflowHistoryPage]



def record_tojson_answer(record: AttemptRecord) -> dict[str, Any]:
    def t(value: Any) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "executionId": record.execution_id,
        "attempt": record.attempt,
        "namespace": record.namespace,
        "job": record.job,
        "priority": record.priority,
        "state": str(record.state),
        "reason": record.reason,
        "scheduledFor": t(record.scheduled_for),
        "startedAt": t(record.started_at),
        "finishedAt": t(record.finished_at),
        "pod": record.pod,
        "error": record.error,
    }


@dataclasses.dataclass(frozen=True)
class Guard:
    """Who may call what: each caller's token is authenticated and each request authorised.

    ``leader_lease`` is the access /leader needs: ``get`` on the leader Lease.
    """

    authenticator: Authenticator
    authorizer: Authorizer
    leader_lease: Access


def execution_access(namespace: str, execution_id: str = "") -> Access:
    """``get executions.vigil.dev`` (that one, or any with an empty id) in `namespace` ("" = all)."""
    return Access(verb="get", group=GROUP, resource=EXECUTIONS, namespace=namespace, name=execution_id)


def list_executions_access(namespace: str) -> Access:
    """``list executions.vigil.dev`` in `namespace`: what `kubectl get executions -n NS` needs."""
    return Access(verb="list", group=GROUP, resource=EXECUTIONS, namespace=namespace)


def workflow_access(namespace: str, workflow: str) -> Access:
    """``get workflows.vigil.dev`` named `workflow` in `namespace`: what `kubectl get wf` needs."""
    return Access(verb="get", group=GROUP, resource=WORKFLOWS, namespace=namespace, name=workflow)


def summary_tojson_answer(summary: ExecutionSummary) -> dict[str, Any]:
    def t(value: datetime | None) -> str | None:
        return value.isoformat() if value is not None else None

    return {
        "executionId": summary.execution_id,
        "jobUid": summary.job_uid,
        "priority": summary.priority,
        "scheduledFor": t(summary.scheduled_for),
        "state": str(summary.state),
        "attempts": summary.attempts,
        "reason": summary.reason,
        "startedAt": t(summary.started_at),
        "finishedAt": t(summary.finished_at),
        "pod": summary.pod,
        "error": summary.error,
    }


def encode_cursor(cursor: HistoryCursor) -> str:
    """The `continue` token of the page after `cursor`: opaque to callers, no secret in it."""
    raw = f"{cursor.scheduled_for.isoformat()}|{cursor.execution_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(token: str) -> HistoryCursor:
    """The cursor a `continue` token names; ValueError when it is not one this API wrote."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        stamp, execution_id = raw.split("|", 1)
        scheduled_for = datetime.fromisoformat(stamp)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError("continue is not a token from an earlier page of this list") from None
    if scheduled_for.tzinfo is None or not re.fullmatch(EXECUTION_ID, execution_id):
        raise ValueError("continue is not a token from an earlier page of this list")
    return HistoryCursor(scheduled_for, execution_id)


def encode_workflow_cursor(cursor: WorkflowCursor) -> str:
    """The `continue` token of the page of a workflow's history after `cursor` (opaque, no secret)."""
    raw = f"{cursor.workflow_uid}|{cursor.seq}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_workflow_cursor(token: str) -> WorkflowCursor:
    """The cursor a workflow history's `continue` token names; ValueError when this API did not write it."""
    try:
        uid, seq = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode().split("|", 1)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ValueError("continue is not a token from an earlier page of this list") from None
    if not re.fullmatch(WORKFLOW_UID, uid) or not (seq.isascii() and seq.isdigit()):
        raise ValueError("continue is not a token from an earlier page of this list")
    return WorkflowCursor(uid, int(seq))


def entry_tojson_answer(record: WorkflowEventRecord) -> dict[str, Any]:
    """One history entry of the workflow_history answer: its position and the entry as recorded."""
    return {"seq": record.seq, "entry": dict(record.data)}


def page_request(query: str, decode: Callable[[str], Cursor]) -> tuple[int, Cursor | None]:
    """(limit, cursor) from a query string, the `continue` token read by `decode`; ValueError
    naming the parameter that is wrong."""
    try:
        params = urllib.parse.parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError("the query string cannot be read") from None
    unknown = sorted(set(params) - JOB_EXECUTIONS_PARAMETERS)
    if unknown:
        named = field_name(unknown[0], instead="")  # a parameter's name is caller's text: plain ones only
        shown = f" {named!r}" if named else ""
        raise ValueError(f"unknown parameter{shown}: only 'limit' and 'continue' are accepted")
    if any(len(values) > 1 for values in params.values()):
        raise ValueError("each parameter may be given once")
    limit_text = params.get("limit", [str(DEFAULT_PAGE_SIZE)])[0]
    if not (limit_text.isascii() and limit_text.isdigit()) or not 1 <= int(limit_text) <= MAX_PAGE_SIZE:
        raise ValueError(f"limit must be a whole number from 1 to {MAX_PAGE_SIZE}")
    token = params.get("continue", [""])[0]
    return int(limit_text), decode(token) if token else None


class ApiServer:
    """Serves the endpoints above from the collaborators it is given.

    ``find_execution(id)`` is the Execution named `id` in whichever namespace (or None);
    ``get_execution(namespace, id)`` the one in `namespace`. Without a ``guard`` every guarded
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
        queue_api: QueueApi | None = None,
    ) -> None:
        self._leader = leader
        self._find_execution = find_execution
        self._get_execution = get_execution
        self._timeline = timeline
        self._job_executions = job_executions
        self._workflow_history = workflow_history
        self._approvals = approvals
        self._guard = guard
        self._queue_api = queue_api

    def answer(self, target: str, *, token: str | None = None) -> Answer:
        """(status, content type, body) for a GET of `target` (a path, and a query string for
        the routes that take one) by the holder of `token`."""
        path, _, query = target.partition("?")
        if path in HEALTH_PATHS:
            return 200, "text/plain", b"ok\n"
        if self._queue_api is not None and self._queue_api.serves(path):
            return self._queue_api.answer("GET", path, token=token, query=query)
        if APPROVAL_PATH.match(path) and self._approvals is not None:
            return problem(405, "POST decides an approval; GET does nothing", "MethodNotAllowed")
        if path != "/leader" and not (
            EXECUTION_PATH.match(path)
            or NAMESPACED_EXECUTION_PATH.match(path)
            or (JOB_EXECUTIONS_PATH.match(path) and self._job_executions is not None)
            or (WORKFLOW_HISTORY_PATH.match(path) and self._workflow_history is not None)
        ):
            return problem(404, "no such route", NO_ROUTE)
        try:
            return self._guarded(path, query, token)
        except ReviewUnavailable as error:
            log.warning("HTTP API: cannot review a caller: %s", error)
            return problem(503, "cannot check the caller's credentials now; try again", "ReviewUnavailable")

    def _guarded(self, path: str, query: str, token: str | None) -> Answer:
        guard = self._guard
        user = guard.authenticator.authenticate(token) if guard is not None and token else None
        if guard is None or user is None:
            return problem(
                401, "a Kubernetes bearer token the API server accepts is required (Authorization: Bearer ...)",
                "Unauthorized",
            )  # fmt: skip
        if path == "/leader":
            if not guard.authorizer.allowed(user, guard.leader_lease):
                return _forbidden(user, guard.leader_lease)
            return 200, "text/plain", f"{self._leader() or ''}\n".encode()
        of_job = JOB_EXECUTIONS_PATH.match(path)
        if of_job is not None:
            return self._job_history(guard, user, of_job.group(1), of_job.group(3), query)
        of_workflow = WORKFLOW_HISTORY_PATH.match(path)
        if of_workflow is not None:
            return self._workflow_entries(guard, user, of_workflow.group(1), of_workflow.group(3), query)
        namespaced = NAMESPACED_EXECUTION_PATH.match(path)
        if namespaced is not None:
            return self._execution_in(guard, user, namespaced.group(1), namespaced.group(3))
        match = EXECUTION_PATH.match(path)
        assert match is not None  # answer() routed only these paths here
        return self._execution(guard, user, match.group(1))

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

    def answer_delete(self, path: str, token: str | None) -> Answer:
        """(status, content type, body) for a DELETE of `path` by the holder of `token`."""
        if self._queue_api is not None and self._queue_api.serves(path):
            return self._queue_api.answer("DELETE", path, token=token)
        return problem(405, "DELETE is served only under /v1/", "MethodNotAllowed")

    def _execution_in(self, guard: Guard, user: User, namespace: str, execution_id: str) -> Answer:
        """The execution asked for in `namespace`: authorised first, then looked up there only."""
        access = execution_access(namespace, execution_id)
        if not guard.authorizer.allowed(user, access):
            return _forbidden(user, access)
        if self._get_execution is not None:
            obj = self._get_execution(namespace, execution_id)
        else:
            obj = _named(self._find_execution(execution_id), execution_id, namespace)
        rows, error = self._rows(execution_id)
        return self._execution_answer(execution_id, namespace, obj, rows, error)

    def _execution(self, guard: Guard, user: User, execution_id: str) -> Answer:
        """The execution asked for by id alone: served from the first namespace it is found in
        (its object's, else its history rows') that the caller may read. Nothing of another
        namespace is ever included: a look-alike made in one namespace cannot show another's rows."""
        obj = _named(self._find_execution(execution_id), execution_id, None)
        rows, error = self._rows(execution_id)
        found = ([str(obj["metadata"]["namespace"])] if obj is not None else []) + sorted(
            {row.namespace for row in rows or []}
        )
        for namespace in dict.fromkeys(found):
            if guard.authorizer.allowed(user, execution_access(namespace, execution_id)):
                mine = obj if obj is not None and obj["metadata"]["namespace"] == namespace else None
                if mine is None and self._get_execution is not None:
                    mine = self._get_execution(namespace, execution_id)
                return self._execution_answer(execution_id, namespace, mine, rows, error)
        if not found and guard.authorizer.allowed(user, execution_access("")):
            return self._execution_answer(execution_id, "", None, rows, error)
        return problem(
            403,
            f"{user.name} may not get execution {execution_id}: it does not exist in any namespace where "
            "they may get executions (ask by /namespaces/NAMESPACE/executions/ID to tell the two apart)",
            "Forbidden",
        )

    def _job_history(self, guard: Guard, user: User, namespace: str, job: str, query: str) -> Answer:
        """A page of the job's executions from the history: authorised first (``list`` on
        executions there), then the query string read, then the database asked."""
        read = self._job_executions
        assert read is not None  # answer() routed here only when it is set
        got = _history_page(
            guard, user, list_executions_access(namespace), query, decode_cursor,
            lambda limit, after: read(namespace, job, limit, after),
        )  # fmt: skip
        if not isinstance(got, _Page):
            return got
        page = got.page
        body: dict[str, Any] = {
            "namespace": namespace,
            "job": job,
            "executions": [summary_tojson_answer(s) for s in page.executions],
        }
        if page.after is not None:
            body["continue"] = encode_cursor(page.after)
        return json_answer(200, body)

    def _workflow_entries(self, guard: Guard, user: User, namespace: str, workflow: str, query: str) -> Answer:
        """A page of the workflow's history entries: authorised first (``get`` on that workflow),
        then the query string read, then the database asked; 404 when it holds none."""
        read = self._workflow_history
        assert read is not None  # answer() routed here only when it is set
        got = _history_page(
            guard, user, workflow_access(namespace, workflow), query, decode_workflow_cursor,
            lambda limit, after: read(namespace, workflow, limit, after),
        )  # fmt: skip
        if not isinstance(got, _Page):
            return got
        page, after = got.page, got.after
        if after is None and not page.entries:
            return problem(404, f"no history of workflow {workflow} in namespace {namespace}", "NotFound")
        uid = after.workflow_uid if after is not None else page.entries[0].workflow_uid
        body: dict[str, Any] = {
            "namespace": namespace,
            "workflow": workflow,
            "uid": uid,
            "entries": [entry_tojson_answer(record) for record in page.entries],
        }
        first = next((record for record in page.entries if record.seq == 0), None)
        if first is not None:
            body["definition"] = first.definition
        if page.after is not None:
            body["continue"] = encode_workflow_cursor(page.after)
        return json_answer(200, body)

    def _rows(self, execution_id: str) -> tuple[list[AttemptRecord] | None, str | None]:
        try:
            return list(self._timeline(execution_id)), None
        except HistoryUnavailable as err:
            return None, f"history database unavailable: {err}"

    @staticmethod
    def _execution_answer(
        execution_id: str,
        namespace: str,
        obj: Mapping[str, Any] | None,
        rows: list[AttemptRecord] | None,
        history_error: str | None,
    ) -> Answer:
        mine = [r for r in rows or [] if r.namespace == namespace]
        if obj is None and not mine:
            return problem(404, f"execution {execution_id} not found", "NotFound")
        body: dict[str, Any] = {"executionId": execution_id, "namespace": namespace}
        if obj is not None:
            body["spec"] = obj.get("spec") or {}
            body["status"] = obj.get("status") or {}
        body["history"] = [record_tojson_answer(r) for r in mine] if rows is not None else None
        if history_error is not None:
            body["historyError"] = history_error
        return json_answer(200, body)

    def dispatch(self, method: str, path: str, query: str, token: str | None, body: bytes) -> Answer:
        """The answer to `method` on `path` (with its `query` string): the one router every
        request goes through (vigil.api.app runs it on an executor thread)."""
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

    def serve(self, port: int, limits: Limits | None = None) -> Serving:
        """Serve on `port` (0: any free one) from a thread, within `limits` (default: Limits())."""
        limits = limits or Limits()
        return serve(self.application(limits), port, limits)


Page = TypeVar("Page")


@dataclasses.dataclass(frozen=True)
class _Page(Generic[Page, Cursor]):
    """What the history answered, and the cursor it was asked from."""

    page: Page
    after: Cursor | None


def _history_page(
    guard: Guard,
    user: User,
    access: Access,
    query: str,
    decode: Callable[[str], Cursor],
    read: Callable[[int, Cursor | None], Page],
) -> _Page[Page, Cursor] | Answer:
    """A page read from the history for a caller: authorised first, then the query string read
    (400 naming the parameter), then the database asked (503 while it is unavailable)."""
    if not guard.authorizer.allowed(user, access):
        return _forbidden(user, access)
    try:
        limit, after = page_request(query, decode)
    except ValueError as error:
        return problem(400, str(error), "BadRequest")
    try:
        return _Page(read(limit, after), after)
    except HistoryUnavailable as error:
        return problem(503, f"history database unavailable: {error}; try again", "HistoryUnavailable")


def _named(obj: Mapping[str, Any] | None, execution_id: str, namespace: str | None) -> Mapping[str, Any] | None:
    """`obj` if it is the Execution named `execution_id` (in `namespace`, when given), else None."""
    if obj is None:
        return None
    meta = obj.get("metadata") or {}
    if meta.get("name") != execution_id or (namespace is not None and meta.get("namespace") != namespace):
        return None
    return obj


def _forbidden(user: User, access: Access) -> Answer:
    where = f" in namespace {access.namespace}" if access.namespace else " in every namespace"
    what = f"{access.resource}.{access.group}" if access.group else access.resource
    name = f" {access.name}" if access.name else ""
    return problem(403, f"{user.name} may not {access.verb} {what}{name}{where}", "Forbidden")
