"""The history routes: a job's executions and a workflow's history, from the history database alone.

    GET /namespaces/{ns}/scheduledjobs/{job}/executions?limit=N&continue=TOKEN
        the job's executions, newest first, a page at a time (limit 1..500, default 50); the
        answer's `continue` asks for the next page. Served from the history alone: it is where
        retention leaves what it deletes. Needs ``list`` on ``executions.vigil.dev`` there.
    GET /namespaces/{ns}/workflows/{wf}/history?limit=N&continue=TOKEN
        the workflow's history entries, in order, a page at a time, of the newest workflow of
        that name; the page holding entry 0 also holds its pinned `definition`. 404 when the
        database holds no entry of that name. Needs ``get`` on that workflow: 403 comes before
        404, so a name's history is not learnt without that access.
    GET /namespaces/{ns}/executions/{id}/log?attempt=N
        the stored tail of an attempt's log (vigil.core.logtail; without `attempt`, of the latest
        attempt that has one), kept once its pod is gone; 404 when none is stored. Needs ``get``
        on ``pods/log`` there, as `kubectl logs` does (Kubernetes' view, edit and admin roles
        grant it); a workflow step's attempts are read by their execution id the same way.

Each is authorised first, then its query string read (400 naming the parameter), then the
database asked (503 while it is unavailable).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
import urllib.parse
from collections.abc import Callable
from datetime import datetime
from typing import Any, Generic, TypeVar

from vigil.api.bodies import field_name
from vigil.api.executions import EXECUTION_ID, NAMESPACE
from vigil.api.guards import Guard, forbidden, list_executions_access, workflow_access
from vigil.api.problems import Answer, json_answer, problem
from vigil.core.access import Access, User
from vigil.core.history import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    ExecutionPage,
    ExecutionSummary,
    HistoryCursor,
    WorkflowCursor,
    WorkflowEventRecord,
    WorkflowHistoryPage,
)
from vigil.core.logtail import LogTail, log_tail_to_json
from vigil.core.ports import HistoryUnavailable

JOB_NAME = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"  # a DNS subdomain, as every object name
JOB_EXECUTIONS_PATH = re.compile(rf"^/namespaces/({NAMESPACE})/scheduledjobs/({JOB_NAME})/executions/?$")
JOB_EXECUTIONS_PARAMETERS = frozenset({"limit", "continue"})
WORKFLOW_HISTORY_PATH = re.compile(rf"^/namespaces/({NAMESPACE})/workflows/({JOB_NAME})/history/?$")
LOG_TAIL_PATH = re.compile(rf"^/namespaces/({NAMESPACE})/executions/({EXECUTION_ID})/log/?$")
MAX_ATTEMPT = 32767  # attempts are counted in a smallint
#: A workflow's uid in a `continue` token (Kubernetes writes UUIDs).
WORKFLOW_UID = r"[-a-zA-Z0-9]{1,128}"

Cursor = TypeVar("Cursor")
#: ``job_executions(namespace, job, limit, after)``: a page of the job's history (SqlHistory's).
JobExecutions = Callable[[str, str, int, HistoryCursor | None], ExecutionPage]
#: ``workflow_history(namespace, workflow, limit, after)``: a page of a workflow's history
#: entries (SqlHistory's ``workflow_history``).
WorkflowHistory = Callable[[str, str, int, WorkflowCursor | None], WorkflowHistoryPage]
#: ``log_tail(namespace, execution_id, attempt)``: an attempt's stored log tail, or None
#: (SqlHistory's ``log_tail``; attempt None: the latest that has one).
LogTails = Callable[[str, str, int | None], LogTail | None]


def pod_log_access(namespace: str) -> Access:
    """``get pods/log`` in `namespace`: what `kubectl logs` needs, so a stored log is read by whoever
    could have read it from the pod."""
    return Access(verb="get", group="", resource="pods", namespace=namespace, subresource="log")


def attempt_request(query: str) -> int | None:
    """The `attempt` of a log request's query string (None: not given); ValueError naming it."""
    try:
        params = urllib.parse.parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError("the query string cannot be read") from None
    if set(params) - {"attempt"}:
        raise ValueError("only the parameter 'attempt' is accepted")
    values = params.get("attempt", [])
    if not values:
        return None
    if len(values) > 1 or not (values[0].isascii() and values[0].isdigit()) or not 1 <= int(values[0]) <= MAX_ATTEMPT:
        raise ValueError(f"attempt must be one whole number from 1 to {MAX_ATTEMPT}")
    return int(values[0])


def summary_to_json(summary: ExecutionSummary) -> dict[str, Any]:
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


def entry_to_json(record: WorkflowEventRecord) -> dict[str, Any]:
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


class HistoryRoutes:
    """Serves the two routes from the history's reads (either None: that route is not served)."""

    def __init__(
        self,
        *,
        job_executions: JobExecutions | None,
        workflow_history: WorkflowHistory | None,
        log_tail: LogTails | None = None,
    ) -> None:
        self._job_executions = job_executions
        self._workflow_history = workflow_history
        self._log_tail = log_tail

    def serves(self, path: str) -> bool:
        return bool(
            (JOB_EXECUTIONS_PATH.match(path) and self._job_executions is not None)
            or (WORKFLOW_HISTORY_PATH.match(path) and self._workflow_history is not None)
            or (LOG_TAIL_PATH.match(path) and self._log_tail is not None)
        )

    def answer(self, guard: Guard, user: User, path: str, query: str) -> Answer:
        """The answer for `path` (one `serves`) and its `query` to `user`."""
        of_job = JOB_EXECUTIONS_PATH.match(path)
        if of_job is not None:
            return self._job_history(guard, user, of_job.group(1), of_job.group(3), query)
        of_log = LOG_TAIL_PATH.match(path)
        if of_log is not None:
            return self._stored_log(guard, user, of_log.group(1), of_log.group(3), query)
        of_workflow = WORKFLOW_HISTORY_PATH.match(path)
        assert of_workflow is not None  # serves() said so
        return self._workflow_entries(guard, user, of_workflow.group(1), of_workflow.group(3), query)

    def _job_history(self, guard: Guard, user: User, namespace: str, job: str, query: str) -> Answer:
        """A page of the job's executions from the history: authorised first (``list`` on
        executions there), then the query string read, then the database asked."""
        read = self._job_executions
        assert read is not None  # serves() said so
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
            "executions": [summary_to_json(s) for s in page.executions],
        }
        if page.after is not None:
            body["continue"] = encode_cursor(page.after)
        return json_answer(200, body)

    def _stored_log(self, guard: Guard, user: User, namespace: str, execution_id: str, query: str) -> Answer:
        """An attempt's stored log tail: authorised first (``get pods/log`` there), then the query
        string read, then the database asked; 404 when it holds none."""
        read = self._log_tail
        assert read is not None  # serves() said so
        access = pod_log_access(namespace)
        if not guard.authorizer.allowed(user, access):
            return forbidden(user, access)
        try:
            attempt = attempt_request(query)
        except ValueError as error:
            return problem(400, str(error), "BadRequest")
        try:
            tail = read(namespace, execution_id, attempt)
        except HistoryUnavailable as error:
            return problem(503, f"history database unavailable: {error}; try again", "HistoryUnavailable")
        if tail is None:
            which = f"attempt {attempt}" if attempt is not None else "any attempt"
            return problem(404, f"no stored log of {which} of execution {execution_id} in namespace {namespace}", "NotFound")
        return json_answer(200, log_tail_to_json(tail))

    def _workflow_entries(self, guard: Guard, user: User, namespace: str, workflow: str, query: str) -> Answer:
        """A page of the workflow's history entries: authorised first (``get`` on that workflow),
        then the query string read, then the database asked; 404 when it holds none."""
        read = self._workflow_history
        assert read is not None  # serves() said so
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
            "entries": [entry_to_json(record) for record in page.entries],
        }
        first = next((record for record in page.entries if record.seq == 0), None)
        if first is not None:
            body["definition"] = first.definition
        if page.after is not None:
            body["continue"] = encode_workflow_cursor(page.after)
        return json_answer(200, body)


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
        return forbidden(user, access)
    try:
        limit, after = page_request(query, decode)
    except ValueError as error:
        return problem(400, str(error), "BadRequest")
    try:
        return _Page(read(limit, after), after)
    except HistoryUnavailable as error:
        return problem(503, f"history database unavailable: {error}; try again", "HistoryUnavailable")
